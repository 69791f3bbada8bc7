"""Closed-loop multi-turn rollouts: the policy writes a turn, the environment answers, and so on.

For ``tasks × G`` trajectories, every turn is one batched ``engine.generate`` call over the live
trajectories; each environment then steps on its turn's text (concurrently, in threads, under a step
timeout), and its observation is appended. A trajectory ends with its final answer (a turn without a
tool call), when the environment ends it (violation, tool budget, its own turn cap), at ``max_turns``,
at ``max_total_tokens``, or at the trajectory wall-clock limit.

Token-in, token-out. A trajectory's training sequence is exactly::

    prompt ids | turn 1: sampled ids (loss_mask 1) | observation ids (0) | turn 2: sampled ids (1) | ...

The sampled ids (ending with the end-of-turn token the policy sampled) are never decoded and
re-encoded: the decoded text only goes to the environment. Observation ids are the chat template's
frame around the tool message (everything the template writes after the assistant's end-of-turn
token, up to and including the next assistant header: :class:`TurnTemplate`), so the context the
policy samples from at turn k is, token for token, the training sequence's prefix. A turn cut by its
token budget gets the end-of-turn id appended with ``loss_mask`` 0 (the policy did not sample it).

Outcomes. The reward is the goal predicate on the *live* environment after the last step (the
environment-predicate verifier's :meth:`~rlvr.verifiers.env.EnvPredicateVerifier.judge_env`); the
same verifier then replays the trajectory's turn texts in a fresh environment, and a disagreement is
an ``infra`` outcome with a logged error (the rollout and the verifier would be seeing different
worlds). A tool that raises or hangs (``EnvLimits.tool_timeout_s``) is an error observation; an
environment that breaks (``reset``/``step`` raising, a step past ``step_timeout_s``) ends its
trajectory as ``infra``: kept out of the advantages and counted, never a crash of the batch. A secret
found in an observation by the leak guard is ``infra`` too (and an alert), never a reward.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rlvr.data.chat import end_of_turn_id, stop_token_ids
from rlvr.data.types import Task
from rlvr.envs.base import EnvLimits, ToolEnv
from rlvr.envs.registry import make_env
from rlvr.errors import ConfigError
from rlvr.rollout.engine import SamplingParams
from rlvr.verifiers.base import Verdict
from rlvr.verifiers.env import EnvPredicateVerifier

log = logging.getLogger(__name__)

PLACEHOLDER = "@@RLVR-OBSERVATION@@"


class TemplateError(ConfigError):
    """The chat template cannot frame a tool message after an assistant turn."""


class TurnTemplate:
    """Token ids of the first prompt and of each observation, from the tokenizer's chat template.

    The observation frame is measured once on a probe conversation ``[user, assistant "A"]``: the text
    the template renders after ``A<end-of-turn>`` when a ``tool_role`` message and the generation
    prompt follow (e.g. ``<|tool|>`` … ``<|end|><|assistant|>``; Qwen-style templates also put the
    newline after ``<|im_end|>`` here, the most common multi-turn token bug). Without a chat template
    observations are framed by newlines.
    """

    def __init__(self, tokenizer, tool_role: str = "tool"):
        self.tok = tokenizer
        self.role = tool_role
        self.stop_ids = stop_token_ids(tokenizer)
        self.eot_id = end_of_turn_id(tokenizer)
        self.pre, self.post = self._frame()
        self._user_frame: tuple[str, str] | None = None

    def _frame(self) -> tuple[str, str]:
        if not getattr(self.tok, "chat_template", None):
            return "\n", "\n"
        msgs = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "A"}]
        try:
            full = self.tok.apply_chat_template(msgs + [{"role": self.role, "content": PLACEHOLDER}],
                                                tokenize=False, add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 — a template that rejects the role is a config error
            raise TemplateError(f"the chat template cannot render a {self.role!r} message ({e}); set "
                                f"rollout.loop.tool_role (e.g. 'user')") from None
        eot = self.tok.convert_ids_to_tokens(self.eot_id)
        head = "A" + eot
        cut = full.find(head, full.find("u"))
        if cut < 0 or PLACEHOLDER not in full[cut:]:
            raise TemplateError(f"the chat template does not render the assistant turn as content + "
                                f"{eot!r} followed by the {self.role!r} message; run `rlvr probe template`")
        pre, post = full[cut + len(head):].split(PLACEHOLDER, 1)
        return pre, post

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added): the fast backend directly when there is one."""
        backend = getattr(self.tok, "backend_tokenizer", None)
        if backend is not None:
            return backend.encode(text, add_special_tokens=False).ids
        return self.tok(text, add_special_tokens=False)["input_ids"]

    @staticmethod
    def first_messages(task: Task, first_message: str) -> list[dict[str, str]]:
        """The task's system messages, then the environment's first observation as the user message."""
        msgs = [m for m in task.policy_messages() if m["role"] == "system"]
        return msgs + [{"role": "user", "content": first_message}]

    def render_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The template's rendering of ``messages`` with the generation prompt, tokenized."""
        if getattr(self.tok, "chat_template", None):
            text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            text = "\n".join(m["content"] for m in messages) + "\n"
        return self.encode(text)

    def prompt_ids(self, task: Task, first_message: str) -> list[int]:
        """The first prompt (:meth:`first_messages`, rendered; the template's frame around a lone user
        message is measured once and reused)."""
        msgs = self.first_messages(task, first_message)
        if len(msgs) > 1 or not getattr(self.tok, "chat_template", None):
            return self.render_ids(msgs)
        if self._user_frame is None:
            text = self.tok.apply_chat_template([{"role": "user", "content": PLACEHOLDER}], tokenize=False,
                                                add_generation_prompt=True)
            pre, _, post = text.partition(PLACEHOLDER)
            self._user_frame = (pre, post)
        return self.encode(self._user_frame[0] + first_message + self._user_frame[1])

    def observation_ids(self, text: str) -> list[int]:
        """The ids appended after the policy's end-of-turn token: the tool message and the next
        assistant header."""
        return self.encode(self.pre + text + self.post)


