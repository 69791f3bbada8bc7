"""``start: screened``: an RL stage starts from the screened-best of an earlier stage's saved checkpoints, and the
summary records the screen and the choice."""

import json

from test_cli_sft import rlvr

RECIPE = """\
name: t
run_dir: {run_dir}
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 4, split: heldout}}, max_new_tokens: 6, control: none}}
eval_base: false
stages:
  - {{type: sft, max_steps: 2, save_every: 1, keep_last: 0, data: {{families: [add2], n: 8}}}}
  - {{type: rl, max_steps: 1, tasks_per_step: 2, data: {{families: [add2], n: 8}}, start: screened,
     start_statistic: {stat}, start_tasks: 3, sampling: {{group_size: 2, max_new_tokens: 6}}}}
"""


def test_rl_starts_from_the_screened_best_checkpoint(tiny_dir, tmp_path):
    recipe, run = tmp_path / "r.yaml", tmp_path / "run"
    recipe.write_text(RECIPE.format(run_dir=run, model=tiny_dir, stat="entropy"))
    out = rlvr("run", str(recipe)).stdout
    (sft, rl) = json.loads((run / "summary.json").read_text())["stages"]
    start = rl["start"]
    paths = [r["path"] for r in start["screened"]]
    assert [p.split("/")[-1] for p in paths] == ["step-000001", "final"]  # the last step is final/
    best = max(start["screened"], key=lambda r: r["entropy"])
    assert start["from"] == "sft" and start["statistic"] == "entropy" and start["chosen"] == best["path"]
    assert start["value"] == best["entropy"] and all(r["rank"] >= 1 for r in start["screened"])
    assert "rl: started from" in out and "2 screened checkpoints of sft" in out


def test_start_from_must_name_an_earlier_stage(tiny_dir, tmp_path):
    recipe = tmp_path / "r.yaml"
    text = RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir, stat="rank").replace(
        "start: screened,", "start: screened, start_from: later,")
    recipe.write_text(text)
    p = rlvr("validate", str(recipe), check=False)
    assert p.returncode == 2 and "start_from" in p.stderr and "'later' is not an earlier stage" in p.stderr
    assert "r.yaml" in p.stderr and "Traceback" not in p.stderr
