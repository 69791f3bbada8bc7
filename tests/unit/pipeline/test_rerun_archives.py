"""A fresh run into a run directory that holds an earlier run moves the earlier stage aside instead of
appending to its metrics (nothing written is lost, nothing is mixed)."""

import json

import pytest

from rlvr.config.load import load_recipe
from rlvr.pipeline import archive_stage_dir, run_pipeline

RECIPE = """\
name: r
run_dir: {run_dir}
threads: 1
eval_base: false
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 4, split: heldout}}, max_new_tokens: 8}}
stages:
  - {{type: sft, max_steps: 2, batch_size: 4, micro_batch_size: 4, save_every: 0, eval_every: 0,
     data: {{families: [add2], n: 16}}}}
"""


def recipe_at(tmp_path, tiny_dir):
    p = tmp_path / "r.yaml"
    p.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir))
    return load_recipe(p)


def steps(path):
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_fresh_rerun_moves_the_earlier_stage_aside(tiny_dir, tmp_path):
    recipe = recipe_at(tmp_path, tiny_dir)
    run_pipeline(recipe)
    first = (tmp_path / "run" / "sft" / "metrics.jsonl").read_text()
    run_pipeline(recipe)
    moved = sorted(tmp_path.joinpath("run").glob("sft.prev-*"))
    assert len(moved) == 1
    assert (moved[0] / "metrics.jsonl").read_text() == first  # the earlier run, byte for byte
    new = steps(tmp_path / "run" / "sft" / "metrics.jsonl")
    assert new == sorted(new) and len(new) == len(steps(moved[0] / "metrics.jsonl"))  # one run, not two
    assert (tmp_path / "run" / "sft" / "final" / "config.json").exists()


def test_resume_does_not_move_anything(tiny_dir, tmp_path):
    recipe = recipe_at(tmp_path, tiny_dir)
    run_pipeline(recipe)
    run_pipeline(recipe, resume=True)
    assert not list(tmp_path.joinpath("run").glob("sft.prev-*"))


@pytest.mark.parametrize("inside", [True, False])
def test_a_starting_model_inside_the_moved_stage_is_followed(tmp_path, inside):
    stage = tmp_path / "run" / "grpo"
    (stage / "final").mkdir(parents=True)
    init = str(stage / "final") if inside else str(tmp_path / "elsewhere")
    moved, init2 = archive_stage_dir(stage, init)
    assert moved is not None and not stage.exists() and (moved / "final").is_dir()
    assert init2 == (str(moved / "final") if inside else init)


def test_an_empty_or_missing_stage_dir_is_left_alone(tmp_path):
    assert archive_stage_dir(tmp_path / "none", "x") == (None, "x")
    (tmp_path / "empty").mkdir()
    assert archive_stage_dir(tmp_path / "empty", None) == (None, None)
