"""Environments and an engine for closed-loop tests.

``EchoEnv`` never ends on plain text (any turn gets an observation), so a random tiny model produces
several-turn trajectories. ``ScriptedEngine`` plays given turn texts (for fault tests, where what the
policy writes must be chosen).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rlvr.data.chat import end_of_turn_id
from rlvr.data.types import Task
from rlvr.envs.base import GoalResult, StepResult, ToolEnv
from rlvr.envs.calculator import CalculatorEnv
from rlvr.rollout.engine import Generation


class EchoEnv(ToolEnv):
    """Answers every turn with its length; ends after ``gold["init"]["turns"]`` turns (default 3).
    Goal: the total length of the turns is even."""

    name: ClassVar[str] = "echo"

    def _load(self, init: dict[str, Any]) -> None:
        self.lens: list[int] = []
        self.limit = init.get("turns", 3)

    def step(self, action_text: str) -> StepResult:
        self.turns += 1
        self.lens.append(len(action_text))
        self._done = self.turns >= self.limit
        return StepResult(f"<tool_output>{len(action_text)} chars</tool_output>", self._done, {"calls": []})

    def end_state(self) -> dict[str, Any]:
        return {"lens": list(self.lens)}

    def _instructions(self, task: Task) -> str:
        return task.prompt

    @classmethod
    def check_goal(cls, end_state, goal) -> GoalResult:
        return GoalResult(sum(end_state["lens"]) % 2 == 0)

    @classmethod
    def validate_gold(cls, gold) -> None:
        pass

    @classmethod
    def secret_values(cls, gold) -> list[str]:
        return []


class RaisingToolEnv(CalculatorEnv):
    name: ClassVar[str] = "calc_raising"

    def tool_mul(self, a: int, b: int) -> str:
        raise ZeroDivisionError("bug in the tool")


class HangingToolEnv(CalculatorEnv):
    name: ClassVar[str] = "calc_hanging"

    def tool_mul(self, a: int, b: int) -> str:
        time.sleep(1.5)
        return "0"


class BreakingEnv(CalculatorEnv):
    name: ClassVar[str] = "calc_breaking"

    def step(self, action_text: str) -> StepResult:
        if self.turns >= 1:
            raise RuntimeError("the environment's database went away")
        return super().step(action_text)


class HangingEnv(CalculatorEnv):
    name: ClassVar[str] = "calc_hanging_env"

    def step(self, action_text: str) -> StepResult:
        time.sleep(1.5)
        return super().step(action_text)


class FlakyEnv(CalculatorEnv):
    """A non-deterministic environment: every other instance loses the final answer, so the live run
    and its replay see different worlds."""

    name: ClassVar[str] = "calc_flaky"
    instances = 0

    def _load(self, init):
        super()._load(init)
        FlakyEnv.instances += 1
        self.loses_answer = FlakyEnv.instances % 2 == 0

    def end_state(self):
        state = super().end_state()
        return {**state, "answer": None} if self.loses_answer else state


FAKE_ENVS = [EchoEnv, RaisingToolEnv, HangingToolEnv, BreakingEnv, HangingEnv, FlakyEnv]


def echo_task(i: int = 0, turns: int = 3) -> Task:
    return Task(id=f"echo-{i}", prompt=f"Say something ({i}).", kind="env",
                gold={"env": "echo", "init": {"turns": turns}, "goal": {}})


class ScriptedEngine:
    """Plays ``script[task marker][turn]`` (the turn index is the number of assistant headers in the
    context, minus one); sampled logprobs are -0.5 per token. Implements ``generate``."""

    def __init__(self, tokenizer, script: dict[str, list[str]]):
        self.tok, self.script = tokenizer, script
        self.eot = end_of_turn_id(tokenizer)

    def generate(self, prompts, params) -> Generation:
        out = Generation([], [], [], [], [], [])
        for i, p in enumerate(prompts):
            ctx = self.tok.decode(p)
            marker = next(m for m in self.script if m in ctx)
            turn = ctx.count("<|assistant|>") - 1
            text = self.script[marker][min(turn, len(self.script[marker]) - 1)]
            ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.eot]
            for name, v in (("prompt_ids", p), ("completion_ids", ids), ("old_logprobs", [-0.5] * len(ids)),
                            ("finish_reason", "eos"), ("texts", text), ("prompt_index", i)):
                getattr(out, name).append(v)
        return out

    def sync_weights(self, model) -> None:
        pass
