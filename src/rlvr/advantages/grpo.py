"""Group-relative advantages: GRPO (Shao et al., 2024) and Dr.GRPO (Liu et al., 2025).

Shapes: ``rewards`` is ``[num_groups, G]`` (row g holds the G samples drawn for one task);
``mask`` (optional, same shape, bool) marks the samples that take part. A sample outside the mask
(e.g. a verifier infrastructure failure) neither contributes to its group's statistics nor receives
an advantage (it gets exactly 0), and its reward may be anything, NaN included.

Standard deviation: every ``std`` in this package is the **population** standard deviation
``sqrt(mean((r - mean_g)^2))`` (divide by the number of samples, ``torch.std(unbiased=False)``).
TRL and veRL use the unbiased ``torch.std`` (divide by G - 1), which makes their advantages
``sqrt((G - 1) / G)`` times ours. We pick the population form because it is defined for a
group of one and because, for binary rewards, it gives advantages of unit (population) variance:
rewards ``[1, 0, 0, 1]`` give exactly ``[+1, -1, -1, +1]`` (with eps = 0).

Zero-variance groups (all valid rewards equal, or fewer than two valid samples) get advantages
that are exactly 0.0: they are forced to zero rather than left to floating-point luck
(``mean([0.1, 0.1, 0.1])`` is not exactly 0.1).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

Scale = Literal["group", "batch", "none"]
SCALES: tuple[str, ...] = ("group", "batch", "none")


def prepare_group_rewards(rewards: Tensor, mask: Tensor | None, fn: str) -> tuple[Tensor, Tensor]:
    """Validate ``rewards [num_groups, G]`` and ``mask``; return float rewards (0 outside mask), bool mask."""
    if not isinstance(rewards, Tensor):
        raise TypeError(f"{fn}: rewards must be a torch.Tensor, got {type(rewards).__name__}")
    if rewards.dim() != 2:
        raise ValueError(f"{fn}: rewards must have shape [num_groups, G], got {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    if mask is None:
        mask = torch.ones_like(rewards, dtype=torch.bool)
    else:
        if mask.shape != rewards.shape:
            raise ValueError(
                f"{fn}: mask shape {tuple(mask.shape)} does not match rewards shape {tuple(rewards.shape)}"
            )
        mask = mask.to(device=rewards.device, dtype=torch.bool)
    if not bool(torch.isfinite(rewards[mask]).all()):
        raise ValueError(f"{fn}: rewards contain NaN or inf at valid (mask=True) positions")
    rewards = torch.where(mask, rewards.detach(), torch.zeros_like(rewards))
    return rewards, mask


def group_mean(rewards: Tensor, mask: Tensor) -> Tensor:
    """Mean of each group's valid rewards: ``sum_j m_j r_j / max(sum_j m_j, 1)`` -> ``[num_groups, 1]``."""
    count = mask.sum(dim=1, keepdim=True).clamp(min=1).to(rewards.dtype)
    return (rewards * mask).sum(dim=1, keepdim=True) / count


def group_std(rewards: Tensor, mask: Tensor) -> Tensor:
    """Population std of each group's valid rewards (divide by the valid count) -> ``[num_groups, 1]``."""
    count = mask.sum(dim=1, keepdim=True).clamp(min=1).to(rewards.dtype)
    centered = (rewards - group_mean(rewards, mask)) * mask
    return ((centered**2).sum(dim=1, keepdim=True) / count).sqrt()


def zero_variance_groups(rewards: Tensor, mask: Tensor | None = None) -> Tensor:
    """Groups whose valid rewards are all exactly equal (or with < 2 valid samples) -> bool ``[num_groups]``.

    These groups carry no learning signal for any group-relative estimator (GRPO, Dr.GRPO, RLOO):
    the trainer counts them (``rollout/zero_var_frac``) and may drop them from the backward pass.
    """
    r, m = prepare_group_rewards(rewards, mask, "zero_variance_groups")
    inf = torch.tensor(float("inf"), dtype=r.dtype, device=r.device)
    hi = torch.where(m, r, -inf).amax(dim=1)
    lo = torch.where(m, r, inf).amin(dim=1)
    return (hi == lo) | (m.sum(dim=1) < 2)


def _finish(adv: Tensor, rewards: Tensor, mask: Tensor) -> Tensor:
    """Force exact zeros outside the mask and on zero-variance groups."""
    zero = zero_variance_groups(rewards, mask)[:, None] | ~mask
    return torch.where(zero, torch.zeros_like(adv), adv)


def grpo(rewards: Tensor, scale: Scale = "group", eps: float = 1e-6, mask: Tensor | None = None) -> Tensor:
    """GRPO advantages ``A_i = (r_i - mean_g) / (std + eps)``; ``[num_groups, G] -> [num_groups, G]``.

    Shao et al., 2024, "DeepSeekMath" (arXiv:2402.03300), outcome supervision, eq. for Â_{i,t}.

    - ``scale="group"``: std is the population std of the sample's own group (see module docstring).
    - ``scale="batch"``: std is the population std of all valid rewards in the batch (the group mean is
      still subtracted) — the "batch" scaling of TRL / Dr.GRPO follow-ups, robust to tiny group variance.
    - ``scale="none"``: no division (``r_i - mean_g``), identical to :func:`dr_grpo`.

    Samples outside ``mask`` and every sample of a zero-variance group get exactly 0.
    """
    if scale not in SCALES:
        raise ValueError(f"grpo: scale must be one of {SCALES}, got {scale!r}")
    r, m = prepare_group_rewards(rewards, mask, "grpo")
    centered = r - group_mean(r, m)
    if scale == "group":
        adv = _safe_div(centered, group_std(r, m) + eps)
    elif scale == "batch":
        flat_r, flat_m = r.reshape(1, -1), m.reshape(1, -1)
        adv = _safe_div(centered, group_std(flat_r, flat_m) + eps)
    else:
        adv = centered
    return _finish(adv, r, m)


def _safe_div(x: Tensor, denom: Tensor) -> Tensor:
    """``x / denom`` with 0 where ``denom`` is 0 (eps = 0 and a std that underflowed)."""
    return torch.where(
        denom > 0, x / torch.where(denom > 0, denom, torch.ones_like(denom)), torch.zeros_like(x)
    )


def dr_grpo(rewards: Tensor, mask: Tensor | None = None) -> Tensor:
    """Dr.GRPO advantages ``A_i = r_i - mean_g`` (no std division); ``[num_groups, G] -> [num_groups, G]``.

    Liu et al., 2025, "Understanding R1-Zero-Like Training: A Critical Perspective" (arXiv:2503.20783):
    dividing by the group std up-weights near-unanimous (too easy / too hard) groups; Dr.GRPO drops it
    (and pairs it with the ``seq-mean-token-sum-norm`` aggregation, see ``rlvr.losses.aggregate``).
    """
    return grpo(rewards, scale="none", mask=mask)
