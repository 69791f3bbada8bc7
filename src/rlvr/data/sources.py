"""Build task lists from a ``TaskSource`` config (built-in, JSONL, HumanEval, HF datasets, reasoning-gym, and the
registered loaders: TextArena games)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from rlvr.config.data import (BuiltinArithmetic, BuiltinEnvTasks, HFTasks, HumanEvalTasks, JsonlTasks,
                              ReasoningGymTasks)
from rlvr.data.types import Task
from rlvr.errors import DataError

ENV_TASK_GENERATORS: dict[str, Callable[..., list[Task]]] = {}
"""Task generators of the built-in environments, by environment name. The environments live a layer
above data (``rlvr.envs``) and register theirs when imported (``rlvr`` imports ``rlvr.envs``)."""


SOURCE_LOADERS: dict[str, Callable[..., list[Task]]] = {}
"""Loaders of task sources that live above the data layer (``textarena``: its games are environments), by the
source's ``type``; registered when their module is imported (``rlvr`` imports ``rlvr.envs``)."""


def register_source_loader(kind: str, load: Callable[..., list[Task]]) -> None:
    """Register ``load(src) -> tasks`` for the task source config whose ``type`` is ``kind``."""
    SOURCE_LOADERS[kind] = load


def register_env_tasks(env: str, generate: Callable[..., list[Task]]) -> None:
    """Register ``generate(n, seed=, split=) -> tasks`` as the task source ``builtin_env:<env>``."""
    ENV_TASK_GENERATORS[env] = generate


def load_task_source(src) -> list[Task]:
    """Materialise the tasks a source config names (with its system prompt, if any). Whether each task can be
    judged is the verifiers' check (:func:`rlvr.verifiers.registry.refuse_unjudgeable`)."""
    return with_system(_load(src), getattr(src, "system_prompt", None))


def _load(src) -> list[Task]:
    if isinstance(src, BuiltinArithmetic):
        from rlvr.data.arithmetic import generate

        try:
            teacher = src.teacher
            return generate(src.families, src.n, split=src.split, seed=src.seed, weights=src.weights,
                            teacher_rate=teacher.rate if teacher else 0.0,
                            teacher_families=teacher.families if teacher else None)
        except ValueError as e:
            raise DataError(f"builtin tasks: {e}") from None
    if isinstance(src, JsonlTasks):
        from rlvr.data.jsonl import load_tasks

        return _filter_split(load_tasks(src.path), src.split, src.path)[: src.limit]
    if isinstance(src, HumanEvalTasks):
        from rlvr.data.humaneval import load_humaneval

        return load_humaneval()[: src.limit]
    if isinstance(src, HFTasks):
        return _load_hf(src)
    if isinstance(src, BuiltinEnvTasks):
        gen = ENV_TASK_GENERATORS.get(src.env)
        if gen is None:
            raise DataError(f"builtin_env: no task generator registered for environment {src.env!r} "
                            f"(registered: {sorted(ENV_TASK_GENERATORS)})")
        return gen(src.n, seed=src.seed, split=src.split, **env_options(gen, src))
    if isinstance(src, ReasoningGymTasks):
        from rlvr.data.reasoning_gym import load_reasoning_gym

        return load_reasoning_gym(src)
    load = SOURCE_LOADERS.get(getattr(src, "type", None))
    if load is not None:
        return load(src)
    raise DataError(f"unknown task source {src!r}")


def env_options(gen, src: BuiltinEnvTasks) -> dict:
    """The source's environment-specific options (``families``, ``shortcut_rate``, ``hops``) that ``gen`` takes."""
    import inspect

    params = inspect.signature(gen).parameters
    opts = {"families": tuple(src.families) if src.families else None, "shortcut_rate": src.shortcut_rate,
            "hops": src.hops}
    return {k: v for k, v in opts.items() if k in params and v is not None}


def _load_hf(src: HFTasks) -> list[Task]:
    """Rows -> tasks through the JSONL rules (TRL columns accepted); other columns go to ``task.meta``."""
    from rlvr.data.hf import load_hf_rows
    from rlvr.data.jsonl import task_from_record

    ds = load_hf_rows(src.path, src.split, "HF task dataset")
    tasks = []
    for i, row in enumerate(ds):
        if src.limit is not None and i >= src.limit:
            break
        rec = {k: v for k, v in dict(row).items() if v is not None}
        if src.prompt_field != "prompt" and src.prompt_field in rec:
            rec["prompt"] = rec.pop(src.prompt_field)
        elif "prompt" not in rec and "messages" not in rec and "question" in rec:
            rec["prompt"] = rec.pop("question")
        if src.answer_field != "answer" and src.answer_field in rec:
            rec["answer"] = rec.pop(src.answer_field)
        if isinstance(rec.get("answer"), (str, int, float)):
            rec["answer"] = str(rec["answer"]).split("####")[-1].strip()  # GSM8K: "... #### 42"
        where = f"{src.path}[{src.split}]#{i}"
        rec.setdefault("id", f"{Path(src.path).name}-{i}")
        rec.setdefault("family", Path(src.path).name)
        tasks.append(task_from_record(rec, where, extra="meta"))
    if not tasks:
        raise DataError(f"HF task dataset {src.path!r} (split {src.split!r}) has no rows")
    return tasks


def with_system(tasks: list[Task], system_prompt: str | None) -> list[Task]:
    """Put a system message before each task's prompt (a task that already starts with one keeps its own)."""
    if not system_prompt:
        return tasks
    out = []
    for t in tasks:
        msgs = t.policy_messages()
        if msgs[0]["role"] != "system":
            msgs = [{"role": "system", "content": system_prompt}, *msgs]
        out.append(replace(t, messages=msgs))
    return out


def _filter_split(tasks: list[Task], split: str | None, path: str) -> list[Task]:
    if split is None:
        return tasks
    kept = [t for t in tasks if t.split == split]
    if not kept:
        raise DataError(f"{path}: no line has \"split\": {split!r} (splits present: {sorted({t.split for t in tasks})})")
    return kept
