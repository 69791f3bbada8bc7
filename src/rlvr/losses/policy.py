"""Clipped policy-gradient surrogates: PPO / GRPO / DAPO (token level) and GSPO (sequence level).

The per-token loss returned here is meant to be reduced by ``rlvr.losses.aggregate``; the KL and
entropy terms are separate (``rlvr.losses.kl``, ``rlvr.losses.entropy``).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

Level = Literal["token", "sequence"]


def _check_inputs(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, loss_mask: Tensor
) -> tuple[Tensor, Tensor]:
    """Validate shapes; return (bool mask, advantages [B, T]: detached, exactly 0 where masked out)."""
    if logprobs.dim() != 2:
        raise ValueError(f"clipped_surrogate: logprobs must be [B, T], got {tuple(logprobs.shape)}")
    for name, t in (("old_logprobs", old_logprobs), ("loss_mask", loss_mask)):
        if t.shape != logprobs.shape:
            raise ValueError(
                f"clipped_surrogate: {name} shape {tuple(t.shape)} != logprobs shape {tuple(logprobs.shape)}"
            )
    mask = loss_mask.to(device=logprobs.device, dtype=torch.bool)
    adv = advantages.detach().to(device=logprobs.device, dtype=logprobs.dtype)
    if adv.shape == logprobs.shape[:1]:
        adv = adv[:, None]
    elif adv.shape != logprobs.shape:
        raise ValueError(
            f"clipped_surrogate: advantages must be [B]={logprobs.shape[0]} or "
            f"[B, T]={tuple(logprobs.shape)}, "
            f"got {tuple(adv.shape)}"
        )
    adv = torch.where(mask, adv.expand_as(logprobs), torch.zeros_like(logprobs))
    return mask, adv


def _log_ratio(
    logprobs: Tensor, old_logprobs: Tensor, mask: Tensor, level: str, max_log_ratio: float
) -> tuple[Tensor, Tensor]:
    """Return (log of the ratio used in the surrogate [B, T], token log-ratio log(pi/pi_old) [B, T]).

    Both are 0 on masked-out positions *before* any exp, so padding holding -inf or NaN logprobs
    cannot leak NaN into values or gradients.
    """
    zeros = torch.zeros_like(logprobs)
    token_lr = torch.where(mask, logprobs - old_logprobs.detach(), zeros).clamp(-max_log_ratio, max_log_ratio)
    if level == "token":
        return token_lr, token_lr
    lengths = mask.sum(dim=1, keepdim=True).clamp(min=1).to(logprobs.dtype)
    seq_lr = (token_lr.sum(dim=1, keepdim=True) / lengths).detach()
    safe_logp = torch.where(mask, logprobs, zeros)
    # GSPO-token: log s_it = sg[log s_i] + log pi_t - sg[log pi_t]  (value log s_i, gradient d log pi_t)
    seq_token_lr = torch.where(mask, seq_lr + (safe_logp - safe_logp.detach()), zeros)
    return seq_token_lr, token_lr


def clipped_surrogate(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    level: Level = "token",
    dual_clip: float | None = None,
    max_log_ratio: float = 20.0,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped surrogate loss -> ``(per_token_loss [B, T], metrics)``; 0 where ``loss_mask`` is 0.

    Inputs: ``logprobs`` (with grad), ``old_logprobs`` (sampling policy, detached) and ``loss_mask`` are
    ``[B, T]``; ``advantages`` is ``[B]`` (one per sequence) or ``[B, T]`` (per token), detached.

    ``level="token"`` — PPO (Schulman et al., 2017, arXiv:1707.06347) as used by GRPO, with DAPO's
    decoupled clip range (Yu et al., 2025, arXiv:2503.14476, "clip-higher": eps_high > eps_low)::

        r_t = exp(logp_t - old_logp_t)
        loss_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)

    ``level="sequence"`` — GSPO (Zheng et al., 2025, arXiv:2507.18071), length-normalised sequence
    ratio clipped at the sequence level::

        s_i = exp( (1/|y_i|) sum_t (logp_it - old_logp_it) )       (mean over the masked tokens)
        loss_it = -min(s_it A_it, clip(s_it, 1 - eps_low, 1 + eps_high) A_it)
        s_it = sg[s_i] * pi_t / sg[pi_t]                           (the "GSPO-token" form)

    s_it has the value s_i on every masked token of sequence i, so clipping is decided per sequence (a
    clipped sequence contributes no gradient at all), and its gradient is ``s_i * d logp_it``. Reduced
    with ``aggregate(..., "seq-mean-token-mean")`` and a per-sequence advantage, the value *and* the
    gradient are exactly GSPO's ``-min(s_i A_i, clip(s_i) A_i)`` averaged over sequences, whose gradient
    is ``s_i A_i (1/|y_i|) sum_t d logp_it``; per-token advantages are allowed as in GSPO-token. (GSPO
    uses much smaller clip ranges than PPO, e.g. 3e-4 / 4e-4.)

    ``dual_clip=c`` (c > 1; Ye et al., 2020, "Mastering Complex Control in MOBA Games") bounds the loss
    of a negative-advantage token with a huge ratio: for A < 0 the objective becomes
    ``max(min(r A, clip(r) A), c A)``.

    Log-ratios are clamped to ``±max_log_ratio`` before ``exp`` (no inf; gradient 0 beyond the clamp).

    Metrics (Python floats, over masked tokens; at the sequence level each token carries its sequence's
    ratio, so fractions are token-weighted fractions of sequences):
    ``clip/low_frac`` — A < 0 and ratio < 1 - eps_low (the lower clip binds);
    ``clip/high_frac`` — A > 0 and ratio > 1 + eps_high (the upper clip binds);
    ``clip/dual_frac`` (with dual_clip) — the dual clip binds;
    ``ratio/mean``, ``ratio/max``, ``ratio/min`` — of the ratio used in the surrogate;
    ``policy/approx_kl`` — k3 estimate of KL(pi_old || pi): mean of ``(r - 1) - log r`` with token ratios.
    """
    if level not in ("token", "sequence"):
        raise ValueError(f"clipped_surrogate: level must be 'token' or 'sequence', got {level!r}")
    if not (0.0 <= eps_low < 1.0 and eps_high >= 0.0):
        raise ValueError(
            f"clipped_surrogate: need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low}, {eps_high}"
        )
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"clipped_surrogate: dual_clip must be > 1, got {dual_clip}")
    mask, adv = _check_inputs(logprobs, old_logprobs, advantages, loss_mask)
    log_ratio, token_lr = _log_ratio(logprobs, old_logprobs, mask, level, max_log_ratio)
    ratio = torch.exp(log_ratio)
    surr = ratio * adv
    surr_clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    objective = torch.minimum(surr, surr_clipped)
    dual_active = None
    if dual_clip is not None:
        dual_active = (adv < 0) & (dual_clip * adv > objective.detach())
        objective = torch.where(dual_active, dual_clip * adv, objective)
    loss = torch.where(mask, -objective, torch.zeros_like(objective))
    metrics = _metrics(ratio.detach(), token_lr.detach(), adv, mask, eps_low, eps_high, dual_active)
    return loss, metrics


