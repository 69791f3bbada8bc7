"""The multi-turn credit family of the first seed: ARPO, StepPO, Turn-PPO — one advantage per turn.

Inputs are flat over the N turns of a batch, a trajectory's turns consecutive and in turn order (as in
:mod:`rlvr.advantages.credit`): ``turn_rewards [N]`` (shaping terms, plus the outcome on the last turn),
``group_ids``, ``traj_ids``. Learned values ``values [N]`` are a critic's V(s_t) of the state each turn
acts from (the policy's pooled hidden state at the turn boundary; see ``trainers/agent.py``).

arpo (advantage redistribution by a turn-level critic):
    A_i = GRPO advantage of the trajectory's summed reward R_i (as ``trajectory``)
    V_{i,T} := R_i (the last turn leads to the outcome);  δ_{i,t} = V_{i,t+1} - V_{i,t}
    u_{i,t} = max(0, sign(A_i) · δ_{i,t})      (the turns that moved the expected value toward the outcome)
    w_{i,t} = T_i · u_{i,t} / Σ_s u_{i,s}      (w = 1 for every turn when Σ_s u_{i,s} = 0)
    A_{i,t} = A_i · ((1 - λ) + λ · w_{i,t})
    so Σ_t A_{i,t} = T_i · A_i: the trajectory's credit is only moved between its turns. The critic is
    regressed on R_i (the Monte-Carlo value of every state of the trajectory): :func:`outcome_targets`.

steppo (per-step advantages from step scores: a process checklist on the environment's states):
    p⁻_{i,t}, p⁺_{i,t} = checklist score of the state before / after turn t (fraction of the goal's
    conditions met);  r^p_{i,t} = p⁺_{i,t} - p⁻_{i,t}
    G^p_{i,t} = Σ_{s>=t} r^p_{i,s}   (progress still to be made from turn t on)
    A^step_{i,t} = (G^p_{i,t} - mean_g G^p) / (std_g G^p + eps)   over all turns of the group g
    A_{i,t} = A_i + ω · A^step_{i,t}     (A_i: the trajectory's GRPO advantage)

turn_ppo (PPO with the turn as the MDP step and a small learned per-turn value):
    V_{i,T} := 0;  δ_{i,t} = r_{i,t} + γ V_{i,t+1} - V_{i,t}
    A_{i,t} = Σ_{k>=0} (γλ)^k δ_{i,t+k}   (GAE over turns);  returns R̂_{i,t} = A_{i,t} + V_{i,t} (critic targets)
    ``scale="batch"``: A whitened over the batch's turns (mean 0, std 1).

``scale="none"`` drops every std division. Groups whose rewards are all equal give A_i = 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from rlvr.advantages.credit import trajectory_credit


def _turns_of(traj_ids: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    out: dict[Hashable, list[int]] = defaultdict(list)
    for i, t in enumerate(traj_ids):
        out[t].append(i)
    return out


def _floats(x, n: int, what: str) -> list[float]:
    vals = x.detach().to(torch.float64).tolist() if isinstance(x, Tensor) else [float(v) for v in x]
    if len(vals) != n:
        raise ValueError(f"credit: {what} has {len(vals)} entries for {n} turns")
    return vals


def outcome_targets(turn_rewards: Tensor, traj_ids: Sequence[Hashable]) -> Tensor:
    """ARPO's critic targets: every turn's state is worth its trajectory's summed reward R_i -> ``[N]``."""
    r = _floats(turn_rewards, len(traj_ids), "turn_rewards")
    out = [0.0] * len(r)
    for idx in _turns_of(traj_ids).values():
        total = sum(r[i] for i in idx)
        for i in idx:
            out[i] = total
    return torch.tensor(out, dtype=torch.float32)


