"""How a reward function of your own is called: its form (read from its parameters), TRL's keyword lists,
what counts as a reward, and its failures described by the user's own code (file:line, type, message).

**The two forms**, told apart by the function's parameters:

* ``f(task, completion) -> float | Verdict`` (rlvr's, called once per completion): any function that takes
  two positional arguments and names none of TRL's arguments;
* ``f(completions, **kwargs) -> list[float | None]`` (TRL's batched one, called once per batch): any function
  with a parameter named ``prompts``, ``completions`` or ``completion_ids``, or whose only parameter is
  ``**kwargs``. It receives, as TRL's ``GRPOTrainer`` passes them, keyword lists with one element per
  completion: ``prompts`` (the task's prompt: its text, or its chat when the task is a chat),
  ``completions`` (the text; for a chat prompt ``[{"role": "assistant", "content": text}]``),
  ``completion_ids`` (the sampled token ids; None where only the text is known, e.g. a completions file
  without ``completion_ids``), every dataset column (the task's gold fields such as ``answer``, its ``meta``
  columns, and ``id``, ``kind``, ``family``, ``difficulty``, ``split``, ``answer_format``, ``solution``),
  and ``log_extra`` / ``log_metric`` as callables that discard what they get. TRL's ``trainer_state`` and
  ``environments`` are not passed. An element None means "this reward does not apply to this completion"
  (TRL's NaN): it adds nothing to the sum; a completion no reward applies to is ``infra``.

Anything else is refused with the signature it has: ``f(*args, **kwargs)`` (either form), ``f(completion)``,
``f(task, completion, extra)``, ``f(completion, task)`` (swapped), a required keyword TRL never passes.
"""

from __future__ import annotations

import inspect
import math
import numbers
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.data.types import Task
from rlvr.errors import ConfigError

TRL_ARGS = ("prompts", "completions", "completion_ids")
TRL_CALLBACKS = ("log_extra", "log_metric")
RLVR_ROOT = Path(__file__).resolve().parents[1]


def reward_form(fn: Callable[..., Any], spec: str) -> str:
    """``"task"`` for ``f(task, completion)``, ``"batch"`` for TRL's ``f(completions, **kwargs)``; a
    ConfigError naming ``spec`` and the signature when it is neither or could be both."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return "task"  # a builtin without a signature: called as f(task, completion)
    P = inspect.Parameter
    named = [p for p in sig.parameters.values() if p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    var_kw = any(p.kind is P.VAR_KEYWORD for p in sig.parameters.values())
    var_pos = any(p.kind is P.VAR_POSITIONAL for p in sig.parameters.values())
    expected = ("expected f(task, completion) -> float (one completion) or TRL's f(completions, **kwargs) -> "
                "list[float] (a batch); see docs/rewards.md")
    if any(p.name in TRL_ARGS for p in named) or (not named and var_kw and not var_pos):
        pos_only = [p.name for p in named if p.kind is P.POSITIONAL_ONLY and p.default is P.empty]
        if pos_only:
            raise ConfigError(f"reward function {spec!r}{sig}: TRL's form passes keywords only, so positional-only "
                              f"parameter(s) {pos_only} get nothing; {expected}")
        return "batch"
    if not named:
        raise ConfigError(f"reward function {spec!r}{sig} is ambiguous: it could be either form; name its "
                          f"parameters: {expected}")
    if len(named) >= 2 and named[0].name in ("completion", "completions", "response", "text") and \
            named[1].name == "task":
        raise ConfigError(f"reward function {spec!r}{sig}: its arguments are swapped: rlvr calls f(task, completion)")
    try:
        sig.bind(None, None)
    except TypeError as e:
        raise ConfigError(f"reward function {spec!r}{sig} cannot be called as f(task, completion) ({e}); "
                          f"{expected}") from None
    return "task"


def missing_batch_args(fn: Callable[..., Any], columns: Sequence[str]) -> list[str]:
    """The required parameters of a TRL-form ``fn`` that no keyword rlvr passes fills (``columns``: the
    dataset columns of the tasks at hand)."""
    P = inspect.Parameter
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    known = set(TRL_ARGS) | set(TRL_CALLBACKS) | set(columns)
    return [p.name for p in params if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)
            and p.default is P.empty and p.name not in known]


def task_columns(task: Task) -> dict[str, Any]:
    """The dataset columns of ``task`` as TRL would pass them (everything but the prompt and completion)."""
    cols: dict[str, Any] = {"id": task.id, "kind": task.kind, "family": task.family, "difficulty": task.difficulty,
                            "split": task.split, "answer_format": task.answer_format, "solution": task.solution}
    cols.update(task.meta)
    cols.update(task.gold)
    for k in (*TRL_ARGS, *TRL_CALLBACKS, "prompt", "completion"):
        cols.pop(k, None)
    return cols


def _discard(*args: Any, **kwargs: Any) -> None:
    """TRL's ``log_extra`` / ``log_metric``: accepted, nothing kept."""


