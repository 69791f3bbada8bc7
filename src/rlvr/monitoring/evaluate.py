"""Held-out evaluation: greedy pass@1 and sampled pass@k (unbiased estimator, Chen et al. 2021),
with the task's verifier or the run's reward terms (:mod:`rlvr.monitoring.scoring`), overall and per family.

The run's own evaluations (:class:`EvalHook` during a stage, the pipeline's after it) and ``rlvr eval`` all
come here with the same judge (:func:`~rlvr.monitoring.scoring.eval_judge` of ``eval.rewards``) and the
same greedy float32 decode, so the same weights get the same verdict on every problem wherever they are
evaluated (at the same batch size: a row's padding changes its float rounding)."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from rlvr.data.chat import encode_prompt, stop_token_ids
from rlvr.data.jsonl import write_json_atomic
from rlvr.data.sources import load_task_source
from rlvr.data.types import Task, with_ids
from rlvr.models.checkpoint import is_lora, merged_copy
from rlvr.monitoring.calibration import agreement, answer_key, answer_probability, summarise
from rlvr.monitoring.scoring import eval_judge, judge_with_lengths
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.verifiers.judge import Judge, default_judge, reward_judge

__all__ = ["EvalHook", "Judge", "default_judge", "evaluate", "pass_at_k", "reward_judge"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k = 1 - C(n-c, k) / C(n, k) for n samples of which c passed (Chen et al. 2021).

    Computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i) to stay stable for large n.
    """
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def _ks(n: int) -> list[int]:
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    return ks if ks[-1] == n else ks + [n]


def evaluate(engine, tokenizer, tasks: list[Task], judge: Judge, k: int = 1, temperature: float = 1.0,
             max_new_tokens: int = 64, seed: int = 0, agent=None, calibration_samples: int = 0,
             calibration_bins: int = 10) -> dict:
    """Evaluate ``tasks``: greedy pass@1 always; pass@k for k in 1,2,4..K when ``k`` > 1.

    ``calibration``: the ECE of the greedy answer's probability always, and of the agreement among samples
    when there are samples (the ``k`` ones when ``k`` > 1, else ``calibration_samples`` drawn for it alone;
    :mod:`rlvr.monitoring.calibration`). Environment tasks (``kind == "env"``) run in the closed loop
    (:mod:`rlvr.monitoring.agent_eval`, with the ``agent`` loop limits), never as one open-loop completion.
    """
    if tasks and all(t.kind == "env" for t in tasks):
        from rlvr.monitoring.agent_eval import evaluate_agent

        return evaluate_agent(engine, tokenizer, tasks, agent, k=k, temperature=temperature, seed=seed)
    t0 = time.time()
    prompts = [encode_prompt(tokenizer, t) for t in tasks]
    stops = stop_token_ids(tokenizer)
    greedy = engine.generate(prompts, SamplingParams(greedy=True, max_new_tokens=max_new_tokens,
                                                     stop_token_ids=stops))
    verdicts = judge_with_lengths(judge, tasks, with_ids(greedy.texts, greedy.completion_ids), greedy.completion_ids)
    passed = np.array([v.passed for v in verdicts], dtype=float)
    fams = defaultdict(list)
    for t, p in zip(tasks, passed):
        fams[t.family].append(p)
    result = {
        "n_tasks": len(tasks),
        "pass_at_1": float(passed.mean()) if len(tasks) else 0.0,
        "mean_score": mean_score(verdicts),
        "by_family": {f: float(np.mean(v)) for f, v in sorted(fams.items())},
        "mean_length": float(np.mean([len(c) for c in greedy.completion_ids])) if tasks else 0.0,
        "truncation_rate": float(np.mean([r == "length" for r in greedy.finish_reason])) if tasks else 0.0,
        "outcomes": _count([v.outcome for v in verdicts]),
        "scoring": getattr(judge, "scoring", "each task's verifier"),
    }
    calib = {"answer_prob": summarise([answer_probability(lp) for lp in greedy.old_logprobs],
                                      [v.passed for v in verdicts], calibration_bins)}
    m = k if k > 1 else calibration_samples
    if m > 1 and tasks:
        gen, sverdicts = _draw(engine, tasks, prompts, judge, m, temperature, max_new_tokens, stops, seed)
        if k > 1:
            result.update(_sampled(tasks, gen, sverdicts, k))
        calib["agreement"] = _agreement(tasks, gen, sverdicts, m, calibration_bins)
    result["calibration"] = {**calib, "bins": calibration_bins, "samples": m if m > 1 else 0}
    result["seconds"] = round(time.time() - t0, 3)
    result["samples"] = [{"task_id": t.id, "completion": c, "outcome": v.outcome, "reward": v.reward}
                         for t, c, v in zip(tasks, greedy.texts, verdicts)]  # every greedy completion
    return result


