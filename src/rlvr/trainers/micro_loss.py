"""The RL micro-batch loss: the variant's token loss on one micro-batch, with the sampler/trainer mismatch
correction, the KL penalty to the reference, the entropy bonus, aggregated over the whole mini-batch's
denominators (``accumulate`` in ``trainers/common.py`` sums the micro-batches' gradients)."""

from __future__ import annotations

import torch

from rlvr.data.collate import TrainBatch
from rlvr.losses.aggregate import aggregate
from rlvr.losses.kl import kl_penalty
from rlvr.losses.mismatch import mismatch_sums
from rlvr.models.logprobs import token_logprobs
from rlvr.models.truncation import Truncation
from rlvr.trainers.variants import PolicyInputs, policy_loss


def micro_loss(model, mb: TrainBatch, cfg, counts_kw: dict, pad_id: int, on_policy: bool, bf16: bool = False):
    """Loss of one micro-batch, already divided by the mini-batch's global denominator."""
    b = mb.tokens(pad_id, device=model.device)
    ids, att, lm, old = b.input_ids, b.attention_mask, b.loss_mask, b.old_logprobs
    # the engine's logprobs of the sampled tokens: kept apart when old_logprobs were recomputed (off-policy)
    sampler = b.sampler_logprobs if b.sampler_logprobs is not None else b.old_logprobs
    logprobs, entropy = token_logprobs(model, ids, att, cfg.sampling.temperature, with_entropy=True,
                                       bf16=bf16, entropy_grad=bool(cfg.entropy_coef), wanted=lm,
                                       truncation=Truncation.of(cfg.sampling))
    gap_metrics = {}
    if on_policy:  # old = the forward itself (ratio exactly 1); the sampler's logprobs only measure the gap
        gap = torch.where(lm.bool(), (logprobs.detach() - old).abs(), torch.zeros_like(old))
        gap_metrics = {"rollout/logprob_mismatch_sum": float(gap.sum()),
                       "rollout/logprob_mismatch_max": float(gap.max())}
        old = logprobs.detach()
    per_tok, metrics = policy_loss(cfg.loss, PolicyInputs(logprobs, old, b.advantages, lm, entropy, b.ref_logprobs))
    metrics.update(gap_metrics)
    if cfg.correction.enabled:  # sampler/trainer mismatch: truncated IS + geometric-mean sequence mask
        c = cfg.correction
        weights, mm = mismatch_sums(old, sampler, lm, c.tis_cap, c.seq_low, c.seq_high)
        per_tok = per_tok * weights
        metrics.update(mm)
    if b.ref_logprobs is not None:  # β > 0, or KL measured for the health monitor (no gradient at β = 0)
        kl = kl_penalty(logprobs if cfg.kl.beta > 0 else logprobs.detach(), b.ref_logprobs,
                        kind=cfg.kl.estimator, loss_mask=lm)
        if cfg.kl.beta > 0:
            per_tok = per_tok + cfg.kl.beta * kl
        metrics["kl/ref"] = float((kl.detach() * lm).sum() / lm.sum().clamp(min=1))
    if cfg.entropy_coef:
        per_tok = per_tok - cfg.entropy_coef * entropy
    loss = aggregate(per_tok, lm, cfg.loss.aggregation, **counts_kw)
    metrics["policy/entropy_sum"] = float((entropy.detach() * lm).sum())
    metrics["policy/tokens_sum"] = float(lm.sum())
    return loss, metrics


def micro_batch_loss(model, batch: TrainBatch, cfg, counts_kw: dict, pad_id: int, on_policy: bool, bf16: bool,
                     rows: list[int]):
    """:func:`micro_loss` of the rows ``rows`` of ``batch`` (the form ``accumulate`` calls, bound with
    ``functools.partial``)."""
    return micro_loss(model, batch.subset(rows), cfg, counts_kw, pad_id, on_policy, bf16)
