"""Per-token advantages for PPO: GAE, discounted returns, whitening, sparse-to-token rewards.

Shapes: ``[B, T]`` tensors over a padded batch; ``loss_mask [B, T]`` is 1 on tokens the policy
generated and is trained on, 0 on prompt, padding and tool output. The recursions below run over the
masked tokens of each row **only**, in order: a position with ``loss_mask == 0`` is skipped (it
gets advantage and return 0, and the token after it sees the value of the next *masked* token), so
left padding, right padding, a prompt in front and tool output in the middle of a multi-turn
trajectory are all handled alike. The last masked token of a row is terminal (next value 0).
Everything here is computed without gradient (inputs are detached).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _check_bt(fn: str, loss_mask: Tensor, **tensors: Tensor) -> Tensor:
    """Check that every tensor is ``[B, T]`` like ``loss_mask``; return the bool mask."""
    if loss_mask.dim() != 2:
        raise ValueError(f"{fn}: loss_mask must be [B, T], got {tuple(loss_mask.shape)}")
    for name, t in tensors.items():
        if t.shape != loss_mask.shape:
            raise ValueError(
                f"{fn}: {name} shape {tuple(t.shape)} != loss_mask shape {tuple(loss_mask.shape)}"
            )
    return loss_mask.to(dtype=torch.bool)


def _float(t: Tensor) -> Tensor:
    """Detach and promote to at least float32."""
    t = t.detach()
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) or not t.is_floating_point() else t


@torch.no_grad()
def gae(
    rewards: Tensor, values: Tensor, loss_mask: Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[Tensor, Tensor]:
    """Generalised Advantage Estimation -> ``(advantages [B, T], returns [B, T])``.

    Schulman et al., 2016, "High-Dimensional Continuous Control Using Generalized Advantage
    Estimation" (arXiv:1506.02438). Over the masked tokens t_1 < t_2 < ... < t_n of a row:

        delta_k = r_{t_k} + gamma * V_{t_{k+1}} - V_{t_k}        (V_{t_{n+1}} = 0, terminal)
        A_k     = delta_k + gamma * lam * A_{k+1}                (A_{n+1} = 0)
        R_k     = A_k + V_{t_k}                                  (the value-function target)

    Positions with ``loss_mask == 0`` get A = R = 0 and are skipped by the recursion. Rewards placed on
    such positions would be silently lost, so a non-zero reward there is an error: put the sequence
    reward on the last policy token (see :func:`token_rewards`).
    """
    mask = _check_bt("gae", loss_mask, rewards=rewards, values=values)
    r, v = _float(rewards), _float(values)
    if bool((r[~mask] != 0).any()):
        raise ValueError("gae: non-zero rewards at positions where loss_mask == 0 would be ignored")
    bsz, length = mask.shape
    adv = torch.zeros_like(r)
    next_value = torch.zeros(bsz, dtype=r.dtype, device=r.device)
    next_adv = torch.zeros_like(next_value)
    for t in range(length - 1, -1, -1):
        m = mask[:, t]
        delta = r[:, t] + gamma * next_value - v[:, t]
        a = delta + gamma * lam * next_adv
        adv[:, t] = torch.where(m, a, torch.zeros_like(a))
        next_value = torch.where(m, v[:, t], next_value)
        next_adv = torch.where(m, a, next_adv)
    returns = torch.where(mask, adv + v, torch.zeros_like(adv))
    return adv, returns


@torch.no_grad()
def discounted_returns(rewards: Tensor, loss_mask: Tensor, gamma: float = 1.0) -> Tensor:
    """Reward-to-go ``G_k = sum_{j >= k} gamma^(j-k) r_{t_j}`` over each row's masked tokens -> ``[B, T]``.

    Equals :func:`gae` with ``values = 0`` and ``lam = 1``. Masked-out positions get 0.
    """
    return gae(rewards, torch.zeros_like(rewards, dtype=_float(rewards).dtype), loss_mask, gamma, 1.0)[0]


@torch.no_grad()
def whiten(x: Tensor, mask: Tensor | None = None, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` over the masked entries; masked-out entries become 0.

    Mean and variance are the population statistics of the entries where ``mask`` is true (all
    entries when ``mask`` is None). With ``shift_mean=False`` the mean is added back after scaling
    (``x / std`` up to the mean), as in the PPO-for-LMs implementations (Ziegler et al., 2019).
    Any shape; ``mask`` must match ``x``.
    """
    x = _float(x)
    m = torch.ones_like(x, dtype=torch.bool) if mask is None else mask.to(device=x.device, dtype=torch.bool)
    if m.shape != x.shape:
        raise ValueError(f"whiten: mask shape {tuple(m.shape)} != x shape {tuple(x.shape)}")
    n = m.sum().clamp(min=1).to(x.dtype)
    xm = torch.where(m, x, torch.zeros_like(x))
    mean = xm.sum() / n
    var = (torch.where(m, x - mean, torch.zeros_like(x)) ** 2).sum() / n
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return torch.where(m, out, torch.zeros_like(out))


@torch.no_grad()
def token_rewards(
    sequence_rewards: Tensor, loss_mask: Tensor, kl: Tensor | None = None, kl_coef: float = 0.0
) -> Tensor:
    """Sequence rewards onto tokens: ``r_t = -kl_coef * kl_t + [t is the last masked token] R`` -> ``[B, T]``.

    The per-token KL-in-reward shaping of PPO for language models (Ziegler et al., 2019,
    arXiv:1909.08593; Ouyang et al., 2022): ``kl [B, T]`` is a per-token KL estimate to the reference
    (e.g. ``rlvr.losses.kl.kl_penalty(..., kind="k1")``). Rows without any masked token get no reward.
    """
    mask = _check_bt("token_rewards", loss_mask)
    if sequence_rewards.shape != (mask.shape[0],):
        raise ValueError(
            f"token_rewards: sequence_rewards must be [B]={mask.shape[0]}, "
            f"got {tuple(sequence_rewards.shape)}"
        )
    seq_r = _float(sequence_rewards)
    out = torch.zeros(mask.shape, dtype=seq_r.dtype, device=seq_r.device)
    if kl is not None:
        if kl.shape != mask.shape:
            raise ValueError(
                f"token_rewards: kl shape {tuple(kl.shape)} != loss_mask shape {tuple(mask.shape)}"
            )
        out = torch.where(mask, -kl_coef * _float(kl), out)
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).amax(dim=1)
    has = last >= 0
    rows = torch.arange(mask.shape[0], device=mask.device)[has]
    out[rows, last[has]] += seq_r[has]
    return out
