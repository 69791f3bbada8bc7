"""``rlvr plan RECIPE`` end to end on a tiny recipe (before and after a run), and its parts: probes per
task kind, the determinism check, the advice."""

import itertools
import pytest
import json
import shutil

from rlvr.commands.plan import determinism, probe_verifiers
from rlvr.data.types import Task
from rlvr.verifiers.base import Verdict
from rlvr.verifiers.registry import _CUSTOM, register_verifier

from test_cli_sft import rlvr

RECIPE = """\
name: t
run_dir: {run_dir}
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 6, split: heldout}}, max_new_tokens: 8}}
stages:
  - {{type: sft, max_steps: 2, data: {{families: [add2], n: 16}}}}
  - {{type: rl, data: {{families: [add2], n: 16}}, sampling: {{group_size: 4, max_new_tokens: 8}}}}
"""


@pytest.mark.slow  # two plans with probes, determinism and screens (~35 s); the rules have fast tests below
def test_plan_before_and_after_the_run(tiny_dir, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir))
    rep = json.loads(rlvr("plan", str(recipe), "--n-tasks", "6", "--json").stdout)
    assert rep["kinds"] == ["math"] and rep["probes"]["math"]["probes"] > 10 and not rep["probes"]["math"]["accepted"]
    assert rep["determinism"]["checked"] > 0 and rep["determinism"]["differ"] == []
    (s,) = rep["screen"]
    assert s["checkpoint"] == "start" and s["stage"] == "rl" and s["group_size"] == 4 and s["below_threshold"]
    assert any("the SFT stage before it must lift p above" in r for r in rep["recommendations"])
    # a finished stage: its final/ is screened instead of the start
    shutil.copytree(tiny_dir, tmp_path / "run" / "sft" / "final")
    out = rlvr("plan", str(recipe), "--n-tasks", "6").stdout
    assert "screen sft for rl" in out and "p below p*(G) = 0.159: more SFT" in out


def test_a_verifier_that_answers_differently_twice_is_named():
    flips = itertools.cycle([1.0, 0.0])

    class Coin:
        name = "coin"

        def verify(self, task, completion):
            r = next(flips)
            return Verdict(r, bool(r), "pass" if r else "wrong")

    register_verifier("coin", Coin)
    try:
        tasks = [Task(id=f"c{i}", prompt="?", kind="coin", gold={}, solution="x") for i in range(2)]
        rep = determinism(tasks)
        assert rep["checked"] == 6 and len(rep["differ"]) == 6
    finally:
        _CUSTOM.pop("coin")


def test_a_task_kind_without_a_verifier_is_named():
    probes, missing = probe_verifiers({"poetry"})
    assert probes == {} and missing == ["poetry"]
