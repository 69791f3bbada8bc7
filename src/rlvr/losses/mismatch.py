"""Sampler/trainer mismatch correction: the sampler's probabilities are not the trainer's.

A rollout engine (vLLM's kernels, bf16, a different batch shape) samples from μ, a slightly different
distribution from the trainer's π_old for the *same* weights. The clipped surrogate's ratio is taken
against π_old (recomputed by the trainer), so the samples need one more importance weight μ → π_old:

    ρ_t = π_old(y_t) / μ(y_t)                            (token ratio, trainer over sampler)
    w_t = min(ρ_t, C)                                    truncated IS (Yao et al. 2025, "Your efficient
                                                         RL framework secretly brings you off-policy RL
                                                         training"; C = ``tis_cap``)
    g_i = exp( (1/|y_i|) Σ_t log ρ_t )                   geometric-mean ratio of sequence i
    m_i = 1 if seq_low <= g_i <= seq_high else 0         sequence mask (seq-mask-tis / geometric RS)

    loss_it  <-  m_i · w_t · loss_it                     (weights detached: they scale, never steer)

Masked sequences keep their place in the loss denominators (they are a correction, not a filter of
what the method defines as the batch; NeMo-RL and OpenRLHF do the same). The geometric mean is
length-invariant: a long sequence of tiny per-token mismatches is not masked for being long.

With the in-process fp32 HF engine μ and π_old are the same function (up to float rounding), so every
w_t is 1 ± 1e-6, no sequence leaves the band and the correction is a no-op.
"""

from __future__ import annotations

import torch
from torch import Tensor


def mismatch_weights(trainer_logprobs: Tensor, sampler_logprobs: Tensor, loss_mask: Tensor, tis_cap: float = 2.0,
                     seq_low: float = 0.999, seq_high: float = 1.001) -> tuple[Tensor, dict[str, float]]:
    """Per-token weights ``m_i · min(ρ_t, C)`` ``[B, T]`` (0 off the mask, detached) and the mismatch metrics.

    ``trainer_logprobs`` (π_old, the trainer's recomputation), ``sampler_logprobs`` (μ, the engine's) and
    ``loss_mask`` are ``[B, T]``. Metrics over masked tokens: ``mismatch/logprob_diff_mean`` and
    ``mismatch/logprob_diff_max`` (|log π_old − log μ|), ``mismatch/tis_weight_mean``,
    ``mismatch/tis_truncated_frac`` (tokens with ρ_t > C), ``mismatch/seq_masked_frac`` (of sequences
    with at least one token).
    """
    if trainer_logprobs.shape != sampler_logprobs.shape or trainer_logprobs.shape != loss_mask.shape:
        raise ValueError(f"mismatch_weights: shapes differ: trainer {tuple(trainer_logprobs.shape)}, sampler "
                         f"{tuple(sampler_logprobs.shape)}, loss_mask {tuple(loss_mask.shape)}")
    with torch.no_grad():
        mask = loss_mask.to(torch.bool)
        zeros = torch.zeros_like(trainer_logprobs, dtype=torch.float32)
        log_rho = torch.where(mask, trainer_logprobs.float() - sampler_logprobs.float().to(trainer_logprobs.device),
                              zeros)
        rho = torch.exp(log_rho.clamp(max=20.0))
        w_tok = torch.clamp(rho, max=tis_cap)
        n_tok = mask.sum(dim=1)
        has = n_tok > 0
        geo = torch.exp(log_rho.sum(dim=1) / n_tok.clamp(min=1))
        keep = ((geo >= seq_low) & (geo <= seq_high)) | ~has
        weights = torch.where(mask & keep[:, None], w_tok, zeros)
        n = mask.sum().clamp(min=1)
        diff = log_rho.abs()
        metrics = {
            "mismatch/logprob_diff_mean": float(diff.sum() / n),
            "mismatch/logprob_diff_max": float(diff.max()) if mask.any() else 0.0,
            "mismatch/tis_weight_mean": float(torch.where(mask, w_tok, zeros).sum() / n),
            "mismatch/tis_truncated_frac": float((mask & (rho > tis_cap)).sum() / n),
            "mismatch/seq_masked_frac": float((has & ~keep).sum() / has.sum().clamp(min=1)),
        }
    return weights.to(trainer_logprobs.dtype), metrics
