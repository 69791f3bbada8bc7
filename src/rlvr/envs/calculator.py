"""``calculator``: multi-step arithmetic over 3-4-digit numbers with add / sub / mul tools.

A ~1M-parameter model cannot multiply ``347*58`` in its head; with the tools it only has to plan the
calls in the right order and copy numbers from one tool output into the next call. Tools:
``add(a, b)``, ``sub(a, b)``, ``mul(a, b)`` on integers; each answers with the result. The episode
ends with a turn without a tool call: its last integer is the answer.

State: ``{"answer": str or None, "results": [int, ...]}`` (the tool results in call order and the
final answer). Goal (``gold["goal"]``): ``{"answer": "21329"}`` — the final answer must equal it.

Leak guard: the tools compute the answer by design (the last call's output *is* the answer once the
policy has planned the calls), so the answer is not a secret here; what the guard watches is the goal
payload itself (a tool that printed ``{"answer": ...}`` would be an environment bug and an ``infra``
outcome).

Task families (``init["ops"]`` lists the plan; the budget is exactly its length, so a wasted call
leaves the last step unpaid):

    mul_add      a*b+c        mul, add          mul_sub      a*b-c        mul, sub
    add_mul      (a+b)*c      add, mul          mul_add_mul  a*b+c*d      mul, mul, add

Demonstrations (``task.solution``) come from a teacher that is better at arithmetic than the student:
with probability ``shortcut_rate`` it does an add or sub *in its head* and writes the result straight
into the next call (or as the final answer) instead of calling the tool. The shortcut is always
correct, so every demonstration passes, but a student that imitates it must add 4-6-digit numbers
without the tool; the best path for the student is to call the tool every time. That is the room RL
has over SFT on these tasks (docs/agents.md).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any, ClassVar

from rlvr.data.types import Task
from rlvr.envs.base import ArgSpec, GoalResult, ToolEnv, ToolSpec, generate_env_tasks
from rlvr.envs.tools import CLOSE, OPEN
from rlvr.errors import DataError

_INT = re.compile(r"-?\d+")
OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b}
SYMBOL = {"add": "+", "sub": "-", "mul": "*"}


def compact_call(name: str, **args: Any) -> str:
    """A tool call in the documented markup with compact JSON (fewer tokens for character models)."""
    body = json.dumps({"name": name, "args": args}, separators=(",", ":"))
    return OPEN + body.replace("<", "\\u003c") + CLOSE


class CalculatorEnv(ToolEnv):
    """Arithmetic with tools; see the module docstring for tools, state, goal and families."""

    name: ClassVar[str] = "calculator"
    tool_specs: ClassVar[tuple[ToolSpec, ...]] = tuple(
        ToolSpec(op, f"return a {SYMBOL[op]} b", {"a": ArgSpec("int"), "b": ArgSpec("int")}) for op in OPS)

    def _load(self, init: dict[str, Any]) -> None:
        self.results: list[int] = []

    def _tool(self, op: str, a: int, b: int) -> str:
        self.results.append(OPS[op](a, b))
        return str(self.results[-1])

    def tool_add(self, a: int, b: int) -> str:
        return self._tool("add", a, b)

    def tool_sub(self, a: int, b: int) -> str:
        return self._tool("sub", a, b)

    def tool_mul(self, a: int, b: int) -> str:
        return self._tool("mul", a, b)

    def end_state(self) -> dict[str, Any]:
        found = _INT.findall(self.final_text or "")
        return {"answer": found[-1].lstrip("+") if found else None, "results": list(self.results)}

    def _instructions(self, task: Task) -> str:
        return f"{task.prompt}\nTools: add, sub, mul (a, b). At most {self.budget} calls, then the result."

    # ----- gold -----
    @classmethod
    def validate_gold(cls, gold: dict[str, Any]) -> None:
        goal = gold.get("goal")
        if not isinstance(gold.get("init"), dict):
            raise DataError("calculator task: gold['init'] must be an object (e.g. {'ops': [...]})")
        if not isinstance(goal, dict) or not isinstance(goal.get("answer"), str) or not _INT.fullmatch(goal["answer"]):
            raise DataError("calculator task: gold['goal'] must be {'answer': '<integer>'}")

    @classmethod
    def check_goal(cls, end_state: dict[str, Any], goal: dict[str, Any]) -> GoalResult:
        got = end_state.get("answer")
        if got is None:
            return GoalResult(False, ("no integer in the final answer",))
        return GoalResult(int(got) == int(goal["answer"]), () if int(got) == int(goal["answer"]) else
                          ("answer differs",))

    @classmethod
    def secret_values(cls, gold: dict[str, Any]) -> list[str]:
        return []  # the tools compute the answer by design (module docstring)


# ----- task generator -----
def _num(rng: random.Random, digits: int) -> int:
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


# family -> (operand digits, plan); a plan step is (op, left, right) over operand names and earlier
# step results ("r0", "r1", ...); the last step's result is the answer.
FAMILIES: dict[str, tuple[dict[str, int], list[tuple[str, str, str]], str]] = {
    "mul_add": ({"a": 3, "b": 2, "c": 4}, [("mul", "a", "b"), ("add", "r0", "c")], "{a}*{b}+{c}"),
    "mul_sub": ({"a": 3, "b": 2, "c": 4}, [("mul", "a", "b"), ("sub", "r0", "c")], "{a}*{b}-{c}"),
    "add_mul": ({"a": 3, "b": 4, "c": 2}, [("add", "a", "b"), ("mul", "r0", "c")], "({a}+{b})*{c}"),
    "mul_add_mul": ({"a": 3, "b": 2, "c": 3, "d": 2},
                    [("mul", "a", "b"), ("mul", "c", "d"), ("add", "r0", "r1")], "{a}*{b}+{c}*{d}"),
}


def _builder(family: str, shortcut_rate: float):
    digits, plan, fmt = FAMILIES[family]

    def build(rng: random.Random) -> tuple[str, dict, dict, list[str]]:
        vals: dict[str, int] = {k: _num(rng, d) for k, d in digits.items()}
        expr = fmt.format(**vals)
        actions: list[str] = []
        for i, (op, left, right) in enumerate(plan):
            a, b = vals[left], vals[right]
            vals[f"r{i}"] = OPS[op](a, b)
            # the teacher's shortcut: an add/sub done in its head (never the first step: nothing to
            # carry over yet) — its result then appears in the next call, or as the final answer
            if op == "mul" or i == 0 or rng.random() >= shortcut_rate:
                actions.append(compact_call(op, a=a, b=b))
        answer = vals[f"r{len(plan) - 1}"]
        init = {"expr": expr, "ops": [op for op, _, _ in plan]}
        return f"{expr}=?", init, {"answer": str(answer)}, actions + [str(answer)]

    return build


def generate_calculator_tasks(n: int, seed: int = 0, split: str = "train",
                              families: tuple[str, ...] = ("mul_add", "mul_sub", "add_mul", "mul_add_mul"),
                              shortcut_rate: float = 0.5) -> list[Task]:
    """``n`` calculator tasks of ``split`` (by a hash of the task), deterministic by ``seed``; the budget
    is exactly the plan's length; ``task.solution`` is the teacher's demonstration (module docstring)."""
    if not 0.0 <= shortcut_rate <= 1.0:
        raise DataError(f"calculator tasks: shortcut_rate must be in [0, 1], got {shortcut_rate}")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise DataError(f"calculator tasks: unknown families {unknown}; choose from {sorted(FAMILIES)}")
    builders = {f: _builder(f, shortcut_rate) for f in families}
    return generate_env_tasks(CalculatorEnv, "calculator", builders, n, seed, split, tuple(families),
                              budget=lambda init, goal, actions: len(init["ops"]))
