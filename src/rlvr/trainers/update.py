"""The policy-update engine the RL and PPO stages share, over the one batch they carry
(:class:`~rlvr.data.collate.TokenBatch`, ``[B, T]`` rows): the micro-batch plan, the no-grad forwards
(recomputed old logprobs, the reference's), and the sampler/trainer logprob mismatch. The micro-batch losses
are ``trainers/micro_loss.py``, the accumulation loop ``trainers/common.accumulate`` and the seeded
mini-batch shuffle ``data/order.minibatch_rows``."""

from __future__ import annotations

import numpy as np
import torch

from rlvr import hooks
from rlvr.data.collate import TokenBatch, micro_token_budget, plan_micro_batches, split_overhead
from rlvr.losses.kl import kl_penalty
from rlvr.models.logprobs import token_logprobs
from rlvr.models.prefix_share import shared_prefixes
from rlvr.models.truncation import NONE as NO_TRUNCATION
from rlvr.models.truncation import Truncation
from rlvr.trainers.common import reference_model


def update_micro_batches(model, batch: TokenBatch, rows: list[int], micro: int,
                         micro_tokens: int | str | None = "auto") -> list[list[int]]:
    """The micro-batches (as row ids of ``batch``) that an update forwards for the mini-batch
    ``batch.subset(rows)`` (``micro_tokens``: ``model.micro_tokens``, see ``micro_token_budget``): length-sorted,
    a group's rows kept together (the packed forward shares their prompt)."""
    fwd = [i for i in rows if i < len(batch)]
    lengths, rows_prompt = batch.lengths(), batch.prompts()
    prompts = [i if rows_prompt[i] is None else rows_prompt[i] for i in fwd]
    packed = hooks.packed_forward(model)
    plan = plan_micro_batches([lengths[i] for i in fwd], micro, split_overhead(model, packed),
                              micro_token_budget(model, micro_tokens), prompts,
                              [len(p) if isinstance(p, tuple) else 0 for p in prompts] if packed else None)
    return [[fwd[k] for k in m] for m in plan]


def first_update_micros(model, batch: TokenBatch, first_minibatches: list[list[int]], micro: int,
                        micro_tokens: int | str | None = "auto"):
    """The micro-batches (row ids) of the first epoch's updates, mini-batch after mini-batch."""
    return [m for rows in first_minibatches for m in update_micro_batches(model, batch, rows, micro, micro_tokens)]


NO_GRAD_BUDGET_FACTOR = 16
"""How many times the update's token budget a no-grad pass's micro-batch may hold. The budget bounds the
activations an update keeps for its backward; a no-grad forward keeps none (a layer's temporaries at a time),
and larger matrix products run faster per token: at the Qwen2.5-0.5B shape on 2 cores, 16 rows of 152 tokens
took 18.8 s in micro-batches of 146 tokens (the update's budget) and 13.9 s in one."""


def no_grad_budget(model, micro_tokens: int | str | None = "auto") -> int | None:
    """The token budget of a no-grad pass's micro-batches: under ``auto``, :data:`NO_GRAD_BUDGET_FACTOR` × the
    update's (``micro_token_budget``; None where it has none: then both are cut by rows alone, alike); a pinned
    budget (an integer, or None) cuts every pass alike, so a recipe that pins it reproduces bit for bit."""
    budget = micro_token_budget(model, micro_tokens)
    return budget * NO_GRAD_BUDGET_FACTOR if micro_tokens == "auto" and budget is not None else budget


def reference_micros(model, batch: TokenBatch, first_minibatches: list[list[int]], micro: int,
                     micro_tokens: int | str | None = "auto"):
    """The micro-batches of the reference pass: the first epoch's mini-batches (as the first updates) cut by
    the no-grad budget (:func:`no_grad_budget`). Where that budget is the update's (none: GPUs; a pinned one) or
    the automatic one does not bind (small models) they are the first updates' own micro-batches, so KL is exactly
    0 while the policy is the reference; where the automatic budget binds (a large model on the CPU) they are
    wider, and the first step's KL is the two cuttings' float rounding instead of 0 (logprobs at most 3e-6 apart
    at the Qwen2.5-0.5B shape in float32)."""
    return first_update_micros(model, batch, first_minibatches, micro, no_grad_budget(model, micro_tokens))


@torch.no_grad()
def forward_logprobs(model, batch: TokenBatch, temperature: float, micro: int, bf16: bool,
                     micros: list[list[int]] | None = None, truncation: Truncation = NO_TRUNCATION,
                     micro_tokens: int | str | None = "auto") -> torch.Tensor:
    """``[B, T]``: each forwarded row's logprobs under ``model`` (no grad, 0 on padding), with the update's
    temperature, truncation (top-k / top-p) and precision, over ``micros`` (row ids; default: the
    length-sorted plan of all rows), a group's prompt computed once (``rlvr.models.prefix_share``)."""
    out = torch.zeros_like(batch.loss_mask, dtype=torch.float32)
    if micros is None:
        micros = update_micro_batches(model, batch, list(range(len(batch))), micro, micro_tokens)
    with hooks.reuse_weights(), shared_prefixes() as prefix:
        for rows in micros:
            mb = batch.rows(rows).to(model.device)
            lp, _ = token_logprobs(model, mb.input_ids, mb.attention_mask, temperature, bf16=bf16, wanted=mb.loss_mask,
                                   truncation=truncation, prefix=prefix)
            T = mb.input_ids.shape[1]
            out[rows, :T] = torch.where(mb.attention_mask.bool(), lp.float(), 0.0).to(out.device)
    return out


