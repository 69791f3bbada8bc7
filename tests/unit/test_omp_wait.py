"""rlvr.omp_wait: which OpenMP wait policy a run gets, and that a user's choice or a loaded torch is left alone."""

import os
import sys

import pytest

from rlvr import omp_wait
from rlvr.commands.run import QUICKSTART, resolve

RECIPES = QUICKSTART.parent


def recipe(path=QUICKSTART, *sets):
    return resolve(str(path), list(sets), False, None, False)[0]


def test_a_local_single_process_run_spins():
    assert omp_wait.choose(recipe(), busy=0.0) == ("spin", "omp_wait: auto, the run has the cores to itself")
    assert omp_wait.choose(recipe(RECIPES / "grpo_mul31.yaml"), busy=0.1)[0] == "spin"
    assert omp_wait.choose(recipe(), busy=None)[0] == "spin"  # unknown load: as if idle


def test_a_machine_without_a_free_core_per_thread_sleeps(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    mode, why = omp_wait.choose(recipe(QUICKSTART, "threads=2"), busy=0.8)
    assert mode == "passive" and "0.8 of 2 CPUs" in why
    assert omp_wait.choose(recipe(QUICKSTART, "threads=1"), busy=0.8)[0] == "spin"
    assert omp_wait.choose(recipe(QUICKSTART, "threads=1"), busy=1.7)[0] == "passive"


def test_busy_cpus_sees_a_busy_process():
    import subprocess
    import sys as _sys

    if omp_wait.busy_cpus(0.05) is None:
        pytest.skip("no /proc/stat")
    p = subprocess.Popen([_sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass"])
    try:
        import time

        time.sleep(0.5)
        busy = omp_wait.busy_cpus(0.5)
    finally:
        p.kill()
        p.wait()
    assert busy >= 0.8 and busy <= (os.cpu_count() or 1) + 0.01  # the busy loop's core (whatever else runs)


@pytest.mark.parametrize("sets, needle", [
    (["distributed.backend=ray"], "ray"),
])
def test_runs_that_share_the_cores_sleep(sets, needle):
    mode, why = omp_wait.choose(recipe(QUICKSTART, *sets), busy=0.0)
    assert mode == "passive" and needle in why


def test_multi_turn_rollouts_sleep():
    mode, why = omp_wait.choose(recipe(RECIPES / "agent-calculator.yaml"), busy=0.0)
    assert mode == "passive" and "multi-turn" in why


def test_torchrun_ranks_on_one_machine_sleep(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    mode, why = omp_wait.choose(recipe(), busy=0.0)
    assert mode == "passive" and "torchrun" in why


def test_the_recipe_key_wins_over_auto():
    assert omp_wait.choose(recipe(QUICKSTART, "omp_wait=passive"))[0] == "passive"
    assert omp_wait.choose(recipe(QUICKSTART, "distributed.backend=ray", "omp_wait=spin"))[0] == "spin"


def test_a_bad_value_names_the_key():
    from rlvr.errors import ConfigError

    with pytest.raises(ConfigError, match="omp_wait"):
        recipe(QUICKSTART, "omp_wait=busy")


@pytest.fixture
def no_torch_yet(monkeypatch):
    """As in a fresh CLI process: the user set nothing and torch has not loaded."""
    monkeypatch.setattr(omp_wait, "USER_SET", False)
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)


def test_apply_sets_the_environment_libgomp_reads(no_torch_yet):
    omp_wait.default_wait()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert omp_wait.apply("spin") == "spin"
    assert "OMP_WAIT_POLICY" not in os.environ and os.environ["GOMP_SPINCOUNT"] == str(omp_wait.SPIN_COUNT)
    assert omp_wait.in_effect() == f"spin (GOMP_SPINCOUNT={omp_wait.SPIN_COUNT})"
    assert omp_wait.apply("passive") == "passive"
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE" and "GOMP_SPINCOUNT" not in os.environ
    assert omp_wait.in_effect() == "passive"
    with pytest.raises(ValueError, match="busy"):
        omp_wait.apply("busy")


def test_a_users_policy_is_never_changed(no_torch_yet, monkeypatch):
    monkeypatch.setattr(omp_wait, "USER_SET", True)
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert omp_wait.apply("spin") == "user: OMP_WAIT_POLICY=ACTIVE"
    omp_wait.default_wait()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE" and "GOMP_SPINCOUNT" not in os.environ


def test_nothing_changes_once_torch_has_loaded(monkeypatch):
    import torch  # noqa: F401

    monkeypatch.setattr(omp_wait, "USER_SET", False)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert omp_wait.apply("spin") == "fixed: torch already loaded"
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


@pytest.mark.parametrize("env, spins", [
    ({"OMP_WAIT_POLICY": "PASSIVE"}, False), ({"GOMP_SPINCOUNT": "100000"}, True), ({}, True),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, True), ({"GOMP_SPINCOUNT": "0"}, False), ({"GOMP_SPINCOUNT": "10k"}, True),
    ({"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "100"}, True), ({"OMP_WAIT_POLICY": "passive"}, False),
])
def test_spins_reads_the_environment(monkeypatch, env, spins):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert omp_wait.spins() is spins


def test_the_cli_and_recipe_resolution_load_no_torch():
    """The policy is chosen after the recipe is resolved and must reach libgomp before torch loads: the CLI
    module and resolving a recipe (its validation included) import no torch."""
    import subprocess

    code = ("import sys, rlvr.cli\n"
            "from rlvr.commands.run import QUICKSTART, resolve\n"
            "r = resolve(str(QUICKSTART), ['omp_wait=spin'], False, None, False)[0]\n"
            "from rlvr import omp_wait\n"
            "print(omp_wait.choose(r, busy=0.0)[0], 'torch' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["spin", "False"]


def test_apply_for_measures_nothing_when_rlvr_may_not_choose(monkeypatch):
    monkeypatch.setattr(omp_wait, "USER_SET", False)
    monkeypatch.setattr(omp_wait, "busy_cpus", lambda *a: pytest.fail("measured although torch has loaded"))
    assert omp_wait.apply_for(recipe()) == "fixed: torch already loaded"
