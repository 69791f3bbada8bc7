"""Held-out evaluation: greedy pass@1 and sampled pass@k (unbiased estimator, Chen et al. 2021),
with the task's verifier, overall and per family."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Callable, Sequence

import numpy as np

from rlvr.data.chat import encode_prompt, stop_token_ids
from rlvr.data.types import Task
from rlvr.rollout.engine import SamplingParams
from rlvr.verifiers.base import Verdict

Judge = Callable[[Sequence[Task], Sequence[str]], list[Verdict]]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k = 1 - C(n-c, k) / C(n, k) for n samples of which c passed (Chen et al. 2021).

    Computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i) to stay stable for large n.
    """
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def default_judge(workers: int = 0) -> Judge:
    """Route each task to its verifier (by ``task.kind``) and verify a batch (in a pool if workers>0)."""
    from rlvr.verifiers.pool import verify_batch
    from rlvr.verifiers.registry import TaskRouter

    router = TaskRouter()

    def judge(tasks, completions):
        return verify_batch(router, list(tasks), list(completions), workers=workers)
    return judge


def _ks(n: int) -> list[int]:
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    return ks if ks[-1] == n else ks + [n]


def evaluate(engine, tokenizer, tasks: list[Task], judge: Judge, k: int = 1, temperature: float = 1.0,
             max_new_tokens: int = 64, seed: int = 0, agent=None) -> dict:
    """Evaluate ``tasks``: greedy pass@1 always; pass@k for k in 1,2,4..K when ``k`` > 1.

    Environment tasks (``kind == "env"``) run in the closed loop (:mod:`rlvr.monitoring.agent_eval`,
    with the ``agent`` loop limits), never as one open-loop completion.
    """
    if tasks and all(t.kind == "env" for t in tasks):
        from rlvr.monitoring.agent_eval import evaluate_agent

        return evaluate_agent(engine, tokenizer, tasks, agent, k=k, temperature=temperature, seed=seed)
    t0 = time.time()
    prompts = [encode_prompt(tokenizer, t) for t in tasks]
    stops = stop_token_ids(tokenizer)
    greedy = engine.generate(prompts, SamplingParams(greedy=True, max_new_tokens=max_new_tokens,
                                                     stop_token_ids=stops))
    verdicts = judge(tasks, greedy.texts)
    passed = np.array([v.passed for v in verdicts], dtype=float)
    fams = defaultdict(list)
    for t, p in zip(tasks, passed):
        fams[t.family].append(p)
    result = {
        "n_tasks": len(tasks),
        "pass_at_1": float(passed.mean()) if len(tasks) else 0.0,
        "by_family": {f: float(np.mean(v)) for f, v in sorted(fams.items())},
        "mean_length": float(np.mean([len(c) for c in greedy.completion_ids])) if tasks else 0.0,
        "truncation_rate": float(np.mean([r == "length" for r in greedy.finish_reason])) if tasks else 0.0,
        "outcomes": _count([v.outcome for v in verdicts]),
    }
    if k > 1:
        result.update(_sampled(engine, tokenizer, tasks, prompts, judge, k, temperature, max_new_tokens,
                               stops, seed))
    result["seconds"] = round(time.time() - t0, 3)
    result["samples"] = [{"task_id": t.id, "completion": c, "outcome": v.outcome}
                         for t, c, v in zip(tasks[:5], greedy.texts[:5], verdicts[:5])]
    return result


def _sampled(engine, tokenizer, tasks, prompts, judge, k, temperature, max_new_tokens, stops, seed) -> dict:
    gen = engine.generate(prompts, SamplingParams(n=k, temperature=temperature, max_new_tokens=max_new_tokens,
                                                  stop_token_ids=stops, seed=seed))
    rep = [tasks[i] for i in gen.prompt_index]
    verdicts = judge(rep, gen.texts)
    correct = np.zeros(len(tasks), dtype=int)
    for i, v in zip(gen.prompt_index, verdicts):
        correct[i] += int(v.passed)
    out = {}
    for kk in _ks(k):
        out[f"pass_at_{kk}_sampled"] = float(np.mean([pass_at_k(k, int(c), kk) for c in correct]))
    fams = defaultdict(list)
    for t, c in zip(tasks, correct):
        fams[t.family].append(pass_at_k(k, int(c), k))
    out[f"by_family_pass_at_{k}"] = {f: float(np.mean(v)) for f, v in sorted(fams.items())}
    return out


def _count(items) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for x in items:
        out[x] += 1
    return dict(out)


def binomial_check(n: int, c: int, k: int) -> float:
    """Reference pass@k by exact binomials (used by tests)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k) if n - c >= k else 1.0
