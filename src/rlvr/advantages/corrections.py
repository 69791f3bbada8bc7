"""The 2026 "second-order corrections" of group-relative advantages.

- :func:`sign_balance` — SignBalance (RIT + Adobe Research, 2026-09): keep the verifier's sign, replace the
  group's std normalisation by a global magnitude, restore a zero mean by per-class rescaling.
- :func:`asymmetric` — AsymGRPO (NC State + Case Western, 2026-04): positive and negative channels scaled
  separately.
- :func:`downweight_rows` — EDEN / guidance: some samples of a group enter the update with a smaller weight.
- :func:`residual_advantage` — Residual Advantage (arXiv:2610.11519): a teacher's per-step probability
  residual, minus its value under the student, centred within each response, added to the verifier advantage.

Shapes as in :mod:`rlvr.advantages.grpo`: rewards/advantages ``[num_groups, G]``; per-token tensors ``[B, T]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.advantages.grpo import group_mean, prepare_group_rewards, zero_variance_groups


def sign_balance(rewards: Tensor, mask: Tensor | None = None, scale: float = 1.0) -> Tensor:
    """SignBalance advantages ``[num_groups, G] -> [num_groups, G]``.

    ``s_i = sign(r_i − mean_g)`` (the verifier's verdict relative to its group: +1 correct, −1 wrong for a
    binary reward), 0 in zero-variance groups and outside ``mask``. Over the whole batch
    ``N_+ = #{s_i = +1}``, ``N_− = #{s_i = −1}``, ``N = N_+ + N_−``, and::

        A_i = c · s_i · N / (2 N_+)   if s_i = +1
        A_i = c · s_i · N / (2 N_−)   if s_i = −1

    so ``sum_i A_i = c (N/2 − N/2) = 0`` (the per-class recalibration restores the zero mean; the class
    counts are statistics of the batch, never of the sample's own group, and carry no gradient). A correct
    answer in a group where it is rare (a likely guess) gets the same magnitude as one in a group where it
    is common — GRPO gives it ``sqrt((1−p)/p)``, i.e. the most to the rarest.

    Our choice where the seed is open: the recalibration classes are batch-wide (not per group, which
    would re-introduce the group's composition).
    """
    r, m = prepare_group_rewards(rewards, mask, "sign_balance")
    informative = m & ~zero_variance_groups(r, m)[:, None]
    s = torch.sign(r - group_mean(r, m)) * informative
    n_pos, n_neg = (s > 0).sum(), (s < 0).sum()
    n = (n_pos + n_neg).to(r.dtype)
    lam_pos = n / (2 * n_pos.clamp(min=1))
    lam_neg = n / (2 * n_neg.clamp(min=1))
    return scale * torch.where(s > 0, s * lam_pos, s * lam_neg)


def asymmetric(advantages: Tensor, pos_weight: float, neg_weight: float) -> Tensor:
    """AsymGRPO: ``A' = α_+ · A`` where ``A > 0``, ``α_− · A`` where ``A < 0`` (0 stays 0)."""
    return torch.where(advantages > 0, pos_weight * advantages, neg_weight * advantages)


def downweight_rows(advantages: Tensor, rows: Tensor, weight: float) -> Tensor:
    """Multiply the advantages of the marked samples (``rows``: bool, same shape) by ``weight``."""
    return torch.where(rows.to(torch.bool), weight * advantages, advantages)


def residual_advantage(student_probs: Tensor, teacher_probs: Tensor, student_token_prob: Tensor,
                       teacher_token_prob: Tensor, loss_mask: Tensor) -> Tensor:
    """The teacher's centred per-step residual ``[B, T]`` (0 off the mask), to add to the verifier advantage.

    With ``π_S``, ``π_T`` the student's and teacher's next-token distributions at step t and ``y_t`` the
    sampled token, the one-step reward is the bounded probability residual
    ``ρ_t = π_T(y_t) − π_S(y_t) ∈ [−1, 1]``; its value under the student is
    ``V_t = Σ_a π_S(a) (π_T(a) − π_S(a))``; the step advantage ``g_t = ρ_t − V_t`` is centred within its
    response: ``g_t − mean_{t'∈y} g_{t'}``. The centring makes the guidance zero-mean in every response:
    the verifier advantage stays the response's mean label and the teacher only moves credit between steps.

    ``student_probs``/``teacher_probs``: ``sum_a π(a)(π_T(a) − π_S(a))`` needs only
    ``V_t = <π_S, π_T> − <π_S, π_S>``, so callers pass the two inner products as ``[B, T]`` tensors:
    ``student_probs = <π_S, π_S>``, ``teacher_probs = <π_S, π_T>``.
    """
    m = loss_mask.to(torch.bool)
    g = (teacher_token_prob - student_token_prob) - (teacher_probs - student_probs)
    g = torch.where(m, g, torch.zeros_like(g))
    mean = g.sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1)
    return torch.where(m, g - mean, torch.zeros_like(g))
