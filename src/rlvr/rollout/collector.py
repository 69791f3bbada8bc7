"""Turn tasks into scored trajectory groups: generate G samples per task, verify, compose rewards.

The gold payload stays with the Task; only the rendered prompt reaches the engine. Verifier outcomes
``infra`` are kept out of the advantage computation (``valid`` = False) and counted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from rlvr.data.chat import encode_prompt, stop_token_ids
from rlvr.data.types import Task, with_ids
from rlvr.rollout.engine import RolloutEngine, SamplingParams
from rlvr.rollout.seeds import row_seeds
from rlvr.verifiers.base import INFRA_OUTCOMES
from rlvr.verifiers.checklist import checklist_score


@dataclass
class Rollouts:
    """A batch of ``num_groups × G`` trajectories, group-major (row ``g * G + j``)."""

    tasks: list[Task]                  # one per group
    group_size: int
    prompt_ids: list[list[int]]        # per trajectory
    completion_ids: list[list[int]]
    old_logprobs: list[list[float]]
    finish_reason: list[str]
    texts: list[str]
    rewards: torch.Tensor              # [num_groups, G] composed reward
    valid: torch.Tensor                # [num_groups, G] bool: verdict usable for advantages
    passed: torch.Tensor               # [num_groups, G] bool
    outcomes: list[str]
    reward_terms: dict[str, torch.Tensor] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    policy_version: list[int] = field(default_factory=list)   # per trajectory; empty: the live model
    row_extras: dict[str, list] = field(default_factory=dict)  # per trajectory (rlvr.rollout.methods)
    reward_errors: list[dict] = field(default_factory=list)     # the batch's infra verdicts (infra_errors)

    @property
    def num_groups(self) -> int:
        return len(self.tasks)

    def select_groups(self, keep: list[int]) -> "Rollouts":
        """The sub-batch made of groups ``keep`` (in that order)."""
        G = self.group_size
        rows = [g * G + j for g in keep for j in range(G)]
        pick = lambda xs: [xs[r] for r in rows]  # noqa: E731
        return Rollouts(
            [self.tasks[g] for g in keep], G, pick(self.prompt_ids), pick(self.completion_ids),
            pick(self.old_logprobs), pick(self.finish_reason), pick(self.texts), self.rewards[keep],
            self.valid[keep], self.passed[keep], pick(self.outcomes),
            {k: v[keep] for k, v in self.reward_terms.items()}, dict(self.seconds),
            pick(self.policy_version) if self.policy_version else [],
            {k: pick(v) for k, v in self.row_extras.items()}, list(self.reward_errors))

    @staticmethod
    def concat(parts: list["Rollouts"]) -> "Rollouts":
        first = parts[0]
        cat = lambda name: [x for p in parts for x in getattr(p, name)]  # noqa: E731
        secs: dict[str, float] = {}
        for p in parts:
            for k, v in p.seconds.items():
                secs[k] = secs.get(k, 0.0) + v
        return Rollouts(
            cat("tasks"), first.group_size, cat("prompt_ids"), cat("completion_ids"), cat("old_logprobs"),
            cat("finish_reason"), cat("texts"), torch.cat([p.rewards for p in parts]),
            torch.cat([p.valid for p in parts]), torch.cat([p.passed for p in parts]), cat("outcomes"),
            {k: torch.cat([p.reward_terms[k] for p in parts]) for k in first.reward_terms}, secs,
            cat("policy_version") if all(p.policy_version for p in parts) else [],
            {k: [x for p in parts for x in p.row_extras.get(k, [None] * len(p.prompt_ids))]
             for k in {k for p in parts for k in p.row_extras}}, cat("reward_errors"))


def overlong_penalty(lengths: torch.Tensor, max_new_tokens: int, buffer: int, penalty: float) -> torch.Tensor:
    """DAPO soft overlong punishment: 0 up to Lmax - Lb, then linear down to -penalty at Lmax.

    R_len(L) = 0 if L <= Lmax - Lb;  ((Lmax - Lb) - L) / Lb * penalty if L <= Lmax;  -penalty otherwise.
    """
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    start = max_new_tokens - buffer
    over = (lengths.float() - start).clamp(min=0)
    return -(over / buffer).clamp(max=1.0) * penalty


@dataclass
class RewardContext:
    """What a reward term may read besides the verdicts: the task and completion text of each sample."""

    tasks: list
    texts: list[str]


def checklist_term(term, verdicts, lens, max_new, ctx: RewardContext | None) -> list[float]:
    """TCR: the share of the task's checklist items (its worked steps) the completion states correctly."""
    if ctx is None:
        raise ValueError("the checklist reward term needs the tasks and completions (RewardContext)")
    return [checklist_score(t, c) for t, c in zip(ctx.tasks, ctx.texts)]


