"""The judge: the callable a trainer uses to turn ``(task, completion)`` pairs into verdicts.

Each task is routed to the verifier of its ``kind`` (see :class:`~rlvr.verifiers.registry.TaskRouter`);
a batch is verified inline or in the process pool (``workers > 0``, hard timeouts per verification).
"""

from __future__ import annotations

from typing import Callable, Sequence

from rlvr.data.types import Task
from rlvr.verifiers.base import Verdict

Judge = Callable[[Sequence[Task], Sequence[str]], list[Verdict]]


def default_judge(workers: int = 0) -> Judge:
    """Route each task to its verifier (by ``task.kind``) and verify a batch (in a pool if workers>0)."""
    from rlvr.verifiers.pool import verify_batch
    from rlvr.verifiers.registry import TaskRouter

    router = TaskRouter()

    def judge(tasks, completions):
        return verify_batch(router, list(tasks), list(completions), workers=workers)
    return judge
