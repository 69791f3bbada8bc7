"""Build task lists from a ``TaskSource`` config (built-in, JSONL, HumanEval, HF datasets)."""

from __future__ import annotations

from typing import Callable

from rlvr.config.data import BuiltinArithmetic, BuiltinEnvTasks, HFTasks, HumanEvalTasks, JsonlTasks
from rlvr.data.types import Task
from rlvr.errors import DataError

ENV_TASK_GENERATORS: dict[str, Callable[..., list[Task]]] = {}
"""Task generators of the built-in environments, by environment name. The environments live a layer
above data (``rlvr.envs``) and register theirs when imported (``rlvr`` imports ``rlvr.envs``)."""


def register_env_tasks(env: str, generate: Callable[..., list[Task]]) -> None:
    """Register ``generate(n, seed=, split=) -> tasks`` as the task source ``builtin_env:<env>``."""
    ENV_TASK_GENERATORS[env] = generate


def load_task_source(src) -> list[Task]:
    """Materialise the tasks a source config names."""
    if isinstance(src, BuiltinArithmetic):
        from rlvr.data.arithmetic import generate

        try:
            return generate(src.families, src.n, split=src.split, seed=src.seed, weights=src.weights)
        except ValueError as e:
            raise DataError(f"builtin tasks: {e}") from None
    if isinstance(src, JsonlTasks):
        from rlvr.data.jsonl import load_tasks

        return load_tasks(src.path)[: src.limit]
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
        return gen(src.n, seed=src.seed, split=src.split)
    raise DataError(f"unknown task source {src!r}")


def _load_hf(src: HFTasks) -> list[Task]:
    try:
        import datasets
    except ImportError:
        raise DataError("task source type 'hf' needs the `datasets` package: pip install datasets") from None
    try:
        ds = datasets.load_dataset(src.path, split=src.split)
    except Exception as e:  # noqa: BLE001 - surfaced as a one-paragraph error
        raise DataError(f"could not load HF dataset {src.path!r} (split {src.split!r}) offline: {e}") from None
    tasks = []
    for i, row in enumerate(ds):
        if src.limit is not None and i >= src.limit:
            break
        for f in (src.prompt_field, src.answer_field):
            if f not in row:
                raise DataError(f"HF dataset {src.path}: row {i} has no field {f!r} (fields: {sorted(row)})")
        answer = str(row[src.answer_field]).split("####")[-1].strip()
        tasks.append(Task(id=f"{src.path}-{i}", prompt=row[src.prompt_field], kind="math",
                          gold={"answer": answer}, family=src.path, split=src.split))
    return tasks
