"""Every SQL probe: reward 0, an expected outcome, the databases byte-for-byte unchanged."""

import os

import pytest

from rlvr.verifiers.probes.runner import _Verifiers, run_probe
from rlvr.verifiers.probes.sql import ATTACH_TARGET, PROBES, VACUUM_TARGET, database_unchanged, snapshot


@pytest.fixture(scope="module")
def verifiers():
    vs = _Verifiers()
    yield vs
    vs.close()


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
def test_sql_probe(verifiers, probe):
    row = run_probe(probe, verifiers)
    assert row.reward == 0, row
    assert row.outcome in probe.expected, row
    assert row.host_effects == [], row
    assert not os.path.exists(ATTACH_TARGET) and not os.path.exists(VACUUM_TARGET)


def test_host_check_sees_a_changed_database(tmp_path):
    state = snapshot(str(tmp_path))
    path = next(iter(state["hashes"]))
    with open(path, "rb") as f:
        original = f.read()
    try:
        with open(path, "ab") as f:
            f.write(b"x")
        open(ATTACH_TARGET, "w").close()
        effects = database_unchanged(state)
        assert any("database changed" in e for e in effects) and any("file created" in e for e in effects)
    finally:
        with open(path, "wb") as f:
            f.write(original)
        os.unlink(ATTACH_TARGET)
    assert database_unchanged(state) == []


def test_suite_covers_the_issue_list():
    names = {p.name for p in PROBES}
    for required in ("drop_table", "delete_rows", "update_rows", "insert_rows", "two_statements", "attach",
                     "pragma", "load_extension", "recursive_cte_forever", "superset", "duplicated_rows",
                     "extra_column", "sqlite_master"):
        assert required in names
