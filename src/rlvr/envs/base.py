"""The environment protocol: ``reset(task) -> Observation``, ``step(action_text) -> StepResult``.

An episode: ``reset`` shows the policy the task and the tools; each ``step`` takes one assistant turn
(text that may hold tool calls in the markup of :mod:`rlvr.envs.tools`), runs the calls in order and
returns their output. A turn without a tool call is the final answer and ends the episode; so do a
violation, the tool budget being spent, and ``max_turns``.

What the trainer does with it: ``Observation.text`` is the first user message; each
``StepResult.observation`` (tool output) is appended to the context with ``loss_mask`` 0 — tool
output is environment text and is never trained on; only the policy's own turns get ``loss_mask`` 1.

The reward comes from :meth:`ToolEnv.end_state` (a plain-data snapshot) and the task's goal
predicate, never from anything the policy says. ``task.gold`` (``{"env", "init", "goal",
"budget"}``) is read by the environment but never rendered: a :class:`LeakGuard` scans every
observation for the goal's secret values and records (and redacts, or raises on) a leak.

Rules enforced here, for every environment:
  * tool budget: at most ``budget`` tool calls per episode (malformed calls count too); the next call
    is refused and recorded as a ``tool_budget`` violation;
  * size caps: turn length, call length, calls per turn, tool-output length;
  * environment-specific rules (path traversal, reserved names, protected state) raise
    :class:`PolicyViolation` from a tool and are recorded the same way;
  * a tool that raises an unexpected exception, or runs past ``EnvLimits.tool_timeout_s``, answers
    with an error observation (counted in ``tool_errors``): a broken tool never ends the episode.

Task generators split train/held-out by a hash of the task itself (:func:`split_of_key`), like the
arithmetic families: no seed or sample size puts one task in both splits.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from rlvr.data.types import Task
from rlvr.envs.tools import CallError, ParsedTurn, ToolCall, ToolCallError, parse_turn, render_output
from rlvr.errors import DataError

VIOLATION_KINDS = ("tool_budget", "path_traversal", "reserved", "protected")


class EnvError(RuntimeError):
    """The environment was misused (``step`` before ``reset`` or after ``done``)."""


class GoldLeakError(RuntimeError):
    """An observation contained a secret goal value (an environment bug, never the policy's fault)."""


class ToolError(Exception):
    """A tool refused an ordinary request (no such file, missing key): the policy sees the message."""


class ToolTimeout(Exception):
    """A tool ran past ``EnvLimits.tool_timeout_s`` (the policy sees an error observation)."""


def call_with_timeout(fn, kwargs: dict[str, Any], timeout_s: float | None) -> Any:
    """``fn(**kwargs)``, or ToolTimeout after ``timeout_s`` seconds (the call's thread is abandoned:
    Python cannot kill a thread). Exceptions raised by ``fn`` propagate unchanged."""
    if not timeout_s:
        return fn(**kwargs)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["out"] = fn(**kwargs)
        except BaseException as e:  # noqa: BLE001 — re-raised in the caller's thread
            box["err"] = e

    th = threading.Thread(target=run, daemon=True, name="rlvr-tool")
    th.start()
    th.join(timeout_s)
    if th.is_alive():
        raise ToolTimeout(f"timed out after {timeout_s:g}s")
    if "err" in box:
        raise box["err"]
    return box["out"]


class PolicyViolation(Exception):
    """The policy broke a rule of the environment (traversal, reserved or protected state)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ArgSpec:
    """One tool argument: JSON type ``str`` or ``int``, whether it is required, and its default."""

    type: str
    required: bool = True
    default: Any = None
    max_chars: int = 8192


@dataclass(frozen=True)
class ToolSpec:
    """A tool the policy may call: its name, a one-line description and its arguments."""

    name: str
    description: str
    args: dict[str, ArgSpec] = field(default_factory=dict)

    def signature(self) -> str:
        parts = [f"{k}: {a.type}" + ("" if a.required else f" = {a.default!r}") for k, a in self.args.items()]
        return f"{self.name}({', '.join(parts)})"


@dataclass(frozen=True)
class EnvLimits:
    """Caps every environment enforces, whatever the policy emits."""

    tool_budget: int = 16
    """Tool calls allowed per episode when the task gives no ``gold["budget"]``."""
    max_turns: int = 32
    """Assistant turns after which the episode is truncated (not a violation)."""
    max_calls_per_turn: int = 4
    """Tool calls parsed from one turn; more are ignored with a format error."""
    max_call_chars: int = 8192
    """Length cap of one call's JSON body."""
    max_turn_chars: int = 32_000
    """Length cap of one assistant turn; a longer turn is a format error and runs nothing."""
    max_output_chars: int = 4000
    """Tool output beyond this is truncated."""
    end_on_violation: bool = True
    """End the episode at the first violation (its verdict is ``violation`` anyway)."""
    on_leak: str = "redact"
    """When an observation holds a secret: ``redact`` (record, hide it), ``raise``, or ``record``
    (record only, show it: for audits such as the leak probe, never for training)."""
    tool_timeout_s: float | None = None
    """Wall-clock limit of one tool call (None: none). A tool past it becomes an error observation
    (``error: ... timed out``); its thread is abandoned, so the environment must not be reused."""


@dataclass
class Observation:
    """What ``reset`` shows the policy: the task text with the tool instructions, and the tools."""

    text: str
    tools: tuple[ToolSpec, ...]
    budget: int


@dataclass
class StepResult:
    """What ``step`` returns: tool output (loss_mask 0), whether the episode ended, and details."""

    observation: str
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Violation:
    """A broken rule: its kind (one of VIOLATION_KINDS), a message and the turn it happened in."""

    kind: str
    message: str
    turn: int


@dataclass(frozen=True)
class GoalResult:
    """The goal predicate on an end state: met, and which conditions failed (no gold values)."""

    met: bool
    failures: tuple[str, ...] = ()


def integer_answer_goal(end_state: dict[str, Any], goal: dict[str, Any]) -> GoalResult:
    """The goal of environments whose task ends with one integer answer (calculator, kvchain): the end
    state's ``answer`` equals ``goal["answer"]``."""
    got = end_state.get("answer")
    if got is None:
        return GoalResult(False, ("no answer",))
    ok = int(got) == int(goal["answer"])
    return GoalResult(ok, () if ok else ("answer differs",))


@runtime_checkable
class Environment(Protocol):
    """A multi-turn tool environment (see the module docstring for the episode rules)."""

    name: str

    def reset(self, task: Task) -> Observation: ...

    def step(self, action_text: str) -> StepResult: ...

    def end_state(self) -> dict[str, Any]: ...

    @property
    def done(self) -> bool: ...


class LeakGuard:
    """Scans observations for secret goal values (strings of at least ``min_chars`` characters).

    A secret found in an observation is a leak unless the policy wrote it first (it then reads back
    its own text). Secrets shorter than ``min_chars`` cannot be scanned for without false alarms and
    are not guarded; task generators keep their secrets longer.
    """

    def __init__(self, secrets: list[str], min_chars: int = 3):
        self.secrets = sorted({s for s in (x.strip() for x in secrets) if len(s) >= min_chars}, key=len)

    def find(self, text: str, policy_text: str) -> list[int]:
        """Indexes of secrets present in ``text`` that ``policy_text`` does not contain."""
        return [i for i, s in enumerate(self.secrets) if s in text and s not in policy_text]

    def redact(self, text: str, leaked: list[int]) -> str:
        for i in sorted(leaked, key=lambda j: -len(self.secrets[j])):
            text = text.replace(self.secrets[i], "[redacted]")
        return text


def check_args(spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
    """Validate a call's args against its spec; fill defaults. Raises ToolCallError (format)."""
    unknown = set(args) - set(spec.args)
    if unknown:
        raise ToolCallError(f"{spec.name}: unknown argument(s) {sorted(unknown)}; "
                            f"expected {spec.signature()}")
    out: dict[str, Any] = {}
    for key, a in spec.args.items():
        if key not in args:
            if a.required:
                raise ToolCallError(f"{spec.name}: missing argument {key!r}; expected {spec.signature()}")
            out[key] = a.default
            continue
        v = args[key]
        if a.type == "int":
            if isinstance(v, bool) or not isinstance(v, int) or abs(v) > 10**12:
                raise ToolCallError(f"{spec.name}: argument {key!r} must be an integer (|v| <= 10**12)")
        elif a.type == "str":
            if not isinstance(v, str):
                raise ToolCallError(f"{spec.name}: argument {key!r} must be a string")
            if len(v) > a.max_chars:
                raise ToolCallError(f"{spec.name}: argument {key!r} is longer than {a.max_chars} characters")
        elif a.type == "str|int":
            bad_int = isinstance(v, int) and abs(v) > 10**12
            if isinstance(v, bool) or not isinstance(v, (str, int)) or bad_int:
                raise ToolCallError(f"{spec.name}: argument {key!r} must be a string or an integer")
            if isinstance(v, str) and len(v) > a.max_chars:
                raise ToolCallError(f"{spec.name}: argument {key!r} is longer than {a.max_chars} characters")
        out[key] = v
    return out


class ToolEnv:
    """Shared machinery of the built-in environments: budget, parsing, dispatch, violations, leaks.

    A subclass sets ``name`` and ``tool_specs``, implements ``tool_<name>(**args) -> str`` for each
    tool, ``_load(init)``, ``end_state()``, ``check_goal(end_state, goal)``, ``validate_gold(gold)``
    and ``secret_values(gold)``.
    """

    name: ClassVar[str] = "base"
    tool_specs: ClassVar[tuple[ToolSpec, ...]] = ()

    def __init__(self, limits: EnvLimits | None = None):
        self.limits = limits or EnvLimits()
        if self.limits.on_leak not in ("redact", "raise", "record"):
            raise ValueError(f"on_leak must be 'redact', 'raise' or 'record', got {self.limits.on_leak!r}")
        self._task: Task | None = None
        self._done = True

    # ----- subclass hooks -----
    def _load(self, init: dict[str, Any]) -> None:
        raise NotImplementedError

    def end_state(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def check_goal(cls, end_state: dict[str, Any], goal: dict[str, Any]) -> GoalResult:
        raise NotImplementedError

    @classmethod
    def validate_gold(cls, gold: dict[str, Any]) -> None:
        raise NotImplementedError

    @classmethod
    def secret_values(cls, gold: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    @classmethod
    def checklist(cls, end_state: dict[str, Any], gold: dict[str, Any], family: str) -> float | None:
        """Step score of a state (a process checklist): the fraction in [0, 1] of the task's intermediate
        conditions the state meets; None when the environment has none (StepPO needs one)."""
        return None

    def progress(self) -> float | None:
        """:meth:`checklist` of the live state (None before ``reset`` or without a checklist)."""
        if self._task is None:
            return None
        return self.checklist(self.end_state(), self._task.gold, self._task.family)

    @classmethod
    def secrets_guardable(cls, gold: dict[str, Any], prompt: str, min_chars: int = 3) -> bool:
        """True when every secret is long enough to scan for and absent from the prompt (generators)."""
        return all(len(s) >= min_chars and s not in prompt for s in cls.secret_values(gold))

    # ----- episode -----
    @property
    def done(self) -> bool:
        return self._done

    @classmethod
    def check_gold(cls, gold: dict[str, Any]) -> None:
        """DataError when ``gold`` cannot start an episode of this environment: another ``env``, a bad
        ``init`` / ``goal`` (:meth:`validate_gold`), or a ``budget`` outside [0, 1000]."""
        if gold.get("env") != cls.name:
            raise DataError(f"gold['env'] is {gold.get('env')!r}, expected {cls.name!r}")
        cls.validate_gold(gold)
        budget = gold.get("budget", 0)
        if isinstance(budget, bool) or not isinstance(budget, int) or not 0 <= budget <= 1000:
            raise DataError(f"gold['budget'] must be an integer in [0, 1000], got {budget!r}")

    def task_gold(self, task: Task) -> dict[str, Any]:
        """``task.gold`` checked by :meth:`check_gold`; DataError naming the task otherwise."""
        gold = task.gold or {}
        try:
            self.check_gold(gold)
        except DataError as e:
            raise DataError(f"task {task.id}: {e}") from None
        return gold

    def reset(self, task: Task) -> Observation:
        """Start an episode on ``task``; ``task.gold`` must hold ``env``, ``init`` and ``goal``."""
        gold = self.task_gold(task)
        budget = gold.get("budget", self.limits.tool_budget)
        self._task, self.budget, self._done = task, budget, False
        self.turns = self.tool_calls = 0
        self.violations: list[Violation] = []
        self.format_errors: list[str] = []
        self.leaks: list[dict[str, Any]] = []
        self.tool_errors = 0
        self.final_text: str | None = None
        self._policy_text: list[str] = []
        self._guard = LeakGuard(self.secret_values(gold) + [json.dumps(gold["goal"])])
        self._load(gold["init"])
        text = self._guarded(self._instructions(task), "reset")
        return Observation(text, self.tool_specs, budget)

    def step(self, action_text: str) -> StepResult:
        """Run one assistant turn; see the module docstring for when the episode ends."""
        if self._task is None or self._done:
            raise EnvError("step() called " + ("before reset()" if self._task is None else "after done"))
        if not isinstance(action_text, str):
            raise EnvError(f"step() takes the turn's text, got {type(action_text).__name__}")
        self.turns += 1
        info: dict[str, Any] = {"turn": self.turns, "calls": [], "violation": None, "final": False}
        self._policy_text.append(action_text[: self.limits.max_turn_chars])
        if len(action_text) > self.limits.max_turn_chars:
            outputs = [self._format_error(f"turn is {len(action_text)} characters; the limit is "
                                          f"{self.limits.max_turn_chars}; nothing was run")]
        else:
            parsed = self._parse_turn(action_text)
            if not parsed.has_tool_markup:
                self._done = info["final"] = True
                self.final_text = action_text
                return StepResult("", True, info)
            outputs = [self._format_error(e) for e in parsed.turn_errors]
            for item in parsed.items:
                out = self._run_item(item, info)
                if out is not None:
                    outputs.append(out)
                if self._done:
                    break
        if self.turns >= self.limits.max_turns and not self._done:
            self._done = info["truncated"] = True
        return StepResult(self._guarded("".join(outputs), f"turn {self.turns}"), self._done, info)

    def _parse_turn(self, action_text: str) -> ParsedTurn:
        """The calls of one turn (the documented ``<tool>`` markup; an environment may add a terser form)."""
        return parse_turn(action_text, self.limits.max_calls_per_turn, self.limits.max_call_chars)

    def _run_item(self, item: ToolCall | CallError, info: dict[str, Any]) -> str | None:
        """Run one call (or answer one malformed call) under the budget; None when nothing is shown."""
        if self.tool_calls >= self.budget:
            self._violate("tool_budget", f"tool budget of {self.budget} calls is spent; call refused", info)
            return render_output("refused: the tool budget is spent")
        self.tool_calls += 1
        if isinstance(item, CallError):
            info["calls"].append({"tool": None, "ok": False, "error": "format"})
            return self._format_error(item.message)
        # Decoded string args are policy text too (JSON escapes hide newlines from the raw turn).
        self._policy_text.extend(str(v) for v in item.args.values() if isinstance(v, (str, int)))
        spec = next((s for s in self.tool_specs if s.name == item.name), None)
        try:
            if spec is None:
                names = ", ".join(s.name for s in self.tool_specs)
                raise ToolCallError(f"unknown tool {item.name!r}; tools: {names}")
            args = check_args(spec, item.args)
            out = str(call_with_timeout(getattr(self, f"tool_{spec.name}"), args, self.limits.tool_timeout_s))
            info["calls"].append({"tool": spec.name, "ok": True, "error": None})
        except ToolCallError as e:
            info["calls"].append({"tool": item.name, "ok": False, "error": "format"})
            return self._format_error(str(e))
        except ToolError as e:
            self.tool_errors += 1
            info["calls"].append({"tool": item.name, "ok": False, "error": "tool"})
            out = f"error: {e}"
        except PolicyViolation as e:
            info["calls"].append({"tool": item.name, "ok": False, "error": "violation"})
            self._violate(e.kind, str(e), info)
            out = f"refused: {e}"
        except ToolTimeout as e:
            self.tool_errors += 1
            info["calls"].append({"tool": item.name, "ok": False, "error": "timeout"})
            out = f"error: tool {item.name} {e}"
        except Exception as e:  # noqa: BLE001 — a raising tool is an error observation, never a crash
            self.tool_errors += 1
            info["calls"].append({"tool": item.name, "ok": False, "error": "crash"})
            out = f"error: tool {item.name} failed ({type(e).__name__})"
        cap = self.limits.max_output_chars
        return self._render(out if len(out) <= cap else out[:cap] + "\n...[truncated]")

    def _render(self, text: str) -> str:
        """A successful call's output as the policy sees it (``<tool_output>`` blocks by default)."""
        return render_output(text)

    def _format_error(self, message: str) -> str:
        self.format_errors.append(message)
        return render_output(f"format error: {message}")

    def _violate(self, kind: str, message: str, info: dict[str, Any]) -> None:
        v = Violation(kind, message, self.turns)
        self.violations.append(v)
        info["violation"] = {"kind": kind, "message": message}
        if kind == "tool_budget" or self.limits.end_on_violation:
            self._done = True

    def _guarded(self, text: str, where: str) -> str:
        """Scan one observation for secrets; record, then redact or raise (``limits.on_leak``)."""
        leaked = self._guard.find(text, "\n".join(self._policy_text))
        if not leaked:
            return text
        self.leaks.append({"where": where, "secrets": len(leaked)})
        if self.limits.on_leak == "raise":
            raise GoldLeakError(f"{self.name}: {len(leaked)} secret goal value(s) in the {where} observation")
        return text if self.limits.on_leak == "record" else self._guard.redact(text, leaked)

    def goal_result(self) -> GoalResult:
        """The task's goal predicate on the current end state."""
        if self._task is None:
            raise EnvError("goal_result() called before reset()")
        return self.check_goal(self.end_state(), self._task.gold["goal"])

    def _instructions(self, task: Task) -> str:
        prompt = task.prompt or "\n".join(m["content"] for m in task.policy_messages() if m["role"] == "user")
        lines = [f"- {s.signature()}: {s.description}" for s in self.tool_specs]
        return (f"{prompt}\n\nTools. Call one with <tool>{{\"name\": NAME, \"args\": {{...}}}}</tool> "
                f"(JSON). At most {self.budget} tool calls in total and {self.limits.max_calls_per_turn} "
                f"per turn. Tool output comes back in <tool_output> blocks. Reply without a tool call "
                f"when you are done.\n" + "\n".join(lines))


HELDOUT_PERCENT = 10
"""Share of every environment's task space reserved for held-out evaluation."""


def split_of_key(key: str) -> str:
    """The split of a task identified by ``key`` (a pure function of the task: the splits are disjoint)."""
    import hashlib

    h = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return "heldout" if int.from_bytes(h, "big") % 100 < HELDOUT_PERCENT else "train"


def task_key(env_name: str, gold: dict[str, Any]) -> str:
    """What identifies a task: its environment, initial state and goal (canonical JSON)."""
    return env_name + ":" + json.dumps({"init": gold["init"], "goal": gold["goal"]}, sort_keys=True)


def generate_env_tasks(env_cls, env_name: str, builders: dict, n: int, seed: int, split: str,
                       families: tuple[str, ...], budget_slack: int = 3, budget=None) -> list[Task]:
    """``n`` tasks of one environment in ``split``, deterministic by ``seed``; ``task.solution`` is a JSON
    list of the oracle's turns. ``builders[family](rng) -> (prompt, init, goal, actions)``.

    A drawn task is kept only when :func:`split_of_key` puts it in ``split``; held-out draws never
    repeat a task. The budget is ``budget(init, goal, actions)`` when given, else the oracle's tool
    calls plus ``budget_slack``.
    """
    import random

    unknown = [f for f in families if f not in builders]
    if unknown:
        raise DataError(f"{env_name} tasks: unknown families {unknown}; choose from {sorted(builders)}")
    if split not in ("train", "heldout"):
        raise DataError(f"{env_name} tasks: split must be 'train' or 'heldout', got {split!r}")
    tasks: list[Task] = []
    seen: set[str] = set()
    for i in range(n):
        fam = families[i % len(families)]
        for attempt in range(2000):
            rng = random.Random(f"rlvr-env-{env_name}-{seed}-{split}-{i}-{attempt}")
            prompt, init, goal, actions = builders[fam](rng)
            calls = sum(1 for a in actions if "<tool>" in a)
            cap = budget(init, goal, actions) if budget is not None else calls + budget_slack
            gold = {"env": env_name, "init": init, "goal": goal, "budget": cap}
            key = task_key(env_name, gold)
            if (split_of_key(key) == split and env_cls.secrets_guardable(gold, prompt)
                    and not (split == "heldout" and key in seen)):
                break
        else:
            raise DataError(f"{env_name} tasks: no {split} task found for family {fam!r} after 2000 draws")
        seen.add(key)
        tasks.append(Task(id=f"{env_name}-{split}-{seed}-{i}", prompt=prompt, kind="env", gold=gold,
                          family=f"{env_name}/{fam}", split=split, answer_format="raw",
                          solution=json.dumps(actions), meta={"env": env_name, "seed": seed, "index": i}))
    return tasks
