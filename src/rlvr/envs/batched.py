"""``BatchedEnv``: N environments stepped together; finished ones are skipped.

Environments here are in-memory and cheap, so they are stepped in turn in this process. One env that
raises never stops the batch: its slot ends with ``info["error"]`` and the others go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rlvr.data.types import Task
from rlvr.envs.base import EnvLimits, GoalResult, Observation, StepResult, ToolEnv
from rlvr.envs.registry import make_env


class BatchedEnv:
    """Runs one environment per task: ``reset(tasks)``, then ``step(actions)`` until ``all_done``."""

    def __init__(self, limits: EnvLimits | None = None,
                 factory: Callable[[Task, EnvLimits | None], ToolEnv] = make_env):
        self.limits, self.factory = limits, factory
        self.envs: list[ToolEnv] = []
        self.errors: list[str | None] = []

    def reset(self, tasks: Sequence[Task]) -> list[Observation]:
        """Fresh environments for ``tasks``; one observation per task, in order."""
        self.envs = [self.factory(t, self.limits) for t in tasks]
        self.errors = [None] * len(tasks)
        return [env.reset(t) for env, t in zip(self.envs, tasks)]

    @property
    def done(self) -> list[bool]:
        return [env.done or err is not None for env, err in zip(self.envs, self.errors)]

    @property
    def all_done(self) -> bool:
        return all(self.done)

    def step(self, actions: Sequence[str | None]) -> list[StepResult | None]:
        """Step every unfinished env with its action; finished slots get None (their action is ignored)."""
        if len(actions) != len(self.envs):
            raise ValueError(f"step() got {len(actions)} actions for {len(self.envs)} environments")
        results: list[StepResult | None] = []
        for i, (env, action, finished) in enumerate(zip(self.envs, actions, self.done)):
            if finished:
                results.append(None)
                continue
            if action is None:
                raise ValueError(f"step(): environment {i} is not done but its action is None")
            try:
                results.append(env.step(action))
            except Exception as e:  # noqa: BLE001 — one failed env never kills the batch
                self.errors[i] = f"{type(e).__name__}: {e}"
                results.append(StepResult("", True, {"error": self.errors[i]}))
        return results

    def end_states(self) -> list[dict[str, Any]]:
        return [env.end_state() for env in self.envs]

    def goal_results(self) -> list[GoalResult]:
        return [env.goal_result() for env in self.envs]
