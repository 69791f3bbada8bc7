"""SQL verifier: result comparison, variants, read-only copies, authorizer, limits, outcomes."""

import hashlib
import os
import time

import pytest

from rlvr.data.types import Task
from rlvr.errors import ConfigError
from rlvr.verifiers.registry import get_verifier
from rlvr.verifiers.sql_columns import MAX_REORDERINGS, reorderings
from rlvr.verifiers.sql import (
    SqlVerifier,
    build_database,
    database_sources,
    has_top_level_order_by,
    rows_match,
)

SCHEMA = """
CREATE TABLE emp (id INTEGER PRIMARY KEY, name TEXT, dept TEXT, salary REAL);
INSERT INTO emp VALUES {rows};
"""
ROWS_A = "(1,'ada','eng',120.5),(2,'bob','eng',99.25),(3,'cyd','ops',80.0)"
ROWS_B = "(1,'ada','ops',120.5),(2,'bob','eng',99.25),(3,'cyd','eng',80.0)"


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    d = tmp_path_factory.mktemp("sqldb")
    a, b = str(d / "a.sqlite"), str(d / "b.sqlite")
    build_database(SCHEMA.format(rows=ROWS_A), a)
    build_database(SCHEMA.format(rows=ROWS_B), b)
    return a, b


@pytest.fixture(scope="module")
def sv():
    return SqlVerifier(timeout_s=1.0)


def task(gold_sql, **gold):
    return Task(id="q", prompt="?", kind="sql", gold={"gold_sql": gold_sql, **gold}, answer_format="code_fence")


def fence(sql):
    return f"Here it is:\n```sql\n{sql}\n```"


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_pass_in_fence_or_bare(sv, dbs):
    t = task("SELECT name FROM emp WHERE dept = 'eng'", database=dbs[0])
    assert sv.verify(t, fence("SELECT name FROM emp WHERE salary > 90")).outcome == "pass"
    assert sv.verify(t, "select name from emp where dept='eng';").outcome == "pass"


def test_rows_are_a_multiset_unless_gold_orders(sv, dbs):
    unordered = task("SELECT name FROM emp WHERE dept = 'eng'", database=dbs[0])
    assert sv.verify(unordered, fence("SELECT name FROM emp WHERE dept = 'eng' ORDER BY name DESC")).passed
    ordered = task("SELECT name FROM emp ORDER BY salary", database=dbs[0])
    assert sv.verify(ordered, fence("SELECT name FROM emp ORDER BY salary")).passed
    v = sv.verify(ordered, fence("SELECT name FROM emp ORDER BY salary DESC"))
    assert v.outcome == "wrong" and "order" in v.details["reason"]


def test_superset_duplicates_and_extra_column_are_wrong(sv, dbs):
    t = task("SELECT name FROM emp WHERE dept = 'eng'", database=dbs[0])
    assert sv.verify(t, fence("SELECT name FROM emp")).outcome == "wrong"
    dup = "SELECT name FROM emp WHERE dept = 'eng' UNION ALL SELECT name FROM emp WHERE dept = 'eng'"
    assert sv.verify(t, fence(dup)).outcome == "wrong"
    v = sv.verify(t, fence("SELECT name, dept FROM emp WHERE dept = 'eng'"))
    assert v.outcome == "wrong" and "columns" in v.details["reason"]


def test_float_tolerance_and_int_float(sv, dbs):
    t = task("SELECT avg(salary) FROM emp WHERE dept = 'eng'", database=dbs[0])  # (120.5 + 99.25) / 2
    assert sv.verify(t, fence("SELECT 109.875")).passed
    assert sv.verify(t, fence("SELECT 109.8750000001")).passed  # within 1e-6
    assert sv.verify(t, fence("SELECT 109.88")).outcome == "wrong"
    assert rows_match([(2.0,)], [(2,)], False, 1e-6)
    assert not rows_match([(None,)], [(0,)], False, 1e-6)
    assert not rows_match([("1",)], [(1,)], False, 1e-6)


def test_every_variant_must_match_so_literals_fail(sv, dbs):
    t = task("SELECT name FROM emp WHERE dept = 'eng'", databases=list(dbs))
    assert sv.verify(t, fence("SELECT name FROM emp WHERE dept = 'eng'")).passed
    literal = sv.verify(t, fence("SELECT 'ada' UNION ALL SELECT 'bob'"))  # right on variant 0 only
    assert literal.outcome == "wrong" and literal.details["variant"] == 1


def test_schema_sql_variants(sv):
    t = task("SELECT count(*) FROM emp", schema_sql=[SCHEMA.format(rows=ROWS_A), SCHEMA.format(rows="(1,'x','y',1)")])
    assert sv.verify(t, fence("SELECT count(id) FROM emp")).passed
    assert sv.verify(t, fence("SELECT 3")).outcome == "wrong"


