"""SQL verifier: the order of result columns (strict by default, as BIRD; any order on request, as Spider's
test-suite evaluation)."""

import pytest

from rlvr.errors import ConfigError
from rlvr.data.types import Task
from rlvr.verifiers.registry import get_verifier
from rlvr.verifiers.sql import SqlVerifier, build_database
from rlvr.verifiers.sql_columns import MAX_REORDERINGS, reorderings

SCHEMA = """
CREATE TABLE emp (id INTEGER PRIMARY KEY, name TEXT, dept TEXT, salary REAL, boss INTEGER);
INSERT INTO emp VALUES {rows};
"""
# variant b swaps who works where, so a query that is right on a only by its column order differs on b
ROWS_A = "(1,'ada','eng',120.5,2),(2,'bob','eng',99.25,1),(3,'cyd','ops',80.0,3)"
ROWS_B = "(1,'ada','ops',120.5,3),(2,'bob','eng',99.25,1),(3,'cyd','eng',80.0,2)"


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    d = tmp_path_factory.mktemp("sqlcols")
    a, b = str(d / "a.sqlite"), str(d / "b.sqlite")
    build_database(SCHEMA.format(rows=ROWS_A), a)
    build_database(SCHEMA.format(rows=ROWS_B), b)
    return a, b


def task(gold_sql, **gold):
    return Task(id="q", prompt="?", kind="sql", gold={"gold_sql": gold_sql, **gold}, answer_format="raw")


def test_reordered_columns_pass_when_any_order_and_fail_by_default(dbs):
    t = task("SELECT name, salary FROM emp WHERE dept = 'eng'", databases=list(dbs))
    swapped = "SELECT salary, name FROM emp WHERE dept = 'eng'"
    v = SqlVerifier(column_order="any").verify(t, swapped)
    assert v.passed and v.details["column_order"] == [1, 0]
    strict = SqlVerifier().verify(t, swapped)
    assert strict.outcome == "wrong" and "rows differ" in strict.details["reason"]
    same = SqlVerifier(column_order="strict").verify(t, "SELECT name AS n, salary FROM emp WHERE dept = 'eng'")
    assert same.passed and "column_order" not in same.details


def test_reordering_keeps_the_ordered_row_rule(dbs):
    t = task("SELECT name, salary FROM emp ORDER BY salary DESC", database=dbs[0])
    assert SqlVerifier(column_order="any").verify(t, "SELECT salary, name FROM emp ORDER BY salary DESC").passed
    v = SqlVerifier(column_order="any").verify(t, "SELECT salary, name FROM emp ORDER BY salary")
    assert v.outcome == "wrong" and "order matters" in v.details["reason"]


def test_columns_with_the_same_values_must_keep_their_pairing(dbs):
    # id and boss hold the same values {1, 2, 3} but pair differently with each row: (id, boss) on a is
    # {(1,2), (2,1), (3,3)}; the candidate (boss, id) is {(2,1), (1,2), (3,3)} -- the same set, so it passes
    # (it is the same relation); (id, id) is not
    t = task("SELECT id, boss FROM emp", database=dbs[0])
    assert SqlVerifier(column_order="any").verify(t, "SELECT boss, id FROM emp").passed
    assert SqlVerifier(column_order="any").verify(t, "SELECT id, id FROM emp").outcome == "wrong"


def test_one_reordering_must_serve_every_variant(tmp_path):
    a, b = str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")
    build_database("CREATE TABLE t (x INTEGER, y INTEGER); INSERT INTO t VALUES (1,10),(2,20);", a)
    build_database("CREATE TABLE t (x INTEGER, y INTEGER); INSERT INTO t VALUES (1,30),(2,40);", b)
    t = task("SELECT x, y FROM t", databases=[a, b])
    assert SqlVerifier(column_order="any").verify(t, "SELECT y, x FROM t").passed  # the swap fits both variants
    # columns as (x, y) where y < 25 (variant a) and as (y, x) elsewhere (variant b): each variant matches
    # under some order, but no one order matches both
    flip = "SELECT CASE WHEN y < 25 THEN x ELSE y END, CASE WHEN y < 25 THEN y ELSE x END FROM t"
    v = SqlVerifier(column_order="any").verify(t, flip)
    assert v.outcome == "wrong" and v.details["variant"] == 1


def test_the_search_is_bounded():
    rows = [tuple([7] * 9)]
    perms = list(reorderings(rows, rows, 9, 1e-6))  # 9! = 362,880 orders would all qualify
    assert perms[0] == tuple(range(9)) and len(perms) == MAX_REORDERINGS
    assert list(reorderings([(1, 2)], [(3, 4)], 2, 1e-6)) == [(0, 1)]  # no column fits: identity only


def test_bad_column_order_option_names_the_option():
    with pytest.raises(ConfigError, match="column_order"):
        get_verifier("sql", column_order="sorted")