@dataclass
class TurnSpan:
    """One policy turn inside a trajectory's ids: ``ids[start:end]`` were sampled (loss_mask 1)."""

    start: int
    end: int
    text: str
    finish: str
    """``stop`` (the policy sampled a stop token) or ``length`` (the turn's token budget ran out)."""
    state: str
    """Hash of the environment state the turn acted from (HGPO groups turns by it)."""
    calls: int = 0
    tool_errors: int = 0
    format_errors: int = 0
    refused: int = 0
    """Calls refused because the tool budget was spent."""
    reward: float = 0.0
    """This turn's reward: shaping terms, plus the outcome reward on the last turn."""
    segment: int = 0
    """The training segment holding the turn's ids."""
    score_before: float | None = None
    score_after: float | None = None
    """The environment's step score (process checklist, ``ToolEnv.progress``) of the state before / after
    the turn (None without a checklist)."""


@dataclass
class Segment:
    """One training sample of a trajectory: ids, loss_mask and sampler logprobs, aligned."""

    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    old_logprobs: list[float] = field(default_factory=list)
    """Sampler log-probabilities aligned with ``ids`` (0 where ``loss_mask`` is 0)."""

    def append(self, ids: list[int], mask: int, logprobs: list[float] | None = None) -> None:
        self.ids += ids
        self.loss_mask += [mask] * len(ids)
        self.old_logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)


