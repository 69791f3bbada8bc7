"""The ranges a sampling or batching number may take, defined once: the recipe's sections use these types
as their fields' types, and the command-line flags are checked against the same types
(:func:`check_flags`), so ``--temperature -1`` and ``eval.temperature: -1`` are refused by one rule.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from rlvr.errors import ConfigError

Temperature = Annotated[float, Field(ge=0)]
"""Sampling temperature for generation only (0 = greedy). Training divides logits by its own, > 0."""
TopP = Annotated[float, Field(gt=0, le=1)]
"""Nucleus sampling threshold (1 = off)."""
TopK = Annotated[int, Field(ge=0)]
"""Top-k sampling (0 = off)."""
Samples = Annotated[int, Field(ge=1)]
"""Samples per task (n, k, group size)."""
NewTokens = Annotated[int, Field(ge=1)]
"""Generation budget per completion, in tokens."""
BatchSize = Annotated[int, Field(ge=1)]
"""Rows per batch or micro-batch."""
Workers = Annotated[int, Field(ge=0)]
"""Worker processes (0 = inline)."""
Count = Annotated[int, Field(ge=1)]
"""A number of tasks, turns or steps."""
Seconds = Annotated[float, Field(gt=0)]
"""A time limit."""

_OPS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def describe(tp: Any) -> str:
    """``">= 0"``, ``"> 0 and <= 1"``: the range an Annotated type above allows."""
    parts = []
    for meta in getattr(tp, "__metadata__", ()):
        for m in getattr(meta, "metadata", [meta]):
            for attr, sym in _OPS:
                if getattr(m, attr, None) is not None:
                    parts.append(f"{sym} {getattr(m, attr):g}")
    return " and ".join(parts)


def flag_problem(flag: str, value: Any, tp: Any) -> str | None:
    """Why ``value`` of ``flag`` is outside the range of ``tp`` (None when it is inside; None values pass)."""
    if value is None:
        return None
    try:
        TypeAdapter(tp).validate_python(value)
    except ValidationError:
        return f"{flag} {value!r}: must be {describe(tp)}"
    return None


def check_flags(*checks: tuple[str, Any, Any]) -> None:
    """Each ``(flag, value, type)`` in range, or one ConfigError naming every flag that is not."""
    bad = [p for p in (flag_problem(*c) for c in checks) if p]
    if bad:
        raise ConfigError("; ".join(bad))


def micro_batch_divides(cls, micro: int, info) -> int:
    """The recipe's micro-batch rule, as a field validator of ``micro_batch_size`` (declared after
    ``batch_size``): a micro-batch smaller than the batch divides it, so every optimizer step accumulates
    ``batch_size / micro_batch_size`` equal micro-batches. (The trainers' sums are normalised over the whole
    batch, so an uneven last micro-batch would not change the gradient; the rule keeps the arithmetic the
    docs state, and memory per forward, what the recipe says.) A micro-batch at least the batch is one
    micro-batch of the whole batch (``rlvr validate`` warns)."""
    batch = info.data.get("batch_size")
    if micro is not None and batch is not None and micro < batch and batch % micro:
        divisors = [d for d in range(1, batch + 1) if batch % d == 0]
        raise ValueError(f"micro_batch_size {micro} does not divide batch_size {batch} (micro-batches of "
                         f"{micro} and a last one of {batch % micro}); use a divisor of {batch}: "
                         f"{', '.join(map(str, divisors))}")
    return micro
