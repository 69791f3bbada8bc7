"""Turn-level (step-grouped) advantages for multi-turn agents: HGPO hierarchical grouping.

He et al., 2026, "Hierarchy-of-Groups Policy Optimization for Long-Horizon Agentic Tasks" (HGPO,
ICLR 2026, arXiv:2602.22817). Plain GRPO gives every turn of a trajectory the trajectory's
advantage; stepwise methods instead compare a turn with other turns taken *from the same state*.
HGPO observes that turns sharing the current state may still differ in the history the policy saw
("context inconsistency"), and compares each turn inside nested groups:

    level k (k = 0..K): turns of the same task group whose last k+1 states (the current state and the
                        k states before it, in their trajectory) are identical.

Level 0 is state-only grouping (GiGPO-style step groups); higher levels share more history, so they
are less biased but smaller (noisier). In every group with >= 2 members each member gets a relative
advantage ``(R - mean) / (std + eps)`` (population std; ``scale="none"`` drops the division), and
the turn's advantage is the weighted mean over the levels where it has a group of >= 2 members:

    A = sum_k w_k A_k,   w_k = (k + 1)^alpha / sum_{k' available} (k' + 1)^alpha

(alpha = 0: uniform; large alpha: the deepest consistent group dominates). A turn that shares no
state with any other turn gets 0. Differences from the released code (verl-agent recipe/hgpo): it
numbers the state-only level 1 (weights (k+2)^alpha in our numbering) and drops exactly-zero
advantages from the average; we keep them, since "as good as its consistent peers" is information,
and so a task whose returns are all equal gets exactly 0 everywhere.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Literal

import torch
from torch import Tensor


def _trajectories(group_ids: Sequence[Hashable], traj_ids: Sequence[Hashable]) -> dict[tuple, list[int]]:
    """Map (group_id, traj_id) -> the flat indices of its turns, in order of appearance."""
    trajs: dict[tuple, list[int]] = defaultdict(list)
    for i, (g, t) in enumerate(zip(group_ids, traj_ids)):
        trajs[(g, t)].append(i)
    return trajs


def step_discounted_returns(step_rewards: Tensor, traj_ids: Sequence[Hashable], gamma: float = 1.0) -> Tensor:
    """Per-turn return ``R_t = sum_{s >= t} gamma^(s-t) r_s`` within each trajectory -> ``[N]``.

    ``step_rewards [N]`` is one reward per turn; the turns of a trajectory (same ``traj_ids`` entry)
    must appear in the flat arrays in turn order (they need not be contiguous).
    """
    if step_rewards.dim() != 1 or len(traj_ids) != step_rewards.shape[0]:
        raise ValueError(
            f"step_discounted_returns: need step_rewards [N] and N traj_ids, got "
            f"{tuple(step_rewards.shape)} and {len(traj_ids)}"
        )
    r = step_rewards.detach().to(torch.float64)
    out = torch.zeros_like(r)
    for idx in _trajectories([0] * len(traj_ids), traj_ids).values():
        running = 0.0
        for i in reversed(idx):
            running = float(r[i]) + gamma * running
            out[i] = running
    return out.to(step_rewards.dtype if step_rewards.is_floating_point() else torch.get_default_dtype())


def _relative(values: list[float], scale: str, eps: float) -> list[float]:
    """Group-relative advantages of one group (exact zeros when all values are equal)."""
    if all(v == values[0] for v in values):
        return [0.0] * len(values)
    n = len(values)
    mean = sum(values) / n
    if scale == "none":
        return [v - mean for v in values]
    std = (sum((v - mean) ** 2 for v in values) / n) ** 0.5
    return [(v - mean) / (std + eps) for v in values]


def hgpo(
    returns: Tensor,
    group_ids: Sequence[Hashable],
    traj_ids: Sequence[Hashable],
    states: Sequence[Hashable],
    max_history: int = 2,
    alpha: float = 1.0,
    scale: Literal["group", "none"] = "group",
    eps: float = 1e-6,
) -> Tensor:
    """HGPO turn advantages (see module docstring) -> ``[N]``, one per turn.

    Args (N turns, flat):
        returns: ``[N]`` return of each turn (e.g. :func:`step_discounted_returns`, or the episode
            reward repeated on every turn).
        group_ids: task group of each turn (turns are only compared inside their task group).
        traj_ids: trajectory of each turn (unique inside a group); a trajectory's turns must appear in
            turn order.
        states: hashable key of the state (observation) the turn acted from, e.g. a hash of the
            environment observation text.
        max_history: K, the deepest level (number of previous states that must match).
        alpha: level-weight exponent, ``w_k ∝ (k + 1)^alpha``.
        scale: ``"group"`` divides by the group's population std (+ eps); ``"none"`` only centres.
    """
    n = returns.shape[0] if returns.dim() == 1 else -1
    if n < 0 or not (len(group_ids) == len(traj_ids) == len(states) == n):
        raise ValueError(
            f"hgpo: need returns [N] and N group_ids/traj_ids/states, got {tuple(returns.shape)}, "
            f"{len(group_ids)}, {len(traj_ids)}, {len(states)}"
        )
    if max_history < 0 or scale not in ("group", "none"):
        raise ValueError(
            f"hgpo: need max_history >= 0 and scale in ('group', 'none'), got {max_history}, {scale!r}"
        )
    r = [float(x) for x in returns.detach().cpu().tolist()]
    clusters: dict[tuple, list[int]] = defaultdict(list)
    for (gid, _), idx in _trajectories(group_ids, traj_ids).items():
        hist = [states[i] for i in idx]
        for pos, i in enumerate(idx):
            for k in range(min(max_history, pos) + 1):
                clusters[(gid, k, tuple(hist[pos - k : pos + 1]))].append(i)
    per_turn: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for (_, k, _), members in clusters.items():
        if len(members) < 2:
            continue
        for i, a in zip(members, _relative([r[i] for i in members], scale, eps)):
            per_turn[i].append((k, a))
    out = [0.0] * n
    for i, items in per_turn.items():
        weights = [(k + 1) ** alpha for k, _ in items]
        out[i] = sum(w * a for w, (_, a) in zip(weights, items)) / sum(weights)
    dtype = returns.dtype if returns.is_floating_point() else torch.get_default_dtype()
    return torch.tensor(out, dtype=dtype, device=returns.device)


def turn_advantages_to_tokens(turn_advantages: Tensor, turn_index: Tensor) -> Tensor:
    """Broadcast per-turn advantages onto tokens -> ``[B, T]``.

    ``turn_advantages [B, M]`` holds the advantage of turn m of row b; ``turn_index [B, T]`` (long) gives
    the turn each token belongs to, or -1 for tokens that are not trained (prompt, tool output,
    padding), which get 0. The result can be passed as per-token advantages to
    ``rlvr.losses.policy.clipped_surrogate``.
    """
    if turn_advantages.dim() != 2 or turn_index.dim() != 2 or turn_index.shape[0] != turn_advantages.shape[0]:
        raise ValueError(
            f"turn_advantages_to_tokens: need [B, M] and [B, T], got {tuple(turn_advantages.shape)} "
            f"and {tuple(turn_index.shape)}"
        )
    if bool((turn_index >= turn_advantages.shape[1]).any()):
        raise ValueError("turn_advantages_to_tokens: turn_index refers to a turn beyond turn_advantages' M")
    idx = turn_index.long()
    gathered = turn_advantages.gather(1, idx.clamp(min=0))
    return torch.where(idx >= 0, gathered, torch.zeros_like(gathered))
