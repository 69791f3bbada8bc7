"""PPO critic loss (clipped value loss) and explained variance."""

from __future__ import annotations

import torch
from torch import Tensor


def clipped_value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    loss_mask: Tensor,
    clip_eps: float | None = 0.2,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped value loss -> ``(per_token_loss [B, T], metrics)``; 0 where ``loss_mask`` is 0.

        V_clip = V_old + clip(V - V_old, -eps, +eps)
        loss_t = 1/2 * max( (V_t - R_t)^2, (V_clip_t - R_t)^2 )

    PPO's value clipping as in OpenAI baselines' ppo2 and the PPO-for-LMs implementations
    (Ziegler et al., 2019; Ouyang et al., 2022). ``values`` carries the gradient; ``old_values`` (the
    critic at rollout time) and ``returns`` (e.g. from ``rlvr.advantages.gae``) are detached.
    ``clip_eps=None`` gives the plain ``(V - R)^2 / 2``. Reduce with ``rlvr.losses.aggregate``.

    Metrics (over masked tokens): ``value/clip_frac`` (the clipped term is strictly larger, so it
    is the one trained on), ``value/mse`` (mean ``(V - R)^2``), ``value/mean``, ``value/returns_mean``,
    ``value/explained_variance``.
    """
    for name, t in (("old_values", old_values), ("returns", returns), ("loss_mask", loss_mask)):
        if t.shape != values.shape or values.dim() != 2:
            raise ValueError(
                f"clipped_value_loss: {name} shape {tuple(t.shape)} != values [B, T] {tuple(values.shape)}"
            )
    mask = loss_mask.to(device=values.device, dtype=torch.bool)
    zeros = torch.zeros_like(values)
    v = torch.where(mask, values, zeros)
    v_old = torch.where(mask, old_values.detach(), zeros)
    ret = torch.where(mask, returns.detach(), zeros)
    unclipped = (v - ret) ** 2
    if clip_eps is None:
        loss = 0.5 * unclipped
        clipped_wins = torch.zeros_like(mask)
    else:
        v_clip = v_old + torch.clamp(v - v_old, -clip_eps, clip_eps)
        clipped = (v_clip - ret) ** 2
        loss = 0.5 * torch.maximum(unclipped, clipped)
        clipped_wins = clipped.detach() > unclipped.detach()
    loss = torch.where(mask, loss, zeros)
    with torch.no_grad():
        n = mask.sum().clamp(min=1).double()
        stats = torch.stack(
            [
                (mask & clipped_wins).sum() / n,
                torch.where(mask, unclipped.detach(), zeros).sum().double() / n,
                v.detach().sum().double() / n,
                ret.sum().double() / n,
            ]
        ).tolist()
        metrics = dict(zip(["value/clip_frac", "value/mse", "value/mean", "value/returns_mean"], stats))
        metrics["value/explained_variance"] = explained_variance(values, returns, mask)
    return loss, metrics


@torch.no_grad()
def explained_variance(values: Tensor, returns: Tensor, mask: Tensor | None = None) -> float:
    """``1 - Var[R - V] / Var[R]`` over the masked entries (population variances) -> float.

    1 is a perfect critic, 0 is no better than predicting the mean return, < 0 is worse than that.
    NaN when the returns have zero variance (undefined) or nothing is masked in.
    """
    if values.shape != returns.shape:
        raise ValueError(
            f"explained_variance: values {tuple(values.shape)} != returns {tuple(returns.shape)}"
        )
    m = (
        torch.ones_like(values, dtype=torch.bool)
        if mask is None
        else mask.to(device=values.device, dtype=torch.bool)
    )
    if m.shape != values.shape:
        raise ValueError(f"explained_variance: mask {tuple(m.shape)} != values {tuple(values.shape)}")
    v, r = values.detach()[m].double(), returns.detach()[m].double()
    if r.numel() == 0:
        return float("nan")
    var_r = r.var(unbiased=False)
    if float(var_r) == 0.0:
        return float("nan")
    return float(1.0 - (r - v).var(unbiased=False) / var_r)