@torch.no_grad()
def _metrics(
    ratio: Tensor,
    token_lr: Tensor,
    adv: Tensor,
    mask: Tensor,
    eps_low: float,
    eps_high: float,
    dual_active: Tensor | None,
) -> dict[str, float]:
    """Clip fractions, ratio statistics and approximate KL(old || new), over masked tokens."""
    n = mask.sum().clamp(min=1).to(ratio.dtype)
    low = mask & (adv < 0) & (ratio < 1.0 - eps_low)
    high = mask & (adv > 0) & (ratio > 1.0 + eps_high)
    approx_kl = torch.where(mask, torch.expm1(token_lr) - token_lr, torch.zeros_like(token_lr))
    has = bool(mask.any())
    big = torch.finfo(ratio.dtype).max
    stats = [
        low.sum() / n,
        high.sum() / n,
        torch.where(mask, ratio, torch.zeros_like(ratio)).sum() / n,
        torch.where(mask, ratio, torch.full_like(ratio, -big)).max() if has else ratio.new_zeros(()),
        torch.where(mask, ratio, torch.full_like(ratio, big)).min() if has else ratio.new_zeros(()),
        approx_kl.sum() / n,
    ]
    keys = ["clip/low_frac", "clip/high_frac", "ratio/mean", "ratio/max", "ratio/min", "policy/approx_kl"]
    if dual_active is not None:
        stats.append((mask & dual_active).sum() / n)
        keys.append("clip/dual_frac")
    values = torch.stack([s.to(torch.float64) for s in stats]).tolist()
    return dict(zip(keys, values))
