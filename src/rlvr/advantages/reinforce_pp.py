"""REINFORCE++ advantages (Hu et al., 2025, "REINFORCE++", arXiv:2501.03262).

REINFORCE++ replaces PPO's critic by a *global* (batch-level) normalisation of the returns. Two
forms are provided:

- :func:`reinforce_pp` — one reward per sequence ``[num_groups, G]`` (outcome reward, no per-token KL
  in the reward; use a KL *loss* term instead). ``baseline="none"`` is plain REINFORCE++;
  ``baseline="group"`` is the "REINFORCE++-baseline" variant (group mean subtracted first).
- :func:`reinforce_pp_token` — per-token rewards ``[B, T]`` (e.g. KL-in-reward shaping built with
  ``rlvr.advantages.gae.token_rewards``): discounted reward-to-go, whitened over all masked tokens.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from rlvr.advantages.gae import discounted_returns, whiten
from rlvr.advantages.grpo import _finish, group_mean, group_std, prepare_group_rewards

Baseline = Literal["none", "group"]


def reinforce_pp(
    rewards: Tensor, baseline: Baseline = "none", eps: float = 1e-6, mask: Tensor | None = None
) -> Tensor:
    """REINFORCE++ sequence advantages, batch-normalised; ``[num_groups, G] -> [num_groups, G]``.

    - ``baseline="none"``: ``A_i = (r_i - mean_B) / (std_B + eps)`` with the mean and population std
      over every valid reward of the batch (all groups together). Groups are not special here: a group
      whose samples all got the same reward still gets non-zero advantages when the batch mean differs.
    - ``baseline="group"``: ``c_i = r_i - mean_g`` then ``A_i = c_i / (std_B(c) + eps)`` with std_B the
      population std of all valid ``c`` in the batch. The batch mean of ``c`` is not re-subtracted (it is
      zero up to rounding), so zero-variance groups keep exactly 0 advantages.

    Samples outside ``mask`` get exactly 0.
    """
    if baseline not in ("none", "group"):
        raise ValueError(f"reinforce_pp: baseline must be 'none' or 'group', got {baseline!r}")
    r, m = prepare_group_rewards(rewards, mask, "reinforce_pp")
    flat_m = m.reshape(1, -1)
    if baseline == "none":
        flat_r = r.reshape(1, -1)
        adv = (r - group_mean(flat_r, flat_m)) / (group_std(flat_r, flat_m) + eps)
        return torch.where(m, adv, torch.zeros_like(adv))
    centered = torch.where(m, r - group_mean(r, m), torch.zeros_like(r))
    flat_c = centered.reshape(1, -1)
    count = flat_m.sum().clamp(min=1).to(r.dtype)
    std = ((flat_c**2).sum() / count).sqrt()
    return _finish(centered / (std + eps), r, m)


@torch.no_grad()
def reinforce_pp_token(
    token_rewards: Tensor, loss_mask: Tensor, gamma: float = 1.0, eps: float = 1e-8
) -> tuple[Tensor, Tensor]:
    """Token-level REINFORCE++ -> ``(advantages [B, T], returns [B, T])``.

    ``G_t = sum_{s >= t} gamma^(s-t) r_s`` over the masked tokens of each row (see
    ``rlvr.advantages.gae.discounted_returns``), then ``A_t = (G_t - mean) / sqrt(var + eps)`` with the
    mean and population variance over all masked tokens of the batch. Masked-out positions get 0.
    """
    returns = discounted_returns(token_rewards, loss_mask, gamma)
    return whiten(returns, loss_mask, shift_mean=True, eps=eps), returns
