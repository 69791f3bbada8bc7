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
what the method defines as the batch; NeMo-RL and OpenRLHF do the same): each one shrinks the step by its
share, which the trainer reports (``mismatch/seq_masked_frac``, a warning above 5%). The geometric mean is
length-invariant: a long sequence of tiny per-token mismatches is not masked for being long.

The default band [0.98, 1.02] is set from the gap measured between bf16 and float32 forwards of the same
weights on the tiny models (|mean log ρ| of a sequence ≤ 1.3e-2, p99 7.8e-3; docs/scaling.md,
bench/mismatch_band.py): rounding passes, a sequence off by 0.04 nats a token or more is masked.

With the in-process fp32 HF engine μ and π_old are the same function (up to float rounding), so every
w_t is 1 ± 1e-6, no sequence leaves the band and the correction is a no-op. Both sides are under the same
top-k / top-p truncation (``rlvr.models.truncation``), so a truncated sampler is not a mismatch.
"""

from __future__ import annotations

import torch
from torch import Tensor

SEQ_LOW, SEQ_HIGH = 0.98, 1.02
"""The default sequence band (``correction.seq_low`` / ``seq_high``), see the module doc."""


def mismatch_weights(trainer_logprobs: Tensor, sampler_logprobs: Tensor, loss_mask: Tensor, tis_cap: float = 2.0,
                     seq_low: float = SEQ_LOW, seq_high: float = SEQ_HIGH) -> tuple[Tensor, dict[str, float]]:
    """Per-token weights ``m_i · min(ρ_t, C)`` ``[B, T]`` (0 off the mask, detached) and the mismatch metrics.

    ``trainer_logprobs`` (π_old, the trainer's recomputation), ``sampler_logprobs`` (μ, the engine's) and
    ``loss_mask`` are ``[B, T]``. Metrics over masked tokens: ``mismatch/logprob_diff_mean`` and
    ``mismatch/logprob_diff_max`` (|log π_old − log μ|), ``mismatch/tis_weight_mean``,
    ``mismatch/tis_truncated_frac`` (tokens with ρ_t > C), ``mismatch/seq_masked_frac`` (of sequences
    with at least one token).
    """
    weights, sums = mismatch_sums(trainer_logprobs, sampler_logprobs, loss_mask, tis_cap, seq_low, seq_high)
    return weights, mismatch_metrics(sums)


def mismatch_sums(trainer_logprobs: Tensor, sampler_logprobs: Tensor, loss_mask: Tensor, tis_cap: float = 2.0,
                  seq_low: float = SEQ_LOW, seq_high: float = SEQ_HIGH) -> tuple[Tensor, dict[str, float]]:
    """:func:`mismatch_weights`'s weights and its metrics as sums and counts (``mismatch/*_sum``, the max as
    ``mismatch/logprob_diff_max``), which add up exactly over micro-batches, mini-batches and epochs;
    :func:`mismatch_metrics` turns them into the means."""
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
        keep, has = sequence_keep(log_rho, mask, seq_low, seq_high)
        weights = torch.where(mask & keep[:, None], w_tok, zeros)
        diff = log_rho.abs()
        sums = {
            "mismatch/tokens_sum": float(mask.sum()),
            "mismatch/logprob_diff_sum": float(diff.sum()),
            "mismatch/logprob_diff_max": float(diff.max()) if mask.any() else 0.0,
            "mismatch/tis_weight_sum": float(torch.where(mask, w_tok, zeros).sum()),
            "mismatch/tis_truncated_sum": float((mask & (rho > tis_cap)).sum()),
            "mismatch/seqs_sum": float(has.sum()),
            "mismatch/seq_masked_sum": float((has & ~keep).sum()),
        }
    return weights.to(trainer_logprobs.dtype), sums


def sequence_keep(log_rho: Tensor, mask: Tensor, seq_low: float, seq_high: float) -> tuple[Tensor, Tensor]:
    """``(keep [B], has [B])``: rows whose geometric-mean ratio ``exp(mean_t log ρ_t)`` over their ``mask``ed
    tokens lies in ``[seq_low, seq_high]`` (rows without a token are kept), and rows with a token."""
    n_tok = mask.sum(dim=1)
    has = n_tok > 0
    geo = torch.exp(torch.where(mask, log_rho, torch.zeros_like(log_rho)).sum(dim=1) / n_tok.clamp(min=1))
    return ((geo >= seq_low) & (geo <= seq_high)) | ~has, has


def mismatch_metrics(sums: dict[str, float]) -> dict[str, float]:
    """The ``mismatch/*`` means (see :func:`mismatch_weights`) from :func:`mismatch_sums`' sums, however many
    batches they were added over (a row counted μ times in its sums and counts has the same mean)."""
    n, rows = max(sums["mismatch/tokens_sum"], 1.0), max(sums["mismatch/seqs_sum"], 1.0)
    return {
        "mismatch/logprob_diff_mean": sums["mismatch/logprob_diff_sum"] / n,
        "mismatch/logprob_diff_max": sums["mismatch/logprob_diff_max"],
        "mismatch/tis_weight_mean": sums["mismatch/tis_weight_sum"] / n,
        "mismatch/tis_truncated_frac": sums["mismatch/tis_truncated_sum"] / n,
        "mismatch/seq_masked_frac": sums["mismatch/seq_masked_sum"] / rows,
    }
