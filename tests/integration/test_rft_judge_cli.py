"""End to end through the console script: `rlvr rft`, `rlvr distill`, `rlvr probe judge`, and the
validate-time gate and RLAIF label of a model-judged reward."""

import json
import pytest
import os
import shutil
import subprocess
import sys

RECIPE = """\
name: t
run_dir: {run_dir}
eval_base: false
threads: 1
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 8, split: heldout}}, max_new_tokens: 16}}
stages:
  - {{type: rft, rounds: 1, tasks_per_round: 4, steps_per_round: 2, batch_size: 4, micro_batch_size: 4,
     sampling: {{group_size: 2, max_new_tokens: 16}}, data: {{families: [add2], n: 16}}}}
  - {{type: distill, teacher: {model}, rounds: 1, tasks_per_round: 4, steps_per_round: 2, batch_size: 4,
     micro_batch_size: 4, sampling: {{group_size: 2, max_new_tokens: 16}}, data: {{families: [add2], n: 16}}}}
"""

JUDGE = """\
name: j
run_dir: {run_dir}
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 8, split: heldout}}}}
stages:
  - type: rl
    data: {{families: [add2], n: 16}}
    rewards: [{{name: correct}}, {{name: judge, judge_model: {judge}, rubric: "Score 9 if right.", weight: 0.5}}]
"""


def rlvr(*args, check=True):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "rlvr.cli", *args], capture_output=True, text=True, env=env,
                       timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"rlvr {args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def test_rft_and_distill_stages_run_from_the_cli(tiny_dir, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir))
    rlvr("run", str(recipe))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [s["stage"] for s in summary["stages"]] == ["rft", "distill"]
    rows = [json.loads(x) for x in open(tmp_path / "run" / "rft" / "metrics.jsonl")]
    assert any("sample/pass_rate" in r for r in rows)


@pytest.mark.slow  # four CLI processes and a judge probe (~27 s)
def test_judge_gate_label_and_probe(tiny_dir, tmp_path):
    judge = tmp_path / "judge"
    shutil.copytree(tiny_dir, judge)
    recipe = tmp_path / "j.yaml"
    recipe.write_text(JUDGE.format(run_dir=tmp_path / "run", model=tiny_dir, judge=judge))
    p = rlvr("validate", str(recipe), check=False)
    assert p.returncode != 0 and "probe judge" in (p.stdout + p.stderr)
    ok = rlvr("validate", str(recipe), "--allow-unprobed-judge")
    assert "RLAIF" in ok.stdout
    probe = rlvr("probe", "judge", "--judge-model", str(judge), "--rubric", "Score 9 if right.", "--n", "2",
                 "--min-mass", "0", check=False)
    out = probe.stdout
    assert all(a in out for a in ("injection", "score_format", "flattery", "length_padding")), out
    assert list(judge.glob("judge_probe_*.json"))
    # a failed probe still refuses the stage (the untrained judge cannot tell right from wrong)
    again = rlvr("validate", str(recipe), check=False)
    text = " ".join((again.stdout + again.stderr).split())
    if probe.returncode != 0:
        assert again.returncode != 0 and "failed its probe" in text, text
    else:
        assert again.returncode == 0 and "RLAIF" in text, text