def arpo_credit(turn_rewards: Tensor, group_ids: Sequence[Hashable], traj_ids: Sequence[Hashable], values,
                mix: float = 1.0, scale: str = "group", eps: float = 1e-6) -> Tensor:
    """ARPO: the trajectory advantage redistributed over its turns by the critic's value changes -> ``[N]``."""
    if not 0.0 <= mix <= 1.0:
        raise ValueError(f"arpo_credit: mix must be in [0, 1], got {mix}")
    n = len(traj_ids)
    v = _floats(values, n, "values")
    r = _floats(turn_rewards, n, "turn_rewards")
    base = trajectory_credit(turn_rewards, group_ids, traj_ids, scale=scale, eps=eps).tolist()
    out = [0.0] * n
    for idx in _turns_of(traj_ids).values():
        a = base[idx[0]]
        if a == 0.0:
            continue
        nxt = [v[j] for j in idx[1:]] + [sum(r[i] for i in idx)]
        sign = 1.0 if a > 0 else -1.0
        u = [max(0.0, sign * (nxt[k] - v[i])) for k, i in enumerate(idx)]
        total = sum(u)
        for k, i in enumerate(idx):
            w = len(idx) * u[k] / total if total > 0 else 1.0
            out[i] = a * ((1.0 - mix) + mix * w)
    return torch.tensor(out, dtype=torch.float32)


def steppo_credit(turn_rewards: Tensor, group_ids: Sequence[Hashable], traj_ids: Sequence[Hashable],
                  score_before, score_after, step_weight: float = 1.0, scale: str = "group",
                  eps: float = 1e-6) -> Tensor:
    """StepPO: trajectory GRPO plus ω × the group-normalised progress-to-go of the step scores -> ``[N]``."""
    n = len(traj_ids)
    if any(s is None for s in list(score_before) + list(score_after)):
        raise ValueError("steppo_credit: a turn has no step score (the environment has no process checklist)")
    pb, pa = _floats(score_before, n, "score_before"), _floats(score_after, n, "score_after")
    togo = [0.0] * n
    for idx in _turns_of(traj_ids).values():
        acc = 0.0
        for i in reversed(idx):
            acc += pa[i] - pb[i]
            togo[i] = acc
    by_group: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        by_group[g].append(i)
    step = [0.0] * n
    for idx in by_group.values():
        vals = [togo[i] for i in idx]
        if max(vals) == min(vals):
            continue
        m = sum(vals) / len(vals)
        sd = (sum((x - m) ** 2 for x in vals) / len(vals)) ** 0.5
        for i in idx:
            step[i] = (togo[i] - m) / (sd + eps) if scale == "group" else togo[i] - m
    base = trajectory_credit(turn_rewards, group_ids, traj_ids, scale=scale, eps=eps)
    return base + step_weight * torch.tensor(step, dtype=torch.float32)


def turn_gae(turn_rewards: Tensor, traj_ids: Sequence[Hashable], values, gamma: float = 1.0,
             lam: float = 1.0) -> tuple[Tensor, Tensor]:
    """GAE over turns (V after the last turn = 0) -> ``(advantages [N], returns [N])``."""
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"turn_gae: gamma and lam must be in [0, 1], got {gamma}, {lam}")
    n = len(traj_ids)
    r, v = _floats(turn_rewards, n, "turn_rewards"), _floats(values, n, "values")
    adv = [0.0] * n
    for idx in _turns_of(traj_ids).values():
        acc, v_next = 0.0, 0.0
        for i in reversed(idx):
            acc = r[i] + gamma * v_next - v[i] + gamma * lam * acc
            adv[i], v_next = acc, v[i]
    a = torch.tensor(adv, dtype=torch.float32)
    return a, a + torch.tensor(v, dtype=torch.float32)


def turn_ppo_credit(turn_rewards: Tensor, traj_ids: Sequence[Hashable], values, gamma: float = 1.0,
                    lam: float = 0.95, scale: str = "batch", eps: float = 1e-6) -> Tensor:
    """Turn-PPO: turn-level GAE on the learned per-turn values, whitened over the batch -> ``[N]``."""
    adv, _ = turn_gae(turn_rewards, traj_ids, values, gamma, lam)
    if scale == "batch" and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std(unbiased=False) + eps)
    return adv
