"""Rewards of your own: ``rewards: [{name: python, function: "my_rewards:score", weight: 1, timeout_s: 5}]``.

Two forms, told apart by the function's parameters (:mod:`rlvr.verifiers.reward_call` has the rule):
``score(task, completion)`` returns a float (the reward) or a :class:`~rlvr.verifiers.base.Verdict`, once per
completion; ``task`` is the :class:`~rlvr.data.types.Task` (``task.prompt``, ``task.gold`` — the hidden answer
and tests —, ``task.meta`` — your dataset's other columns) and ``completion`` the text (a ``str``; its
``.ids`` are the sampled token ids where known). TRL's ``score(completions, **kwargs)`` returns a list with
one float (or None: does not apply) per completion, once per batch, with TRL's keyword lists.

The per-completion form runs where the verifiers run: inline, or in the verifier pool's worker processes
(``verifier_workers``), which import it by name — so the module must be importable from the working
directory (or ``PYTHONPATH``). The batched form runs once per batch in the process that judges (the
trainer's). Protections: a call that raises, returns something else than a number (or a Verdict; for the
batched form a list of one number or None per completion), returns NaN/inf, or runs past ``timeout_s`` is
an ``infra`` verdict (the trainer keeps it out of the advantages, counts it and writes the first failures,
with the function's traceback, to the stage's ``reward_errors.jsonl``), never a reward. The time limit is
an alarm signal, so it holds in a process's main thread (the pool's hard per-item timeout still applies
elsewhere). Not protected: what the function itself does — it runs with your permissions, unsandboxed;
treat the completion as hostile input inside it.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.data.types import Task
from rlvr.errors import ConfigError
from rlvr.verifiers.base import Verdict
from rlvr.verifiers.reward_call import batch_values, describe_exception, reward_form, reward_value, trl_kwargs

Failure = dict[str, str]  # {"function", "error", "where", "traceback"}: one failed call, in the user's terms


class RewardTimeout(BaseException):
    """A reward function ran past its time limit (a BaseException: the function's own ``except Exception``
    cannot swallow it)."""


def resolve_function(spec: str) -> Callable[..., Any]:
    """``module:function`` -> the callable; ConfigError naming the spec when it cannot be imported (with the
    import error's own file:line) or is not callable."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError(f"reward function {spec!r}: expected 'module:function' (e.g. my_rewards:score)")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # a user's module beside the recipe, as `python -m` would see it
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's to fix
        info = describe_exception(e)
        at = f" at {info['where']}" if info["where"] else ""
        raise ConfigError(f"reward function {spec!r}: importing {module!r} failed{at}: {info['error']}") from None
    if not hasattr(mod, name):
        public = sorted(k for k, v in vars(mod).items() if callable(v) and not k.startswith("_"))
        raise ConfigError(f"reward function {spec!r}: {module!r} ({getattr(mod, '__file__', '?')}) has no "
                          f"{name!r}; its functions: {public}")
    fn = getattr(mod, name)
    if not callable(fn):
        raise ConfigError(f"reward function {spec!r}: {module}.{name} is a {type(fn).__name__}, not callable")
    return fn


def load_reward(spec: str) -> tuple[Callable[..., Any], str]:
    """The callable and its form (``"task"`` or ``"batch"``); ConfigError when it cannot be used."""
    fn = resolve_function(spec)
    return fn, reward_form(fn, spec)


@contextmanager
def time_limit(seconds: float):
    """Raise RewardTimeout in the main thread after ``seconds`` (no limit off the main thread: the pool's
    hard per-item timeout still applies there)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        raise RewardTimeout(f"ran past its timeout_s of {seconds:g}s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _call(spec: str, timeout_s: float, fn: Callable[[], Any]) -> tuple[Any, Failure | None]:
    """``(fn(), None)`` (an awaitable result is run to its end: TRL's async rewards), or ``(None, failure)``
    when it raised (SystemExit included) or ran past ``timeout_s``."""
    try:
        with time_limit(timeout_s):
            out = fn()
            if inspect.isawaitable(out):
                out = asyncio.run(_wait(out))
            return out, None
    except RewardTimeout as e:
        return None, {"function": spec, "error": f"timeout: {e}", "where": "", "traceback": ""}
    except ConfigError as e:
        return None, {"function": spec, "error": str(e), "where": "", "traceback": ""}
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a failing reward is infra, never a reward
        return None, {"function": spec, **describe_exception(e)}


async def _wait(awaitable: Any) -> Any:
    return await awaitable


def _bad_value(spec: str, why: str) -> Failure:
    return {"function": spec, "error": why, "where": "", "traceback": ""}


class PythonReward:
    """A user function of either form. Picklable: workers re-import the function by name."""

    name = "python"

    def __init__(self, function: str, timeout_s: float = 10.0) -> None:
        self.function, self.timeout_s = function, timeout_s
        self._fn: Callable[..., Any] | None = None
        self._form = ""

    def __getstate__(self) -> dict[str, Any]:
        return {"function": self.function, "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["function"], state["timeout_s"])  # type: ignore[misc]

    @property
    def form(self) -> str:
        """``"task"`` (called per completion) or ``"batch"`` (TRL's form, called per batch)."""
        if not self._form:
            self._fn, self._form = load_reward(self.function)
        return self._form

    def score(self, task: Task, completion: str) -> tuple[float | None, Failure | None]:
        """The per-completion form's reward for one completion, or the failure."""
        out, fail = _call(self.function, self.timeout_s, lambda: self._fn(task, completion)
                          if self.form == "task" else None)
        if fail is not None:
            return None, fail
        if isinstance(out, Verdict):
            if out.outcome == "infra":
                return None, {"function": self.function, "error": f"returned an infra Verdict: "
                              f"{out.details.get('error', '')}", "where": "", "traceback": ""}
            return out.reward, None
        value, why = reward_value(out)
        return (value, None) if why is None else (None, _bad_value(self.function, f"returned {why}"))

    def score_batch(self, tasks: Sequence[Task], completions: Sequence[str]) -> list[tuple[float | None, Failure | None]]:
        """TRL's form over a batch: per completion ``(reward or None, failure or None)``."""
        n = len(tasks)
        out, fail = _call(self.function, self.timeout_s, lambda: self._fn(**trl_kwargs(tasks, completions))
                          if self.form == "batch" else None)
        if fail is not None:
            return [(None, fail)] * n
        rows = batch_values(out, n)
        if isinstance(rows, str):
            return [(None, _bad_value(self.function, rows))] * n
        values, whys = rows
        return [(v, None if w is None else _bad_value(self.function, w)) for v, w in zip(values, whys)]

    def verify(self, task: Task, completion: str) -> Verdict:
        t0 = time.perf_counter()
        if self.form == "batch":
            ((value, fail),) = self.score_batch([task], [completion])
        else:
            value, fail = self.score(task, completion)
        return combine(None, {"python": value}, {"python": fail} if fail else {}, time.perf_counter() - t0)


_OURS = ("rewards", "not_applicable", "base", "error", "where", "traceback", "reward_errors")


def combine(primary: Verdict | None, rewards: dict[str, float | None], failures: dict[str, Failure],
            seconds: float) -> Verdict:
    """One verdict from the task verifier's (``primary``; None: the python terms decide pass/wrong by their
    sum) and the python terms' rewards (None: does not apply, adds 0) and failures (any: ``infra``).

    ``details``: ``rewards`` per key, ``not_applicable`` keys, ``base`` (the primary's reward, passed,
    outcome), and for a failure ``error`` (each failing key's function, location and message), ``where`` and
    ``traceback`` (the first failure's) and ``reward_errors`` (every failure by key)."""
    details: dict[str, Any] = {**(primary.details if primary is not None else {}),
                               "rewards": {k: 0.0 if v is None else v for k, v in rewards.items()},
                               "base": None if primary is None else [primary.reward, primary.passed, primary.outcome]}
    skipped = [k for k, v in rewards.items() if v is None and k not in failures]
    if skipped:
        details["not_applicable"] = skipped
    if failures:
        first = next(iter(failures.values()))
        details.update(
            error="; ".join(f"{k} ({f['function']}): {f['error']}" + (f" at {f['where']}" if f["where"] else "")
                            for k, f in failures.items())[:2000],
            where=first["where"], traceback=first["traceback"], reward_errors=dict(failures))
        return Verdict(0.0, False, "infra", details, seconds)
    if primary is not None:
        return Verdict(primary.reward, primary.passed, primary.outcome, details, seconds)
    applied = [v for v in rewards.values() if v is not None]
    if not applied:
        details["error"] = "no reward applies to this completion (every python reward returned None for it)"
        return Verdict(0.0, False, "infra", details, seconds)
    total = sum(applied)
    return Verdict(total, total > 0, "pass" if total > 0 else "wrong", details, seconds)


class RewardJudge:
    """The task's verifier plus the per-completion python terms, judged together per completion (one pool
    item); see :func:`combine` for the verdict. TRL-form terms are added per batch by :func:`add_batch_terms`."""

    name = "reward_judge"

    def __init__(self, primary: Any, terms: dict[str, PythonReward]) -> None:
        self.primary, self.terms = primary, terms

    def verify(self, task: Task, completion: str) -> Verdict:
        t0 = time.perf_counter()
        rewards: dict[str, float | None] = {}
        failures: dict[str, Failure] = {}
        for key, term in self.terms.items():
            rewards[key], fail = term.score(task, completion)
            if fail is not None:
                failures[key] = fail
        base = self.primary.verify(task, completion) if self.primary is not None else None
        return combine(base, rewards, failures, time.perf_counter() - t0)

    def close(self) -> None:
        close = getattr(self.primary, "close", None)
        if callable(close):
            close()


def add_batch_terms(verdicts: list[Verdict], terms: dict[str, PythonReward], tasks: Sequence[Task],
                    completions: Sequence[str]) -> list[Verdict]:
    """The verdicts with each TRL-form term's rewards (one call per term over the whole batch) combined in."""
    scores = {key: term.score_batch(tasks, completions) for key, term in terms.items()}
    out = []
    for i, v in enumerate(verdicts):
        if "rewards" not in v.details:  # the pool's own verdict (a hard timeout, a dead worker): kept
            out.append(v)
            continue
        d = v.details
        rewards: dict[str, float | None] = dict(d["rewards"])
        failures = dict(d.get("reward_errors", {}))
        for key, rows in scores.items():
            rewards[key], fail = rows[i]
            if fail is not None:
                failures[key] = fail
        base = d.get("base")
        primary = None if base is None else Verdict(base[0], base[1], base[2],
                                                    {k: x for k, x in d.items() if k not in _OURS})
        if primary is not None and primary.outcome == "infra" and "error" in d and not d.get("reward_errors"):
            primary.details["error"] = d["error"]
        out.append(combine(primary, rewards, failures, v.seconds))
    return out
