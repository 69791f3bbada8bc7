"""Metrics of closed-loop trajectories: outcomes, turns, tool use, and the horizon report.

The horizon report says how long trajectories are before anyone picks a credit estimator: the first
seed's advice is to measure the horizon first and match the algorithm to it (per-turn credit starts
to matter from about thirty turns; below that, trajectory-level GRPO spreads the signal well enough).
"""

from __future__ import annotations

import numpy as np
import torch

from rlvr.rollout.multiturn import Trajectory

LONG_HORIZON_TURNS = 30
"""From about this many turns per trajectory the choice of credit estimator starts to matter."""


def horizon_report(trajs: list[Trajectory]) -> dict:
    """How long the trajectories are (read it before choosing a credit estimator)."""
    turns = np.array([len(t.turns) for t in trajs if t.turns] or [0])
    toks = [t.policy_tokens for t in trajs if t.turns]
    return {"horizon/turns_p50": float(np.percentile(turns, 50)), "horizon/turns_p90": float(np.percentile(turns, 90)),
            "horizon/turns_max": int(turns.max()), "horizon/policy_tokens_mean": float(np.mean(toks)) if toks else 0.0}


def horizon_note(report: dict) -> str:
    p90 = report["horizon/turns_p90"]
    if p90 < LONG_HORIZON_TURNS:
        return (f"horizon: p50 {report['horizon/turns_p50']:.0f}, p90 {p90:.0f} turns per trajectory (< "
                f"{LONG_HORIZON_TURNS}): trajectory-level credit is usually close enough; turn-level or HGPO "
                f"credit pays on longer horizons")
    return (f"horizon: p90 {p90:.0f} turns per trajectory (>= {LONG_HORIZON_TURNS}): credit assignment is likely the "
            f"bottleneck; compare turn-level or HGPO credit with trajectory-level")


def agent_metrics(trajs: list[Trajectory]) -> dict:
    """Outcome, turn and tool metrics of one batch of trajectories."""
    n = max(len(trajs), 1)
    valid = [t for t in trajs if t.valid]
    spans = [s for t in trajs for s in t.turns]
    rewards = torch.tensor([t.reward for t in valid], dtype=torch.float32)
    groups: dict[int, set] = {}
    for t in valid:
        groups.setdefault(t.group, set()).add(round(t.reward, 9))
    details = [t.verdict.details for t in trajs if t.verdict is not None]
    m = {"rollout/pass_rate": sum(t.passed for t in trajs) / n,
         "reward/mean": float(rewards.mean()) if len(valid) else 0.0,
         "reward/std": float(rewards.std()) if len(valid) > 1 else 0.0,
         "rollout/zero_var_frac": float(np.mean([len(v) == 1 for v in groups.values()])) if groups else 1.0,
         "rollout/length_mean": float(np.mean([t.policy_tokens for t in trajs])) if trajs else 0.0,
         "rollout/truncation_rate": float(np.mean([s.finish == "length" for s in spans])) if spans else 0.0,
         "agent/turns_mean": float(np.mean([len(t.turns) for t in trajs])) if trajs else 0.0,
         "agent/tokens_per_turn": float(np.mean([s.end - s.start for s in spans])) if spans else 0.0,
         "agent/tool_calls_mean": float(np.mean([sum(s.calls for s in t.turns) for t in trajs])) if trajs else 0.0,
         "agent/tool_errors": sum(s.tool_errors for s in spans),
         "agent/format_errors": sum(s.format_errors for s in spans),
         "agent/budget_overruns": sum(s.refused for s in spans),
         "agent/leaks": sum(1 for d in details if d.get("leaks")),
         "agent/replay_disagree": sum(1 for d in details if d.get("replay_disagrees")),
         "agent/segments": sum(len(t.segments) for t in trajs if t.turns),
         "verifier/infra": len(trajs) - len(valid)}
    for t in trajs:
        m[f"agent/end/{t.end}"] = m.get(f"agent/end/{t.end}", 0) + 1
        if t.verdict is not None:
            m[f"verifier/{t.verdict.outcome}"] = m.get(f"verifier/{t.verdict.outcome}", 0) + 1
    return {**m, **horizon_report(trajs)}
