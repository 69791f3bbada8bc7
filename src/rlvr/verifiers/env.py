"""Environment-predicate verifier: replay the policy's tool calls in a fresh environment, then check
the task's goal predicate on the end state.

Completion forms (all are hostile input):
  * a JSON list of strings: one assistant turn each, in order (preferred: exactly what was stepped);
  * a JSON list of chat messages ``{"role", "content"}``: the ``assistant`` contents are the turns;
    every other role (``tool``, ``user``, ``system``) is ignored;
  * a flat transcript: the turns are the text between ``<tool_output>...</tool_output>`` blocks
    (see :func:`rlvr.envs.tools.split_transcript`); the blocks themselves are dropped.

Outcomes: ``pass`` (goal met, no violation); ``violation`` (tool budget overrun, path traversal,
reserved or protected state touched); ``format`` (the completion is not a trajectory, or a tool call
was malformed and the goal was not met — any malformed call with ``strict_format``); ``wrong`` (the
goal predicate is false); ``infra`` (a bad task, an environment bug, or a gold value found in an
observation — the reward would be meaningless).

Protects against: claimed success (text, a ``{"done": true}`` blob, fake tool output, ``tool``-role
messages) — the end state is recomputed from the calls alone; fishing for the goal (observations are
scanned for secret goal values); brute force (a per-task tool budget, checked per call);
host access (the environments are in-memory; paths with ``..``, absolute/host paths, NUL bytes are
violations); writing a "goal reached" flag (reserved names/keys are violations; no such flag exists
in any predicate); protected state; replaying another task's trajectory (the predicate reads this
task's gold); parser confusion (duplicate JSON keys, NaN, unknown keys, nested/unclosed tags);
oversized input (completion, turn, call, output caps).

Does not protect against: a goal predicate that is too weak (it checks only the listed paths/keys —
extra files or keys the policy creates are allowed); secrets shorter than 3 characters (not scanned
for); a completion whose turns differ from what was really stepped during the rollout (give the
structured list form to replay exactly); limits that differ from the rollout's (build the verifier
with the rollout's ``EnvLimits``); wall-time limits (replay is in-process and bounded by the
caps above; the pool enforces a hard timeout).
"""

from __future__ import annotations

import json
import time
from typing import Any

from rlvr.data.types import Task
from rlvr.envs.base import EnvLimits, ToolEnv
from rlvr.envs.registry import ENVIRONMENTS, make_env
from rlvr.envs.tools import ToolCallError, split_transcript
from rlvr.errors import DataError
from rlvr.verifiers.base import Verdict


def parse_trajectory(completion: Any, max_chars: int = 1_000_000) -> tuple[list[str], str]:
    """Turn a completion into assistant turns; returns ``(turns, form)``. Raises ToolCallError."""
    if isinstance(completion, list):
        size = sum(len(x) if isinstance(x, str) else len(str(x)) for x in completion)
        if size > max_chars:
            raise ToolCallError(f"completion is {size} characters; the limit is {max_chars}")
        return _turns_from_list(completion), "list"
    if not isinstance(completion, str):
        raise ToolCallError(f"completion must be text or a list of turns, got {type(completion).__name__}")
    if len(completion) > max_chars:
        raise ToolCallError(f"completion is {len(completion)} characters; the limit is {max_chars}")
    if not completion.strip():
        raise ToolCallError("empty completion")
    if completion.lstrip().startswith("["):
        try:
            obj = json.loads(completion)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, list):
            return _turns_from_list(obj), "list"
    return split_transcript(completion), "transcript"


def _turns_from_list(items: list[Any]) -> list[str]:
    if all(isinstance(x, str) for x in items):
        return list(items)
    if all(isinstance(x, dict) and isinstance(x.get("role"), str) and isinstance(x.get("content"), str)
           for x in items):
        return [x["content"] for x in items if x["role"] == "assistant"]
    raise ToolCallError("a list completion must hold only strings (turns) or only chat messages "
                        "{'role', 'content'}")


