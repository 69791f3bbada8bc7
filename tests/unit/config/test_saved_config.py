"""--resume and the run's saved config.yaml: the diff names each changed key; a moved run dir is not a change."""

import pytest

from rlvr.config.load import dump_recipe, load_recipe
from rlvr.config.saved import resume_recipe
from rlvr.errors import ConfigError


def saved_run(tmp_path, *sets):
    tmp_path.mkdir(exist_ok=True)
    r = load_recipe(None, ["stages=[{type: sft}]", f"run_dir={tmp_path}", *sets])
    (tmp_path / "config.yaml").write_text(dump_recipe(r))
    return r


def test_resume_without_a_recipe_applies_set_as_a_change(tmp_path):
    saved_run(tmp_path, "stages.sft.max_steps=7")
    with pytest.raises(ConfigError, match=r"stages.0.max_steps: 7 -> 9"):
        resume_recipe(None, tmp_path, overrides=["stages.sft.max_steps=9"])
    r, changes = resume_recipe(None, tmp_path, allow_change=True, overrides=["stages.sft.max_steps=9"])
    assert r.stages[0].max_steps == 9 and changes == {"stages.0.max_steps": [7, 9]}


def test_a_moved_run_dir_resumes_where_it_is_now(tmp_path):
    saved = saved_run(tmp_path / "old")
    moved = tmp_path / "new"
    (tmp_path / "old").rename(moved)
    r, changes = resume_recipe(None, moved)
    assert changes == {} and r.stages == saved.stages and r.run_dir == str(moved)
    r, changes = resume_recipe(saved.model_copy(update={"run_dir": str(moved)}), moved)
    assert changes == {} and r.run_dir == str(moved)


def test_no_saved_config_and_no_recipe_is_an_error_naming_the_file(tmp_path):
    with pytest.raises(ConfigError, match="config.yaml not found"):
        resume_recipe(None, tmp_path / "nothing")
