"""Per-pair weights for preference losses: Uni-DPO (quality x performance) and RGPO (reliability).

Use as ``weighted_mean(per_pair_loss, weights)``; both are re-exported by ``rlvr.losses.preference``.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor


def weighted_mean(
    per_pair: Tensor,
    weights: Tensor,
    normalize: Literal["count", "weights"] = "count",
    denominator: float | None = None,
) -> Tensor:
    """``sum_i w_i l_i / D`` -> scalar.

    ``D = B`` (``normalize="count"``, Uni-DPO's ``(w * l).mean()``; the weights change each pair's share
    and the overall scale), ``D = sum_i w_i`` (``normalize="weights"``, a self-normalised mean that
    keeps the loss scale), or ``denominator`` when given — pass the mini-batch's pair count (or weight
    sum) to make gradient accumulation over micro-batches exact. Gradients flow through ``weights``
    only if they carry any (the weight helpers below detach by default).
    """
    if per_pair.shape != weights.shape or per_pair.dim() != 1:
        raise ValueError(
            f"weighted_mean: need per_pair and weights [B], got {tuple(per_pair.shape)}, "
            f"{tuple(weights.shape)}"
        )
    if normalize not in ("count", "weights"):
        raise ValueError(f"weighted_mean: normalize must be 'count' or 'weights', got {normalize!r}")
    total = (weights.to(per_pair.dtype) * per_pair).sum()
    if denominator is not None:
        denom = denominator
    elif normalize == "count":
        denom = per_pair.shape[0]
    else:
        denom = float(weights.detach().sum())
    return total / denom if denom > 0 else total * 0.0


def uni_dpo_quality_weight(quality_margin: Tensor, eta: float = 0.7) -> Tensor:
    """Uni-DPO quality-aware weight ``w_qual = sigma(eta * (s_w - s_l))`` -> ``[B]`` (detached).

    ``quality_margin = s_w - s_l``: the external score margin of the pair (verifier reward, judge or RM
    score). Pairs with a larger quality gap get more weight. (Some summaries say the opposite — "larger gap,
    lower weight"; the paper and its code weight *up* large margins, which is what we do.)
    With binary verifier rewards every correct-vs-wrong pair has margin 1: the weight is a constant.
    """
    qm = quality_margin.detach()
    if not qm.is_floating_point():
        qm = qm.to(torch.get_default_dtype())
    return torch.sigmoid(eta * qm)


def uni_dpo_performance_weight(
    policy_margin: Tensor,
    beta: float = 2.0,
    tau_ref: float = 1.0,
    gamma: float = 3.0,
    detach: bool = True,
) -> Tensor:
    """Uni-DPO performance-aware (focal) weight ``w_perf = (1 - sigma(beta * m - tau_ref))^gamma`` -> ``[B]``.

    ``policy_margin m = logp_w - logp_l`` under the current policy (reference-free; Uni-DPO uses
    length-averaged logprobs with beta = 2). Pairs the model already ranks right by more than
    ``tau_ref / beta`` are down-weighted, the ones it gets wrong keep weight near 1 (focal loss,
    Lin et al., 2017). The reference code differentiates through this factor; we detach by default so
    it is a pure re-weighting (``detach=False`` reproduces the reference code).
    """
    m = policy_margin.detach() if detach else policy_margin
    return (1 - torch.sigmoid(beta * m - tau_ref)) ** gamma


def uni_dpo_weights(
    quality_margin: Tensor,
    policy_margin: Tensor,
    beta: float = 2.0,
    eta: float = 0.7,
    tau_ref: float = 1.0,
    gamma: float = 3.0,
    detach: bool = True,
) -> Tensor:
    """Uni-DPO per-pair weight ``w = w_qual * w_perf`` -> ``[B]``.

    Peng et al., 2025/2026, "Uni-DPO: A Unified Paradigm for Dynamic Preference Optimization of LLMs"
    (ICLR 2026, arXiv:2506.10054; github.com/pspdada/Uni-DPO). The full objective is
    ``mean_i[-w_i log sigma(beta h_i)] + calibrated NLL`` (:func:`uni_dpo_calibrated_nll`), i.e.
    ``weighted_mean(dpo(...)[0], uni_dpo_weights(...))`` (label_smoothing 0). Defaults (eta 0.7,
    tau_ref 1.0, gamma 3.0, beta 2.0) are those of the authors' Llama-3-8B-Instruct config.
    """
    if quality_margin.shape != policy_margin.shape or quality_margin.dim() != 1:
        raise ValueError(
            f"uni_dpo_weights: need two [B] tensors, got {tuple(quality_margin.shape)}, "
            f"{tuple(policy_margin.shape)}"
        )
    w_qual = uni_dpo_quality_weight(quality_margin, eta).to(policy_margin.dtype)
    return w_qual * uni_dpo_performance_weight(policy_margin, beta, tau_ref, gamma, detach)


def uni_dpo_calibrated_nll(
    policy_chosen_logprobs: Tensor,
    ref_chosen_logprobs: Tensor,
    chosen_scores: Tensor,
    tau_good: float,
    lam: float = 0.001,
) -> Tensor:
    """Uni-DPO calibrated NLL ``lam * 1[ref_logp_w > logp_w] * 1[s_w >= tau_good] * (-logp_w)`` -> ``[B]``.

    An SFT term on the chosen response that is active only when its likelihood has fallen below the
    reference (likelihood displacement) *and* it is a genuinely good response (score >= tau_good).
    The indicators carry no gradient.
    """
    with torch.no_grad():
        active = (ref_chosen_logprobs.detach() > policy_chosen_logprobs.detach()) & (
            chosen_scores.detach() >= tau_good
        )
    return lam * active.to(policy_chosen_logprobs.dtype) * (-policy_chosen_logprobs)


class RgpoWeights(NamedTuple):
    """Output of :func:`rgpo_weights` (all detached)."""

    weights: Tensor
    """``[B]`` consensus strength ``|2q - 1|`` in [0, 1]: the per-pair loss weight."""
    label_smoothing: Tensor
    """``[B]`` ``min(q, 1 - q)``: per-pair cDPO smoothing for ``dpo(label_smoothing=...)`` (after swaps)."""
    swap: Tensor
    """``[B]`` bool: the inferred label contradicts the recorded one (swap chosen and rejected)."""
    posterior: Tensor
    """``[B]`` q = P(the recorded chosen is truly better | votes)."""
    reliability: Tensor
    """``[K]`` estimated probability that each annotator votes correctly."""


@torch.no_grad()
def rgpo_weights(
    votes: Tensor,
    num_iters: int = 20,
    prior_reliability: float = 0.8,
    prior_strength: float = 2.0,
) -> RgpoWeights:
    """RGPO-style reliability weights from several annotators' votes on each pair -> :class:`RgpoWeights`.

    ``votes [B, K]``: +1 if annotator k prefers the recorded chosen, -1 if it prefers the rejected, 0 if
    it did not vote. Annotators may be humans, LLM judges, reward models or verifiers.

    Source: Huang et al., ICML 2026, "Reliability-Aware LLM Alignment from Inconsistent Human Feedback"
    (RGPO) — the paper's equations were not available to us, only its
    abstract: "estimate annotator reliability and infer latent ground-truth labels" and "modulate the
    objective by the consensus level". This is our concrete reading of it:

    1. One-coin Dawid-Skene EM (Dawid & Skene, 1979): annotator k is right with probability eta_k.
       E-step ``q_i = sigma(sum_k v_ik log(eta_k / (1 - eta_k)))``; M-step ``eta_k`` = expected fraction
       of correct votes, with a Beta prior of mean ``prior_reliability`` and weight ``prior_strength``.
    2. Latent label: swap the pair when ``q_i < 1/2``.
    3. Weight ``|2 q_i - 1|`` (0 for a split vote, 1 for certain consensus) for ``weighted_mean``, and
       adaptive regularisation through per-pair label smoothing ``min(q_i, 1 - q_i)`` for ``dpo``: a
       low-consensus pair pulls its margin towards 0 instead of pushing it up.
    """
    if votes.dim() != 2:
        raise ValueError(f"rgpo_weights: votes must be [B, K], got {tuple(votes.shape)}")
    v = votes.detach().to(torch.float64)
    if not bool(((v == 1) | (v == -1) | (v == 0)).all()):
        raise ValueError("rgpo_weights: votes must be +1, -1 or 0")
    if not 0.5 <= prior_reliability < 1.0:
        raise ValueError(f"rgpo_weights: prior_reliability must lie in [0.5, 1), got {prior_reliability}")
    present = v != 0
    a, b = prior_reliability * prior_strength, (1 - prior_reliability) * prior_strength
    eta = torch.full((v.shape[1],), prior_reliability, dtype=torch.float64, device=v.device)
    q = torch.full((v.shape[0],), 0.5, dtype=torch.float64, device=v.device)
    for _ in range(max(num_iters, 1)):
        q = torch.sigmoid((v * torch.log(eta / (1 - eta))).sum(dim=1))
        correct = torch.where(v > 0, q[:, None], 1 - q[:, None]) * present
        eta = ((correct.sum(dim=0) + a) / (present.sum(dim=0) + a + b)).clamp(1e-3, 1 - 1e-3)
    dtype = votes.dtype if votes.is_floating_point() else torch.get_default_dtype()
    return RgpoWeights(
        weights=(2 * q - 1).abs().to(dtype),
        label_smoothing=torch.minimum(q, 1 - q).to(dtype),
        swap=q < 0.5,
        posterior=q.to(dtype),
        reliability=eta.to(dtype),
    )
