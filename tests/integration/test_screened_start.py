"""``start: screened``: an RL stage starts from the screened-best of an earlier stage's saved checkpoints, and the
summary records the screen and the choice."""

import json
import shutil

import pytest

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


@pytest.mark.slow  # a whole run: SFT saving checkpoints, two screens, an RL step (~25 s); the choice is tested below
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


def test_start_from_must_name_an_earlier_stage(tiny_dir, tmp_path, rlvr_cli):
    recipe = tmp_path / "r.yaml"
    text = RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir, stat="rank").replace(
        "start: screened,", "start: screened, start_from: later,")
    recipe.write_text(text)
    code, _, err = rlvr_cli("validate", recipe)
    assert code == 2 and "start_from" in err and "'later' is not an earlier stage" in err
    assert "r.yaml" in err and "Traceback" not in err


def test_the_screened_start_picks_the_best_checkpoint_by_the_named_statistic(tiny_dir, tmp_path):
    from rlvr.config.recipe import Recipe
    from rlvr.models.tiny import build_tiny
    from rlvr.pipeline import pick_start, saved_checkpoints, screened_start

    run = tmp_path / "run"
    shutil.copytree(tiny_dir, run / "sft" / "checkpoints" / "step-000001")
    build_tiny(run / "sft" / "final", size="test", seed=1)
    (run / "sft" / "checkpoints" / "step-000002").mkdir()  # no model in it: not screened
    rl = {"type": "rl", "start": "screened", "start_tasks": 2, "data": {"families": ["add2"], "n": 4},
          "sampling": {"group_size": 2, "max_new_tokens": 4}}
    recipe = Recipe.model_validate({"model": {"path": tiny_dir}, "stages": [{"type": "sft"}, rl]})
    assert [d.name for d in saved_checkpoints(run / "sft")] == ["step-000001", "final"]
    by_entropy = screened_start(recipe.model_copy(update={"stages": [recipe.stages[0], recipe.stages[1].model_copy(
        update={"start_statistic": "entropy"})]}), 1, run)
    rows = by_entropy["screened"]
    assert len(rows) == 2 and by_entropy["from"] == "sft"
    assert by_entropy["chosen"] == max(rows, key=lambda r: r["entropy"])["path"]
    by_rank = screened_start(recipe.model_copy(update={"stages": [recipe.stages[0], recipe.stages[1].model_copy(
        update={"start_statistic": "rank"})]}), 1, run)
    assert by_rank["chosen"] == next(r["path"] for r in by_rank["screened"] if r["rank"] == 1)
    by_default = screened_start(recipe, 1, run)
    assert by_default["statistic"] == "pass_at_1"
    assert by_default["chosen"] == pick_start(by_default["screened"], "pass_at_1", recipe.plan.no_signal)["path"]
    empty = screened_start(recipe, 1, tmp_path / "elsewhere")
    assert empty["chosen"] is None and "saved no checkpoint" in empty["note"]


def _row(path, p1, below=False, signal=0.5, rank=1):
    return {"path": path, "pass_at_1": p1, "below_threshold": below, "signal_frac_observed": signal, "rank": rank,
            "entropy": 1.0 - p1}


def test_the_default_start_is_the_best_pass_at_1_that_rl_can_use():
    from rlvr.config.rl import RLStage
    from rlvr.pipeline import pick_start

    assert RLStage().start_statistic == "pass_at_1"
    rows = [_row("early", 0.4, signal=0.5, rank=1), _row("late", 0.7, signal=0.45, rank=2),
            _row("dead", 0.9, signal=0.05, rank=3), _row("cold", 0.95, below=True, signal=0.3, rank=4)]
    # the measured share ranks "early" first (it gains most); the later, usable one ends higher
    assert pick_start(rows, "pass_at_1", 0.1)["path"] == "late"
    assert pick_start(rows, "rank", 0.1)["path"] == "early"
    assert pick_start(rows, "entropy", 0.1)["path"] == "early"
    # none usable: the best pass@1 of all of them
    unusable = [_row("a", 0.2, signal=0.0), _row("b", 0.3, below=True)]
    assert pick_start(unusable, "pass_at_1", 0.1)["path"] == "b"
