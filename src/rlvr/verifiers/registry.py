"""Finding verifiers by kind or name, routing tasks to them, and composing several into one reward.

Kinds: ``math`` (:class:`~rlvr.verifiers.math.MathVerifier`), ``sql``
(:class:`~rlvr.verifiers.sql.SqlVerifier`), ``code`` (``rlvr.verifiers.code``) and ``env``
(``rlvr.verifiers.env``) and ``reasoning_gym`` (``rlvr.verifiers.reasoning_gym``, the dataset's own
scorer); code, env and reasoning_gym are imported only when asked for. Other names can be added
with :func:`register_verifier`.

What a task must hold for its kind's verifier to judge it is each verifier class's ``check_task(task)``
(None, or why not: math needs ``answer``; code ``tests`` / ``io_tests``; sql ``gold_sql`` and a database
that exists; env a ``gold`` its environment accepts). :func:`refuse_unjudgeable` applies it where a task
file is read, so such a task is refused naming its file and line, not judged ``infra`` row after row.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlvr.data.types import Task
from rlvr.errors import ConfigError, DataError, listing
from rlvr.verifiers.base import Verdict, Verifier
from rlvr.verifiers.extract import extract_answer

# kind -> (module, class name or None to find the class whose ``name`` is the kind)
BUILTIN: dict[str, tuple[str, str | None]] = {
    "math": ("rlvr.verifiers.math", "MathVerifier"),
    "sql": ("rlvr.verifiers.sql", "SqlVerifier"),
    "code": ("rlvr.verifiers.code", "CodeVerifier"),
    "env": ("rlvr.verifiers.env", "EnvPredicateVerifier"),
    "reasoning_gym": ("rlvr.verifiers.reasoning_gym", "ReasoningGymVerifier"),
}
_CUSTOM: dict[str, Callable[..., Verifier]] = {}
_SHARED: dict[str, Verifier] = {}


def register_verifier(name: str, factory: Callable[..., Verifier]) -> None:
    """Make ``get_verifier(name, **options)`` call ``factory(**options)``."""
    _CUSTOM[name] = factory


def available_kinds() -> list[str]:
    """Every name :func:`get_verifier` accepts."""
    return sorted(set(BUILTIN) | set(_CUSTOM))


def verifier_class(kind: str) -> type:
    """The class for a built-in kind; ConfigError when the kind is unknown or its module is missing."""
    if kind not in BUILTIN:
        raise ConfigError(f"unknown verifier {kind!r}; known: {available_kinds()}")
    module, cls_name = BUILTIN[kind]
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"verifier {kind!r} is not available: importing {module} failed ({e})") from e
    cls = getattr(mod, cls_name, None) if cls_name else None
    if cls is None:  # fall back to any class in the module that declares name == kind
        cls = next((c for c in vars(mod).values() if isinstance(c, type) and getattr(c, "name", None) == kind
                    and callable(getattr(c, "verify", None))), None)
    if cls is None:
        raise ConfigError(f"verifier {kind!r} is not available: {module} defines no verifier class")
    return cls


def get_verifier(kind_or_name: str, **options: Any) -> Verifier:
    """A new verifier of this kind/name built with ``options`` (its constructor's keyword arguments)."""
    if kind_or_name in _CUSTOM:
        return _CUSTOM[kind_or_name](**options)
    cls = verifier_class(kind_or_name)
    try:
        return cls(**options)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"verifier {kind_or_name!r}: bad options {sorted(options)} ({e})") from e


def task_problem(task: Task) -> str | None:
    """Why the verifier of ``task.kind`` cannot judge ``task`` (None when it can, or when the verifier
    declares no ``check_task``); a kind no verifier judges is a problem too."""
    factory: Any = _CUSTOM.get(task.kind)
    if factory is None:
        try:
            factory = verifier_class(task.kind)
        except ConfigError as e:
            return f"field 'kind': {e}"
    check = getattr(factory, "check_task", None)
    return check(task) if callable(check) else None


def unjudgeable(tasks: list[Task]) -> list[str]:
    """``"<file:line>: <why>"`` for each task its kind's verifier cannot judge (:func:`task_problem`)."""
    return [f"{t.where}: {why}" for t in tasks if (why := task_problem(t))]


def refuse_unjudgeable(tasks: list[Task]) -> list[Task]:
    """``tasks`` unchanged, or DataError naming (file, line, field or file) every task its verifier cannot
    judge: before any completion is generated or judged, not as one ``infra`` verdict per row."""
    problems = unjudgeable(tasks)
    if problems:
        raise DataError(listing(problems, "tasks cannot be judged"))
    return tasks


def verifier_for_task(task: Task) -> Verifier:
    """The shared default verifier for ``task.kind`` (one instance per kind, so workers are reused)."""
    v = _SHARED.get(task.kind)
    if v is None:
        v = _SHARED[task.kind] = get_verifier(task.kind)
    return v


