"""Whole-tree limits (a cgroup per run) and the harness's least privilege: forked children that each stay
under the per-process memory limit are stopped together; the run's cgroup is gone afterwards; without
cgroups the fallback is loud; the harness, where it can, judges under its own unprivileged uid."""

import glob
import os

import pytest

from rlvr.data.types import Task
from rlvr.verifiers.code import CodeVerifier
from rlvr.verifiers.sandbox import cgroups, detect_isolation, jobs

TREE_BOMB = """```python
import os, time
def f(x):
    for i in range(12):
        if os.fork() == 0:
            b = b"x" * (100 << 20)  # written at once: resident, not just reserved
            time.sleep(30)
    time.sleep(30)
```"""
TASK = Task(id="t", kind="code", gold={"tests": "def check(candidate):\n    assert candidate(1) == 2\n",
                                       "entry_point": "f"}, answer_format="code_fence")
GOOD = "```python\ndef f(x):\n    return x + 1\n```"


def needs_cgroups():
    if isinstance(cgroups.cgroup_bases(), str):
        pytest.skip(f"no cgroups here: {cgroups.cgroup_bases()}")


def _my_cgroups() -> list[str]:
    mine = f"rlvr-sbx-{os.getpid()}-*"  # the runs of this process (other sessions may be verifying right now)
    return glob.glob(f"/sys/fs/cgroup/*/{mine}") + glob.glob(f"/sys/fs/cgroup/*/*/*/{mine}")


@pytest.mark.parametrize("sandbox", ["cold", "warm"])
def test_a_tree_of_processes_is_held_to_one_memory_limit(sandbox):
    needs_cgroups()
    if sandbox == "warm" and detect_isolation("auto").level != "bwrap+uid":
        pytest.skip("the warm sandbox needs bwrap+uid")
    # 12 children x 100 MiB: each under its own 256 MiB address-space limit, the tree far over 320 MiB
    v = CodeVerifier(timeout_s=4.0, memory_mb=256, sandbox=sandbox)
    res = v.verify(TASK, TREE_BOMB)
    assert (res.outcome, res.reward) == ("violation", 0.0) and res.details["limit"] == "memory (whole process tree)"
    assert res.details["sandbox"] == sandbox
    # cold: the run's cgroup is gone; warm: at most empty ones kept for the next run, removed at exit
    assert not [d for d in _my_cgroups() if cgroups._pids(d)]
    cgroups.close_free_cgroups()
    assert not _my_cgroups()
    assert v.verify(TASK, GOOD).outcome == "pass"  # the warm server survived the OOM kill of its job


def test_without_cgroups_the_fallback_is_loud_and_verification_goes_on(monkeypatch, capsys):
    monkeypatch.setattr(cgroups, "cgroup_bases", lambda: "cgroups switched off for this test")
    monkeypatch.setattr(cgroups, "_WARNED", [])
    v = CodeVerifier(timeout_s=5.0)
    assert v.verify(TASK, GOOD).outcome == "pass" and v.verify(TASK, GOOD).outcome == "pass"
    err = capsys.readouterr().err
    assert err.count("SANDBOX HAS NO WHOLE-TREE LIMITS (cgroups switched off for this test)") == 1


def test_the_harness_judges_under_its_own_unprivileged_uid(monkeypatch):
    if not detect_isolation("auto").uid_switch:
        pytest.skip("no uid switch here (not root)")
    monkeypatch.setattr(jobs, "harness_can_drop_root", lambda: True)  # this machine's python is under /root
    tests = "def check(candidate):\n    import os\n    assert os.getuid() != 0\n    assert candidate(1) == 2\n"
    t = Task(id="u", kind="code", gold={"tests": tests, "entry_point": "f"}, answer_format="code_fence")
    assert CodeVerifier(timeout_s=5.0).verify(t, GOOD).outcome == "pass"