@pytest.mark.parametrize("sql", [
    "DROP TABLE emp", "DELETE FROM emp", "UPDATE emp SET salary = 0", "INSERT INTO emp VALUES (9,'z','eng',1)",
    "WITH x AS (SELECT 1) DELETE FROM emp", "ATTACH DATABASE 'x.sqlite' AS x", "PRAGMA writable_schema = ON",
    "SELECT name FROM pragma_table_info('emp')", "SELECT load_extension('evil.so')",
    "SELECT name FROM sqlite_master", "EXPLAIN SELECT 1", "VACUUM INTO 'copy.sqlite'",
    "SELECT name FROM emp; DROP TABLE emp", "SELECT 1; SELECT 2",
])
def test_forbidden_statements_are_violations_and_leave_the_db_alone(sv, dbs, sql):
    before = digest(dbs[0])
    v = sv.verify(task("SELECT name FROM emp", database=dbs[0]), fence(sql))
    assert v.outcome == "violation" and v.reward == 0, v.details
    assert digest(dbs[0]) == before


@pytest.mark.parametrize("sql,denied", [
    ("ATTACH DATABASE ':memory:' AS x", "ATTACH"),
    ("PRAGMA table_info(emp)", "PRAGMA"),
    ("INSERT INTO emp VALUES (9,'z','eng',1)", "INSERT"),
    ("SELECT name FROM sqlite_master", "sqlite_master"),
    ("SELECT load_extension('x')", "load_extension"),
    ("SELECT 1; SELECT 2", "more than one statement"),
])
def test_authorizer_blocks_even_without_the_static_check(dbs, sql, denied):
    """Defense in depth: run past the text/sqlglot check straight into SQLite."""
    from rlvr.verifiers.sql import _Fail

    v = SqlVerifier(timeout_s=1.0, use_sqlglot=False)
    with pytest.raises(_Fail) as e:
        v._run(("file", dbs[0]), sql, time.monotonic() + 1.0, trusted=False)
    assert e.value.outcome == "violation" and denied in e.value.reason


def test_copy_is_read_only_even_for_trusted_sql(dbs):
    from rlvr.verifiers.sql import _Fail

    before = digest(dbs[0])
    with pytest.raises(_Fail) as e:
        SqlVerifier()._run(("file", dbs[0]), "DELETE FROM emp", time.monotonic() + 1.0, trusted=True)
    assert e.value.outcome == "crash" and "readonly" in e.value.reason.replace("-", "").replace(" ", "")
    assert digest(dbs[0]) == before


def test_time_limit_and_row_cap(dbs):
    sv = SqlVerifier(timeout_s=0.5, max_rows=100)
    t = task("SELECT name FROM emp", database=dbs[0])
    forever = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)"
    t0 = time.perf_counter()
    assert sv.verify(t, fence(forever + " SELECT count(*) FROM r")).outcome == "timeout"
    assert time.perf_counter() - t0 < 2.0
    v = sv.verify(t, fence(forever + " SELECT x FROM r"))
    assert v.outcome == "wrong" and "cap" in v.details["reason"]


def test_value_size_limit(sv, dbs):
    v = sv.verify(task("SELECT 1", database=dbs[0]), fence("SELECT randomblob(2000000000)"))
    assert v.outcome == "crash" and "too big" in v.details["reason"]


def test_sql_errors_are_crash_and_prose_is_format(sv, dbs):
    t = task("SELECT name FROM emp", database=dbs[0])
    assert sv.verify(t, fence("SELECT nme FROM emp")).outcome == "crash"
    assert sv.verify(t, fence("SELEC name FROM emp")).outcome == "format"  # not SQL at all
    assert sv.verify(t, "I don't know how to write this query.").outcome == "format"
    assert sv.verify(t, "```sql\n```").outcome == "format"
    assert sv.verify(t, "").outcome == "format"


def test_gold_problems_are_infra(sv, dbs, tmp_path):
    assert sv.verify(task("SELECT nope FROM emp", database=dbs[0]), fence("SELECT 1")).outcome == "infra"
    assert sv.verify(task("SELECT 1", database=str(tmp_path / "missing.sqlite")), fence("SELECT 1")).outcome == "infra"
    assert sv.verify(task("SELECT 1"), fence("SELECT 1")).outcome == "infra"  # no database at all
    assert sv.verify(Task(id="q", kind="sql", gold={"database": dbs[0]}), fence("SELECT 1")).outcome == "infra"


def test_database_sources():
    assert database_sources({"database": "a", "databases": ["b", "c"]}) == [("file", "a"), ("file", "b"), ("file", "c")]
    assert database_sources({"schema_sql": "CREATE TABLE t(x)"}) == [("schema", "CREATE TABLE t(x)")]
    with pytest.raises(ValueError):
        database_sources({"databases": []})