REWARD_TERMS = {
    "checklist": checklist_term,
    "correct": lambda term, verdicts, lens, max_new, *_: [vd.reward for vd in verdicts],
    "format": lambda term, verdicts, lens, max_new, *_: [0.0 if vd.outcome == "format" else 1.0 for vd in verdicts],
    "length": lambda term, verdicts, lens, max_new, *_: [-n / max_new for n in lens],
    "overlong": lambda term, verdicts, lens, max_new, *_: overlong_penalty(
        torch.tensor(lens), max_new, max_new // 5 if term.buffer is None else term.buffer, 1.0).tolist(),
    "python": lambda term, verdicts, lens, max_new, *_: [float(vd.details.get("rewards", {}).get(term.key, 0.0))
                                                     for vd in verdicts],
    "judge": lambda term, verdicts, lens, max_new, *_: [float(vd.details.get("rewards", {}).get(term.key, 0.0))
                                                        for vd in verdicts],
}
"""A reward term's per-sample values, by ``term.name``: correct (the verifier's reward), format (1 when an
answer is extractable), length (-len / max_new_tokens), overlong (DAPO's soft punishment, in [-1, 0]; the
term's weight is the penalty at max length), python (the user function's reward, judged beside the
verifier; 0 when infra), judge (the model judge's score in [0, 1], RLAIF: ``rollout.model_judge``; a
completion it cannot score is ``infra``)."""


def infra_errors(tasks: list[Task], texts: list[str], ids: list[list[int]], verdicts) -> list[dict]:
    """One record per infra verdict: the task id, the completion (text and ids: a line ``rlvr verify`` reads)
    and the failure as the verifier or the reward function reported it (error, where, traceback)."""
    return [{"task_id": t.id, "completion": c, "completion_ids": list(i), "error": v.details.get("error", ""),
             "where": v.details.get("where", ""), "traceback": v.details.get("traceback", "")}
            for t, c, i, v in zip(tasks, texts, ids, verdicts) if v.outcome in INFRA_OUTCOMES]


def compose_rewards(verdicts, completion_lens, terms, max_new_tokens: int,
                    ctx: RewardContext | None = None) -> dict[str, torch.Tensor]:
    """Per-term reward vectors keyed by ``term.key`` (see ``REWARD_TERMS``); the trainer sums them weighted."""
    return {term.key: torch.tensor(REWARD_TERMS[term.name](term, verdicts, list(completion_lens), max_new_tokens, ctx),
                                   dtype=torch.float32) for term in terms}


def collect(engine: RolloutEngine, tokenizer, tasks: list[Task], judge, sampling, reward_terms, seed: int,
            prompt_fn=None) -> Rollouts:
    """Generate ``sampling.group_size`` samples per task, verify them, and compose rewards. ``prompt_fn(task)
    -> ids`` overrides how a prompt is encoded (EDEN's extra position, OC-GRPO's privileged context)."""
    G = sampling.group_size
    t0 = time.perf_counter()
    prompts = [(prompt_fn or (lambda t: encode_prompt(tokenizer, t)))(t) for t in tasks]
    per_row = getattr(sampling, "row_seeds", False)
    params = SamplingParams(n=G, temperature=sampling.temperature, top_p=sampling.top_p,
                            top_k=getattr(sampling, "top_k", 0),
                            max_new_tokens=sampling.max_new_tokens, stop_token_ids=stop_token_ids(tokenizer),
                            stop_strings=list(sampling.stop), seed=seed,
                            row_seeds=row_seeds(seed, len(prompts) * G) if per_row else None,
                            threads=getattr(sampling, "decode_threads", None))
    gen = engine.generate(prompts, params)
    t1 = time.perf_counter()
    rep = [tasks[i] for i in gen.prompt_index]
    verdicts = judge(rep, with_ids(gen.texts, gen.completion_ids))  # text + sampled ids
    t2 = time.perf_counter()
    lens = [len(c) for c in gen.completion_ids]
    terms = compose_rewards(verdicts, lens, reward_terms, sampling.max_new_tokens, RewardContext(rep, gen.texts))
    total = sum(t.weight * terms[t.key] for t in reward_terms)
    shape = (len(tasks), G)
    valid = torch.tensor([v.outcome not in INFRA_OUTCOMES for v in verdicts]).view(shape)
    return Rollouts(
        tasks, G, gen.prompt_ids, gen.completion_ids, gen.old_logprobs, gen.finish_reason, gen.texts,
        total.view(shape), valid, torch.tensor([v.passed for v in verdicts]).view(shape),
        [v.outcome for v in verdicts], {k: v.view(shape) for k, v in terms.items()},
        {"generate": t1 - t0, "verify": t2 - t1}, list(gen.policy_version),
        reward_errors=infra_errors(rep, gen.texts, gen.completion_ids, verdicts))
