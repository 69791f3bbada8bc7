"""Advantage estimators: pure functions over reward/value tensors (no model, no trainer).

Group estimators take rewards ``[num_groups, G]`` and return advantages of the same shape;
per-token estimators take ``[B, T]`` tensors with a ``loss_mask``. See each module for formulas.
"""

from rlvr.advantages.gae import discounted_returns, gae, token_rewards, whiten
from rlvr.advantages.grpo import SCALES, dr_grpo, group_mean, group_std, grpo, zero_variance_groups
from rlvr.advantages.reinforce_pp import reinforce_pp, reinforce_pp_token
from rlvr.advantages.rloo import rloo
from rlvr.advantages.turn_level import hgpo, step_discounted_returns, turn_advantages_to_tokens

__all__ = [
    "SCALES",
    "discounted_returns",
    "dr_grpo",
    "gae",
    "group_mean",
    "group_std",
    "grpo",
    "hgpo",
    "reinforce_pp",
    "reinforce_pp_token",
    "rloo",
    "step_discounted_returns",
    "token_rewards",
    "turn_advantages_to_tokens",
    "whiten",
    "zero_variance_groups",
]
