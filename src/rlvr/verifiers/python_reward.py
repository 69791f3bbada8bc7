"""Rewards of your own: ``rewards: [{name: python, function: "my_rewards:score", weight: 1, timeout_s: 5}]``.

The function is called as ``score(task, completion)`` and returns a float (the reward) or a
:class:`~rlvr.verifiers.base.Verdict`. ``task`` is the :class:`~rlvr.data.types.Task` (``task.prompt``,
``task.gold`` — the hidden answer and tests —, ``task.meta`` — your dataset's other columns).

It runs where the verifiers run: inline, or in the verifier pool's worker processes
(``verifier_workers``), which import it by name — so the module must be importable from the working
directory (or ``PYTHONPATH``). Protections: a call that raises, returns something else than a number
or a Verdict, returns NaN/inf, or runs past ``timeout_s`` is an ``infra`` verdict (the trainer keeps it
out of the advantages and counts it), never a reward. Not protected: what the function itself does —
it runs with your permissions, unsandboxed; treat the completion as hostile input inside it.
"""

from __future__ import annotations

import importlib
import math
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from rlvr.data.types import Task
from rlvr.errors import ConfigError
from rlvr.verifiers.base import Verdict


class RewardTimeout(Exception):
    """A reward function ran past its time limit."""


def resolve_function(spec: str) -> Callable[..., Any]:
    """``module:function`` -> the callable; ConfigError naming the spec when it cannot be imported."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError(f"reward function {spec!r}: expected 'module:function' (e.g. my_rewards:score)")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # a user's module beside the recipe, as `python -m` would see it
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's to fix
        raise ConfigError(
            f"reward function {spec!r}: importing {module!r} failed: {type(e).__name__}: {e}"
        ) from None
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise ConfigError(f"reward function {spec!r}: {module!r} has no callable {name!r}")
    return fn


@contextmanager
def time_limit(seconds: float):
    """Raise RewardTimeout in the main thread after ``seconds`` (no limit off the main thread: the pool's
    hard per-item timeout still applies there)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        raise RewardTimeout(f"ran past {seconds:g}s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class PythonReward:
    """A user function as a verifier. Picklable: workers re-import the function by name."""

    name = "python"

    def __init__(self, function: str, timeout_s: float = 10.0) -> None:
        self.function, self.timeout_s = function, timeout_s
        self._fn: Callable[..., Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"function": self.function, "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["function"], state["timeout_s"])  # type: ignore[misc]

    def verify(self, task: Task, completion: str) -> Verdict:
        t0 = time.perf_counter()
        try:
            if self._fn is None:
                self._fn = resolve_function(self.function)
            with time_limit(self.timeout_s):
                out = self._fn(task, completion)
        except Exception as e:  # noqa: BLE001 - a failing reward is infra, never a reward
            return Verdict.infra(f"{self.function}: {type(e).__name__}: {e}"[:500], time.perf_counter() - t0)
        dt = time.perf_counter() - t0
        if isinstance(out, Verdict):
            return out
        if isinstance(out, bool) or not isinstance(out, (int, float)) or not math.isfinite(float(out)):
            return Verdict.infra(
                f"{self.function} returned {out!r}: expected a finite number or a Verdict", dt
            )
        r = float(out)
        return Verdict(r, r > 0, "pass" if r > 0 else "wrong", {}, dt)


class RewardJudge:
    """The task's verifier plus python reward terms, judged together per completion (one pool item).

    The verdict is the task verifier's (``primary``; None when the recipe has no ``correct`` term: then
    the python terms decide pass/wrong); each python term's reward is in ``details["rewards"][key]``. A
    python term that is ``infra`` makes the whole verdict ``infra``.
    """

    name = "reward_judge"

    def __init__(self, primary: Any, terms: dict[str, PythonReward]) -> None:
        self.primary, self.terms = primary, terms

    def verify(self, task: Task, completion: str) -> Verdict:
        t0 = time.perf_counter()
        rewards, errors = {}, []
        for key, term in self.terms.items():
            v = term.verify(task, completion)
            if v.outcome == "infra":
                errors.append(f"{key}: {v.details.get('error', '')}")
            rewards[key] = v.reward
        if self.primary is not None:
            base = self.primary.verify(task, completion)
        else:
            total = sum(rewards.values())
            base = Verdict(total, total > 0, "pass" if total > 0 else "wrong", {})
        details = {**base.details, "rewards": rewards}
        if errors:
            return Verdict(
                0.0, False, "infra", {**details, "error": "; ".join(errors)}, time.perf_counter() - t0
            )
        return Verdict(base.reward, base.passed, base.outcome, details, time.perf_counter() - t0)

    def close(self) -> None:
        close = getattr(self.primary, "close", None)
        if callable(close):
            close()