@dataclass
class Trajectory:
    """One closed-loop episode, as training data (token-in, token-out) and as an outcome.

    Its training data is one :class:`Segment` (history ``concat``) or several (history ``template``,
    when the chat template rewrote an earlier turn and the exact prefix broke); the last segment is
    the context the next turn is sampled from.
    """

    task: Task
    group: int
    sample: int
    segments: list[Segment] = field(default_factory=lambda: [Segment()])
    prompt_len: int = 0
    turns: list[TurnSpan] = field(default_factory=list)
    end: str = ""
    """final | env_done | max_turns | tokens | wall_clock | infra"""
    error: str | None = None
    verdict: Verdict | None = None
    env: ToolEnv | None = None
    observation: str = ""
    """The environment's answer to the last turn (appended before the next turn)."""
    messages: list[dict[str, str]] = field(default_factory=list)
    """The conversation as text (history ``template`` re-renders it every turn)."""

    @property
    def ids(self) -> list[int]:
        """The current context: the last segment's ids."""
        return self.segments[-1].ids

    @property
    def loss_mask(self) -> list[int]:
        return self.segments[-1].loss_mask

    @property
    def old_logprobs(self) -> list[float]:
        return self.segments[-1].old_logprobs

    @property
    def policy_tokens(self) -> int:
        return sum(seg.loss_mask.count(1) for seg in self.segments)

    @property
    def valid(self) -> bool:
        return self.verdict is not None and self.verdict.outcome != "infra"

    @property
    def passed(self) -> bool:
        return self.verdict is not None and self.verdict.passed

    @property
    def reward(self) -> float:
        return sum(t.reward for t in self.turns)

    @property
    def turn_texts(self) -> list[str]:
        return [t.text for t in self.turns]

    def append(self, ids: list[int], mask: int, logprobs: list[float] | None = None) -> None:
        self.segments[-1].append(ids, mask, logprobs)


def state_key(env: ToolEnv) -> str:
    """A short hash of the environment's plain-data state."""
    blob = json.dumps(env.end_state(), sort_keys=True, default=str)
    return hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()


