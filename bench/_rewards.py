"""Reward terms both sides of a TRL comparison compute identically from a completion's text.

``spread``: crc32 of the completion text, scaled to [0, 1). Any two different completions of a group get
different rewards (a 32-bit hash collision aside), so every group whose samples are not all the same
text carries reward variance — even when every sample is cut at ``max_new_tokens``, where ``length``
(-len / max_new) is the same for all of them and ``correct`` is 0 for a random model. Both trainers
then forward and backward every row. It carries no signal about the task: a benchmark term only.

rlvr calls it as a ``name: python`` reward term (``spread(task, completion)``); TRL as a reward function
(``trl_spread(completions)``, conversational completions are ``[{"role": "assistant", "content": ...}]``).

``make_trl_reward(tasks)`` (``time_to_accuracy.py``): TRL's side of rlvr's ``correct`` reward term -- rlvr's
own RL judge on the same task and completion text.
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
    return [spread_value(completion_text(c)) for c in completions]


def completion_text(c) -> str:
    """A TRL completion's text (a conversational one is ``[{"role": "assistant", "content": ...}]``)."""
    return c[-1]["content"] if isinstance(c, list) else c


def make_trl_reward(tasks):
    """TRL reward function over the dataset's ``task_index`` column: rlvr's RL judge for a ``correct`` reward
    term on the same (task, completion text) -- the reward rlvr trains on; an ``infra`` verdict (kept out of rlvr's
    advantages) is None (TRL leaves it out of the reward)."""
    from rlvr.config.rl import RewardTerm
    from rlvr.verifiers.base import INFRA_OUTCOMES
    from rlvr.verifiers.judge import reward_judge

    judge = reward_judge([RewardTerm(name="correct")])

    def reasoning_gym_reward(completions, task_index, **_):
        texts = [completion_text(c) for c in completions]
        verdicts = judge([tasks[i] for i in task_index], texts)
        return [None if v.outcome in INFRA_OUTCOMES else float(v.reward) for v in verdicts]
    return reasoning_gym_reward
