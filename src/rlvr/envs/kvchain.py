"""``kvchain``: a long-horizon key-value chain — every turn needs the previous turn's observation.

The store maps short keys (a letter and a digit, ``q3``) to values. From the start key named in the
prompt, each key's value is the next key of the chain; after ``hops`` keys the value is a number, the
answer. The only tool is ``get(key)``. Everything is terse so that a tiny model's context holds a whole
trajectory (~10 tokens a turn): a turn that is just a key (``q3``) is ``get(q3)`` (the documented
``<tool>`` markup works too), and the observation is the bare value (``k7``, framed by the chat
template's tool turn). To know which key to read next the policy must copy it from the last
observation, so a successful trajectory is ``hops`` dependent ``get`` turns and one answer turn (31
turns at the default 30 hops). Decoy keys hold values that look like chain links, so nothing can be
guessed.

State: ``{"answer": str or None, "reached": k}`` — the answer is the last integer of the final turn (a
turn without a tool call); ``reached``: how many chain keys have been read in chain order. Goal
(``gold["goal"]``): ``{"answer": "417"}``. Checklist (StepPO's step score): (reached + answer right) /
(hops + 1). The answer is revealed by the last ``get`` by design, so there are no secrets to guard.
"""

from __future__ import annotations

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
from rlvr.envs.tools import ParsedTurn, ToolCall, neutralise
from rlvr.errors import DataError

DEFAULT_HOPS = 30
_KEY = re.compile(r"[a-z][0-9]")
_INT = re.compile(r"-?\d+")


class KVChainEnv(ToolEnv):
    """Follow a chain of keys to a number; see the module docstring."""

    name: ClassVar[str] = "kvchain"
    tool_specs: ClassVar[tuple[ToolSpec, ...]] = (
        ToolSpec("get", "the value at a key", {"key": ArgSpec("str", max_chars=8)}),)

    def _load(self, init: dict[str, Any]) -> None:
        self.store: dict[str, str] = dict(init["store"])
        self.chain: list[str] = list(init["chain"])
        self.reached = 0

    def _parse_turn(self, action_text: str) -> ParsedTurn:
        key = action_text.strip()
        if _KEY.fullmatch(key):  # the terse form: a bare key is get(key)
            return ParsedTurn([ToolCall("get", {"key": key})])
        return super()._parse_turn(action_text)

    def _render(self, text: str) -> str:
        return neutralise(text)

    def tool_get(self, key: str) -> str:
        if key not in self.store:
            raise ToolError(f"no key {key[:8]}")
        if self.reached < len(self.chain) and key == self.chain[self.reached]:
            self.reached += 1
        return self.store[key]

    def end_state(self) -> dict[str, Any]:
        found = _INT.findall((self.final_text or "").strip())
        return {"answer": found[-1] if found else None, "reached": self.reached}

    def _instructions(self, task: Task) -> str:
        return ("Reply with a key to get its value. Each value is the next key; go on until a value is a "
                f"number, then reply with that number.\n{task.prompt}")

    @classmethod
    def validate_gold(cls, gold: dict[str, Any]) -> None:
        init, goal = gold.get("init"), gold.get("goal")
        if not isinstance(init, dict) or not isinstance(init.get("store"), dict) or not isinstance(
                init.get("chain"), list) or not init["chain"]:
            raise DataError("kvchain task: gold['init'] must be {'store': {key: value}, 'chain': [key, ...]}")
        missing = [k for k in init["chain"] if k not in init["store"]]
        if missing:
            raise DataError(f"kvchain task: chain keys {missing[:3]} are not in the store")
        if not isinstance(goal, dict) or not _INT.fullmatch(str(goal.get("answer", ""))):
            raise DataError("kvchain task: gold['goal'] must be {'answer': '<integer>'}")

    @classmethod
    def check_goal(cls, end_state: dict[str, Any], goal: dict[str, Any]) -> GoalResult:
        return integer_answer_goal(end_state, goal)

    @classmethod
    def checklist(cls, end_state: dict[str, Any], gold: dict[str, Any], family: str) -> float:
        hops = len(gold["init"]["chain"])
        done = end_state.get("answer") is not None and cls.check_goal(end_state, gold["goal"]).met
        return (end_state.get("reached", 0) + int(done)) / (hops + 1)

    @classmethod
    def secret_values(cls, gold: dict[str, Any]) -> list[str]:
        return []  # the last get reveals the answer by design


def _chain_builder(hops: int, decoys: int):
    def build(rng: random.Random) -> tuple[str, dict, dict, list[str]]:
        names = [f"{a}{d}" for a in "abcdefghijklmnopqrstuvwxyz" for d in "0123456789"]
        keys = rng.sample(names, hops + decoys)
        chain, extra = keys[:hops], keys[hops:]
        answer = str(rng.randint(100, 999))
        store = {k: (chain[i + 1] if i + 1 < hops else answer) for i, k in enumerate(chain)}
        for k in extra:  # decoys: links into the chain or other decoys, and numbers
            store[k] = rng.choice(keys) if rng.random() < 0.7 else str(rng.randint(100, 999))
        init = {"store": dict(sorted(store.items())), "chain": chain}
        actions = list(chain) + [answer]
        return f"start: {chain[0]}", init, {"answer": answer}, actions
    return build


def generate_kvchain_tasks(n: int, seed: int = 0, split: str = "train", families: tuple[str, ...] = ("chain",),
                           hops: int = DEFAULT_HOPS) -> list[Task]:
    """``n`` chain tasks of ``hops`` dependent ``get`` turns (+ the answer turn); ``task.solution`` is the
    oracle's turns; the tool budget is exactly ``hops``."""
    if not 1 <= hops <= 200:
        raise DataError(f"kvchain tasks: hops must be in [1, 200], got {hops}")
    builders = {"chain": _chain_builder(hops, decoys=max(10, hops // 2))}
    return generate_env_tasks(KVChainEnv, "kvchain", builders, n, seed, split, tuple(families),
                              budget=lambda init, goal, actions: len(init["chain"]))


register_env_tasks("kvchain", generate_kvchain_tasks)
