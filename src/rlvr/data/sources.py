"""Build task lists from a ``TaskSource`` config (built-in, JSONL, HumanEval, HF datasets)."""

from __future__ import annotations

from rlvr.config.data import BuiltinArithmetic, BuiltinEnvTasks, HFTasks, HumanEvalTasks, JsonlTasks
from rlvr.data.types import Task
from rlvr.errors import DataError


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
        from rlvr.verifiers.humaneval import load_humaneval

        return load_humaneval()[: src.limit]
    if isinstance(src, HFTasks):
        return _load_hf(src)
    if isinstance(src, BuiltinEnvTasks):
        return _builtin_env(src)
    raise DataError(f"unknown task source {src!r}")


def _builtin_env(src: BuiltinEnvTasks) -> list[Task]:
    from rlvr.envs.calculator import generate_calculator_tasks
    from rlvr.envs.files import generate_files_tasks
    from rlvr.envs.kvstore import generate_kvstore_tasks
    from rlvr.envs.sql_agent import generate_sql_tasks

    kw = {"families": tuple(src.families)} if src.families else {}
    if src.env == "calculator":
        return generate_calculator_tasks(src.n, seed=src.seed, split=src.split, shortcut_rate=src.shortcut_rate, **kw)
    gen = {"files": generate_files_tasks, "kvstore": generate_kvstore_tasks, "sql": generate_sql_tasks}[src.env]
    return gen(src.n, seed=src.seed, split=src.split, **kw)


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
