"""RLOO: REINFORCE with a leave-one-out baseline (Kool et al., 2019; Ahmadian et al., 2024)."""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.advantages.grpo import _finish, prepare_group_rewards


def rloo(rewards: Tensor, mask: Tensor | None = None) -> Tensor:
    """Leave-one-out advantages ``A_i = r_i - (1/(n-1)) sum_{j != i} r_j``; ``[num_groups, G]`` -> same.

    Kool, van Hoof & Welling, 2019, "Buy 4 REINFORCE Samples, Get a Baseline for Free!";
    Ahmadian et al., 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
    from Human Feedback in LLMs" (arXiv:2402.14740).

    ``n`` is the number of valid samples in the group (``mask``); equivalently
    ``A_i = n/(n-1) * (r_i - mean_g)``, so the advantages of a group sum to zero. The baseline of each
    sample excludes its own reward, which keeps the estimator unbiased. Groups with fewer than two
    valid samples, zero-variance groups and samples outside ``mask`` get exactly 0.
    """
    r, m = prepare_group_rewards(rewards, mask, "rloo")
    n = m.sum(dim=1, keepdim=True).to(r.dtype)
    total = (r * m).sum(dim=1, keepdim=True)
    baseline = (total - r) / (n - 1).clamp(min=1)
    adv = torch.where(n > 1, r - baseline, torch.zeros_like(r))
    return _finish(adv, r, m)
