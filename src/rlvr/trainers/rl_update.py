"""The policy update of the GRPO family: advantages per algorithm, then clipped-surrogate (+KL,
+entropy) over micro-batches with exact accumulation. Micro-batches are cut from the length-sorted rows
where that saves padded compute (:func:`plan_micro_batches`).

Sequences whose advantage is exactly zero are never forwarded when nothing else (KL, entropy) needs
them — a speed-up only: they still count in the loss's denominators (token-mean: their tokens;
seq-mean: their rows; Dr.GRPO: their rows in the constant), so the gradient is exactly the one of the
whole batch, whatever the fraction of zero-variance groups and whether a KL term forces them in.
DAPO's dynamic sampling is the exception by definition: its batch *is* the informative groups (the
others were filtered out before, see ``trainers.rl.rollout_step``), so they are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from rlvr import advantages as adv_fns
from rlvr.losses.aggregate import aggregate, global_counts
from rlvr.losses.kl import kl_penalty
from rlvr.losses.policy import clipped_surrogate
from rlvr.models.logprobs import token_logprobs
from rlvr.trainers.common import logprob_mismatch, pad_batch


def compute_advantages(loss_cfg, rewards: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Per-trajectory advantages ``[num_groups, G]`` for the configured algorithm."""
    t = loss_cfg.type
    if t in ("grpo",):
        return adv_fns.grpo(rewards, scale=loss_cfg.scale, mask=valid)
    if t in ("dapo", "gspo"):
        return adv_fns.grpo(rewards, scale="group", mask=valid)
    if t == "dr_grpo":
        return adv_fns.dr_grpo(rewards, mask=valid)
    if t == "rloo":
        return adv_fns.rloo(rewards, mask=valid)
    if t == "reinforce_pp":
        return adv_fns.reinforce_pp(rewards, baseline="group" if loss_cfg.group_baseline else "none", mask=valid)
    raise ValueError(f"unknown RL loss type {t!r}")


def clip_range(loss_cfg) -> tuple[float, float, str]:
    """(eps_low, eps_high, level) of the algorithm's clipped surrogate."""
    if loss_cfg.type == "gspo":
        return loss_cfg.eps_low, loss_cfg.eps_high, "sequence"
    if loss_cfg.type == "dapo":
        return loss_cfg.eps_low, loss_cfg.eps_high, "token"
    return loss_cfg.eps, loss_cfg.eps, "token"


