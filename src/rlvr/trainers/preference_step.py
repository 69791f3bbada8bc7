"""The update of the preference trainer: one concatenated forward pass for chosen and rejected, the
configured loss (dpo, ipo, simpo, orpo, cpo; kto on unpaired examples), per-pair weights (Uni-DPO,
RGPO) and exact accumulation over micro-batches (every micro-batch divides by the step's pair count).

Reference log-probabilities are never computed here: the trainer caches them once, before the first
step (see :func:`cache_logps`), and passes the cached rows in.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.losses.preference import (
    cpo,
    dpo,
    ipo,
    kto,
    kto_reference_point,
    orpo,
    rgpo_weights,
    sequence_logps,
    simpo,
    uni_dpo_calibrated_nll,
    uni_dpo_weights,
    weighted_mean,
)
from rlvr.models.logprobs import token_logprobs
from rlvr.trainers.common import pad_batch

REFERENCE_FREE = ("simpo", "orpo", "cpo")
UNI_DPO_TAU_GOOD = 0.5  # the calibrated NLL applies to chosen responses scored >= this (verifier: passed)


def needs_reference(loss_type: str) -> bool:
    """Whether the loss reads reference log-probabilities (simpo, orpo, cpo do not)."""
    return loss_type not in REFERENCE_FREE


@dataclass
class PairData:
    """Training rows for the paired losses; every tensor is indexed by pair."""

    chosen: list[tuple[list[int], list[int]]]     # (ids, loss_mask)
    rejected: list[tuple[list[int], list[int]]]
    start: torch.Tensor          # [N, 2] summed logps (chosen, rejected) of the policy before training = reference
    margin: torch.Tensor         # [N] quality margin for Uni-DPO
    chosen_score: torch.Tensor   # [N]
    weight: torch.Tensor         # [N] fixed per-pair weight (RGPO), 1 otherwise
    smoothing: torch.Tensor      # [N] per-pair label smoothing (RGPO), 0 otherwise

    def __len__(self) -> int:
        return len(self.chosen)


@dataclass
class UnpairedData:
    """Training rows for KTO: the examples and their mismatched KL rows (prompt i, completion of j)."""

    rows: list[tuple[list[int], list[int]]]
    kl_rows: list[tuple[list[int], list[int]]]
    desirable: torch.Tensor      # [N] bool
    start: torch.Tensor          # [N] reference summed logps
    kl_start: torch.Tensor       # [N] reference summed logps of the KL rows

    def __len__(self) -> int:
        return len(self.rows)


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def seq_logps(model, rows: list[tuple[list[int], list[int]]], pad_id: int, bf16: bool = False):
    """One forward pass over ``rows`` -> (summed logps [R], completion lengths [R]) on the model's device."""
    ids, att, lm = pad_batch([r[0] for r in rows], pad_id, [r[1] for r in rows], left=False,
                             device=model_device(model))
    lp, _ = token_logprobs(model, ids, att, 1.0, bf16=bf16)
    return sequence_logps(lp, lm), lm.sum(dim=1)


def pair_logps(model, chosen, rejected, pad_id: int, bf16: bool = False):
    """Chosen and rejected of m pairs in ONE concatenated forward -> (pc, pr, lc, lr), each [m]."""
    s, n = seq_logps(model, list(chosen) + list(rejected), pad_id, bf16)
    m = len(chosen)
    return s[:m], s[m:], n[:m], n[m:]


@torch.no_grad()
def cache_logps(model, rows, pad_id: int, micro: int, bf16: bool = False) -> torch.Tensor:
    """Summed logps of every row under ``model`` (no grad), in micro-batches sorted by length -> [R]."""
    out = torch.zeros(len(rows))
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    for s in range(0, len(order), micro):
        idx = order[s:s + micro]
        lp, _ = seq_logps(model, [rows[i] for i in idx], pad_id, bf16)
        out[idx] = lp.float().cpu()
    return out


def rgpo_tables(votes: list[list[int] | None]):
    """RGPO weights, smoothing and swaps for a whole dataset (EM over all pairs at once)."""
    width = max((len(v) for v in votes if v), default=1)
    table = torch.tensor([(v or [1]) + [0] * (width - len(v or [1])) for v in votes], dtype=torch.float32)
    return rgpo_weights(table)


def pair_losses(cfg, pc, pr, rc, rr, lc, lr, smoothing):
    """``(per_pair_loss [m], metrics)`` of the configured paired loss (lengths as floats)."""
    t = cfg.type
    lcf, lrf = lc.to(pc.dtype).clamp(min=1), lr.to(pr.dtype).clamp(min=1)
    if t == "dpo":
        ls = torch.clamp(smoothing, min=cfg.label_smoothing) if cfg.label_smoothing or bool(smoothing.any()) else 0.0
        return dpo(pc, pr, rc, rr, cfg.beta, label_smoothing=ls)
    if t in ("ipo", "kto"):   # kto here only scores held-out pairs (implicit reward beta * log-ratio)
        return (ipo(pc, pr, rc, rr, cfg.beta, lc, lr) if t == "ipo" else dpo(pc, pr, rc, rr, cfg.beta))
    if t == "simpo":
        return simpo(pc, pr, lc, lr, cfg.beta, cfg.gamma, label_smoothing=smoothing)
    if t == "orpo":
        return orpo(-pc / lcf, pc / lcf, pr / lrf, cfg.lam)
    if t == "cpo":
        return cpo(pc, pr, -pc / lcf, cfg.beta, cfg.nll_weight, label_smoothing=smoothing)
    raise ValueError(f"unknown preference loss {t!r}")


