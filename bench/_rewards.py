"""Reward terms both sides of ``grpo_vs_trl.py`` compute identically from a completion's text.

``spread``: crc32 of the completion text, scaled to [0, 1). Any two different completions of a group get
different rewards (a 32-bit hash collision aside), so every group whose samples are not all the same
text carries reward variance — even when every sample is cut at ``max_new_tokens``, where ``length``
(-len / max_new) is the same for all of them and ``correct`` is 0 for a random model. Both trainers
then forward and backward every row. It carries no signal about the task: a benchmark term only.

rlvr calls it as a ``name: python`` reward term (``spread(task, completion)``); TRL as a reward function
(``trl_spread(completions)``, conversational completions are ``[{"role": "assistant", "content": ...}]``).
"""

from __future__ import annotations

import zlib


def spread_value(text: str) -> float:
    """crc32(text) / 2**32: deterministic, in [0, 1), different for different texts."""
    return zlib.crc32(text.encode("utf-8")) / 2**32


def spread(task, completion: str) -> float:
    """rlvr ``name: python`` reward term."""
    return spread_value(completion)


def trl_spread(completions, **_) -> list[float]:
    """TRL reward function: the same value from the same completion text."""
    return [spread_value(c[-1]["content"] if isinstance(c, list) else c) for c in completions]
