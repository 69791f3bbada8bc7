"""A checkpoint's prompt format: ``prompt_format.json`` beside its weights, so a moved checkpoint keeps it.

What decides how a model is prompted and how its held-out completions are judged, as the run that wrote
the checkpoint evaluated it::

    {"system_prompt": "Answer with the number only." | null,   the system message put before each prompt
     "chat_template": true | false,      whether prompts go through the tokenizer's chat template
     "rewards": [{"name": "python", "function": "mod:fn", ...}] | null,
                                         held-out scoring: these reward terms (a pass is a summed reward
                                         of 1), or null for each task's own verifier
     "dtype": "float32",                 the weights' dtype the run evaluated with
     "eval_batch_size": 256, "eval_max_new_tokens": 64}         the run's evaluation settings

A run (``rlvr.pipeline``) sets the format with :func:`checkpoint_format` around its stages; every
checkpoint written meanwhile (``final/``, ``best/``, ``healthy/``, periodic ``checkpoints/step-N/``) gets
the file inside the same atomic write as the weights (:func:`rlvr.models.checkpoint.save_pretrained_atomic`).
``rlvr build-tiny`` writes the tiny model's (no system prompt). A folder without the
file (a model from elsewhere) has no format: the commands prompt it with no system message, as before.
"""

from __future__ import annotations

import contextlib
import json
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from rlvr.errors import DataError

FILE = "prompt_format.json"
FIELDS = {"system_prompt": (str, type(None)), "chat_template": (bool,), "rewards": (list, type(None)),
          "dtype": (str,), "eval_batch_size": (int, type(None)), "eval_max_new_tokens": (int, type(None))}
DTYPES = ("float32", "bfloat16", "float16")

_CURRENT: ContextVar[dict | None] = ContextVar("rlvr_prompt_format", default=None)


def make_format(system_prompt: str | None = None, rewards: list[dict] | None = None, dtype: str = "float32",
                eval_batch_size: int | None = None, eval_max_new_tokens: int | None = None) -> dict[str, Any]:
    """A prompt format (``chat_template`` is filled from the tokenizer when a checkpoint is written)."""
    return {"system_prompt": system_prompt or None, "rewards": rewards, "dtype": dtype,
            "eval_batch_size": eval_batch_size, "eval_max_new_tokens": eval_max_new_tokens}


@contextlib.contextmanager
def checkpoint_format(fmt: dict | None):
    """Every checkpoint written inside this block carries ``fmt`` (None: none is written)."""
    token = _CURRENT.set(fmt)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_format() -> dict | None:
    """The format checkpoints written now carry (set by :func:`checkpoint_format`)."""
    return _CURRENT.get()


def write_format(folder: Path, tokenizer, fmt: dict | None = None) -> None:
    """Write ``folder/prompt_format.json`` from ``fmt`` (default: :func:`current_format`; none: nothing)."""
    fmt = fmt if fmt is not None else current_format()
    if fmt is None:
        return
    out = {**make_format(), **fmt, "chat_template": bool(getattr(tokenizer, "chat_template", None))}
    (Path(folder) / FILE).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def read_format(folder: str | Path) -> dict | None:
    """The format saved with a checkpoint (None when the folder has no ``prompt_format.json``); a file
    that is not JSON, or a field of the wrong type, is a DataError naming the file and the field."""
    path = Path(folder) / FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not valid JSON ({e}); fix or delete it (it only records the prompt format)") \
            from None
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    for key, types in FIELDS.items():
        if key in raw and (not isinstance(raw[key], types) or (bool not in types and isinstance(raw[key], bool))):
            want = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise DataError(f"{path}: field {key!r} must be {want}, got {raw[key]!r}")
    if raw.get("dtype", "float32") not in DTYPES:
        raise DataError(f"{path}: field 'dtype' must be one of {', '.join(DTYPES)}, got {raw['dtype']!r}")
    return {**make_format(), "chat_template": False, **{k: raw[k] for k in FIELDS if k in raw}}
