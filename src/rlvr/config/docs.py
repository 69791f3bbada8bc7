"""``docs/recipes.md``, generated from the config classes' field docstrings.

``python -m rlvr.config.docs > docs/recipes.md`` rewrites it; a test fails when a field has no docstring
or when the file is stale.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

HEADER = """# Recipe reference

Every key a recipe (YAML) accepts, generated from the config classes' docstrings by
`python -m rlvr.config.docs > docs/recipes.md` (a test fails when a field is undocumented or this file
is stale). Unknown keys are errors naming the file, the line and the nearest valid key. Override any key
on the command line: `--set stages.sft.max_steps=100`, `--set model.lora.r=8` (list items by index or by
stage name). Data line formats: [data.md](data.md).
"""


def _strip(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _sections_in(tp: Any) -> list[type[BaseModel]]:
    tp = _strip(tp)
    out: list[type[BaseModel]] = []
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    for a in typing.get_args(tp):
        out += _sections_in(a)
    return out


def section_classes() -> list[type[BaseModel]]:
    """Every config class reachable from :class:`Recipe`, in the order first met (breadth first)."""
    return list(_walk())


def _walk() -> dict[type[BaseModel], list[str]]:
    """Config class -> the recipe paths where it appears."""
    from rlvr.config.recipe import Recipe

    seen: dict[type[BaseModel], list[str]] = {Recipe: ["(top level)"]}
    queue: list[tuple[type[BaseModel], str]] = [(Recipe, "")]
    while queue:
        cls, path = queue.pop(0)
        for name, f in cls.model_fields.items():
            tp = _strip(f.annotation)
            listy = typing.get_origin(tp) is list
            for sub in _sections_in(tp):
                tag = sub.model_fields["type"].default if "type" in sub.model_fields else None
                p = f"{path}{name}{'[]' if listy else ''}" + (f" (type: {tag})" if tag and listy else "")
                if sub not in seen:
                    seen[sub] = [p]
                    queue.append((sub, p + "."))
                elif p not in seen[sub] and len(seen[sub]) < 6:
                    seen[sub].append(p)
    return seen


def undocumented_fields(classes: list[type[BaseModel]] | None = None) -> list[str]:
    """``Class.field`` for every field without a docstring (``type`` tags document themselves)."""
    out = []
    for cls in classes if classes is not None else section_classes():
        for name, f in cls.model_fields.items():
            if name != "type" and not (f.description or "").strip():
                out.append(f"{cls.__name__}.{name}")
    return out


def _type_name(tp: Any) -> str:
    tp = _strip(tp)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return f"list of {_type_name(args[0])}" if args else "list"
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    return getattr(tp, "__name__", str(tp))


def _default(f: Any) -> str:
    if f.default is PydanticUndefined:
        return "**required**"
    d = f.default
    if isinstance(d, BaseModel):
        fields = {k: v for k, v in d.model_dump(mode="json", exclude_defaults=True).items()}
        return f"{type(d).__name__}({', '.join(f'{k}={json.dumps(v)}' for k, v in fields.items())})"
    if isinstance(d, list) and d and isinstance(d[0], BaseModel):
        return "[" + ", ".join(json.dumps(x.model_dump(mode="json", exclude_defaults=True)) for x in d) + "]"
    return f"`{json.dumps(d)}`"


def recipes_markdown() -> str:
    """The whole reference page."""
    parts = [HEADER]
    for cls, paths in _walk().items():
        doc = " ".join((cls.__doc__ or "").split())
        parts.append(f"\n## {cls.__name__}\n\n{doc}\n\nWhere: {', '.join(f'`{p}`' for p in paths)}\n")
        parts.append("| key | type | default | meaning |\n|---|---|---|---|")
        for name, f in cls.model_fields.items():
            desc = " ".join((f.description or "").split()).replace("|", "\\|")
            if name == "type":
                desc = desc or "Selects this alternative."
            parts.append(
                f"| `{name}` | {_type_name(f.annotation)} | {_default(f).replace('|', chr(92) + '|')} "
                f"| {desc} |"
            )
    return "\n".join(parts) + "\n"


def documented_keys() -> set[str]:
    """Every key name that docs/recipes.md documents (for checks that a doc uses only real keys)."""
    return {name for cls in section_classes() for name in cls.model_fields}


if __name__ == "__main__":
    print(recipes_markdown(), end="")
