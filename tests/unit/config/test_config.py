"""Recipes: unknown keys name key, file, line and nearest valid key; --set overrides; typed variants."""

import pytest

from rlvr.config.load import apply_override, load_recipe
from rlvr.errors import ConfigError

RECIPE = """\
name: t
stages:
  - type: sft
    optim:
      lrr: 0.1
"""


def test_unknown_key_names_key_file_line_and_nearest(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text(RECIPE)
    with pytest.raises(ConfigError) as e:
        load_recipe(p)
    msg = str(e.value)
    assert f"{p}:5" in msg  # the line of `lrr:`
    assert "stages.0.sft.optim.lrr" in msg
    assert "did you mean 'lr'" in msg


def test_mistyped_variant_field_suggests_the_variant_field():
    with pytest.raises(ConfigError, match="did you mean 'eps_high'"):
        load_recipe(None, ["stages=[{type: rl, loss: {type: dapo, eps_hgh: 0.3}}]"])


def test_overrides_keep_defaults_and_switch_variants():
    r = load_recipe(None, ["stages=[{type: rl}]", "stages.rl.optim.lr=2e-4", "stages.rl.loss.type=dapo",
                           "stages.0.loss.eps_high=0.3"])
    st = r.stages[0]
    assert st.optim.lr == 2e-4 and st.optim.schedule == "constant"  # the stage default survives
    assert st.loss.type == "dapo" and st.loss.eps_high == 0.3 and st.loss.eps_low == 0.2


def test_switching_the_loss_by_override_brings_the_new_losses_defaults_and_drops_the_old_ones(tmp_path):
    """A default a loss variant fills in (DAPO: dynamic sampling on correctness, the overlong term) follows the loss
    a --set switches to, as if the recipe had named it; what the recipe or an override set explicitly stays."""
    p = tmp_path / "r.yaml"
    p.write_text("stages:\n  - type: rl\n    name: rl\n    loss: {type: grpo}\n")
    dapo = load_recipe(p, ["stages.rl.loss.type=dapo"]).stages[0]
    assert dapo.sampling.dynamic_sampling == "correct" and [t.name for t in dapo.rewards] == ["correct", "overlong"]
    assert load_recipe(p, ["stages.rl.loss={type: dapo}"]).stages[0].sampling.dynamic_sampling == "correct"
    # rlvr sweep resolves its cells the same way (it compares a cell's saved config with this)
    from rlvr.commands.sweep import with_overrides

    swept = with_overrides(load_recipe(p), ["stages.rl.loss.type=dapo"], "--vary")
    assert swept.model_dump() == load_recipe(p, ["stages.rl.loss.type=dapo"]).model_dump()
    back = load_recipe(p, ["stages.rl.loss.type=dapo", "stages.rl.loss.type=grpo"]).stages[0]
    assert back.sampling.dynamic_sampling == "off" and [t.name for t in back.rewards] == ["correct"]
    # from a DAPO recipe to GRPO, and the other overrides of the same stage keep the variant's defaults
    p.write_text("stages:\n  - type: rl\n    name: rl\n    loss: {type: dapo}\n")
    grpo = load_recipe(p, ["stages.rl.optim.lr=3e-5", "stages.rl.loss.type=grpo"]).stages[0]
    assert grpo.sampling.dynamic_sampling == "off" and [t.name for t in grpo.rewards] == ["correct"]
    assert load_recipe(p, ["stages.rl.optim.lr=3e-5"]).stages[0].sampling.dynamic_sampling == "correct"
    # an explicit choice is the user's: it survives the switch either way
    keep = load_recipe(p, ["stages.rl.sampling.dynamic_sampling=off", "stages.rl.loss.type=grpo",
                           "stages.rl.loss.type=dapo"]).stages[0]
    assert keep.sampling.dynamic_sampling == "off" and [t.name for t in keep.rewards] == ["correct", "overlong"]
    p.write_text("stages:\n  - type: rl\n    name: rl\n    loss: {type: dapo}\n    rewards: [{name: correct}, "
                 "{name: overlong, weight: 0.5}]\n")
    listed = load_recipe(p, ["stages.rl.loss.type=grpo"]).stages[0]
    assert [(t.name, t.weight) for t in listed.rewards] == [("correct", 1.0), ("overlong", 0.5)]


def test_bad_override_syntax_and_unknown_stage_name():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        apply_override({}, "stages.sft")
    with pytest.raises(ConfigError, match="no list item named 'nope'"):
        load_recipe(None, ["stages=[{type: sft}]", "stages.nope.max_steps=3"])


def test_eval_tasks_must_be_heldout():
    with pytest.raises(ConfigError, match="heldout"):
        load_recipe(None, ["eval.tasks.split=train"])


def test_duplicate_stage_names_rejected():
    with pytest.raises(ConfigError, match="unique"):
        load_recipe(None, ["stages=[{type: sft}, {type: sft}]"])


def test_every_shipped_recipe_validates():
    from pathlib import Path

    recipes = sorted(Path(__file__).resolve().parents[3].joinpath("recipes").rglob("*.yaml"))
    assert recipes, "no recipes shipped"
    for p in recipes:
        load_recipe(p)


def test_every_shipped_recipe_ends_its_stages_by_step_counts():
    """A time cap makes the documented figures depend on the machine's speed; users may still set one."""
    from pathlib import Path

    import yaml

    for p in sorted(Path(__file__).resolve().parents[3].joinpath("recipes").rglob("*.yaml")):
        for i, st in enumerate(yaml.safe_load(p.read_text()).get("stages", [])):
            assert st.get("max_minutes") is None, f"{p.name}: stage {st.get('name', i)} stops by max_minutes"