def trl_kwargs(tasks: Sequence[Task], completions: Sequence[str]) -> dict[str, list[Any]]:
    """TRL's reward keywords for a batch (module docstring): one list element per completion."""
    chat = [t.messages is not None for t in tasks]
    cols = [task_columns(t) for t in tasks]
    names = list(dict.fromkeys(k for c in cols for k in c))
    out: dict[str, Any] = {
        "prompts": [t.policy_messages() if c else t.prompt for t, c in zip(tasks, chat)],
        "completions": [[{"role": "assistant", "content": str(x)}] if c else str(x) for x, c in zip(completions, chat)],
        "completion_ids": [getattr(x, "ids", None) for x in completions],
    }
    for k in names:
        out[k] = [c.get(k) for c in cols]
    out.update({k: _discard for k in TRL_CALLBACKS})
    return out


def reward_value(out: Any, batch: bool = False) -> tuple[float | None, str | None]:
    """``(reward, None)`` when ``out`` is a finite number, else ``(None, why)``. In TRL's form (``batch``) None
    (does not apply) and booleans (TRL reads them as 0/1) are rewards too."""
    if out is None and batch:
        return None, None
    if getattr(out, "ndim", None) == 0 and hasattr(out, "item"):  # a numpy or torch scalar
        out = out.item()
    if (isinstance(out, bool) and not batch) or not isinstance(out, numbers.Real):
        return None, f"{_show(out)}: expected a finite number" + (" or None" if batch else "")
    if not math.isfinite(float(out)):
        return None, f"{out!r}: expected a finite number"
    return float(out), None


def batch_values(out: Any, n: int) -> tuple[list[float | None], list[str | None]] | str:
    """A TRL-form result as per-row ``(values, errors)``; a string saying why when it is not a list of ``n``."""
    if isinstance(out, (str, bytes, dict)) or not hasattr(out, "__len__") or not hasattr(out, "__iter__"):
        return f"returned {_show(out)}: expected a list of {n} numbers (one per completion; None where it does not apply)"
    vals = list(out)
    if len(vals) != n:
        return f"returned a list of {len(vals)} for {n} completions: expected one number (or None) per completion"
    pairs = [reward_value(v, batch=True) for v in vals]
    return [v for v, _ in pairs], [e and f"returned {e} as element {i}" for i, (_, e) in enumerate(pairs)]


def _show(x: Any) -> str:
    r = repr(x)
    return f"{type(x).__name__} {r[:80] + '...' if len(r) > 80 else r}"


def describe_exception(e: BaseException) -> dict[str, str]:
    """The user's view of a failure: ``error`` ("Type: message"), ``where`` (the innermost frame outside
    rlvr, "file:line in function") and ``traceback`` (those frames and the exception)."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not _is_rlvr(f.filename)]
    msg = f"{type(e).__name__}: {e}"
    where = f"{_rel(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    tb = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(type(e), e))
    return {"error": msg[:1000], "where": where, "traceback": tb[-4000:]}


def _is_rlvr(filename: str) -> bool:
    try:
        return Path(filename).resolve().is_relative_to(RLVR_ROOT)
    except OSError:
        return False


def _rel(filename: str) -> str:
    try:
        return str(Path(filename).resolve().relative_to(Path.cwd()))
    except (ValueError, OSError):
        return filename