def pair_weights(wcfg, pc, pr, lc, lr, margin, fixed):
    """Per-pair weights [m]: 1 (none), RGPO's fixed reliability weight, or Uni-DPO's quality x performance."""
    if wcfg.type == "uni_dpo":
        policy_margin = pc.detach() / lc.clamp(min=1) - pr.detach() / lr.clamp(min=1)
        return uni_dpo_weights(margin, policy_margin, wcfg.perf_beta, wcfg.eta, wcfg.tau_ref, wcfg.focal_gamma)
    if wcfg.type == "rgpo":
        return fixed
    return torch.ones_like(pc.detach())


def _accumulate(agg: dict, met: dict, w: float) -> None:
    for k, v in met.items():
        agg[k] = agg.get(k, 0.0) + float(v) * w


def paired_step(model, data: PairData, idx: list[int], stage, pad_id: int, bf16: bool) -> dict:
    """Forward/backward one optimizer step's pairs in micro-batches; returns step-mean metrics."""
    order = sorted(idx, key=lambda i: len(data.chosen[i][0]) + len(data.rejected[i][0]))
    micros = [order[s:s + stage.micro_batch_size] for s in range(0, len(order), stage.micro_batch_size)]
    total = len(idx)
    agg: dict[str, float] = {}
    for mb in micros:
        pc, pr, lc, lr = pair_logps(model, [data.chosen[i] for i in mb], [data.rejected[i] for i in mb],
                                    pad_id, bf16)
        dev = pc.device
        rc, rr = data.start[mb, 0].to(dev), data.start[mb, 1].to(dev)
        per_pair, met = pair_losses(stage.loss, pc, pr, rc, rr, lc, lr, data.smoothing[mb].to(dev))
        w = pair_weights(stage.weighting, pc, pr, lc, lr, data.margin[mb].to(dev), data.weight[mb].to(dev))
        loss = weighted_mean(per_pair, w, denominator=total)
        if stage.weighting.type == "uni_dpo" and stage.weighting.nll_lambda > 0:
            nll = uni_dpo_calibrated_nll(pc, rc, data.chosen_score[mb].to(dev), UNI_DPO_TAU_GOOD,
                                         stage.weighting.nll_lambda)
            loss = loss + nll.sum() / total
        loss.backward()
        with torch.no_grad():
            met = dict(met)
            met["train/loss"] = float(loss) * total / len(mb)
            met["weights/mean"] = float(w.mean())
            met["pathology/chosen_logp_delta"] = float((pc - rc).mean())
            met["pathology/rejected_logp_delta"] = float((pr - rr).mean())
            met["length/chosen_tokens"] = float(lc.float().mean())
            met["length/rejected_tokens"] = float(lr.float().mean())
        _accumulate(agg, met, len(mb) / total)
    return agg


def kto_step(model, data: UnpairedData, idx: list[int], stage, pad_id: int, bf16: bool) -> dict:
    """KTO over one step's examples: z0 from the step's mismatched rows (no grad), then micro-batches."""
    micro = stage.micro_batch_size
    with torch.no_grad():
        kl_pol = torch.cat([seq_logps(model, [data.kl_rows[i] for i in idx[s:s + micro]], pad_id, bf16)[0]
                            for s in range(0, len(idx), micro)])
    z0 = kto_reference_point(kl_pol, data.kl_start[idx].to(kl_pol.device))
    cfg = stage.loss
    agg: dict[str, float] = {}
    order = sorted(idx, key=lambda i: len(data.rows[i][0]))
    for s in range(0, len(order), micro):
        mb = order[s:s + micro]
        lp, _ = seq_logps(model, [data.rows[i] for i in mb], pad_id, bf16)
        start, d = data.start[mb].to(lp.device), data.desirable[mb].to(lp.device)
        per, met = kto(lp, start, d, z0, cfg.beta, cfg.lambda_d, cfg.lambda_u)
        loss = per.sum() / len(idx)
        loss.backward()
        met = dict(met)
        met["train/loss"] = float(loss.detach()) * len(idx) / len(mb)
        delta = lp.detach() - start
        if bool(d.any()):
            met["pathology/chosen_logp_delta"] = float(delta[d].mean())
        if bool((~d).any()):
            met["pathology/rejected_logp_delta"] = float(delta[~d].mean())
        _accumulate(agg, met, len(mb) / len(idx))
    return agg


@torch.no_grad()
def pair_eval(model, loss_cfg, chosen, rejected, start: torch.Tensor, pad_id: int, micro: int,
              bf16: bool = False) -> dict:
    """Held-out pair metrics: the loss's implicit-reward accuracy and margin, raw logp accuracy, drift."""
    if not chosen:
        return {}
    pcs, prs, lcs, lrs = [], [], [], []
    for s in range(0, len(chosen), micro):
        pc, pr, lc, lr = pair_logps(model, chosen[s:s + micro], rejected[s:s + micro], pad_id, bf16)
        pcs.append(pc), prs.append(pr), lcs.append(lc), lrs.append(lr)
    pc, pr, lc, lr = (torch.cat(x) for x in (pcs, prs, lcs, lrs))
    rc, rr = start[:, 0].to(pc.device), start[:, 1].to(pc.device)
    per, met = pair_losses(loss_cfg, pc, pr, rc, rr, lc, lr, torch.zeros_like(pc))
    return {"heldout/accuracy": met["rewards/accuracy"], "heldout/margin": met["rewards/margin"],
            "heldout/loss": float(per.mean()), "heldout/logp_accuracy": float((pc > pr).float().mean()),
            "heldout/chosen_logp_delta": float((pc - rc).mean()),
            "heldout/rejected_logp_delta": float((pr - rr).mean()), "heldout/pairs": len(chosen)}
