"""``calculator``: multi-step arithmetic over 3-4-digit numbers with add / sub / mul tools and registers.

A ~1M-parameter model cannot multiply ``347*58`` in its head; with the tools it only has to plan the
calls in the right order. The task's numbers sit in registers (``x=347 y=58 z=1203``, then
``x*y+z=?``); every result goes to the next register ``r1``, ``r2``, ...; a tool argument is an integer
or a register name. Tools: ``add(a, b)``, ``sub(a, b)``, ``mul(a, b)``; each answers ``r1 = 20126``.
The episode ends with a turn without a tool call: the answer, a register name or an integer (the last
one in the turn).

State: ``{"answer": str or None, "registers": {name: int}}``. Goal (``gold["goal"]``):
``{"answer": "21329"}`` — the final answer must equal it.

Leak guard: the tools compute the answer by design (the last call's result *is* the answer once the
policy has planned the calls), so the answer is not a secret here; what the guard watches is the goal
payload itself (a tool that printed ``{"answer": ...}`` would be an environment bug: ``infra``).

Task families (``init["ops"]`` is the plan; the budget is exactly its length, so a wasted call leaves
the last step unpaid):

    mul_add      x*y+z        mul, add          mul_sub      x*y-z        mul, sub
    add_mul      (x+y)*z      add, mul          mul_add_mul  x*y+z*w      mul, mul, add

Demonstrations (``task.solution``) come from a teacher that is better at arithmetic than the student:
when the last step is an add or a sub, with probability ``shortcut_rate`` (default 0.6) it does it *in
its head* and answers ``= 21329`` instead of calling the tool and answering ``r2``. The shortcut is
always right, so every demonstration passes; but at the fork after the last-but-one result, an
imitating student's most likely next token is the ``=`` of the shortcut, and then it must add 4-6-digit
numbers without the tool. The student's best path is the tool every time. That is the room RL has over
SFT on these tasks (docs/agents.md): greedy decoding of a policy that imitates the teacher takes the
teacher's majority branch at every fork, and no amount of SFT changes which branch that is.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any, ClassVar

from rlvr.data.sources import register_env_tasks
from rlvr.data.types import Task
from rlvr.envs.base import (
    ArgSpec,
    GoalResult,
    ToolEnv,
    ToolError,
    ToolSpec,
    generate_env_tasks,
    integer_answer_goal,
)
from rlvr.envs.tools import CLOSE, OPEN
from rlvr.errors import DataError

_INT = re.compile(r"-?\d+")
_REGISTER = re.compile(r"[a-z][a-z0-9]{0,7}")
OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b}
SYMBOL = {"add": "+", "sub": "-", "mul": "*"}


def compact_call(name: str, **args: Any) -> str:
    """A tool call in the documented markup with compact JSON (fewer tokens for character models)."""
    body = json.dumps({"name": name, "args": args}, separators=(",", ":"))
    return OPEN + body.replace("<", "\\u003c") + CLOSE


class CalculatorEnv(ToolEnv):
    """Arithmetic with tools and registers; see the module docstring."""

    name: ClassVar[str] = "calculator"
    tool_specs: ClassVar[tuple[ToolSpec, ...]] = tuple(
        ToolSpec(op, f"r = a {SYMBOL[op]} b", {"a": ArgSpec("str|int", max_chars=8), "b": ArgSpec("str|int", max_chars=8)})
        for op in OPS)

    def _load(self, init: dict[str, Any]) -> None:
        self.registers: dict[str, int] = dict(init["registers"])
        self.n_results = 0

    def _value(self, v: str | int) -> int:
        if isinstance(v, int):
            return v
        if v not in self.registers:
            raise ToolError(f"no register {v[:8]!r}; registers: {', '.join(self.registers)}")
        return self.registers[v]

    def _tool(self, op: str, a: str | int, b: str | int) -> str:
        value = OPS[op](self._value(a), self._value(b))
        self.n_results += 1
        self.registers[f"r{self.n_results}"] = value
        return f"r{self.n_results} = {value}"

    def tool_add(self, a: str | int, b: str | int) -> str:
        return self._tool("add", a, b)

    def tool_sub(self, a: str | int, b: str | int) -> str:
        return self._tool("sub", a, b)

    def tool_mul(self, a: str | int, b: str | int) -> str:
        return self._tool("mul", a, b)

    def end_state(self) -> dict[str, Any]:
        text = (self.final_text or "").strip()
        if text in self.registers:
            answer: str | None = str(self.registers[text])
        else:
            found = _INT.findall(text)
            answer = found[-1] if found else None
        return {"answer": answer, "registers": dict(self.registers)}

    def _instructions(self, task: Task) -> str:
        # the expression last: right before the first call that reads its registers
        return (f"Tools: add, sub, mul (a, b: numbers or registers); results go to r1, r2... At most {self.budget} "
                f"calls, then the answer.\n{task.prompt}")

    # ----- gold -----
    @classmethod
    def validate_gold(cls, gold: dict[str, Any]) -> None:
        init, goal = gold.get("init"), gold.get("goal")
        regs = init.get("registers") if isinstance(init, dict) else None
        if not isinstance(regs, dict) or not all(isinstance(k, str) and _REGISTER.fullmatch(k) and isinstance(v, int)
                                                 and not isinstance(v, bool) for k, v in regs.items()):
            raise DataError("calculator task: gold['init'] must be {'registers': {name: integer}, ...}")
        if not isinstance(goal, dict) or not isinstance(goal.get("answer"), str) or not _INT.fullmatch(goal["answer"]):
            raise DataError("calculator task: gold['goal'] must be {'answer': '<integer>'}")

    @classmethod
    def check_goal(cls, end_state: dict[str, Any], goal: dict[str, Any]) -> GoalResult:
        return integer_answer_goal(end_state, goal)

    @classmethod
    def checklist(cls, end_state: dict[str, Any], gold: dict[str, Any], family: str) -> float | None:
        """The plan's intermediate results found among the result registers, plus the right answer, over
        (plan length + 1); None for a family without a known plan."""
        family = family.rsplit("/", 1)[-1]  # tasks are named calculator/<family>
        if family not in FAMILIES:
            return None
        _, plan, _ = FAMILIES[family]
        regs = end_state["registers"]
        vals: dict[str, int] = {k: v for k, v in regs.items() if not re.fullmatch(r"r\d+", k)}
        results = [v for k, v in regs.items() if re.fullmatch(r"r\d+", k)]
        hits = 0
        for i, (op, left, right) in enumerate(plan):
            if left not in vals or right not in vals:
                break
            vals[f"r{i + 1}"] = OPS[op](vals[left], vals[right])
            if vals[f"r{i + 1}"] in results:
                hits += 1
        done = end_state.get("answer") is not None and cls.check_goal(end_state, gold["goal"]).met
        return (hits + int(done)) / (len(plan) + 1)

    @classmethod
    def secret_values(cls, gold: dict[str, Any]) -> list[str]:
        return []  # the tools compute the answer by design (module docstring)


# ----- task generator -----
# family -> (register digits, plan, expression); a plan step is (op, left, right) over register names
# and earlier results r1, r2, ...; the last step's result is the answer.
FAMILIES: dict[str, tuple[dict[str, int], list[tuple[str, str, str]], str]] = {
    "mul_add": ({"x": 3, "y": 2, "z": 4}, [("mul", "x", "y"), ("add", "r1", "z")], "x*y+z"),
    "mul_sub": ({"x": 3, "y": 2, "z": 4}, [("mul", "x", "y"), ("sub", "r1", "z")], "x*y-z"),
    "add_mul": ({"x": 3, "y": 4, "z": 2}, [("add", "x", "y"), ("mul", "r1", "z")], "(x+y)*z"),
    "mul_add_mul": ({"x": 3, "y": 2, "z": 3, "w": 2},
                    [("mul", "x", "y"), ("mul", "z", "w"), ("add", "r1", "r2")], "x*y+z*w"),
}


def _builder(family: str, shortcut_rate: float):
    digits, plan, expr = FAMILIES[family]

    def build(rng: random.Random) -> tuple[str, dict, dict, list[str]]:
        regs = {k: rng.randint(10 ** (d - 1), 10**d - 1) for k, d in digits.items()}
        vals: dict[str, int] = dict(regs)
        actions: list[str] = []
        for i, (op, left, right) in enumerate(plan):
            vals[f"r{i + 1}"] = OPS[op](vals[left], vals[right])
            actions.append(compact_call(op, a=left, b=right))
        answer = vals[f"r{len(plan)}"]
        final = f"r{len(plan)}"
        if plan[-1][0] != "mul" and rng.random() < shortcut_rate:  # the teacher's shortcut (module docstring)
            actions, final = actions[:-1], f"= {answer}"
        init = {"registers": regs, "ops": [op for op, _, _ in plan]}
        prompt = " ".join(f"{k}={v}" for k, v in regs.items()) + f"\n{expr}=?"
        return prompt, init, {"answer": str(answer)}, actions + [final]

    return build


def generate_calculator_tasks(n: int, seed: int = 0, split: str = "train",
                              families: tuple[str, ...] = ("mul_add", "mul_sub", "add_mul", "mul_add_mul"),
                              shortcut_rate: float = 0.6) -> list[Task]:
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


register_env_tasks("calculator", generate_calculator_tasks)
