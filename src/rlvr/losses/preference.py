"""Preference losses over per-sequence log-probabilities: DPO, IPO, SimPO, KTO, ORPO, CPO.

Inputs are ``[B]`` tensors, one entry per pair (or per example for KTO): ``*_logprobs`` are summed
log-probabilities of a completion's tokens unless a docstring says "mean" (use
:func:`reduce_logprobs` to build them from per-token logprobs). Each loss returns
``(per_pair_loss [B], metrics)``; reduce with ``.mean()`` or ``weighted_mean`` (per-pair weights:
Uni-DPO, RGPO — see ``rlvr.losses.pair_weights``, re-exported here).

Metrics (Python floats): ``rewards/chosen`` and ``rewards/rejected`` (mean implicit reward, e.g.
``beta * (logp - ref_logp)`` for DPO), ``rewards/margin`` (mean chosen - rejected),
``rewards/accuracy`` (fraction of pairs with chosen reward > rejected reward), and
``logprobs/chosen``, ``logprobs/rejected`` (mean policy logprobs: both falling is likelihood displacement).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from rlvr.losses.pair_weights import (
    RgpoWeights,
    rgpo_weights,
    uni_dpo_calibrated_nll,
    uni_dpo_performance_weight,
    uni_dpo_quality_weight,
    uni_dpo_weights,
    weighted_mean,
)

__all__ = [
    "RgpoWeights",
    "constrained_po",
    "cpo",
    "dpo",
    "ipo",
    "kto",
    "kto_reference_point",
    "log1mexp",
    "orpo",
    "preference_metrics",
    "reduce_logprobs",
    "rgpo_weights",
    "simpo",
    "uni_dpo_calibrated_nll",
    "uni_dpo_performance_weight",
    "uni_dpo_quality_weight",
    "uni_dpo_weights",
    "weighted_mean",
]


def reduce_logprobs(
    per_token_logprobs: Tensor, loss_mask: Tensor, reduce: Literal["sum", "mean"] = "sum"
) -> Tensor:
    """``[B, T] -> [B]``: sum (or mean) of the per-token logprobs over each row's masked-in tokens."""
    if per_token_logprobs.shape != loss_mask.shape or per_token_logprobs.dim() != 2:
        raise ValueError(
            f"reduce_logprobs: need matching [B, T] tensors, got {tuple(per_token_logprobs.shape)}, "
            f"{tuple(loss_mask.shape)}"
        )
    m = loss_mask.to(torch.bool)
    total = torch.where(m, per_token_logprobs, torch.zeros_like(per_token_logprobs)).sum(dim=1)
    if reduce == "sum":
        return total
    if reduce == "mean":
        return total / m.sum(dim=1).clamp(min=1).to(total.dtype)
    raise ValueError(f"reduce_logprobs: reduce must be 'sum' or 'mean', got {reduce!r}")


