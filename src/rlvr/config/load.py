"""Read a recipe from YAML, apply ``--set a.b=c`` overrides, validate, and explain errors.

An unknown or mistyped key is an error naming the key, the file (and line) and the nearest valid key.
"""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rlvr.config.recipe import Recipe
from rlvr.errors import ConfigError


def load_recipe(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Load and validate a recipe file (or the defaults when ``path`` is None) with overrides applied."""
    raw: dict[str, Any] = {}
    text = ""
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"{p}: recipe file not found")
        text = p.read_text(encoding="utf-8")
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: invalid YAML: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{p}: a recipe must be a mapping at the top level")
    recipe = validate_recipe(raw, str(path or "<defaults>"), text)
    return override_recipe(recipe, overrides, str(path or "<defaults>"))


def override_recipe(recipe: Recipe, overrides: list[str] | tuple[str, ...], source: str = "<recipe>") -> Recipe:
    """Apply ``--set`` overrides on top of the resolved recipe, so a partial override keeps the other
    defaults. Each one is validated in turn, so list items it adds get their defaults before the next."""
    for ov in overrides:
        full = overridden_dump(recipe, ov)
        recipe = validate_recipe(full, f"{source} with --set {ov}")
    return recipe


def overridden_dump(recipe: Recipe, override: str) -> dict[str, Any]:
    """The resolved ``recipe`` as a dict with one ``KEY=VALUE`` applied, ready to validate: the values a stage's
    variant filled in (not the recipe) are left out first, so that validating re-derives them for the variant the
    override may switch to (``--set stages.rl.loss.type=dapo`` brings DAPO's dynamic sampling)."""
    full = recipe.model_dump(mode="json")
    for stage, dumped in zip(recipe.stages, full["stages"]):
        if hasattr(stage, "unfill_variant_defaults"):
            stage.unfill_variant_defaults(dumped)
    apply_override(full, override)
    return full


def validate_recipe(raw: dict[str, Any], source: str = "<dict>", text: str = "") -> Recipe:
    try:
        return Recipe.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(explain(e, source, text)) from None


def apply_override(raw: dict[str, Any], override: str) -> None:
    """Apply ``a.b.c=value`` (value parsed as YAML). List items by index or, for stages, by name."""
    if "=" not in override:
        raise ConfigError(f"--set {override!r}: expected KEY=VALUE, e.g. --set stages.sft.max_steps=100")
    key, _, value = override.partition("=")
    parts = key.strip().split(".")
    node: Any = raw
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            idx = _list_index(node, part, key)
            if last:
                node[idx] = yaml.safe_load(value)
            else:
                node = node[idx]
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {'.'.join(parts[:i])} is not a mapping")
        if last:
            new = yaml.safe_load(value)
            if part == "type" and node.get("type") != new:
                node.clear()  # switching a variant: drop the old variant's fields
            node[part] = new
        else:
            if node.get(part) is None:  # an unset optional section (model.lora: null): create it
                node[part] = {}
            node = node[part]


def _list_index(node: list, part: str, key: str) -> int:
    if part.isdigit():
        if int(part) >= len(node):
            raise ConfigError(f"--set {key}: index {part} out of range (list has {len(node)} items)")
        return int(part)
    for j, item in enumerate(node):
        if isinstance(item, dict) and (item.get("name") == part or (item.get("type") == part and "name" not in item)):
            return j
    names = [it.get("name", it.get("type")) for it in node if isinstance(it, dict)]
    raise ConfigError(f"--set {key}: no list item named {part!r} (items: {names})")


def explain(err: ValidationError, source: str, text: str = "") -> str:
    """Turn pydantic errors into one paragraph naming keys, file, line and the nearest valid key."""
    msgs = []
    for e in err.errors():
        loc = [x for x in e["loc"]]
        dotted = ".".join(str(x) for x in loc) or "<top level>"
        line = _line_of(text, loc)
        where = f"{source}:{line}" if line else source
        if e["type"] == "extra_forbidden":
            valid = _valid_keys(loc[:-1])
            near = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.5)
            moved = _moved_hint(loc)
            hint = moved or (f"; did you mean {near[0]!r}?" if near else "")
            msgs.append(f"{where}: unknown key {dotted!r}{hint} (valid keys here: {', '.join(valid)})")
        elif e["type"] == "union_tag_invalid":
            ctx = e.get("ctx", {})
            what = "stage type" if len(loc) == 2 and loc[0] == "stages" else f"{loc[-1]} type"
            extra = ""
            if what == "stage type":
                from rlvr.config.recipe import STAGE_ALIASES

                extra = f", or an alias: {', '.join(STAGE_ALIASES)}"
            msgs.append(f"{where}: {dotted}: unknown {what} {ctx.get('tag')!r}; expected one of "
                        f"{ctx.get('expected_tags')}{extra}")
        else:
            msgs.append(f"{where}: {dotted}: {e['msg']} (got {e.get('input')!r})")
    return "Invalid recipe. " + " ".join(msgs)


def _model_at(loc: list) -> Any:
    model: Any = Recipe
    for part in loc:
        model = _step(model, part)
        if model is None:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _find_field(model: Any, name: str, depth: int = 3) -> list[str]:
    """Dotted paths below ``model`` (a config class) that end in a field called ``name``."""
    out: list[str] = []
    if depth <= 0 or not (isinstance(model, type) and issubclass(model, BaseModel)):
        return out
    for fname, f in model.model_fields.items():
        if fname == name:
            out.append(fname)
        for sub in _members(f.annotation):
            out += [f"{fname}.{p}" for p in _find_field(sub, name, depth - 1)]
    return sorted(set(out))


def _members(tp: Any) -> list[Any]:
    tp = _strip(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [m for m in map(_strip, typing.get_args(tp)) if isinstance(m, type) and issubclass(m, BaseModel)]
    return [tp] if isinstance(tp, type) and issubclass(tp, BaseModel) else []


RENAMED = {
    "prompts_per_step": "tasks_per_step", "clip_eps": "eps", "init_kl_coef": "kl.beta", "target_kl": "kl.target",
    "kl_horizon": "kl.horizon",
}
"""Keys renamed in the trainer-layer redesign (PPO's fields now follow the RL stage's), old -> new."""


def _moved_hint(loc: list) -> str:
    """``loss.beta`` under an rl stage -> "; 'beta' lives in kl.beta" (searching the enclosing sections);
    a renamed key names its new name."""
    key = str(loc[-1])
    if key in RENAMED:
        return f"; {key!r} was renamed: use {RENAMED[key]!r}"
    for cut in range(len(loc) - 2, -1, -1):
        anc = _model_at(loc[:cut])
        if anc is None:
            continue
        here = ".".join(str(x) for x in loc[:-1][cut:] if not _is_tag(x))
        paths = [p for p in _find_field(anc, key) if p.rsplit(".", 1)[0] != here]
        if paths:
            return f"; {key!r} is not a key of {here or 'the recipe'}: it lives in {' or '.join(paths)}"
    return ""


def _is_tag(x: Any) -> bool:
    return isinstance(x, str) and x in _TAGS


def _valid_keys(loc: list) -> list[str]:
    """Field names of the config model found by walking ``loc`` from the Recipe root."""
    model: Any = Recipe
    for part in loc:
        model = _step(model, part)
        if model is None:
            return []
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


def _step(tp: Any, part: Any) -> Any:
    tp = _unwrap(tp, part)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if isinstance(part, str) and part in tp.model_fields:
            return _unwrap(tp.model_fields[part].annotation, None)
        return tp  # a discriminator tag in the loc: stay on the chosen member
    origin = typing.get_origin(tp)
    if origin in (list, tuple) and isinstance(part, int):
        return _unwrap(typing.get_args(tp)[0], None)
    return None


def _strip(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _unwrap(tp: Any, tag: Any) -> Any:
    """Strip Annotated/Optional; pick a union member by its ``type`` literal when ``tag`` names one."""
    tp = _strip(tp)
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return tp
    models = [m for m in map(_strip, typing.get_args(tp)) if isinstance(m, type) and issubclass(m, BaseModel)]
    for m in models:
        if "type" in m.model_fields and m.model_fields["type"].default == tag:
            return m
    return models[0] if len(models) == 1 else tp


def _line_of(text: str, loc: list) -> int | None:
    """1-based line of the deepest YAML key on ``loc`` (skipping discriminator tags)."""
    if not text:
        return None
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = [(k, v) for k, v in node.value if k.value == str(part)]
            if not match:
                continue
            line = match[0][0].start_mark.line + 1
            node = match[0][1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
    return line


def _tags() -> set[str]:
    """Every discriminator value (``type`` literal) of the config classes: they appear in error locations."""
    from rlvr.config.docs import section_classes

    return {c.model_fields["type"].default for c in section_classes() if "type" in c.model_fields}


_TAGS = _tags()


def dump_recipe(recipe: Recipe) -> str:
    """The resolved config as YAML (written into the run directory)."""
    return yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False)
