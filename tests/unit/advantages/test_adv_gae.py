"""GAE, discounted returns, whitening and token rewards, against hand-worked numbers and a loop."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.advantages import discounted_returns, gae, token_rewards, whiten

D = torch.float64


def t(x):
    return torch.tensor(x, dtype=D)


# 3-step trajectory, gamma = 0.9, lam = 0.8, rewards [0, 0, 1], values [0.5, 0.6, 0.7]
# t=2: delta = 1 + 0.9*0 - 0.7 = 0.3                  A2 = 0.3
# t=1: delta = 0 + 0.9*0.7 - 0.6 = 0.03               A1 = 0.03 + 0.72*0.3   = 0.246
# t=0: delta = 0 + 0.9*0.6 - 0.5 = 0.04               A0 = 0.04 + 0.72*0.246 = 0.21712
# returns = A + V = [0.71712, 0.846, 1.0]
ADV = [0.21712, 0.246, 0.3]
RET = [0.71712, 0.846, 1.0]


def test_gae_three_steps_by_hand():
    adv, ret = gae(t([[0, 0, 1]]), t([[0.5, 0.6, 0.7]]), torch.ones(1, 3), gamma=0.9, lam=0.8)
    assert torch.allclose(adv, t([ADV]), atol=1e-12)
    assert torch.allclose(ret, t([RET]), atol=1e-12)


def test_gae_skips_masked_positions_prompt_tool_and_padding():
    # same trajectory with a prompt token in front, a tool-output token in the middle and right padding;
    # a second row is left-padded. Masked-out positions are skipped and get 0.
    rewards = t([[0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 1]])
    values = t([[9, 0.5, 9, 0.6, 0.7, 9], [9, 9, 9, 0.5, 0.6, 0.7]])
    mask = torch.tensor([[0, 1, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1]])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    assert torch.allclose(adv, t([[0, ADV[0], 0, ADV[1], ADV[2], 0], [0, 0, 0] + ADV]), atol=1e-12)
    assert torch.allclose(ret, t([[0, RET[0], 0, RET[1], RET[2], 0], [0, 0, 0] + RET]), atol=1e-12)


def test_gae_rejects_rewards_on_masked_positions():
    with pytest.raises(ValueError, match="loss_mask == 0"):
        gae(t([[1.0, 0.0]]), t([[0.0, 0.0]]), torch.tensor([[0, 1]]), 1.0, 1.0)


def test_gae_shape_errors():
    with pytest.raises(ValueError, match="values shape"):
        gae(t([[1.0, 0.0]]), t([[0.0]]), torch.tensor([[1, 1]]))


def test_gae_ignores_nan_values_on_padding():
    adv, ret = gae(t([[0, 1, 0]]), t([[0.5, 0.5, float("nan")]]), torch.tensor([[1, 1, 0]]), 1.0, 1.0)
    # gamma = lam = 1: A_t = G_t - V_t = [1 - .5, 1 - .5]; returns = reward-to-go [1, 1]
    assert torch.allclose(adv, t([[0.5, 0.5, 0.0]]))
    assert torch.allclose(ret, t([[1.0, 1.0, 0.0]]))


def _gae_loop(rewards, values, mask, gamma, lam):
    """Reference: one row at a time, over the list of masked positions."""
    adv = torch.zeros_like(rewards)
    for b in range(rewards.shape[0]):
        pos = [i for i in range(rewards.shape[1]) if mask[b, i]]
        next_v, next_a = 0.0, 0.0
        for i in reversed(pos):
            delta = float(rewards[b, i]) + gamma * next_v - float(values[b, i])
            next_a = delta + gamma * lam * next_a
            next_v = float(values[b, i])
            adv[b, i] = next_a
    return adv, torch.where(mask.bool(), adv + values, torch.zeros_like(adv))


@settings(max_examples=40, deadline=None, database=None)
@given(st.integers(1, 4), st.integers(1, 7), st.floats(0.5, 1.0), st.floats(0.0, 1.0), st.integers(0, 10_000))
def test_property_vectorised_gae_equals_loop(b, length, gamma, lam, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(b, length, generator=g) > 0.3
    rewards = torch.where(mask, torch.randn(b, length, generator=g, dtype=D), torch.zeros(b, length, dtype=D))
    values = torch.randn(b, length, generator=g, dtype=D)
    adv, ret = gae(rewards, values, mask, gamma, lam)
    ref_adv, ref_ret = _gae_loop(rewards, values, mask, gamma, lam)
    assert torch.allclose(adv, ref_adv, atol=1e-10)
    assert torch.allclose(ret, ref_ret, atol=1e-10)


def test_discounted_returns_by_hand():
    # rewards [1, 0, 2] over masked positions, gamma 0.5: G2 = 2, G1 = 0 + .5*2 = 1, G0 = 1 + .5*1 = 1.5
    ret = discounted_returns(t([[1, 0, 0, 2]]), torch.tensor([[1, 1, 0, 1]]), gamma=0.5)
    assert torch.allclose(ret, t([[1.5, 1.0, 0.0, 2.0]]))


def test_whiten_by_hand():
    # masked entries [1, 2, 3]: mean 2, pop var 2/3 -> (x - 2)/sqrt(2/3) = [-1.2247449, 0, 1.2247449]
    out = whiten(t([1, 2, 3, 100]), torch.tensor([1, 1, 1, 0]), eps=0.0)
    k = 1 / math.sqrt(2 / 3)
    assert torch.allclose(out, t([-k, 0, k, 0]), atol=1e-12)
    # shift_mean=False adds the mean back: [2 - k, 2, 2 + k]
    out = whiten(t([1, 2, 3, 100]), torch.tensor([1, 1, 1, 0]), shift_mean=False, eps=0.0)
    assert torch.allclose(out, t([2 - k, 2, 2 + k, 0]), atol=1e-12)


def test_token_rewards_by_hand():
    # kl 0.5 everywhere, coef 0.1 -> -0.05 on each masked token; the sequence reward lands on the last
    # masked token; a row without masked tokens gets nothing
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    out = token_rewards(t([1, 2, 3]), mask, kl=torch.full((3, 4), 0.5, dtype=D), kl_coef=0.1)
    expected = t([[0, -0.05, 0.95, 0], [-0.05, -0.05, -0.05, 1.95], [0, 0, 0, 0]])
    assert torch.allclose(out, expected, atol=1e-12)
    assert torch.equal(token_rewards(t([1, 2, 3]), mask), t([[0, 0, 1, 0], [0, 0, 0, 2], [0, 0, 0, 0]]))