@pytest.mark.parametrize("use_sqlglot", [True, False])
def test_top_level_order_by(use_sqlglot):
    assert has_top_level_order_by("SELECT a FROM t ORDER BY a", use_sqlglot)
    assert has_top_level_order_by("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1", use_sqlglot)
    assert not has_top_level_order_by("SELECT a FROM (SELECT a FROM t ORDER BY a)", use_sqlglot)
    assert not has_top_level_order_by("SELECT 'order by' FROM t", use_sqlglot)
    assert not has_top_level_order_by("SELECT a FROM t", use_sqlglot)


def test_pickled_verifier_works(sv, dbs):
    import pickle

    clone = pickle.loads(pickle.dumps(sv))
    assert clone.verify(task("SELECT 1", database=dbs[0]), fence("SELECT 1")).passed
    assert not os.path.exists(os.path.join(os.path.dirname(dbs[0]), "x.sqlite"))

# ---------------------------------------------------------------------------------- column order
# strict by default (BIRD's rule); column_order="any" is Spider's test-suite rule (verifiers/sql_columns.py)


def test_reordered_columns_pass_when_any_order_and_fail_by_default(dbs):
    t = task("SELECT name, salary FROM emp WHERE dept = 'eng'", databases=list(dbs))
    swapped = "SELECT salary, name FROM emp WHERE dept = 'eng'"
    v = SqlVerifier(column_order="any").verify(t, fence(swapped))
    assert v.passed and v.details["column_order"] == [1, 0]
    strict = SqlVerifier().verify(t, fence(swapped))
    assert strict.outcome == "wrong" and "rows differ" in strict.details["reason"]
    same = SqlVerifier(column_order="strict").verify(t, fence("SELECT name AS n, salary FROM emp WHERE dept = 'eng'"))
    assert same.passed and "column_order" not in same.details


def test_reordering_keeps_the_ordered_row_rule(dbs):
    t = task("SELECT name, salary FROM emp ORDER BY salary DESC", database=dbs[0])
    assert SqlVerifier(column_order="any").verify(t, fence("SELECT salary, name FROM emp ORDER BY salary DESC")).passed
    v = SqlVerifier(column_order="any").verify(t, fence("SELECT salary, name FROM emp ORDER BY salary"))
    assert v.outcome == "wrong" and "order matters" in v.details["reason"]


def test_columns_with_the_same_values_must_keep_their_pairing():
    # the columns x and y hold the same values {1, 2, 3}, paired differently in each row: the reordering that
    # fits the value multisets must still give the gold's rows
    t = task("SELECT x, y FROM t", schema_sql="CREATE TABLE t (x INTEGER, y INTEGER); "
                                                "INSERT INTO t VALUES (1,2),(2,3),(3,1);")
    assert SqlVerifier(column_order="any").verify(t, fence("SELECT y, x FROM t")).passed  # the same pairs
    # (1,1),(2,2),(3,3): each column holds {1, 2, 3}, so both orders are tried -- neither gives the gold's pairs
    assert SqlVerifier(column_order="any").verify(t, fence("SELECT x, x FROM t")).outcome == "wrong"
    assert SqlVerifier(column_order="any").verify(t, fence("SELECT y, y FROM t")).outcome == "wrong"


def test_one_reordering_must_serve_every_variant(tmp_path):
    a, b = str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")
    build_database("CREATE TABLE t (x INTEGER, y INTEGER); INSERT INTO t VALUES (1,10),(2,20);", a)
    build_database("CREATE TABLE t (x INTEGER, y INTEGER); INSERT INTO t VALUES (1,30),(2,40);", b)
    t = task("SELECT x, y FROM t", databases=[a, b])
    assert SqlVerifier(column_order="any").verify(t, fence("SELECT y, x FROM t")).passed  # the swap fits both variants
    # columns as (x, y) where y < 25 (variant a) and as (y, x) elsewhere (variant b): each variant matches
    # under some order, but no one order matches both
    flip = "SELECT CASE WHEN y < 25 THEN x ELSE y END, CASE WHEN y < 25 THEN y ELSE x END FROM t"
    v = SqlVerifier(column_order="any").verify(t, fence(flip))
    assert v.outcome == "wrong" and v.details["variant"] == 1


def test_the_search_is_bounded():
    rows = [tuple([7] * 9)]
    perms = list(reorderings(rows, rows, 9, 1e-6))  # 9! = 362,880 orders would all qualify
    assert perms[0] == tuple(range(9)) and len(perms) == MAX_REORDERINGS
    assert list(reorderings([(1, 2)], [(3, 4)], 2, 1e-6)) == [(0, 1)]  # no column fits: identity only


def test_bad_column_order_option_names_the_option():
    with pytest.raises(ConfigError, match="column_order"):
        get_verifier("sql", column_order="sorted")
