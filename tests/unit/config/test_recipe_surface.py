"""Recipe surface a new user meets: stage-type aliases, moved-key hints, readable tag errors, --set into an
unset section, and docs/recipes.md generated from the config docstrings (every field documented)."""

from pathlib import Path

import pytest

from rlvr.config.load import load_recipe
from rlvr.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("alias, kind, loss", [("grpo", "rl", "grpo"), ("dapo", "rl", "dapo"),
                                               ("dpo", "preference", "dpo"), ("kto", "preference", "kto"),
                                               ("rm", "reward_model", None)])
def test_stage_type_aliases(alias, kind, loss):
    r = load_recipe(None, [f"stages=[{{type: {alias}}}]"])
    st = r.stages[0]
    assert st.type == kind and st.name == alias
    if loss:
        assert st.loss.type == loss


def test_alias_with_a_contradicting_loss_is_refused():
    with pytest.raises(ConfigError, match="type: dapo.*loss.type: grpo|loss.type"):
        load_recipe(None, ["stages=[{type: dapo, loss: {type: grpo}}]"])


def test_unknown_stage_type_names_the_types_not_pydantic_internals(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("stages:\n  - type: grpoo\n")
    with pytest.raises(ConfigError) as e:
        load_recipe(p)
    msg = str(e.value)
    assert "pick()" not in msg and "Input tag" not in msg
    assert "unknown stage type 'grpoo'" in msg and "grpo" in msg and f"{p}:2" in msg


def test_moved_key_hint_points_to_where_the_key_lives(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("stages:\n  - type: rl\n    loss:\n      type: grpo\n      beta: 0.04\n")
    with pytest.raises(ConfigError) as e:
        load_recipe(p)
    assert "kl.beta" in str(e.value) and f"{p}:5" in str(e.value)


def test_set_into_an_unset_section_creates_it():
    r = load_recipe(None, ["model.lora.r=4"])
    assert r.model.lora is not None and r.model.lora.r == 4 and r.model.lora.alpha == 16


@pytest.mark.parametrize("override, key", [
    ("stages=[{type: sft, max_steps: -5}]", "max_steps"),
    ("stages=[{type: rl, tasks_per_step: 0}]", "tasks_per_step"),
    ("model.tiny.size=10m", "size"),
])
def test_out_of_range_values_are_refused_at_load(override, key):
    with pytest.raises(ConfigError, match=key):
        load_recipe(None, [override])


def test_every_config_field_has_a_docstring_and_recipes_md_is_current():
    from rlvr.config.docs import recipes_markdown, undocumented_fields

    assert undocumented_fields() == []
    doc = ROOT / "docs" / "recipes.md"
    assert doc.exists(), "docs/recipes.md missing: python -m rlvr.config.docs > docs/recipes.md"
    assert doc.read_text() == recipes_markdown(), "docs/recipes.md is stale: python -m rlvr.config.docs > docs/recipes.md"


def test_undocumented_field_is_caught():
    from rlvr.config.base import Section
    from rlvr.config.docs import undocumented_fields

    class Bad(Section):
        documented: int = 1
        """yes."""
        bare: int = 2

    assert undocumented_fields([Bad]) == ["Bad.bare"]


def test_config_name_lists_match_their_definitions():
    """config imports no torch, so it lists the tiny sizes and arithmetic families by name: keep them equal."""
    from rlvr.config.data import ARITHMETIC_FAMILIES
    from rlvr.config.model import TINY_SIZES
    from rlvr.data.arithmetic import FAMILIES
    from rlvr.models.tiny import SIZES

    assert TINY_SIZES == tuple(SIZES) and ARITHMETIC_FAMILIES == tuple(FAMILIES)


def test_config_layer_imports_nothing_above_it():
    import ast

    for f in (ROOT / "src" / "rlvr" / "config").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for m in mods:
                assert not m.startswith("torch") and (not m.startswith("rlvr.") or
                                                      m.startswith(("rlvr.config", "rlvr.errors"))), (f.name, m)