class TaskRouter:
    """Judges each task with the verifier of its kind. Picklable; verifiers are built on first use.

    options: per-kind constructor options, e.g. ``{"math": {"timeout_s": 2}}``. A kind whose verifier
    cannot be built gives outcome ``infra`` (with the reason) instead of failing the batch.
    """

    name = "router"

    def __init__(self, options: dict[str, dict[str, Any]] | None = None) -> None:
        self.options = {k: dict(v) for k, v in (options or {}).items()}
        self._verifiers: dict[str, Verifier] = {}
        self._errors: dict[str, str] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    def verifier(self, kind: str) -> Verifier | None:
        if kind not in self._verifiers and kind not in self._errors:
            try:
                self._verifiers[kind] = get_verifier(kind, **self.options.get(kind, {}))
            except ConfigError as e:
                self._errors[kind] = str(e)
        return self._verifiers.get(kind)

    def verify(self, task: Task, completion: str) -> Verdict:
        v = self.verifier(task.kind)
        if v is None:
            return Verdict.infra(self._errors[task.kind])
        return v.verify(task, completion)

    def close(self) -> None:
        for v in self._verifiers.values():
            close = getattr(v, "close", None)
            if callable(close):
                close()


RewardFn = Callable[[Task, str], float | Verdict]


@dataclass
class RewardTerm:
    """One part of a composite reward.

    name: metric name (logged as ``reward/<name>``); fn: a Verifier, a kind name for
    :func:`get_verifier`, or a picklable function ``(task, completion) -> float | Verdict``;
    weight: multiplier in the sum -- 0 makes the term a logged metric that does not change the reward.
    """

    name: str
    fn: Verifier | RewardFn | str
    weight: float = 1.0


class CompositeReward:
    """``reward = sum_i weight_i * reward_i`` over terms with non-zero weight.

    ``passed`` and ``outcome`` come from the primary term (``primary`` by name, default the first term
    with non-zero weight), except that an ``infra`` outcome in any weighted term makes the whole
    verdict ``infra`` (reward 0), so a broken checker never leaks into advantages. Every term's
    reward is in ``details["metrics"]["reward/<name>"]``; a weight-0 term that fails is logged as
    None and does not affect the verdict.
    """

    name = "composite"

    def __init__(self, terms: list[RewardTerm | tuple], primary: str | None = None) -> None:
        self.terms = [t if isinstance(t, RewardTerm) else RewardTerm(*t) for t in terms]
        for t in self.terms:
            if isinstance(t.fn, str):
                t.fn = get_verifier(t.fn)
        weighted = [t.name for t in self.terms if t.weight != 0]
        if not weighted:
            raise ConfigError("a CompositeReward needs at least one term with non-zero weight")
        names = [t.name for t in self.terms]
        if len(set(names)) != len(names):
            raise ConfigError(f"CompositeReward term names must be unique, got {names}")
        if primary is not None and primary not in weighted:
            raise ConfigError(f"primary term {primary!r} is not a weighted term; weighted: {weighted}")
        self.primary = primary or weighted[0]

    def verify(self, task: Task, completion: str) -> Verdict:
        t0 = time.perf_counter()
        total, metrics, parts = 0.0, {}, {}
        infra: list[str] = []
        primary: Verdict | None = None
        for term in self.terms:
            v = _run_term(term, task, completion)
            parts[term.name] = {"reward": v.reward, "outcome": v.outcome, "weight": term.weight}
            metrics[f"reward/{term.name}"] = None if v.outcome == "infra" else v.reward
            if term.weight != 0:
                total += term.weight * v.reward
                if v.outcome == "infra":
                    infra.append(f"{term.name}: {v.details.get('error', '')}")
            if term.name == self.primary:
                primary = v
        assert primary is not None
        details = {"terms": parts, "metrics": metrics, **{k: v for k, v in primary.details.items()
                                                           if k not in ("terms", "metrics")}}
        if infra:
            return Verdict(0.0, False, "infra", {**details, "error": "; ".join(infra)}, time.perf_counter() - t0)
        return Verdict(total, primary.passed, primary.outcome, details, time.perf_counter() - t0)

    def close(self) -> None:
        for t in self.terms:
            close = getattr(t.fn, "close", None)
            if callable(close):
                close()


def _run_term(term: RewardTerm, task: Task, completion: str) -> Verdict:
    t0 = time.perf_counter()
    try:
        fn = term.fn
        out = fn.verify(task, completion) if hasattr(fn, "verify") else fn(task, completion)  # type: ignore[union-attr,operator]
    except Exception as e:  # noqa: BLE001 - a failing term is recorded, not raised
        return Verdict.infra(f"{type(e).__name__}: {e}", time.perf_counter() - t0)
    if isinstance(out, Verdict):
        return out
    try:
        r = float(out)
    except (TypeError, ValueError):
        return Verdict.infra(f"reward term {term.name!r} returned {type(out).__name__}")
    return Verdict(r, r > 0, "pass" if r > 0 else "wrong", {}, time.perf_counter() - t0)


def format_reward(task: Task, completion: str) -> float:
    """1.0 when a final answer can be extracted in the task's ``answer_format``, else 0.0."""
    lang = "sql" if task.kind == "sql" else "python" if task.kind == "code" else None
    try:
        ext = extract_answer(completion, task.answer_format or "raw", lang=lang)
    except ValueError:
        return 0.0
    return 1.0 if ext.found and not ext.ambiguous and ext.note != "bare" else 0.0


def completion_chars(task: Task, completion: str) -> float:
    """The completion's length in characters (a log-only metric: use it with weight 0)."""
    return float(len(completion))
