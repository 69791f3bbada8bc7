"""Credit assignment over the turns of multi-turn trajectories: one advantage per turn.

Inputs are flat over the N turns of a batch (a trajectory's turns in turn order): ``turn_rewards
[N]`` (shaping terms of each turn, plus the outcome reward on its last turn), ``group_ids`` (the
task group: only turns of one group are compared), ``traj_ids`` (unique per trajectory),
``turn_index`` (0, 1, ... inside the trajectory). Each estimator returns ``[N]`` advantages; the
trainer spreads a turn's advantage over that turn's policy tokens (observation tokens get nothing).

trajectory (GRPO over whole trajectories; Shao et al. 2024):
    R_i = Σ_t r_{i,t};  A_{i,t} = (R_i - mean_g R) / (std_g R + eps)   (every turn the same)
turn (discounted reward-to-go with a per-depth baseline):
    G_{i,t} = Σ_{s>=t} γ^(s-t) r_{i,s};  d_{i,t} = G_{i,t} - b_{g,t};  A_{i,t} = d_{i,t} / (σ_g + eps)
    b_{g,t} = mean of G_{j,t} over the group's trajectories j that reached turn t, when there are at
    least two of them; otherwise the group's mean of G_{j,0} (the GRPO baseline).
    σ_g = sqrt(mean of d_{j,s}² over every turn (j, s) of the group): the root mean square of the
    deviations the group's advantages are made of, so each group's turn advantages have unit RMS and
    |A| <= sqrt(turns in the group). On single-turn groups it is GRPO's population std of G_0. (The
    std of the first-turn returns alone is 0 when they tie but later turns differ, which blew the
    later deviations up by 1/eps.)
hgpo (He et al. 2026, advantages/turn_level.py, combined as in GiGPO, Feng et al. 2025):
    A_{i,t} = A^traj_i + ω · A^HGPO_{i,t}  with the step groups compared on G_{i,t}.

``scale="none"`` drops every std division. Groups whose returns are all equal get exactly 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from rlvr.advantages.grpo import grpo
from rlvr.advantages.turn_level import hgpo, step_discounted_returns


def _check(turn_rewards: Tensor, *seqs: Sequence) -> list[float]:
    n = turn_rewards.shape[0] if turn_rewards.dim() == 1 else -1
    if n < 0 or any(len(s) != n for s in seqs):
        raise ValueError(f"credit: need turn_rewards [N] and N entries in every id list, got "
                         f"{tuple(turn_rewards.shape)} and {[len(s) for s in seqs]}")
    r = turn_rewards.detach().to(torch.float64)
    if not bool(torch.isfinite(r).all()):
        raise ValueError("credit: turn_rewards contain NaN or inf")
    return r.tolist()


def _episodes(group_ids: Sequence[Hashable], traj_ids: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    """traj id -> flat indices of its turns; raises when one trajectory spans two groups."""
    turns: dict[Hashable, list[int]] = defaultdict(list)
    group_of: dict[Hashable, Hashable] = {}
    for i, (g, t) in enumerate(zip(group_ids, traj_ids)):
        if group_of.setdefault(t, g) != g:
            raise ValueError(f"credit: trajectory {t!r} has turns in groups {group_of[t]!r} and {g!r}")
        turns[t].append(i)
    return turns


def _grpo_by_group(values: dict[Hashable, float], group_of: dict[Hashable, Hashable], scale: str,
                   eps: float) -> dict[Hashable, float]:
    """GRPO of per-trajectory values inside their groups (population std; exact 0 for equal groups)."""
    groups: dict[Hashable, list[Hashable]] = defaultdict(list)
    for t in values:
        groups[group_of[t]].append(t)
    width = max((len(m) for m in groups.values()), default=0)
    order = list(groups)
    rewards = torch.zeros(len(order), max(width, 1), dtype=torch.float64)
    mask = torch.zeros_like(rewards, dtype=torch.bool)
    for gi, g in enumerate(order):
        for j, t in enumerate(groups[g]):
            rewards[gi, j], mask[gi, j] = values[t], True
    adv = grpo(rewards, scale="group" if scale == "group" else "none", eps=eps, mask=mask)
    return {t: float(adv[gi, j]) for gi, g in enumerate(order) for j, t in enumerate(groups[g])}


def trajectory_credit(turn_rewards: Tensor, group_ids: Sequence[Hashable], traj_ids: Sequence[Hashable],
                      scale: str = "group", eps: float = 1e-6) -> Tensor:
    """Every turn gets its trajectory's GRPO advantage of the summed reward -> ``[N]``."""
    r = _check(turn_rewards, group_ids, traj_ids)
    eps_turns = _episodes(group_ids, traj_ids)
    group_of = {t: group_ids[idx[0]] for t, idx in eps_turns.items()}
    adv = _grpo_by_group({t: sum(r[i] for i in idx) for t, idx in eps_turns.items()}, group_of, scale, eps)
    out = [0.0] * len(r)
    for t, idx in eps_turns.items():
        for i in idx:
            out[i] = adv[t]
    return torch.tensor(out, dtype=torch.float32)


