"""Per-token KL estimators to the reference policy, and the adaptive KL coefficient of PPO-RLHF.

Schulman, 2020, "Approximating KL Divergence" (http://joschu.net/blog/kl-approx.html). Tokens are
sampled from the current policy pi; with ``log r = log pi_ref - log pi`` on the sampled token:

    k1 = -log r                  = logp - ref_logp                  (unbiased, high variance, can be < 0)
    k2 = (log r)^2 / 2           = (logp - ref_logp)^2 / 2          (biased, low variance, >= 0)
    k3 = (r - 1) - log r         = exp(ref - logp) - (ref - logp) - 1   (unbiased, low variance, >= 0)

Each estimates KL(pi || pi_ref). GRPO (DeepSeekMath) puts k3 in the loss. As a *loss term* (gradient
through logp), k1 is useless on-policy — its gradient ``d logp`` has expectation zero under pi — so
use k1 only inside the reward (PPO's KL-in-reward, see ``rlvr.advantages.gae.token_rewards``) and
k2 or k3 as a loss. The gradient of k2 w.r.t. logp is ``logp - ref_logp``; that of k3 is ``1 - r``.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

KlKind = Literal["k1", "k2", "k3"]
KL_KINDS: tuple[str, ...] = ("k1", "k2", "k3")


def kl_penalty(
    logprobs: Tensor,
    ref_logprobs: Tensor,
    kind: KlKind = "k3",
    clamp: float | None = 20.0,
    loss_mask: Tensor | None = None,
) -> Tensor:
    """Per-token estimate ``[B, T]`` of KL(pi || pi_ref) on the sampled tokens (formulas: module docstring).

    ``ref_logprobs`` is detached (the reference is frozen). ``clamp`` bounds the log-ratio
    ``ref_logp - logp`` to ``[-clamp, clamp]`` before the estimator is evaluated, so k3's ``exp`` cannot
    overflow (default 20; None disables). With ``loss_mask``, masked-out positions are 0 in value and
    gradient even when padding holds -inf/NaN logprobs. Reduce with ``rlvr.losses.aggregate``.
    """
    if kind not in KL_KINDS:
        raise ValueError(f"kl_penalty: kind must be one of {KL_KINDS}, got {kind!r}")
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"kl_penalty: logprobs shape {tuple(logprobs.shape)} != ref_logprobs {tuple(ref_logprobs.shape)}"
        )
    log_r = ref_logprobs.detach() - logprobs
    if loss_mask is not None:
        if loss_mask.shape != logprobs.shape:
            raise ValueError(
                f"kl_penalty: loss_mask shape {tuple(loss_mask.shape)} != logprobs {tuple(logprobs.shape)}"
            )
        log_r = torch.where(loss_mask.to(torch.bool), log_r, torch.zeros_like(log_r))
    if clamp is not None:
        log_r = log_r.clamp(-clamp, clamp)
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r**2
    return torch.expm1(log_r) - log_r


def adaptive_kl_coef(coef: float, observed_kl: float, target_kl: float, n_steps: int, horizon: int) -> float:
    """Next KL coefficient of the adaptive controller (Ziegler et al., 2019, arXiv:1909.08593, eq. 2).

    ``e = clip(observed_kl / target_kl - 1, -0.2, 0.2)``; ``coef <- coef * (1 + e * n_steps / horizon)``.
    ``observed_kl`` is the mean per-sequence KL of the batch just collected; ``n_steps`` its size.
    """
    if target_kl <= 0 or horizon <= 0:
        raise ValueError(f"adaptive_kl_coef: need target_kl > 0 and horizon > 0, got {target_kl}, {horizon}")
    error = min(max(observed_kl / target_kl - 1.0, -0.2), 0.2)
    return coef * (1.0 + error * n_steps / horizon)
