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


def reward_judge(rewards, workers: int = 0) -> Judge:
    """The RL judge for a stage's reward terms: the task's verifier, plus each ``name: python`` term: one of
    the per-completion form runs beside the verifier in the same pool item, one of TRL's batched form once
    over the batch in this process (see :mod:`rlvr.verifiers.python_reward`)."""
    from rlvr.verifiers.pool import verify_batch
    from rlvr.verifiers.python_reward import PythonReward, RewardJudge, add_batch_terms, combine

    py = {t.key: PythonReward(t.function, t.timeout_s) for t in rewards if t.name == "python"}
    if not py:
        return default_judge(workers)
    # a typo or a signature of neither form is a ConfigError now, not an infra verdict per completion
    per_item = {k: t for k, t in py.items() if t.form == "task"}
    batched = {k: t for k, t in py.items() if t.form == "batch"}
    from rlvr.verifiers.registry import TaskRouter

    primary = TaskRouter() if any(t.name in ("correct", "format") for t in rewards) else None
    verifier = RewardJudge(primary, per_item)
    timeout = 30.0 + sum(t.timeout_s for t in per_item.values())

    def judge(tasks, completions):
        tasks, completions = list(tasks), list(completions)
        if primary is not None or per_item:
            verdicts = verify_batch(verifier, tasks, completions, workers=workers, timeout_s=timeout)
        else:
            verdicts = [combine(None, {}, {}, 0.0) for _ in tasks]
        return add_batch_terms(verdicts, batched, tasks, completions) if batched and tasks else verdicts
    return judge