def turn_discounted_credit(turn_rewards: Tensor, group_ids: Sequence[Hashable], traj_ids: Sequence[Hashable],
                           turn_index: Sequence[int], gamma: float = 0.9, scale: str = "group",
                           eps: float = 1e-6) -> Tensor:
    """Discounted reward-to-go against the group's turns at the same depth (module docstring) -> ``[N]``."""
    r = _check(turn_rewards, group_ids, traj_ids, turn_index)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"turn_discounted_credit: gamma must be in [0, 1], got {gamma}")
    returns = step_discounted_returns(torch.tensor(r, dtype=torch.float64), list(traj_ids), gamma).tolist()
    eps_turns = _episodes(group_ids, traj_ids)
    first: dict[Hashable, list[float]] = defaultdict(list)  # group -> G_{j,0}
    depth: dict[tuple, list[float]] = defaultdict(list)     # (group, t) -> G_{j,t}
    for idx in eps_turns.values():
        g = group_ids[idx[0]]
        first[g].append(returns[idx[0]])
    for i, (g, k) in enumerate(zip(group_ids, turn_index)):
        depth[(g, k)].append(returns[i])
    tied = {g for g, g0 in first.items() if max(g0) == min(g0)}
    tied -= {g for (g, _), v in depth.items() if max(v) != min(v)}  # groups whose returns are all equal
    mean0 = {g: sum(g0) / len(g0) for g, g0 in first.items()}
    dev: list[float | None] = [None] * len(r)  # d_{i,t}; None (advantage exactly 0) in an all-equal group
    for i, (g, k) in enumerate(zip(group_ids, turn_index)):
        if g not in tied:
            peers = depth[(g, k)]
            dev[i] = returns[i] - (sum(peers) / len(peers) if len(peers) >= 2 else mean0[g])
    sigma: dict[Hashable, float] = defaultdict(float)  # group -> RMS of its deviations
    count: dict[Hashable, int] = defaultdict(int)
    for g, d in zip(group_ids, dev):
        if d is not None:
            sigma[g] += d * d
            count[g] += 1
    out = [0.0] * len(r)
    for i, (g, d) in enumerate(zip(group_ids, dev)):
        if d is None:
            continue
        norm = (sigma[g] / count[g]) ** 0.5 + eps
        out[i] = d if scale == "none" else (d / norm if norm > 0 else 0.0)
    return torch.tensor(out, dtype=torch.float32)


def hgpo_credit(turn_rewards: Tensor, group_ids: Sequence[Hashable], traj_ids: Sequence[Hashable],
                states: Sequence[Hashable], gamma: float = 1.0, max_history: int = 2, alpha: float = 1.0,
                step_weight: float = 1.0, scale: str = "group", eps: float = 1e-6) -> Tensor:
    """Trajectory-level GRPO plus ω × HGPO step-group advantages on the discounted returns -> ``[N]``."""
    r = _check(turn_rewards, group_ids, traj_ids, states)
    episode = trajectory_credit(turn_rewards, group_ids, traj_ids, scale, eps)
    returns = step_discounted_returns(torch.tensor(r, dtype=torch.float64), list(traj_ids), gamma)
    step = hgpo(returns, list(group_ids), list(traj_ids), list(states), max_history=max_history, alpha=alpha,
                scale="group" if scale == "group" else "none", eps=eps)
    return episode + step_weight * step.to(torch.float32)
