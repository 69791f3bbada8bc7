"""Losses: pure tensor math returning (loss, detached metrics). No model, no trainer.

``rlvr.losses.aggregate`` (the function) reduces a per-token loss; the submodules hold the losses:
``policy`` (clipped surrogate, GSPO), ``kl``, ``entropy``, ``sft``, ``preference`` (DPO family and
pair weights), ``reward_model`` (Bradley-Terry), ``value`` (clipped value loss).
"""

from rlvr.losses import entropy, kl, pair_weights, policy, preference, reward_model, sft, value
from rlvr.losses.aggregate import (
    AGGREGATION_MODES,
    GlobalCounts,
    aggregate,
    count_seqs,
    count_tokens,
    global_counts,
    masked_mean,
    masked_sum,
)

__all__ = [
    "AGGREGATION_MODES",
    "GlobalCounts",
    "aggregate",
    "count_seqs",
    "count_tokens",
    "entropy",
    "global_counts",
    "kl",
    "masked_mean",
    "masked_sum",
    "pair_weights",
    "policy",
    "preference",
    "reward_model",
    "sft",
    "value",
]
