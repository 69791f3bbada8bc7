"""Per-token policy losses beyond the clipped surrogate: CISPO, SAPO, STEER's token weights and DAR.

Every function returns ``(per_token_loss [B, T], metrics)`` with 0 off ``loss_mask``, reduced afterwards by
``rlvr.losses.aggregate`` like :func:`rlvr.losses.policy.clipped_surrogate`. ``logprobs`` carries the
gradient; ``old_logprobs``, ``advantages`` (``[B]`` or ``[B, T]``), ``entropy`` and ``ref_logprobs`` are detached.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.losses.policy import _check_inputs, _log_ratio


def _masked_mean(x: Tensor, mask: Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))


def cispo(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, loss_mask: Tensor,
          eps_low: float = 1.0, eps_high: float = 0.28, max_log_ratio: float = 20.0) -> tuple[Tensor, dict]:
    """CISPO (MiniMax-M1, Chen et al. 2025, arXiv:2506.13585)::

        r_t = exp(logp_t − old_logp_t)
        loss_t = −sg(clip(r_t, 1 − eps_low, 1 + eps_high)) · A_t · logp_t

    The importance weight is clipped and detached; the token's gradient ``−ŵ_t A_t ∇logp_t`` is never
    zeroed (PPO's clip drops tokens outside the band, which are often the rare "fork" tokens).
    ``eps_low = 1`` (the default) leaves the weight unbounded below. Metric ``clip/high_frac``: share of
    tokens whose weight was capped.
    """
    mask, adv = _check_inputs(logprobs, old_logprobs, advantages, loss_mask)
    lr, _ = _log_ratio(logprobs, old_logprobs, mask, "token", max_log_ratio)
    ratio = torch.exp(lr.detach())
    w = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    safe = torch.where(mask, logprobs, torch.zeros_like(logprobs))
    loss = torch.where(mask, -w * adv * safe, torch.zeros_like(logprobs))
    m = mask.to(logprobs.dtype)
    return loss, {"clip/high_frac": _masked_mean((ratio > 1.0 + eps_high).to(m.dtype), m),
                  "ratio/mean": _masked_mean(ratio, m)}


def sapo(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, loss_mask: Tensor,
         tau_pos: float = 1.0, tau_neg: float = 1.05, max_log_ratio: float = 20.0) -> tuple[Tensor, dict]:
    """SAPO (Soft Adaptive Policy Optimization, Qwen 2025, arXiv:2511.20347)::

        τ_t = tau_pos if A_t > 0 else tau_neg
        f(r) = (4 / τ) · σ(τ (r − 1))
        loss_t = −f(r_t) · A_t

    The gradient w.r.t. ``logp_t`` is ``−A_t · 4 σ(1 − σ) · r_t``: exactly ``−A_t`` on-policy (r = 1,
    σ = 1/2), fading smoothly as the ratio leaves 1 instead of PPO's hard cut-off. Metric
    ``sapo/gate_mean``: mean of ``4 σ(1−σ)`` (1 on-policy).
    """
    mask, adv = _check_inputs(logprobs, old_logprobs, advantages, loss_mask)
    lr, _ = _log_ratio(logprobs, old_logprobs, mask, "token", max_log_ratio)
    ratio = torch.exp(lr)
    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))
    sig = torch.sigmoid(tau * (ratio - 1.0))
    loss = torch.where(mask, -(4.0 / tau) * sig * adv, torch.zeros_like(logprobs))
    m = mask.to(logprobs.dtype)
    gate = (4 * sig * (1 - sig)).detach()
    return loss, {"sapo/gate_mean": _masked_mean(gate, m), "ratio/mean": _masked_mean(ratio.detach(), m)}


@torch.no_grad()
def steer_weights(logprobs: Tensor, entropy: Tensor, advantages: Tensor, loss_mask: Tensor,
                  clipped: Tensor, tau: float) -> tuple[Tensor, dict]:
    """STEER's token weights ``[B, T]`` from the estimated per-token entropy change.

    For a softmax policy, ``∂H/∂z_b = −π_b (log π_b + H)`` and a policy-gradient step on the sampled token
    ``y_t`` moves the logits by ``η A_t (e_y − π)``; keeping the sampled token's own term, the first-order
    entropy change of a token is ``ΔH_t ≈ −η · m_t · A_t · p_t · (log p_t + H_t)`` — the four factors:
    clipping (``m_t = 0`` where the clip binds and the token has no gradient), advantage, the token's
    probability ``p_t`` and the conditional entropy ``H_t``. With ``κ_t = |ΔH_t| / η``::

        w_t = min(1, τ / κ_t)          (1 where κ_t = 0)

    A speed limit: only tokens whose step would move the entropy by more than τ are slowed down, the rest
    keep weight 1. (Dropped: the ``Σ_b π_b² (log π_b + H)`` term, which needs the whole distribution.)
    Metrics: ``steer/downweighted_frac`` (share of tokens with w < 1), ``steer/weight_mean``.
    """
    mask = loss_mask.to(torch.bool)
    adv = advantages if advantages.shape == logprobs.shape else advantages[:, None].expand_as(logprobs)
    p = torch.exp(logprobs)
    kappa = (~clipped.to(torch.bool)).to(p.dtype) * (adv * p * (logprobs + entropy)).abs()
    w = torch.where(kappa > tau, tau / kappa.clamp(min=1e-12), torch.ones_like(kappa))
    w = torch.where(mask, w, torch.zeros_like(w))
    m = mask.to(p.dtype)
    return w, {"steer/downweighted_frac": _masked_mean((w < 1).to(p.dtype), m), "steer/weight_mean": _masked_mean(w, m)}


def clip_binds(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, eps_low: float, eps_high: float) -> Tensor:
    """Where PPO's token clip removes the gradient: ``A > 0, r > 1+ε_high`` or ``A < 0, r < 1−ε_low``."""
    adv = advantages if advantages.shape == logprobs.shape else advantages[:, None].expand_as(logprobs)
    r = torch.exp((logprobs - old_logprobs).detach().clamp(-20, 20))
    return ((adv > 0) & (r > 1 + eps_high)) | ((adv < 0) & (r < 1 - eps_low))


def dar(logprobs: Tensor, ref_logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, loss_mask: Tensor,
        alpha: float, beta: float, max_weight: float) -> tuple[Tensor, dict]:
    """DAR (Dual-regularized Advantage Regression, ICLR 2026): advantage-weighted SFT on the rollouts.

    The closed-form optimum of the dual-KL objective is ``π* ∝ π_0^α π_t^{1−α} exp(A/β)``; minimising
    ``KL(π_θ || π*)`` over the samples of π_t gives a weighted log-likelihood::

        log w_i = α · mean_{t∈y_i} (log π_0(y_t) − log π_old(y_t)) + A_i / β
        w_i = min(exp(log w_i), max_weight)              (detached)
        loss_t = −w_i · log π_θ(y_t)

    Our choices where the paper's sequence ratio ``(π_0/π_t)^α`` is open: the ratio is the per-token
    geometric mean over the sequence (a length-independent scale), and ``A_i`` is the sequence's mean
    advantage over its tokens. Metrics: ``dar/weight_mean``, ``dar/weight_max``, ``dar/clipped_frac``.
    """
    mask, adv = _check_inputs(logprobs, old_logprobs, advantages, loss_mask)
    m = mask.to(logprobs.dtype)
    n = m.sum(dim=1).clamp(min=1)
    zero = torch.zeros_like(logprobs)
    reg = torch.where(mask, ref_logprobs.detach() - old_logprobs.detach(), zero).sum(dim=1) / n
    a_seq = adv.sum(dim=1) / n
    log_w = alpha * reg + a_seq / beta
    w = torch.exp(log_w.clamp(max=50.0)).clamp(max=max_weight)
    loss = torch.where(mask, -w[:, None] * torch.where(mask, logprobs, zero), zero)
    rows = mask.any(dim=1)
    wr = w[rows]
    return loss, {"dar/weight_mean": float(wr.mean()) if wr.numel() else 0.0,
                  "dar/weight_max": float(wr.max()) if wr.numel() else 0.0,
                  "dar/clipped_frac": float((wr >= max_weight).float().mean()) if wr.numel() else 0.0}
