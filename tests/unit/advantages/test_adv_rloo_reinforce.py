"""RLOO and REINFORCE++ advantages against hand-worked numbers."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.advantages import reinforce_pp, reinforce_pp_token, rloo

D = torch.float64


def t(x):
    return torch.tensor(x, dtype=D)


def test_rloo_binary_group():
    # r = [1, 0, 0, 1]; for r_i = 1 the others are {0, 0, 1}: baseline 1/3 -> A = 2/3
    # for r_i = 0 the others are {1, 0, 1}: baseline 2/3 -> A = -2/3
    assert torch.allclose(rloo(t([[1, 0, 0, 1]])), t([[2 / 3, -2 / 3, -2 / 3, 2 / 3]]), atol=1e-12)


def test_rloo_graded_rewards():
    # r = [3, 1, 2]: A_0 = 3 - (1+2)/2 = 1.5; A_1 = 1 - (3+2)/2 = -1.5; A_2 = 2 - (3+1)/2 = 0
    assert torch.allclose(rloo(t([[3, 1, 2]])), t([[1.5, -1.5, 0.0]]), atol=1e-12)


def test_rloo_mask_and_degenerate_groups():
    # valid [3, ., 2]: A_0 = 3 - 2 = 1, A_2 = 2 - 3 = -1; group 2 has one valid sample -> 0;
    # group 3 all equal -> exactly 0
    r = t([[3, 99, 2], [1, 0, 0], [0.1, 0.1, 0.1]])
    m = torch.tensor([[True, False, True], [True, False, False], [True, True, True]])
    adv = rloo(r, mask=m)
    assert torch.equal(adv, t([[1.0, 0.0, -1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))


@settings(max_examples=50, deadline=None, database=None)
@given(
    st.integers(2, 6).flatmap(
        lambda g: st.lists(
            st.lists(st.integers(-300, 300).map(lambda x: x / 100), min_size=g, max_size=g),
            min_size=1,
            max_size=4,
        )
    )
)
def test_property_rloo_is_scaled_dr_grpo_and_sums_to_zero(rows):
    # A_i = r_i - (S - r_i)/(G-1) = G/(G-1) * (r_i - mean)
    r = t(rows)
    g = r.shape[1]
    adv = rloo(r)
    assert torch.allclose(adv, g / (g - 1) * (r - r.mean(dim=1, keepdim=True)), atol=1e-9)
    assert torch.allclose(adv.sum(dim=1), torch.zeros(r.shape[0], dtype=D), atol=1e-9)


def test_reinforce_pp_global_normalisation():
    # rewards [[1, 0], [1, 1]]: batch mean 0.75, pop var = (3 * 0.0625 + 0.5625)/4 = 0.1875, std = 0.4330127
    # A = (r - .75)/.4330127: 1 -> 0.5773503, 0 -> -1.7320508. The all-equal group is NOT zero here.
    adv = reinforce_pp(t([[1, 0], [1, 1]]), eps=0.0)
    a, b = 0.25 / math.sqrt(0.1875), -0.75 / math.sqrt(0.1875)
    assert torch.allclose(adv, t([[a, b], [a, a]]), atol=1e-12)


def test_reinforce_pp_group_baseline():
    # centred by group: [[.5, -.5], [0, 0]]; batch pop std of those = sqrt((.25 + .25 + 0 + 0)/4) = 0.35355
    # A = [[1.4142136, -1.4142136], [0, 0]] — the all-equal group keeps exactly 0
    adv = reinforce_pp(t([[1, 0], [1, 1]]), baseline="group", eps=0.0)
    assert torch.allclose(adv, t([[math.sqrt(2), -math.sqrt(2)], [0, 0]]), atol=1e-12)
    assert torch.equal(adv[1], t([0.0, 0.0]))


def test_reinforce_pp_mask_and_errors():
    r = t([[1.0, float("nan"), 0.0]])
    adv = reinforce_pp(r, mask=torch.tensor([[True, False, True]]), eps=0.0)
    assert torch.allclose(adv, t([[1.0, 0.0, -1.0]]))
    with pytest.raises(ValueError, match="baseline"):
        reinforce_pp(t([[1.0, 0.0]]), baseline="critic")


def test_reinforce_pp_token_level():
    # row 0: mask [1, 1], rewards [0, 1], gamma 1 -> returns [1, 1]
    # row 1: mask [1, 0], rewards [0, 0] -> returns [0, .]
    # whiten over the masked returns [1, 1, 0]: mean 2/3, pop var (1/9 + 1/9 + 4/9)/3 = 2/9, std 0.4714045
    # A = [0.7071068, 0.7071068, -1.4142136], masked-out -> 0
    rewards = t([[0, 1], [0, 0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    adv, ret = reinforce_pp_token(rewards, mask, gamma=1.0, eps=0.0)
    assert torch.allclose(ret, t([[1, 1], [0, 0]]))
    s = 1 / math.sqrt(2)
    assert torch.allclose(adv, t([[s, s], [-2 * s, 0.0]]), atol=1e-12)