def run_threads(jobs: list, timeout_s: float) -> list[tuple[Any, BaseException | None, bool]]:
    """Run the zero-argument callables ``jobs`` concurrently in daemon threads; per job
    ``(result, exception, timed_out)``. A job still running at ``timeout_s`` is abandoned."""
    out: list[list] = [[None, None, True] for _ in jobs]

    def run(i: int, fn) -> None:
        try:
            out[i][0] = fn()
        except BaseException as e:  # noqa: BLE001 — reported to the caller
            out[i][1] = e
        out[i][2] = False

    threads = [threading.Thread(target=run, args=(i, fn), daemon=True, name="rlvr-env") for i, fn in enumerate(jobs)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + timeout_s
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    return [tuple(o) for o in out]  # type: ignore[misc]


class MultiTurnCollector:
    """Runs the closed loop (module docstring) with one engine, tokenizer and loop configuration."""

    def __init__(self, engine, tokenizer, loop, limits: EnvLimits | None = None):
        self.engine, self.tok, self.loop = engine, tokenizer, loop
        self.template = TurnTemplate(tokenizer, loop.tool_role)
        base = limits or EnvLimits()
        self.limits = EnvLimits(**{**base.__dict__, "tool_timeout_s": loop.tool_timeout_s})
        self.verifier = EnvPredicateVerifier(limits=self.limits)
        self.seconds: dict[str, float] = {}
        """Time of the last ``collect``: generate, env (stepping), verify (live verdicts and replays)."""

    # ----- setup -----
    def _start(self, tasks: list[Task], group_size: int) -> list[Trajectory]:
        trajs = []
        for g, task in enumerate(tasks):
            for j in range(group_size):
                tr = Trajectory(task, g, j)
                trajs.append(tr)
                try:
                    tr.env = make_env(task, self.limits)
                    obs = tr.env.reset(task)
                    tr.messages = self.template.first_messages(task, obs.text)
                    tr.append(self.template.prompt_ids(task, obs.text), 0)
                    tr.prompt_len = len(tr.ids)
                except Exception as e:  # noqa: BLE001 — a bad task or a broken env is infra
                    self._break(tr, f"reset failed: {type(e).__name__}: {e}")
        return trajs

    @staticmethod
    def _break(tr: Trajectory, message: str) -> None:
        tr.end, tr.error = "infra", message
        tr.verdict = Verdict.infra(message)

    # ----- the loop -----
    def collect(self, tasks: list[Task], group_size: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                seed: int = 0, greedy: bool = False, top_k: int = 0) -> list[Trajectory]:
        """``len(tasks) × group_size`` trajectories, group-major (row ``g * G + j``), judged."""
        t0 = time.monotonic()
        secs = self.seconds = {"generate": 0.0, "env": 0.0, "verify": 0.0}
        trajs = self._start(tasks, group_size)
        for turn in range(self.loop.max_turns):
            for t in trajs:
                if not t.end and len(t.ids) >= self.loop.max_total_tokens:
                    t.end = "tokens"  # the prompt alone fills max_total_tokens: no turn fits
            live = [t for t in trajs if not t.end]
            if not live:
                break
            t1 = time.monotonic()
            self._generate(live, turn, temperature, top_p, seed, greedy, top_k)
            t2 = time.monotonic()
            self._step(live)
            for tr in live:
                if not tr.end:
                    self._continue(tr, turn, time.monotonic() - t0)
            secs["generate"] += t2 - t1
            secs["env"] += time.monotonic() - t2
        t3 = time.monotonic()
        for tr in trajs:
            if not tr.end:
                tr.end = "max_turns"
            self._judge(tr)
        secs["verify"] = time.monotonic() - t3
        return trajs

    def _generate(self, live: list[Trajectory], turn: int, temperature, top_p, seed: int, greedy: bool,
                  top_k: int = 0) -> None:
        allow = [min(self.loop.max_new_tokens, self.loop.max_total_tokens - len(t.ids)) for t in live]
        params = SamplingParams(n=1, temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=max(allow),
                                greedy=greedy, stop_token_ids=self.template.stop_ids,
                                seed=(seed * 1_000_003 + turn * 7919) % (2**63))
        gen = self.engine.generate([t.ids for t in live], params)
        stops = set(self.template.stop_ids)
        for tr, ids, lps, cap in zip(live, gen.completion_ids, gen.old_logprobs, allow):
            ids, lps = list(ids[:cap]), list(lps[:cap])
            finish = "stop" if ids and ids[-1] in stops else "length"
            start = len(tr.ids)
            text = self.tok.decode(ids, skip_special_tokens=True)
            span = TurnSpan(start, start + len(ids), text, finish, self._state(tr), segment=len(tr.segments) - 1,
                            score_before=self._progress(tr))
            tr.append(ids, 1, lps)
            tr.turns.append(span)

    def _state(self, tr: Trajectory) -> str:
        try:
            return state_key(tr.env)
        except Exception:  # noqa: BLE001 — judged (and marked infra) at the end
            return "?"

    @staticmethod
    def _progress(tr: Trajectory) -> float | None:
        try:
            return tr.env.progress()
        except Exception:  # noqa: BLE001 — a broken environment is judged (infra) at the end
            return None

    def _step(self, live: list[Trajectory]) -> None:
        before = [(t.env.format_errors.__len__(), t.env.tool_errors) for t in live]
        results = run_threads([(lambda t=t: t.env.step(t.turns[-1].text)) for t in live], self.loop.step_timeout_s)
        for tr, (res, err, timed_out), (fmt0, tool0) in zip(live, results, before):
            span = tr.turns[-1]
            if timed_out:
                self._break(tr, f"environment step did not return within {self.loop.step_timeout_s:g}s")
                continue
            if err is not None:
                self._break(tr, f"environment step failed: {type(err).__name__}: {err}")
                continue
            env = tr.env
            span.calls = len(res.info.get("calls", []))
            span.tool_errors = env.tool_errors - tool0
            span.format_errors = len(env.format_errors) - fmt0
            violation = res.info.get("violation") or {}
            span.refused = int(violation.get("kind") == "tool_budget")
            tr.observation = res.observation
            span.score_after = self._progress(tr)
            if res.done:
                tr.end = "final" if res.info.get("final") else "env_done"

    def _continue(self, tr: Trajectory, turn: int, elapsed: float) -> None:
        """Append the observation for the next turn, or end the trajectory at a loop limit."""
        if turn + 1 >= self.loop.max_turns:
            tr.end = "max_turns"
            return
        if elapsed >= self.loop.trajectory_timeout_s:
            tr.end = "wall_clock"
            return
        if self.loop.history == "template":
            extend, ids = self._rerender(tr)
        else:
            close = [] if tr.turns[-1].finish == "stop" else [self.template.eot_id]
            extend, ids = True, close + self.template.observation_ids(tr.observation)
        if (len(tr.ids) if extend else 0) + len(ids) >= self.loop.max_total_tokens:
            tr.end = "tokens"  # no room for another turn (the sequence never outgrows the cap)
        elif extend:
            tr.append(ids, 0)
        else:
            tr.segments.append(Segment(list(ids), [0] * len(ids), [0.0] * len(ids)))

    def _rerender(self, tr: Trajectory) -> tuple[bool, list[int]]:
        """History ``template``: the next context is the template's rendering of the conversation. It
        extends the current segment when that segment is its exact prefix (``(True, the new ids)``),
        else it starts a new segment (``(False, the whole context)``)."""
        tr.messages += [{"role": "assistant", "content": tr.turns[-1].text},
                        {"role": self.template.role, "content": tr.observation}]
        ctx = self.template.render_ids(tr.messages)
        cur = tr.ids
        return (True, ctx[len(cur):]) if ctx[:len(cur)] == cur else (False, ctx)

    # ----- outcome -----
    def _judge(self, tr: Trajectory) -> None:
        if tr.end != "infra":
            live = self.verifier.judge_env(tr.env, "live")
            if self.loop.replay_check and live.outcome != "infra":
                replay = self.verifier.verify(tr.task, tr.turn_texts)
                if (replay.outcome, replay.reward) != (live.outcome, live.reward):
                    msg = (f"task {tr.task.id}: the replay verifier says {replay.outcome} ({replay.reward}) but the "
                           f"live end state says {live.outcome} ({live.reward})")
                    log.error(msg)
                    live = Verdict(0.0, False, "infra", {**live.details, "error": msg, "replay_disagrees": True})
            tr.verdict = live
        tr.env = None  # environments are not kept past the rollout (a timed-out one may still be running)


def demo_example(tokenizer, task: Task, tool_role: str = "tool", max_length: int | None = None,
                 limits: EnvLimits | None = None, template: TurnTemplate | None = None) -> tuple[list[int], list[int]]:
    """``(input_ids, loss_mask)`` of a multi-turn demonstration (``task.solution``: a JSON list of turn
    texts), laid out exactly as a closed-loop rollout: each turn's ids plus the end-of-turn id
    (loss_mask 1), the environment's real observation between turns (loss_mask 0). Pass ``template``
    to reuse one :class:`TurnTemplate` over many demonstrations."""
    try:
        turns = json.loads(task.solution or "[]")
    except ValueError:
        turns = None
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise ConfigError(f"task {task.id}: an environment demonstration must be a JSON list of turn texts")
    tmpl = template or TurnTemplate(tokenizer, tool_role)
    env = make_env(task, limits)
    tr = Trajectory(task, 0, 0)
    tr.append(tmpl.prompt_ids(task, env.reset(task).text), 0)
    for text in turns:
        tr.append(tmpl.encode(text) + [tmpl.eot_id], 1)
        res = env.step(text)
        if env.done:
            break
        tr.append(tmpl.observation_ids(res.observation), 0)
    ids, mask = tr.ids, tr.loss_mask
    return (ids[:max_length], mask[:max_length]) if max_length is not None else (ids, mask)
