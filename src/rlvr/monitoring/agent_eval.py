"""Held-out evaluation of environment tasks in the closed loop (the same loop the RL stage trains in):
greedy success rate, turns and tool calls, and sampled pass@k."""

from __future__ import annotations

import json
import time
from collections import defaultdict

import numpy as np

from rlvr.config.agent import AgentLoopConfig
from rlvr.data.types import Task
from rlvr.rollout.agent_stats import agent_metrics
from rlvr.rollout.multiturn import MultiTurnCollector


def _by_family(tasks: list[Task], values) -> dict[str, float]:
    fams: dict[str, list[float]] = defaultdict(list)
    for t, v in zip(tasks, values):
        fams[t.family].append(float(v))
    return {f: float(np.mean(v)) for f, v in sorted(fams.items())}


def evaluate_agent(engine, tokenizer, tasks: list[Task], loop: AgentLoopConfig | None = None, k: int = 1,
                   temperature: float = 1.0, seed: int = 0) -> dict:
    """Greedy closed-loop success on ``tasks`` (``pass_at_1``), per family, with turn and tool metrics;
    pass@k for k in 1, 2, 4, ..., K from K sampled trajectories per task when ``k`` > 1."""
    from rlvr.monitoring.evaluate import _count, _ks, pass_at_k

    t0 = time.time()
    collector = MultiTurnCollector(engine, tokenizer, loop or AgentLoopConfig())
    trajs = collector.collect(tasks, 1, seed=seed, greedy=True)
    m = agent_metrics(trajs)
    passed = [t.passed for t in trajs]
    result = {
        "n_tasks": len(tasks),
        "pass_at_1": float(np.mean(passed)) if tasks else 0.0,
        "by_family": _by_family(tasks, passed),
        "mean_length": m["rollout/length_mean"],
        "truncation_rate": m["rollout/truncation_rate"],
        "outcomes": _count([t.verdict.outcome for t in trajs]),
        "ends": _count([t.end for t in trajs]),
        "turns_mean": m["agent/turns_mean"],
        "tool_calls_mean": m["agent/tool_calls_mean"],
        "tool_errors": m["agent/tool_errors"],
        "budget_overruns": m["agent/budget_overruns"],
        "horizon": {k2.split("/", 1)[1]: v for k2, v in m.items() if k2.startswith("horizon/")},
    }
    if k > 1:
        sampled = collector.collect(tasks, k, temperature=temperature, seed=seed + 1)
        correct = [sum(t.passed for t in sampled[i * k:(i + 1) * k]) for i in range(len(tasks))]
        for kk in _ks(k):
            result[f"pass_at_{kk}_sampled"] = float(np.mean([pass_at_k(k, c, kk) for c in correct]))
        result[f"by_family_pass_at_{k}"] = _by_family(tasks, [pass_at_k(k, c, k) for c in correct])
    result["seconds"] = round(time.time() - t0, 3)
    result["samples"] = [{"task_id": t.task.id, "completion": json.dumps(t.turn_texts), "outcome": t.verdict.outcome}
                         for t in trajs[:5]]
    return result