def _draw(engine, tasks, prompts, judge, k, temperature, max_new_tokens, stops, seed):
    """``k`` samples per prompt (prompt-major) and their verdicts."""
    gen = engine.generate(prompts, SamplingParams(n=k, temperature=temperature, max_new_tokens=max_new_tokens,
                                                  stop_token_ids=stops, seed=seed))
    rep = [tasks[i] for i in gen.prompt_index]
    return gen, judge_with_lengths(judge, rep, with_ids(gen.texts, gen.completion_ids), gen.completion_ids)


def _agreement(tasks, gen, verdicts, m: int, bins: int) -> dict:
    """The agreement measure's calibration over the problems (samples are prompt-major, ``m`` a problem)."""
    conf, correct = [], []
    for i, t in enumerate(tasks):
        rows = range(i * m, (i + 1) * m)
        a, ok = agreement([answer_key(t, gen.texts[j]) for j in rows], [verdicts[j].passed for j in rows])
        conf.append(a)
        correct.append(ok)
    return summarise(conf, correct, bins)


def _sampled(tasks, gen, verdicts, k) -> dict:
    correct = np.zeros(len(tasks), dtype=int)
    for i, v in zip(gen.prompt_index, verdicts):
        correct[i] += int(v.passed)
    out: dict = {"sampled": [{"task_id": tasks[i].id, "sample": j, "completion": c, "outcome": v.outcome}
                             for j, (i, c, v) in enumerate(zip(gen.prompt_index, gen.texts, verdicts))]}
    for kk in _ks(k):
        out[f"pass_at_{kk}_sampled"] = float(np.mean([pass_at_k(k, int(c), kk) for c in correct]))
    fams = defaultdict(list)
    for t, c in zip(tasks, correct):
        fams[t.family].append(pass_at_k(k, int(c), k))
    out[f"by_family_pass_at_{k}"] = {f: float(np.mean(v)) for f, v in sorted(fams.items())}
    return out


def mean_score(verdicts) -> float | None:
    """The mean reward of the judged verdicts (a scorer's partial credit beside the solved fraction;
    ``infra`` verdicts left out); None when nothing was judged."""
    from rlvr.verifiers.base import INFRA_OUTCOMES

    scores = [float(v.reward) for v in verdicts if v.outcome not in INFRA_OUTCOMES]
    return float(np.mean(scores)) if scores else None


def _count(items) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for x in items:
        out[x] += 1
    return dict(out)


class EvalHook:
    """Held-out evaluation during training (for learning curves: pass@1 against training minutes)."""

    def __init__(self, cfg, tokenizer, judge=None, every: int = 0, out=None):
        """``judge``: a test's override; by default the evaluation's own (``cfg.rewards``), never the judge
        a stage trains with (an RL reward that gives partial credit would count every reward > 0 a pass).
        ``out``: the stage folder; each evaluation's per-problem result (eval.json's shape) is written to
        ``out/evals/step-NNNNNN.json``."""
        self.out = out
        self.cfg = cfg
        self.tok = tokenizer
        self.every = every
        self.tasks = load_task_source(cfg.tasks)
        self.judge = judge or eval_judge(cfg.rewards, cfg.workers, tokenizer, cfg.max_new_tokens)

    def due(self, step: int, max_steps: int) -> bool:
        return bool(self.every) and (step % self.every == 0 or step == max_steps)

    def run(self, model, step: int) -> dict:
        """Greedy held-out pass@1 (and per family) as ``eval/...`` metrics (``eval/tasks``: how many problems). A LoRA model is evaluated merged,
        as its checkpoint holds it (:func:`~rlvr.models.checkpoint.merged_copy`), so the step's figure is the
        one ``rlvr eval`` gives its checkpoint."""
        if is_lora(model):
            model = merged_copy(model).eval()
        engine = HFEngine(model, self.tok, batch_size=self.cfg.batch_size)
        r = evaluate(engine, self.tok, self.tasks, self.judge, k=1, max_new_tokens=self.cfg.max_new_tokens,
                     agent=self.cfg.agent)
        if self.out is not None:
            write_json_atomic(Path(self.out) / "evals" / f"step-{step:06d}.json", {"step": step, **r})
        out = {"eval/pass_at_1": r["pass_at_1"], "eval/mean_length": r["mean_length"], "eval/tasks": len(self.tasks)}
        if r.get("mean_score") is not None:  # the mean reward beside the solved fraction
            out["eval/mean_score"] = r["mean_score"]
        out.update({f"eval/pass_at_1/{f}": v for f, v in r["by_family"].items()})
        if "turns_mean" in r:  # closed-loop environment tasks
            out.update({"eval/turns_mean": r["turns_mean"], "eval/tool_calls_mean": r["tool_calls_mean"]})
        return out
