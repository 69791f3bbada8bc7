"""Verifier pool: input order, hard timeouts, dead workers, persistence, inline mode."""

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # the workers import pool_fakes from here too

from pool_fakes import Hostile

from rlvr.data.types import Task
from rlvr.verifiers.pool import VerifierPool, close_pools, get_pool, outcome_counts, verify_batch


def tasks(n):
    return [Task(id=str(i)) for i in range(n)]


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    yield
    close_pools()


def test_hangs_and_crashes_never_stall_or_kill_the_batch():
    comps = ["ok", "hang", "ok", "die", "raise", "ok", "garbage", "hang", "ok", "ok"]
    with VerifierPool(Hostile(), workers=2) as pool:
        t0 = time.perf_counter()
        out = pool.map(tasks(len(comps)), comps, timeout_s=1.0)
        elapsed = time.perf_counter() - t0
        stats = pool.stats
    assert [v.outcome for v in out] == ["pass", "timeout", "pass", "infra", "infra", "pass", "infra",
                                        "timeout", "pass", "pass"]
    assert [v.details.get("task") for v in out if v.outcome == "pass"] == ["0", "2", "5", "8", "9"]  # input order
    assert stats.timeouts == 2 and stats.crashes == 1 and stats.restarts >= 3
    assert elapsed < 8.0  # two 1 s timeouts on two workers, plus restarts
    assert outcome_counts(out) == {"pass": 5, "timeout": 2, "infra": 3}


def test_timeout_kills_the_workers_helpers_too():
    with VerifierPool(Hostile(), workers=1) as pool:
        before = _sleepers()
        out = pool.map(tasks(1), ["spawn-hang"], timeout_s=1.0)
        time.sleep(0.2)
        assert out[0].outcome == "timeout"
        assert _sleepers() - before == set()  # the worker's `sleep 3600` child died with its group


def _sleepers():
    pids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read() == b"sleep\x003600\x00":
                    pids.add(pid)
        except OSError:
            pass
    return pids


def test_workers_persist_across_calls_and_change_with_the_verifier():
    v = Hostile("a")
    first = verify_batch(v, tasks(6), ["ok"] * 6, workers=2)
    pool = get_pool(v, 2)
    procs = {s.proc.pid for s in pool._slots}  # its workers and warm spares (any ready one may take an item)
    second = verify_batch(v, tasks(6), ["ok"] * 6, workers=2)
    pids = {x.details["pid"] for x in first} | {x.details["pid"] for x in second}
    assert pids <= procs and os.getpid() not in pids  # the pool's processes, not the caller
    assert {s.proc.pid for s in pool._slots} == procs and pool.stats.restarts == 0  # the same ones, kept
    assert get_pool(v, 2) is pool
    v.tag = "b"  # a changed verifier gets a fresh pool with the new state
    third = verify_batch(v, tasks(2), ["ok"] * 2, workers=2)
    assert {x.details["tag"] for x in third} == {"b"}


def test_inline_mode_catches_exceptions():
    out = verify_batch(Hostile(), tasks(3), ["ok", "raise", "garbage"], workers=0)
    assert [v.outcome for v in out] == ["pass", "infra", "infra"]
    assert out[0].details["pid"] == os.getpid()


def test_bad_arguments():
    with pytest.raises(ValueError, match="2 tasks but 1 completions"):
        verify_batch(Hostile(), tasks(2), ["ok"], workers=0)
    assert verify_batch(Hostile(), [], [], workers=2) == []

    class Local:  # defined in a function: cannot be pickled for the workers
        name = "local"

        def verify(self, task, completion):
            raise AssertionError

    with pytest.raises(TypeError, match="cannot be pickled"):
        VerifierPool(Local(), workers=1)


def test_real_verifiers_through_the_pool(tmp_path):
    from rlvr.verifiers.registry import TaskRouter

    math_tasks = [Task(id="m", kind="math", gold={"answer": "1/2"}), Task(id="n", kind="math", gold={"answer": "2"})]
    sql = Task(id="s", kind="sql", gold={"schema_sql": "CREATE TABLE t(x); INSERT INTO t VALUES (1);",
                                         "gold_sql": "SELECT x FROM t"}, answer_format="code_fence")
    out = verify_batch(TaskRouter(), math_tasks + [sql, sql],
                       [r"\boxed{0.5}", r"\boxed{3}", "SELECT x FROM t", "DROP TABLE t"],
                       workers=2, timeout_s=30, persistent=False)
    assert [v.outcome for v in out] == ["pass", "wrong", "pass", "violation"]


def test_unpicklable_item_is_infra_and_the_batch_finishes():
    with VerifierPool(Hostile(), workers=1) as pool:
        bad = Task(id="bad", meta={"f": lambda: None})  # a lambda cannot cross to the worker
        out = pool.map([Task(id="a"), bad, Task(id="b")], ["ok", "ok", "ok"], timeout_s=10)
    assert [v.outcome for v in out] == ["pass", "infra", "pass"]


def test_workers_that_cannot_start_settle_the_batch_as_infra(monkeypatch):
    import rlvr.verifiers.pool as pool_mod

    monkeypatch.setattr(pool_mod, "_BOOT", "import sys; sys.exit(7)")  # every worker dies at once
    with VerifierPool(Hostile(), workers=1) as pool:
        out = pool.map(tasks(3), ["ok"] * 3, timeout_s=5)
    assert [v.outcome for v in out] == ["infra"] * 3 and "could not be started" in out[0].details["error"]


def test_storm_of_hanging_verifications_costs_one_timeout_not_waves_of_them():
    # 30% of a batch hang past the 2 s timeout, half sleeping, half spinning on the CPU. Without spares two
    # workers would serve them in three 2 s waves (>= 6 s); with them every hang runs its timeout side by side.
    T = 2.0
    comps = ["ok"] * 20
    for i in (1, 4, 7):
        comps[i] = "hang"
    for i in (2, 9, 15):
        comps[i] = "spin"
    with VerifierPool(Hostile(), workers=2) as pool:
        pool.map(tasks(4), ["ok"] * 4, timeout_s=T)  # started
        t0 = time.perf_counter()
        pool.map(tasks(20), ["ok"] * 20, timeout_s=T)
        normal = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = pool.map(tasks(20), comps, timeout_s=T)
        storm = time.perf_counter() - t0
        slots_after = len(pool._slots)
    assert [v.outcome for v in out] == ["timeout" if c != "ok" else "pass" for c in comps]
    print(f"storm: {storm:.2f} s (normal batch {normal:.2f} s, timeout {T} s, bound {1.5 * T + normal:.2f} s)")
    assert storm <= 1.5 * T + normal, (storm, normal)
    assert slots_after == 6  # the on-demand spares were stopped after the batch: 2 workers + 4 warm spares