def reference_logprobs(ref_model, policy, batch: TokenBatch, temperature: float, micro: int, bf16: bool = False,
                       micros: list[list[int]] | None = None, truncation: Truncation = NO_TRUNCATION) -> torch.Tensor:
    """Frozen-reference logprobs ``[B, T]``, computed once per rollout batch in the policy's precision and
    truncation (LoRA: the policy with adapters disabled) over ``micros`` (the trainers pass
    :func:`reference_micros`: the first updates' micro-batches wherever the update's token budget does not bind,
    so that KL is exactly 0 while the policy is still the reference)."""
    with reference_model(policy, ref_model) as model:
        return forward_logprobs(model, batch, temperature, micro, bf16, micros, truncation)


def logprob_mismatch(trainer: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor) -> dict:
    """Mean and max ``|trainer - sampler|`` logprob over the trained tokens (``rollout/logprob_mismatch_*``)."""
    m = mask.bool()
    if not bool(m.any()):
        return {}
    gap = (trainer.double() - sampler.double()).abs()[m]
    return {"rollout/logprob_mismatch_mean": float(gap.mean()), "rollout/logprob_mismatch_max": float(gap.max())}


def recompute_old_logprobs(model, batch: TokenBatch, cfg, bf16: bool, micros: list[list[int]] | None = None,
                           micro_tokens: int | str | None = "auto") -> dict:
    """Replace the sampler's ``old_logprobs`` by the training forward's (no grad), for updates that are
    not on-policy (RL: μ > 1 or several mini-batches; PPO always): the ratio then starts at exactly 1 instead of
    at the sampler/trainer numerical gap (4-8e-3 a token in bf16, enough to clip GSPO's 3e-4 sequence range).
    The engine's logprobs move to ``batch.sampler_logprobs``, where the mismatch correction reads them.
    An asynchronous trainer, whose samples come from older weights, must keep the sampler's logprobs:
    they are the behaviour policy's. The rows are forwarded in the micro-batches the first epoch's updates
    will use (``micros``, see :func:`first_update_micros`), so even shape-dependent GPU kernels give their
    values bit for bit. Returns the sampler-vs-trainer mismatch metrics (``cfg``: the stage, for its
    ``sampling`` and ``micro_batch_size``)."""
    lps = forward_logprobs(model, batch, cfg.sampling.temperature, cfg.micro_batch_size, bf16, micros,
                           Truncation.of(cfg.sampling), micro_tokens)
    met = logprob_mismatch(lps, batch.old_logprobs, batch.loss_mask)
    if batch.sampler_logprobs is None:  # the engine's stay beside π_old: the mismatch correction compares them
        batch.sampler_logprobs = batch.old_logprobs
    batch.old_logprobs = torch.where(batch.loss_mask.bool(), lps, 0.0)
    return met


def sampled_reference_kl(ref_model, policy, batch: TokenBatch, cfg, bf16: bool, rows: int, seed: int, step: int,
                         micro_tokens: int | str | None = "auto") -> dict:
    """``kl/ref`` measured on a subsample, without gradient: ``rows`` of the batch's forwarded rows, drawn by
    (seed, step), forwarded through the policy (before the update: the weights that sampled them) and
    through the reference, in the update's temperature, truncation and precision, and reduced with the
    stage's estimator (``cfg.kl.estimator``) as the token mean over their trained tokens — the figure the
    loss logs at β > 0, on fewer rows. ``kl/ref_rows`` says how many rows it read. ``{}`` when nothing is
    forwarded (every group zero-variance at β = 0)."""
    n = len(batch)
    if n == 0:
        return {}
    pick = sorted(np.random.default_rng([seed, step, 31]).permutation(n)[:rows].tolist())
    sub = batch.subset(pick)
    trunc, temp = Truncation.of(cfg.sampling), cfg.sampling.temperature
    micros = reference_micros(policy, sub, [list(range(len(sub)))], cfg.micro_batch_size, micro_tokens)
    lps = forward_logprobs(policy, sub, temp, cfg.micro_batch_size, bf16, micros, trunc, micro_tokens)
    ref = reference_logprobs(ref_model, policy, sub, temp, cfg.micro_batch_size, bf16, micros, trunc)
    kl = kl_penalty(lps, ref, cfg.kl.estimator, loss_mask=sub.loss_mask)
    lm = sub.loss_mask.float()
    return {"kl/ref": float((kl * lm).sum() / lm.sum().clamp(min=1)), "kl/ref_rows": len(pick)}
