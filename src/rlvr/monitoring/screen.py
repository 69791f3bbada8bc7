"""Screen checkpoints before RL: is there a gradient to follow at the RL sampling temperature?

With a binary reward and G samples per task at pass rate p, the group-relative advantage is zero for a
group whose samples all pass or all fail (probability p^G + (1-p)^G), so

  signal_frac(p, G) = 1 - p^G - (1-p)^G          expected fraction of groups that carry signal
  adv_var(p, G)     = p (1-p) (G-1) / G          expected within-group advantage variance (the seeds' form)
  p*(G)             = 1 - 2^(-1/G)               the rate under which most groups are dead: signal_frac < 1/2
                                                 (p*(8) = 0.083, the screening paper's value)

Both peak at p = 1/2: more SFT raises p (and greedy pass@1) but lowers the sampled entropy, so the
signal can rise or fall with SFT length depending on where p starts. Greedy pass@1 measures the ceiling at
T = 0; GRPO works at the sampling temperature, where ``p`` and the sampled tokens' ``entropy`` are measured.
The ranking for RL is by the measured fraction of informative groups (``signal_frac_observed``: the groups
of G samples whose outcomes were mixed), then by entropy — never by pass@1 alone.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from rlvr.data.types import Task


def p_star(group_size: int) -> float:
    """The pass rate under which more than half of the groups of ``group_size`` are expected to be dead."""
    return 1.0 - 0.5 ** (1.0 / group_size)


def signal_frac(p: float, group_size: int) -> float:
    return 1.0 - p ** group_size - (1.0 - p) ** group_size


def adv_var(p: float, group_size: int) -> float:
    return p * (1.0 - p) * (group_size - 1) / group_size


def usable_group_size(p: float, max_g: int = 4096) -> int | None:
    """The smallest G (>= 2) at which most groups carry signal (signal_frac >= 1/2), None when no G does
    (p = 0 or 1, or it would take more than ``max_g`` samples per task)."""
    if not 0.0 < p < 1.0:
        return None
    # signal_frac is increasing in G: find the first G with 1 - p^G - (1-p)^G >= 1/2
    q = min(p, 1.0 - p)
    g = max(2, math.ceil(math.log(0.5) / math.log(1.0 - q)))
    while g <= max_g and signal_frac(p, g) < 0.5:
        g += 1
    while g > 2 and signal_frac(p, g - 1) >= 0.5:
        g -= 1
    return g if g <= max_g else None


def sampled_entropy(logprobs: list[list[float]]) -> dict:
    """``rollout/entropy``: mean −log π(token) over the sampled tokens, the Monte-Carlo estimate of the
    sampling distribution's per-token entropy."""
    n = sum(len(x) for x in logprobs)
    return {"rollout/entropy": -sum(sum(x) for x in logprobs) / n} if n else {}


def screen_model(engine, tokenizer, tasks: list[Task], judge, group_size: int, temperature: float,
                 max_new_tokens: int, seed: int = 0) -> dict:
    """Greedy pass@1, then G samples per task at ``temperature``: p, entropy, the expected and observed
    signal of GRPO's groups, ``below_threshold`` (p < p*(G)), ``above_threshold`` (p > 1 - p*(G): most
    groups all pass) and the G that would make the checkpoint usable."""
    from rlvr.config.rl import RewardTerm, SamplingConfig
    from rlvr.monitoring.evaluate import evaluate
    from rlvr.rollout.collector import collect

    greedy = evaluate(engine, tokenizer, tasks, judge, k=1, max_new_tokens=max_new_tokens, seed=seed)
    ro = collect(engine, tokenizer, tasks, judge, SamplingConfig(group_size=group_size, temperature=temperature,
                                                                 max_new_tokens=max_new_tokens),
                 [RewardTerm()], seed=seed)
    passed = ro.passed.float()
    p = float(passed.mean()) if passed.numel() else 0.0
    per_task = passed.mean(dim=1).numpy() if passed.numel() else np.zeros(0)
    ps = p_star(group_size)
    return {"pass_at_1": greedy["pass_at_1"], "by_family": greedy["by_family"], "p": p,
            "entropy": sampled_entropy(ro.old_logprobs).get("rollout/entropy", 0.0),
            "adv_var": adv_var(p, group_size), "signal_frac": signal_frac(p, group_size),
            "signal_frac_observed": float(np.mean((per_task > 0) & (per_task < 1))) if len(per_task) else 0.0,
            "p_star": ps, "below_threshold": p < ps, "above_threshold": p > 1.0 - ps,
            "usable_group_size": usable_group_size(p), "group_size": group_size, "temperature": temperature,
            "n_tasks": len(tasks), "outcomes": greedy["outcomes"], "mean_length": float(np.mean([len(c) for c in ro.completion_ids]))
            if ro.completion_ids else 0.0}


def rank_for_rl(rows: list[dict]) -> list[dict]:
    """Add ``rank`` (1 = best start for RL): usable first (not below/above threshold), then by the measured
    fraction of informative groups, then by entropy."""
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["below_threshold"] or rows[i]["above_threshold"],
                                                    -rows[i]["signal_frac_observed"], -rows[i]["entropy"]))
    for r, i in enumerate(order, 1):
        rows[i]["rank"] = r
    return rows


def producing_run(checkpoint: str | Path) -> Path | None:
    """The run directory a checkpoint was saved in (the nearest parent holding the run's ``config.yaml``:
    RUN/STAGE/final, RUN/STAGE/checkpoints/step-N, RUN/STAGE/best)."""
    p = Path(checkpoint).resolve()
    for parent in list(p.parents)[:4]:
        if (parent / "config.yaml").exists():
            return parent
    return None
