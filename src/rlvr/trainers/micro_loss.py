"""The micro-batch losses of the policy updates, each already divided by its mini-batch's denominators
(``accumulate`` in ``trainers/common.py`` sums the micro-batches' gradients), over row slices of the one
batch the step carries (:class:`~rlvr.data.collate.TokenBatch`):

- :func:`micro_loss` (the RL stage): the variant's token loss with the sampler/trainer mismatch correction,
  the KL penalty to the reference and the entropy bonus;
- :func:`ppo_micro_loss` (PPO): the clipped surrogate and the critic's clipped value loss.

Both forward the policy with :func:`update_logprobs`, the one training forward."""

from __future__ import annotations

import torch

from rlvr.data.collate import TokenBatch
from rlvr.losses.aggregate import aggregate
from rlvr.losses.kl import kl_penalty
from rlvr.losses.mismatch import mismatch_sums
from rlvr.losses.policy import clipped_surrogate
from rlvr.losses.value import clipped_value_loss
from rlvr.models.heads import token_values
from rlvr.models.logprobs import token_logprobs
from rlvr.models.prefix_share import PrefixCache
from rlvr.models.truncation import Truncation
from rlvr.trainers.variants import PolicyInputs, policy_loss


def update_logprobs(model, b: TokenBatch, cfg, bf16: bool, entropy_grad: bool = False,
                    prefix: PrefixCache | None = None):
    """``(logprobs [B, T], entropy [B, T])`` of micro-batch ``b`` under the policy being trained, with the
    stage's sampling temperature and truncation (``cfg.sampling``) and the training precision (``prefix``: the
    update's cache of its groups' prompts, ``rlvr.models.prefix_share``)."""
    return token_logprobs(model, b.input_ids, b.attention_mask, cfg.sampling.temperature, with_entropy=True,
                          bf16=bf16, entropy_grad=entropy_grad, wanted=b.loss_mask,
                          truncation=Truncation.of(cfg.sampling), prefix=prefix)


def micro_loss(model, mb: TokenBatch, cfg, counts_kw: dict, on_policy: bool, bf16: bool = False,
               prefix: PrefixCache | None = None):
    """Loss of one RL micro-batch, already divided by the mini-batch's global denominator."""
    b = mb.to(model.device)
    lm, old = b.loss_mask, b.old_logprobs
    # the engine's logprobs of the sampled tokens: kept apart when old_logprobs were recomputed (off-policy)
    sampler = b.sampler_logprobs if b.sampler_logprobs is not None else b.old_logprobs
    logprobs, entropy = update_logprobs(model, b, cfg, bf16, entropy_grad=bool(cfg.entropy_coef), prefix=prefix)
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


def micro_batch_loss(model, batch: TokenBatch, cfg, counts_kw: dict, on_policy: bool, bf16: bool,
                     rows: list[int], prefix: PrefixCache | None = None):
    """:func:`micro_loss` of the rows ``rows`` of ``batch`` (the form ``accumulate`` calls, bound with
    ``functools.partial``)."""
    return micro_loss(model, batch.rows(rows), cfg, counts_kw, on_policy, bf16, prefix)


def ppo_micro_loss(policy, critic, batch: TokenBatch, cfg, denom: float, bf16: bool, rows: list[int],
                   prefix: PrefixCache | None = None):
    """PPO's loss of the rows ``rows`` of ``batch``: the token-sum of the clipped policy loss + ``vf_coef`` x the
    clipped value loss, divided by the mini-batch's tokens ``denom``. Metrics are token-weighted sums
    (``<name>_sum``, with ``tokens_sum``: what ``accumulate`` adds up across micro-batches)."""
    b = batch.rows(rows).to(next(policy.parameters()).device)
    lm = b.loss_mask
    logprobs, entropy = update_logprobs(policy, b, cfg, bf16, prefix=prefix)
    pg, pmet = clipped_surrogate(logprobs, b.old_logprobs, b.advantages, lm, cfg.eps, cfg.eps)
    values = token_values(critic, b.input_ids, b.attention_mask, bf16)
    vf, vmet = clipped_value_loss(values, b.values, b.returns, lm, cfg.value_clip)
    pg_sum, vf_sum = (pg * lm).sum(), (vf * lm).sum()
    loss = (pg_sum + cfg.vf_coef * vf_sum) / denom
    n = float(lm.sum())
    met = {**pmet, "value/clip_frac": vmet["value/clip_frac"], "value/mse": vmet["value/mse"],
           "policy/loss": float(pg_sum.detach()) / max(n, 1), "value/loss": float(vf_sum.detach()) / max(n, 1),
           "policy/entropy": float((entropy * lm).sum()) / max(n, 1)}
    return loss, {**{f"{k}_sum": v * n for k, v in met.items()}, "tokens_sum": n}