class EnvPredicateVerifier:
    """Replays a trajectory in a fresh environment and checks the goal predicate (see module doc)."""

    name = "env"

    def __init__(self, strict_format: bool = False, max_completion_chars: int = 1_000_000,
                 limits: EnvLimits | None = None, reward: float = 1.0):
        self.strict_format = strict_format
        self.max_completion_chars = max_completion_chars
        self.limits = limits or EnvLimits()
        self.reward = reward

    @staticmethod
    def check_task(task: Task) -> str | None:
        """Why no trajectory of ``task`` could be judged (None when one can): ``gold`` names no known
        environment, or its ``init`` / ``goal`` / ``budget`` do not fit that environment."""
        gold = task.gold if isinstance(task.gold, dict) else {}
        if gold.get("env") not in ENVIRONMENTS:
            return (f"field 'gold': an env task needs gold {{'env', 'init', 'goal'}} with env one of "
                    f"{sorted(ENVIRONMENTS)}; got env {gold.get('env')!r}")
        try:
            ENVIRONMENTS[gold["env"]].check_gold(gold)
        except Exception as e:  # noqa: BLE001 - a malformed gold is the task's problem, named here
            return f"field 'gold': {e if isinstance(e, DataError) else f'{type(e).__name__}: {e}'}"
        return None

    def verify(self, task: Task, completion: str) -> Verdict:
        t0 = time.perf_counter()
        try:
            env = make_env(task, self.limits)
        except DataError as e:
            return Verdict.infra(str(e), time.perf_counter() - t0)
        try:
            turns, form = parse_trajectory(completion, self.max_completion_chars)
        except ToolCallError as e:
            return Verdict(0.0, False, "format", {"env": env.name, "error": str(e)}, time.perf_counter() - t0)
        try:
            ignored = self._replay(env, task, turns)
        except DataError as e:
            return Verdict.infra(f"task {task.id}: {e}", time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 — an environment bug is never the policy's fault
            return Verdict.infra(f"{env.name} environment failed: {type(e).__name__}: {e}",
                                 time.perf_counter() - t0)
        return self.judge_env(env, form, ignored, t0)

    def judge_env(self, env: ToolEnv, form: str = "live", ignored: int = 0, t0: float | None = None) -> Verdict:
        """The verdict on an environment already stepped (by a replay, or live by a rollout): the goal
        predicate on its end state, then the outcome rules of the module docstring."""
        t0 = time.perf_counter() if t0 is None else t0
        try:
            details = self._details(env)
        except Exception as e:  # noqa: BLE001 — an environment bug is never the policy's fault
            return Verdict.infra(f"{env.name} environment failed: {type(e).__name__}: {e}",
                                 time.perf_counter() - t0)
        details["form"], details["ignored_turns"] = form, ignored
        outcome = self._outcome(details)
        if outcome == "infra":
            details["error"] = f"{env.name}: a secret goal value appeared in an observation (environment bug)"
        reward = self.reward if outcome == "pass" else 0.0
        return Verdict(reward, outcome == "pass", outcome, details, time.perf_counter() - t0)

    def _replay(self, env: ToolEnv, task: Task, turns: list[str]) -> int:
        """Step ``turns`` in a fresh episode; returns how many came after the episode ended (ignored)."""
        env.reset(task)
        ignored = 0
        for turn in turns:
            if env.done:
                ignored += 1
                continue
            env.step(turn)
        return ignored

    @staticmethod
    def _details(env: ToolEnv) -> dict[str, Any]:
        goal = env.goal_result()
        return {
            "env": env.name, "turns": env.turns, "tool_calls": env.tool_calls,
            "budget": env.budget, "goal_met": goal.met, "goal_failures": list(goal.failures),
            "violations": [{"kind": v.kind, "message": v.message, "turn": v.turn} for v in env.violations],
            "format_errors": env.format_errors[:10], "n_format_errors": len(env.format_errors),
            "tool_errors": env.tool_errors, "leaks": list(env.leaks),
        }

    def _outcome(self, d: dict[str, Any]) -> str:
        if d["leaks"]:
            return "infra"
        if d["violations"]:
            return "violation"
        if d["n_format_errors"] and (self.strict_format or not d["goal_met"]):
            return "format"
        return "pass" if d["goal_met"] else "wrong"