@dataclass
class TrainBatch:
    """Trajectories selected for the backward pass (row-aligned lists), plus the ``skipped_masks`` of the
    valid rows that are not forwarded (zero advantage) but count in the loss's denominators.

    Row indices ``0 .. num_rows - 1`` (for :meth:`subset` and mini-batch shuffling) run over the forwarded
    rows first, then the skipped ones; ``len()`` is the number of forwarded rows.
    """

    seqs: list[list[int]]
    masks: list[list[int]]
    old_logprobs: list[list[float]]   # aligned with seqs (0 on prompt positions)
    ref_logprobs: list[list[float]] | None
    advantages: list[float]
    skipped_masks: list[list[int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def num_rows(self) -> int:
        """Rows counted in the denominators: forwarded and skipped."""
        return len(self.seqs) + len(self.skipped_masks)

    def subset(self, rows: list[int]) -> TrainBatch:
        n = len(self.seqs)
        fwd = [i for i in rows if i < n]
        pick = lambda xs: None if xs is None else [xs[i] for i in fwd]
        return TrainBatch(pick(self.seqs), pick(self.masks), pick(self.old_logprobs), pick(self.ref_logprobs),
                          pick(self.advantages), [self.skipped_masks[i - n] for i in rows if i >= n])


def build_train_batch(ro, advantages: torch.Tensor, needs_all: bool, mask_truncated: bool) -> TrainBatch:
    """Flatten rollouts into training rows. Zero-advantage rows are not forwarded unless ``needs_all``
    (KL or entropy terms give them a gradient) but still counted; invalid (infrastructure) verdicts,
    empty completions and, with ``mask_truncated``, truncated ones are not part of the loss at all."""
    adv = advantages.reshape(-1).tolist()
    valid = ro.valid.reshape(-1).tolist()
    rows = TrainBatch([], [], [], None, [])
    for i, (p, c) in enumerate(zip(ro.prompt_ids, ro.completion_ids)):
        if not valid[i] or not c or (mask_truncated and ro.finish_reason[i] == "length"):
            continue
        mask = [0] * len(p) + [1] * len(c)
        if adv[i] == 0.0 and not needs_all:
            rows.skipped_masks.append(mask)
            continue
        rows.seqs.append(p + c)
        rows.masks.append(mask)
        rows.old_logprobs.append([0.0] * len(p) + list(ro.old_logprobs[i]))
        rows.advantages.append(adv[i])
    return rows


SPLIT_OVERHEAD_TOKENS = {"cpu": 64}
"""Fixed cost of one forward/backward call in padded-token equivalents, by device type (others: 4096).
Measured for the tiny models on 2 CPU cores: ~8 ms a call vs ~0.1 ms a token."""


def split_overhead(model) -> int:
    """The per-micro-batch cost (in tokens) that :func:`plan_micro_batches` weighs padding against."""
    device = next(model.parameters()).device.type
    return SPLIT_OVERHEAD_TOKENS.get(device, 4096)


def plan_micro_batches(lengths: list[int], cap: int, overhead: int) -> list[list[int]]:
    """Cut rows into micro-batches of at most ``cap`` rows that minimise padded compute.

    Rows are sorted by length; a micro-batch made of the sorted rows ``[i, j)`` costs
    ``(j - i) * lengths[j - 1] + overhead`` (its padded tokens plus a fixed cost per forward/backward).
    An exact dynamic programme over the cut points, O(n * cap), finds the cheapest cutting. The loss
    does not depend on the cutting (every micro-batch divides by the mini-batch's global denominators);
    only the padding the model computes on does. Returns lists of row indices, shortest rows first.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n = len(order)
    if n == 0:
        return []
    srt = np.array([lengths[i] for i in order], dtype=np.int64)
    best = np.zeros(n + 1, dtype=np.int64)
    cut = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        lo = max(0, j - cap)
        cost = best[lo:j] + (j - np.arange(lo, j)) * srt[j - 1] + overhead
        k = int(cost.argmin())
        best[j], cut[j] = cost[k], lo + k
    micros, j = [], n
    while j > 0:
        micros.append(order[cut[j]:j])
        j = int(cut[j])
    return micros[::-1]


def update_micro_batches(model, batch: TrainBatch, rows: list[int], micro: int) -> list[list[int]]:
    """The micro-batches (as row ids of ``batch``) that :func:`update_minibatch` forwards for the
    mini-batch ``batch.subset(rows)``."""
    fwd = [i for i in rows if i < len(batch)]
    plan = plan_micro_batches([len(batch.seqs[i]) for i in fwd], micro, split_overhead(model))
    return [[fwd[k] for k in m] for m in plan]


@torch.no_grad()
def forward_logprobs(model, batch: TrainBatch, pad_id: int, temperature: float, micro: int, bf16: bool,
                     micros: list[list[int]] | None = None):
    """Per forwarded row, its logprobs under ``model`` (no grad), with the update's temperature and
    precision, over ``micros`` (row ids; default: the length-sorted plan of all rows)."""
    out: list = [None] * len(batch)
    if micros is None:
        micros = update_micro_batches(model, batch, list(range(len(batch))), micro)
    for rows in micros:
        ids, att, _ = pad_batch([batch.seqs[i] for i in rows], pad_id, left=False, device=model.device)
        lp, _ = token_logprobs(model, ids, att, temperature, bf16=bf16)
        for k, i in enumerate(rows):
            out[i] = lp[k, : len(batch.seqs[i])].tolist()
    return out


def reference_logprobs(ref_model, policy, batch: TrainBatch, pad_id: int, temperature: float, micro: int,
                       bf16: bool = False, micros: list[list[int]] | None = None):
    """Frozen-reference logprobs, computed once per rollout batch in the policy's precision (LoRA: the
    policy with adapters disabled) and, given ``micros``, on the first updates' micro-batches, so that
    KL is exactly 0 while the policy is still the reference."""
    if ref_model is not None:
        return forward_logprobs(ref_model, batch, pad_id, temperature, micro, bf16, micros)
    with policy.disable_adapter():
        return forward_logprobs(policy, batch, pad_id, temperature, micro, bf16, micros)


def first_update_micros(model, batch: TrainBatch, first_minibatches: list[list[int]], micro: int):
    """The micro-batches (row ids) of the first epoch's updates, mini-batch after mini-batch."""
    return [m for rows in first_minibatches for m in update_micro_batches(model, batch, rows, micro)]


def recompute_old_logprobs(model, batch: TrainBatch, cfg, pad_id: int, bf16: bool,
                           micros: list[list[int]]) -> dict:
    """Replace the sampler's ``old_logprobs`` by the training forward's (no grad), for updates that are
    not on-policy (μ > 1 or several mini-batches): the ratio then starts at exactly 1 instead of at the
    sampler/trainer numerical gap (4-8e-3 a token in bf16, enough to clip GSPO's 3e-4 sequence range).
    The rows are forwarded in the micro-batches the first epoch's updates will use (``micros``, see
    :func:`first_update_micros`), so even shape-dependent GPU kernels give their values bit for bit.
    An asynchronous trainer, whose samples come from older weights, must keep the sampler's logprobs:
    they are the behaviour policy's. Returns the sampler-vs-trainer mismatch metrics."""
    lps = forward_logprobs(model, batch, pad_id, cfg.sampling.temperature, cfg.micro_batch_size, bf16, micros)
    met = logprob_mismatch(lps, batch.old_logprobs, batch.masks)
    batch.old_logprobs = [[lp if m else 0.0 for lp, m in zip(row, mask)] for row, mask in zip(lps, batch.masks)]
    return met


def micro_loss(model, mb: TrainBatch, cfg, counts_kw: dict, pad_id: int, on_policy: bool, bf16: bool = False):
    """Loss of one micro-batch, already divided by the mini-batch's global denominator."""
    dev = model.device
    ids, att, lm = pad_batch(mb.seqs, pad_id, mb.masks, left=False, device=dev)
    T = ids.shape[1]
    old = torch.tensor([o + [0.0] * (T - len(o)) for o in mb.old_logprobs], device=dev)
    logprobs, entropy = token_logprobs(model, ids, att, cfg.sampling.temperature, with_entropy=True,
                                       bf16=bf16, entropy_grad=bool(cfg.entropy_coef))
    metrics_pre = {}
    if on_policy:  # old = the forward itself (ratio exactly 1); the sampler's logprobs only measure the gap
        gap = torch.where(lm.bool(), (logprobs.detach() - old).abs(), torch.zeros_like(old))
        metrics_pre = {"rollout/logprob_mismatch_sum": float(gap.sum()),
                       "rollout/logprob_mismatch_max": float(gap.max())}
        old = logprobs.detach()
    eps_low, eps_high, level = clip_range(cfg.loss)
    adv = torch.tensor(mb.advantages, dtype=torch.float32, device=dev)
    per_tok, metrics = clipped_surrogate(logprobs, old, adv, lm, eps_low, eps_high, level=level)
    metrics.update(metrics_pre)
    if cfg.kl.beta > 0:
        ref = torch.tensor([r + [0.0] * (T - len(r)) for r in mb.ref_logprobs], device=dev)
        kl = kl_penalty(logprobs, ref, kind=cfg.kl.estimator, loss_mask=lm)
        per_tok = per_tok + cfg.kl.beta * kl
        metrics["kl/ref"] = float((kl.detach() * lm).sum() / lm.sum().clamp(min=1))
    if cfg.entropy_coef:
        per_tok = per_tok - cfg.entropy_coef * entropy
    loss = aggregate(per_tok, lm, cfg.loss.aggregation, **counts_kw)
    metrics["policy/entropy_sum"] = float((entropy.detach() * lm).sum())
    metrics["policy/tokens"] = float(lm.sum())
    return loss, metrics


def update_minibatch(model, batch: TrainBatch, cfg, pad_id: int, on_policy: bool, bf16: bool = False) -> dict:
    """Forward/backward a mini-batch's forwarded rows in length-sorted micro-batches (see
    plan_micro_batches); every micro-batch divides by the denominators of all the mini-batch's rows,
    skipped ones included: exact gradients."""
    micros = update_micro_batches(model, batch, list(range(len(batch))), cfg.micro_batch_size)
    counts = global_counts(torch.tensor([m], dtype=torch.float32) for m in batch.masks + batch.skipped_masks)
    norm_len = cfg.sampling.max_new_tokens if cfg.loss.aggregation == "seq-mean-token-sum-norm" else None
    kw = counts.overrides(cfg.loss.aggregation, norm_len=norm_len)
    agg: dict[str, float] = {}
    total = 0.0
    for m in micros:
        loss, met = micro_loss(model, batch.subset(m), cfg, kw, pad_id, on_policy, bf16)
        loss.backward()
        total += float(loss.detach())
        w = len(m) / len(batch)
        for k, v in met.items():
            if k.endswith("max"):
                agg[k] = max(agg.get(k, v), v)
            elif k.endswith("min"):
                agg[k] = min(agg.get(k, v), v)
            else:
                agg[k] = agg.get(k, 0.0) + (v if k.endswith(("_sum", "/tokens")) else v * w)
    agg["train/loss"] = total
    return agg