def _check(fn: str, **tensors: Tensor) -> int:
    """All tensors must be 1-D with the same length; return it."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    first = next(iter(shapes.values()))
    if len(first) != 1 or any(s != first for s in shapes.values()):
        raise ValueError(f"{fn}: all inputs must be [B] with the same B, got {shapes}")
    return first[0]


def _smoothing(fn: str, label_smoothing: float | Tensor, like: Tensor) -> float | Tensor:
    """Validate a label-smoothing factor: a float or a per-pair ``[B]`` tensor, each in [0, 1]."""
    if isinstance(label_smoothing, Tensor):
        if label_smoothing.shape != like.shape:
            raise ValueError(
                f"{fn}: label_smoothing must be a float or [B], got {tuple(label_smoothing.shape)}"
            )
        if bool(((label_smoothing < 0) | (label_smoothing > 1)).any()):
            raise ValueError(f"{fn}: label_smoothing values must lie in [0, 1]")
        return label_smoothing.detach().to(like.dtype)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{fn}: label_smoothing must lie in [0, 1], got {label_smoothing}")
    return label_smoothing


def _sigmoid_loss(logits: Tensor, label_smoothing: float | Tensor) -> Tensor:
    """``-(1 - ls) log sigma(x) - ls log sigma(-x)`` (cDPO / robust label smoothing)."""
    return -(1 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)


@torch.no_grad()
def preference_metrics(
    chosen_rewards: Tensor,
    rejected_rewards: Tensor,
    chosen_logprobs: Tensor | None = None,
    rejected_logprobs: Tensor | None = None,
) -> dict[str, float]:
    """rewards/{chosen,rejected,margin,accuracy}, logprobs/{chosen,rejected}: Python floats, means over pairs."""
    c, r = chosen_rewards.detach().double(), rejected_rewards.detach().double()
    stats = [c.mean(), r.mean(), (c - r).mean(), (c > r).double().mean()]
    keys = ["rewards/chosen", "rewards/rejected", "rewards/margin", "rewards/accuracy"]
    if chosen_logprobs is not None and rejected_logprobs is not None:
        stats += [chosen_logprobs.detach().double().mean(), rejected_logprobs.detach().double().mean()]
        keys += ["logprobs/chosen", "logprobs/rejected"]
    if c.numel() == 0:
        return {k: float("nan") for k in keys}
    return dict(zip(keys, torch.stack(stats).tolist()))


def dpo(
    policy_chosen_logprobs: Tensor,
    policy_rejected_logprobs: Tensor,
    ref_chosen_logprobs: Tensor,
    ref_rejected_logprobs: Tensor,
    beta: float = 0.1,
    label_smoothing: float | Tensor = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """DPO sigmoid loss (Rafailov et al., 2023, arXiv:2305.18290) with cDPO label smoothing -> ``[B]``.

        h = (logp_w - ref_logp_w) - (logp_l - ref_logp_l)
        loss = -(1 - ls) log sigma(beta h) - ls log sigma(-beta h)

    ``ls`` (Mitchell, 2023, "A note on DPO with noisy preferences", cDPO) is the assumed probability
    that the label is flipped: a float, or a per-pair ``[B]`` tensor (e.g. RGPO's reliability-derived
    smoothing). Implicit rewards: ``beta * (logp - ref_logp)``. Inputs are summed logprobs ``[B]``.
    """
    _check(
        "dpo", pc=policy_chosen_logprobs, pr=policy_rejected_logprobs, rc=ref_chosen_logprobs, rr=ref_rejected_logprobs
    )
    ls = _smoothing("dpo", label_smoothing, policy_chosen_logprobs)
    chosen = policy_chosen_logprobs - ref_chosen_logprobs.detach()
    rejected = policy_rejected_logprobs - ref_rejected_logprobs.detach()
    losses = _sigmoid_loss(beta * (chosen - rejected), ls)
    metrics = preference_metrics(beta * chosen, beta * rejected, policy_chosen_logprobs, policy_rejected_logprobs)
    return losses, metrics


def ipo(
    policy_chosen_logprobs: Tensor,
    policy_rejected_logprobs: Tensor,
    ref_chosen_logprobs: Tensor,
    ref_rejected_logprobs: Tensor,
    beta: float = 0.1,
    chosen_lengths: Tensor | None = None,
    rejected_lengths: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """IPO loss (Azar et al., 2023, "A General Theoretical Paradigm to Understand Learning from Human
    Preferences", arXiv:2310.12036) -> ``[B]``: ``(h - 1/(2 beta))^2`` with h the DPO log-ratio difference.

    Length handling: the paper writes h with sequence log-likelihoods; TRL's IPO averages the logprobs
    over each completion's tokens, which keeps the target margin ``1/(2 beta)`` on the same scale
    whatever the lengths. This function uses what it is given; pass ``chosen_lengths`` /
    ``rejected_lengths`` (token counts ``[B]``) to divide the policy *and* reference logprobs of each side
    by its length (the TRL convention, which our preference trainer uses).
    """
    _check(
        "ipo", pc=policy_chosen_logprobs, pr=policy_rejected_logprobs, rc=ref_chosen_logprobs, rr=ref_rejected_logprobs
    )
    if (chosen_lengths is None) != (rejected_lengths is None):
        raise ValueError("ipo: pass both chosen_lengths and rejected_lengths, or neither")
    pc, pr, rc, rr = (
        policy_chosen_logprobs,
        policy_rejected_logprobs,
        ref_chosen_logprobs.detach(),
        ref_rejected_logprobs.detach(),
    )
    if chosen_lengths is not None and rejected_lengths is not None:
        _check("ipo", pc=pc, cl=chosen_lengths, rl=rejected_lengths)
        lc = chosen_lengths.to(pc.dtype).clamp(min=1)
        lr = rejected_lengths.to(pc.dtype).clamp(min=1)
        pc, rc, pr, rr = pc / lc, rc / lc, pr / lr, rr / lr
    h = (pc - rc) - (pr - rr)
    losses = (h - 1.0 / (2.0 * beta)) ** 2
    return losses, preference_metrics(beta * (pc - rc), beta * (pr - rr), pc, pr)


def simpo(
    policy_chosen_logprobs: Tensor,
    policy_rejected_logprobs: Tensor,
    chosen_lengths: Tensor,
    rejected_lengths: Tensor,
    beta: float = 2.0,
    gamma: float = 0.5,
    label_smoothing: float | Tensor = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """SimPO loss (Meng et al., 2024, arXiv:2405.14734), reference-free and length-normalised -> ``[B]``.

        loss = -log sigma( beta/|y_w| logp_w - beta/|y_l| logp_l - gamma )

    ``*_logprobs`` are summed logprobs and ``*_lengths`` token counts ``[B]``. Implicit reward:
    ``beta * logp / |y|``. Optional label smoothing as in DPO.
    """
    _check("simpo", pc=policy_chosen_logprobs, pr=policy_rejected_logprobs, cl=chosen_lengths, rl=rejected_lengths)
    ls = _smoothing("simpo", label_smoothing, policy_chosen_logprobs)
    chosen = beta * policy_chosen_logprobs / chosen_lengths.to(policy_chosen_logprobs.dtype).clamp(min=1)
    rejected = beta * policy_rejected_logprobs / rejected_lengths.to(policy_rejected_logprobs.dtype).clamp(min=1)
    losses = _sigmoid_loss(chosen - rejected - gamma, ls)
    return losses, preference_metrics(chosen, rejected, policy_chosen_logprobs, policy_rejected_logprobs)


@torch.no_grad()
def kto_reference_point(kl_policy_logprobs: Tensor, kl_ref_logprobs: Tensor) -> Tensor:
    """KTO reference point ``z0 = max(0, mean_j (logp(y_j|x_i) - ref_logp(y_j|x_i)))`` -> detached scalar.

    Ethayarajh et al., 2024, "KTO" (arXiv:2402.01306), sec. 4: z0 estimates KL(pi || pi_ref) from
    *mismatched* pairs — completion y_j scored under another example's prompt x_i (e.g. the batch's
    completions shifted by one) — so it does not reward the examples it is computed from. Summed logprobs
    ``[M]``. No gradient flows through it. With several processes, average the mean across processes
    before the clamp (as TRL does).
    """
    _check("kto_reference_point", policy=kl_policy_logprobs, ref=kl_ref_logprobs)
    return (kl_policy_logprobs.detach() - kl_ref_logprobs.detach()).mean().clamp(min=0)


def kto(
    policy_logprobs: Tensor,
    ref_logprobs: Tensor,
    desirable: Tensor,
    kl_ref_point: float | Tensor,
    beta: float = 0.1,
    lambda_d: float = 1.0,
    lambda_u: float = 1.0,
) -> tuple[Tensor, dict[str, float]]:
    """KTO loss (Ethayarajh et al., 2024, arXiv:2402.01306) on unpaired examples -> ``[B]``.

        r = logp - ref_logp                 (summed logprobs of the example's completion)
        desirable:   loss = lambda_d * (1 - sigma(beta (r - z0)))
        undesirable: loss = lambda_u * (1 - sigma(beta (z0 - r)))

    i.e. ``lambda_y - v(x, y)`` with the Kahneman-Tversky value v. ``z0 = kl_ref_point`` comes from
    :func:`kto_reference_point` and is treated as a constant. The paper advises
    ``lambda_d n_d / (lambda_u n_u)`` in [1, 4/3]. (Some summaries write KTO without z0; we follow the paper.)

    Metrics: rewards/chosen (mean ``beta r`` over desirable examples), rewards/rejected (over
    undesirable), rewards/margin (their difference; only when both kinds are present — a key is left
    out when its examples are absent), rewards/accuracy (fraction on the right side of z0:
    ``r > z0`` iff desirable), kto/kl_ref_point.
    """
    _check("kto", policy=policy_logprobs, ref=ref_logprobs, desirable=desirable)
    d = desirable.to(device=policy_logprobs.device, dtype=torch.bool)
    z0 = torch.as_tensor(kl_ref_point, dtype=policy_logprobs.dtype, device=policy_logprobs.device).detach()
    r = policy_logprobs - ref_logprobs.detach()
    losses = torch.where(
        d, lambda_d * (1 - torch.sigmoid(beta * (r - z0))), lambda_u * (1 - torch.sigmoid(beta * (z0 - r)))
    )
    with torch.no_grad():
        rew = beta * r.detach().double()
        metrics: dict[str, float] = {"kto/kl_ref_point": float(z0)}
        if bool(d.any()):
            metrics["rewards/chosen"] = float(rew[d].mean())
        if bool((~d).any()):
            metrics["rewards/rejected"] = float(rew[~d].mean())
        if bool(d.any()) and bool((~d).any()):
            metrics["rewards/margin"] = metrics["rewards/chosen"] - metrics["rewards/rejected"]
        if d.numel():
            metrics["rewards/accuracy"] = float(((r.detach() > z0) == d).double().mean())
    return losses, metrics


def log1mexp(x: Tensor) -> Tensor:
    """``log(1 - exp(x))`` for ``x < 0``, stable everywhere (Mächler, 2012); x is clamped to ``<= -tiny``.

    Uses ``log(-expm1(x))`` for ``x > -log 2`` and ``log1p(-exp(x))`` otherwise; each branch is evaluated
    on an input clamped into its own range, so neither can produce inf/NaN gradients.
    """
    x = x.clamp(max=-torch.finfo(x.dtype).tiny)
    cut = -math.log(2.0)
    near_zero = torch.log(-torch.expm1(x.clamp(min=cut)))
    far = torch.log1p(-torch.exp(x.clamp(max=cut)))
    return torch.where(x > cut, near_zero, far)


def orpo(
    chosen_nll_mean: Tensor,
    policy_chosen_logprobs_mean: Tensor,
    policy_rejected_logprobs_mean: Tensor,
    lam: float = 0.1,
) -> tuple[Tensor, dict[str, float]]:
    """ORPO loss (Hong et al., 2024, "ORPO: Monolithic Preference Optimization without Reference Model",
    arXiv:2403.07691) -> ``[B]``: SFT on the chosen response plus an odds-ratio term.

        log odds(y) = lp - log(1 - exp(lp))      with lp the *length-averaged* logp of y (< 0)
        loss = nll_w - lam * log sigma( log odds(y_w) - log odds(y_l) )

    ``chosen_nll_mean`` is the chosen response's token-mean NLL (``[B]``, or a scalar batch token-mean
    as in TRL, broadcast); ``log(1 - exp(lp))`` uses :func:`log1mexp`. Implicit rewards (TRL):
    ``lam * lp``. Extra metrics: ``orpo/log_odds_ratio`` (mean), ``orpo/nll`` (mean).
    """
    _check("orpo", chosen=policy_chosen_logprobs_mean, rejected=policy_rejected_logprobs_mean)
    nll = (
        chosen_nll_mean.expand_as(policy_chosen_logprobs_mean) if chosen_nll_mean.dim() == 0 else chosen_nll_mean
    )
    _check("orpo", nll=nll, chosen=policy_chosen_logprobs_mean)
    lw, ll = policy_chosen_logprobs_mean, policy_rejected_logprobs_mean
    log_odds = (lw - log1mexp(lw)) - (ll - log1mexp(ll))
    losses = nll - lam * F.logsigmoid(log_odds)
    metrics = preference_metrics(lam * lw, lam * ll, lw, ll)
    metrics["orpo/log_odds_ratio"] = (
        float(log_odds.detach().double().mean()) if log_odds.numel() else float("nan")
    )
    metrics["orpo/nll"] = float(nll.detach().double().mean()) if nll.numel() else float("nan")
    return losses, metrics


def cpo(
    policy_chosen_logprobs: Tensor,
    policy_rejected_logprobs: Tensor,
    chosen_nll: Tensor,
    beta: float = 0.1,
    alpha: float = 1.0,
    label_smoothing: float | Tensor = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """CPO loss (Xu et al., 2024, "Contrastive Preference Optimization", arXiv:2401.08417) -> ``[B]``.

        loss = -(1 - ls) log sigma(beta h) - ls log sigma(-beta h) + alpha * nll_w,   h = logp_w - logp_l

    DPO without the reference model (a uniform reference), plus a behaviour-cloning NLL on the chosen
    response (``chosen_nll [B]``: the token-mean NLL as in TRL's CPOTrainer, ``alpha`` = its
    ``cpo_alpha``). This is *Contrastive* PO; the *Constrained* PO of some surveys is unrelated.
    Implicit rewards: ``beta * logp``.
    """
    _check("cpo", pc=policy_chosen_logprobs, pr=policy_rejected_logprobs, nll=chosen_nll)
    ls = _smoothing("cpo", label_smoothing, policy_chosen_logprobs)
    h = policy_chosen_logprobs - policy_rejected_logprobs
    losses = _sigmoid_loss(beta * h, ls) + alpha * chosen_nll
    metrics = preference_metrics(
        beta * policy_chosen_logprobs, beta * policy_rejected_logprobs, policy_chosen_logprobs, policy_rejected_logprobs
    )
    return losses, metrics


def constrained_po(
    policy_chosen_logprobs: Tensor,
    policy_rejected_logprobs: Tensor,
    ref_chosen_logprobs: Tensor,
    ref_rejected_logprobs: Tensor,
    beta: float = 0.1,
    weight: float = 1.0,
    margin: float = 0.0,
    label_smoothing: float | Tensor = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """Constrained Preference Optimization (arXiv:2605.20834) -> ``[B]``: DPO with the policy's own preference
    for the chosen answer as an explicit constraint, enforced by an exact (hinge) penalty.

        h = (logp_w - ref_logp_w) - (logp_l - ref_logp_l)        (DPO's margin: relative to the reference)
        m = logp_w - logp_l                                       (the policy's own preference)
        loss = -(1 - ls) log sigma(beta h) - ls log sigma(-beta h) + weight * max(0, margin - m)

    Built from the method's published description (the paper itself was not available): DPO fits a soft
    margin ranking of log-ratios *relative to the reference*, whose target margin in the policy's own terms
    can be negative — where the reference prefers the rejected answer by more than DPO's margin, the loss
    falls while the policy keeps preferring the rejected answer ("pathological convergence"). The remedy
    puts an explicit constraint back on the objective, ``m >= margin`` for every pair, so the optimum
    prefers the chosen answer absolutely. The hinge is zero (DPO unchanged) on pairs that satisfy it; on a
    violating pair it adds a gradient ``weight`` that raises ``logp_w`` and lowers ``logp_l``. Inputs are
    summed logprobs ``[B]``; ``ls``: per-pair label smoothing as in :func:`dpo` (RGPO's). Metrics add ``constraint/violation`` (share of pairs with ``m < margin``) and
    ``constraint/penalty`` (the mean hinge).
    """
    _check(
        "constrained_po", pc=policy_chosen_logprobs, pr=policy_rejected_logprobs, rc=ref_chosen_logprobs,
        rr=ref_rejected_logprobs,
    )
    losses, metrics = dpo(policy_chosen_logprobs, policy_rejected_logprobs, ref_chosen_logprobs,
                          ref_rejected_logprobs, beta, label_smoothing)
    hinge = torch.clamp(margin - (policy_chosen_logprobs - policy_rejected_logprobs), min=0.0)
    losses = losses + weight * hinge
    h = hinge.detach().double()
    metrics["constraint/violation"] = float((h > 0).double().mean()) if h.numel() else float("nan")
    metrics["constraint/penalty"] = float(h.mean()) if h.numel() else float("nan")
    return losses, metrics
