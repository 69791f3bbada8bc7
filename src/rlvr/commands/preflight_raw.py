"""The dry run's checks that need no valid recipe, run on the YAML as read when the schema itself fails.

A recipe with a schema error (an unknown key, a value out of range) cannot be resolved, so the full dry run
(:mod:`rlvr.commands.preflight`) cannot start; but its model folder, tokenizer and files can still be
checked from the raw mapping. :func:`load_recipe_listing` reports those problems in the same message as
the schema errors, so a user fixes every list at once instead of meeting the next after each fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlvr.commands.preflight import DryRun, Problem, _try, check_model_folder, check_text, format_problem
from rlvr.config.load import apply_override, load_recipe
from rlvr.config.recipe import STAGE_ALIASES, Recipe
from rlvr.errors import ConfigError, listing
from rlvr.stages import STAGES

STAGE_MODEL_KEYS = ("reward_model_path", "teacher", "backbone")


def load_recipe_listing(path: str, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """:func:`load_recipe`, but a schema error also lists what :func:`raw_problems` finds in the same file."""
    try:
        return load_recipe(path, overrides)
    except ConfigError as e:
        raw, text = _read(path, overrides)
        probs = raw_problems(raw) if raw is not None else []
        if not probs:
            raise
        found = "\n  - ".join(format_problem(p, path, text) for p in probs)
        raise ConfigError(f"{e}\nFound as well (these checks need no valid recipe):\n  - {found}") from None


def _read(path: str, overrides) -> tuple[dict | None, str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
        raw = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None, ""
    if not isinstance(raw, dict):
        return None, ""
    for ov in overrides:
        try:
            apply_override(raw, ov)
        except (ConfigError, TypeError, KeyError, IndexError):
            continue  # the schema error names it
    return raw, text


def raw_problems(raw: dict[str, Any]) -> list[Problem]:
    """The starting model folder and its tokenizer, every stage model folder, every task and pairs file
    (present, parsed, its tasks judgeable where they are judged, its text encodable by the tokenizer)."""
    dry = DryRun(recipe=None)  # no resolved recipe: only the tokenizer and the texts are filled
    out: list[Problem] = []
    model = raw.get("model")
    if isinstance(model, dict) and isinstance(model.get("path"), str):
        template = model.get("chat_template") if model.get("chat_template") in ("required", "plain") else "required"
        out += check_model_folder(model["path"], "model.path", template, dry)
    ev = raw.get("eval")
    if isinstance(ev, dict):
        out += _source(dry, "eval.tasks", ev.get("tasks"), judged=True)
    stages = raw.get("stages")
    for i, st in enumerate(stages if isinstance(stages, list) else []):
        if isinstance(st, dict):
            out += _stage(dry, i, st)
    return out + check_text(dry)


def _stage(dry: DryRun, i: int, st: dict[str, Any]) -> list[Problem]:
    kind = STAGES.get(STAGE_ALIASES.get(st.get("type"), (st.get("type"),))[0])
    # the raw approximation of rlvr.commands.preflight.judged_sources: judged where a stage of its type may be
    judged, demos = (kind.may_judge_data, kind.demonstrations) if kind is not None else (False, False)
    out = _source(dry, f"stages.{i}.data", st.get("data"), judged=judged, demos=demos)
    out += _source(dry, f"stages.{i}.heldout", st.get("heldout"), judged=False, demos=True)
    models = [(k, st.get(k)) for k in STAGE_MODEL_KEYS]
    pairs = st.get("pairs")
    if isinstance(pairs, dict):
        models.append(("pairs.reward_model_path", pairs.get("reward_model_path")))
        out += _source(dry, f"stages.{i}.pairs.tasks", pairs.get("tasks"), judged=pairs.get("scorer") != "reward_model")
        for name in ("path", "heldout_path"):
            if isinstance(pairs.get(name), str):
                out += _pairs(dry, f"stages.{i}.pairs.{name}", pairs[name])
    for k, p in models:
        if isinstance(p, str) and not (Path(p) / "config.json").exists():
            out.append(Problem(f"stages.{i}.{k}", f"{p!r} is not a local model folder (no config.json)"))
    return out


def _source(dry: DryRun, key: str, src: Any, judged: bool, demos: bool = False) -> list[Problem]:
    """A task source given as a mapping with a ``path``: the file or folder exists; a JSONL file parses, and
    its tasks are judgeable when ``judged``."""
    if not isinstance(src, dict) or not isinstance(src.get("path"), str):
        return []
    path, pkey = src["path"], f"{key}.path"
    if not Path(path).exists():
        return [Problem(pkey, f"{path}: file not found")]
    if src.get("type", "jsonl") != "jsonl":
        return []
    from rlvr.data.jsonl import load_tasks
    from rlvr.verifiers.registry import unjudgeable

    out: list[Problem] = []
    tasks = _try(out, pkey, lambda: load_tasks(path))
    if tasks:
        dry.texts[pkey] = (tasks, demos)
        bad = unjudgeable(tasks) if judged else []
        if bad:
            out.append(Problem(pkey, listing(bad, "tasks cannot be judged by their kind's verifier")))
    return out


def _pairs(dry: DryRun, key: str, path: str) -> list[Problem]:
    from rlvr.data.preference import load_preferences

    out: list[Problem] = []
    recs = _try(out, key, lambda: load_preferences(path))
    if recs:
        dry.texts[key] = (recs, True)
    return out
