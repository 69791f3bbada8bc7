"""Reward-model training loss: Bradley-Terry on pairs of scalar rewards."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


@torch.no_grad()
def pairwise_accuracy(chosen_rewards: Tensor, rejected_rewards: Tensor) -> float:
    """Fraction of pairs with ``r_chosen > r_rejected`` (ties count as wrong); NaN for an empty batch."""
    if chosen_rewards.numel() == 0:
        return float("nan")
    return float((chosen_rewards > rejected_rewards).double().mean())


def bradley_terry(
    chosen_rewards: Tensor,
    rejected_rewards: Tensor,
    margin: float | Tensor | None = None,
    center_coef: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """Bradley-Terry reward-model loss -> ``(per_pair_loss [B], metrics)``.

        loss_i = -log sigma(r_c - r_r - m_i) + center_coef * (r_c + r_r)^2

    Bradley & Terry, 1952; as the RM objective of Ouyang et al., 2022 (InstructGPT, arXiv:2203.02155).
    ``margin`` m (float or ``[B]``, default 0) is Llama 2's preference-strength margin (Touvron et al.,
    2023); ``center_coef`` is the auxiliary term of Eisenstein et al., 2023 (arXiv:2312.09244), which
    pins the reward's free offset near zero (TRL's ``center_rewards_coefficient``).

    Metrics: ``rm/accuracy`` (r_c > r_r), ``rm/margin`` (mean r_c - r_r), ``rm/chosen``, ``rm/rejected``.
    """
    if chosen_rewards.shape != rejected_rewards.shape or chosen_rewards.dim() != 1:
        raise ValueError(
            f"bradley_terry: need chosen and rejected rewards [B], got {tuple(chosen_rewards.shape)}, "
            f"{tuple(rejected_rewards.shape)}"
        )
    diff = chosen_rewards - rejected_rewards
    if margin is not None:
        if isinstance(margin, Tensor) and margin.shape not in ((), chosen_rewards.shape):
            raise ValueError(f"bradley_terry: margin must be a float or [B], got {tuple(margin.shape)}")
        diff = diff - (margin.detach() if isinstance(margin, Tensor) else margin)
    losses = -F.logsigmoid(diff)
    if center_coef:
        losses = losses + center_coef * (chosen_rewards + rejected_rewards) ** 2
    with torch.no_grad():
        c, r = chosen_rewards.detach().double(), rejected_rewards.detach().double()
        empty = c.numel() == 0
        metrics = {
            "rm/accuracy": pairwise_accuracy(c, r),
            "rm/margin": float("nan") if empty else float((c - r).mean()),
            "rm/chosen": float("nan") if empty else float(c.mean()),
            "rm/rejected": float("nan") if empty else float(r.mean()),
        }
    return losses, metrics
