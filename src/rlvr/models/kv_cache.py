"""The keyword an HF model's ``forward`` takes its KV cache by, across transformers versions (the generation
engine's decoder and the shared-prompt continuations both pass one)."""

from __future__ import annotations

import inspect


def cache_kwarg(model) -> str:
    """The forward() keyword for the KV cache: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(type(base).forward).parameters
    return "cache" if "cache" in params else "past_key_values"
