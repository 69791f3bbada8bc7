"""A run's saved ``config.yaml`` on ``--resume``: resume with it, or refuse a silent change.

A run resumed with a recipe (or ``--set``) that differs from what the run was started with would
silently change its schedule, step counts and data; ``--resume`` therefore uses the saved config, and a
differing recipe is refused with the differences listed unless the user allows the change (then it is
recorded in ``config_changes.jsonl`` beside the config).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from rlvr.config.load import validate_recipe
from rlvr.config.recipe import Recipe
from rlvr.errors import ConfigError

CONFIG_FILE = "config.yaml"
CHANGES_FILE = "config_changes.jsonl"


def flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "s": [{"x": 2}]}`` -> ``{"a.b": 1, "s.0.x": 2}``."""
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}."))
        return out or {prefix[:-1]: {}}
    if isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        out = {}
        for i, v in enumerate(d):
            out.update(flat(v, f"{prefix}{i}."))
        return out
    return {prefix[:-1]: d}


def config_diff(old: Recipe, new: Recipe) -> dict[str, list]:
    """Dotted key -> [old value, new value] for every key that differs (absent: None). ``run_dir`` is not
    compared: a run directory that was moved or copied resumes where it now is."""
    a, b = flat(old.model_dump(mode="json")), flat(new.model_dump(mode="json"))
    return {
        k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k) and k != "run_dir"
    }


def load_saved(run_dir: str | Path) -> Recipe | None:
    """The recipe a run was started with (None when the run directory has no config.yaml)."""
    p = Path(run_dir) / CONFIG_FILE
    if not p.exists():
        return None
    text = p.read_text(encoding="utf-8")
    return validate_recipe(yaml.safe_load(text) or {}, str(p), text)


def resume_recipe(
    recipe: Recipe | None,
    run_dir: str | Path,
    allow_change: bool = False,
    overrides: list[str] | tuple[str, ...] = (),
) -> tuple[Recipe, dict]:
    """The recipe to resume with and the allowed changes (empty when none). See the module docstring.
    ``recipe`` None: the saved one, with ``overrides`` (``--set``) applied (a change like any other)."""
    from rlvr.config.load import override_recipe

    saved = load_saved(run_dir)
    if saved is not None:  # the run is where its config.yaml is now (it may have been moved)
        saved = saved.model_copy(update={"run_dir": str(run_dir)})
    if saved is None:
        if recipe is None:
            raise ConfigError(
                f"--resume: {Path(run_dir) / CONFIG_FILE} not found, so there is no run to resume "
                "there; give the recipe (rlvr run RECIPE --resume) or the right --run-dir"
            )
        return recipe, {}
    if recipe is None:
        recipe = override_recipe(saved, overrides, str(Path(run_dir) / CONFIG_FILE))
    changes = config_diff(saved, recipe)
    if not changes:
        return saved, {}
    if not allow_change:
        listed = "; ".join(f"{k}: {json.dumps(a)} -> {json.dumps(b)}" for k, (a, b) in changes.items())
        raise ConfigError(
            f"--resume: the recipe differs from the config this run was started with "
            f"({Path(run_dir) / CONFIG_FILE}): {listed}. Resume with the saved config (drop the "
            "changes, or `rlvr run --resume --run-dir DIR` without a recipe), or accept the change "
            "with --allow-config-change (it is logged in the run)"
        )
    return recipe, changes
