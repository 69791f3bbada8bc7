"""GRPO / Dr.GRPO advantages against hand-worked numbers, plus invariances."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.advantages import dr_grpo, grpo, zero_variance_groups

D = torch.float64


def t(x):
    return torch.tensor(x, dtype=D)


def test_grpo_binary_group_population_std():
    # r = [1, 0, 0, 1]: mean 0.5; population std = sqrt(mean([.25,.25,.25,.25])) = 0.5
    # A = (r - 0.5) / 0.5 = [+1, -1, -1, +1]   (unbiased std would be 0.57735 -> ±0.866)
    adv = grpo(t([[1, 0, 0, 1]]), eps=0.0)
    assert torch.equal(adv, t([[1.0, -1.0, -1.0, 1.0]]))


def test_grpo_one_success_in_four():
    # r = [1, 0, 0, 0]: mean 0.25; var = (0.75^2 + 3 * 0.25^2) / 4 = (0.5625 + 0.1875) / 4 = 0.1875
    # std = 0.4330127; A = 0.75 / 0.4330127 = sqrt(3) = 1.7320508, -0.25 / 0.4330127 = -1/sqrt(3)
    adv = grpo(t([[1, 0, 0, 0]]), eps=0.0)
    s3 = math.sqrt(3.0)
    assert torch.allclose(adv, t([[s3, -1 / s3, -1 / s3, -1 / s3]]), atol=1e-12)


def test_grpo_eps_is_added_to_std():
    # std 0.5, eps 0.5 -> A = 0.5 / 1.0 = 0.5
    adv = grpo(t([[1, 0]]), eps=0.5)
    assert torch.allclose(adv, t([[0.5, -0.5]]))


def test_grpo_batch_scale_uses_batch_std():
    # groups [1,0] and [1,1]; group means 0.5 and 1 -> centred [[.5,-.5],[0,0]]
    # batch rewards [1,0,1,1]: mean .75, pop var = (3 * .0625 + .5625) / 4 = .1875, std = .4330127
    # A = [[.5/.4330127, -.5/.4330127], [0, 0]] = [[1.1547005, -1.1547005], [0, 0]]
    adv = grpo(t([[1, 0], [1, 1]]), scale="batch", eps=0.0)
    assert torch.allclose(adv, t([[2 / math.sqrt(3), -2 / math.sqrt(3)], [0, 0]]), atol=1e-12)


def test_scale_none_equals_dr_grpo():
    # Dr.GRPO: r - mean_g. r = [3, 1, 2] -> mean 2 -> [1, -1, 0]
    r = t([[3, 1, 2]])
    assert torch.equal(dr_grpo(r), t([[1.0, -1.0, 0.0]]))
    assert torch.equal(grpo(r, scale="none"), dr_grpo(r))


def test_zero_variance_groups_are_exactly_zero():
    # mean([0.1, 0.1, 0.1]) = 0.10000000000000002 in float64, so r - mean would not be 0 without forcing
    r = t([[0.1, 0.1, 0.1], [1.0, 0.0, 1.0], [0.7, 0.7, 0.7]])
    assert torch.equal(zero_variance_groups(r), torch.tensor([True, False, True]))
    for adv in (grpo(r), grpo(r, scale="batch"), grpo(r, scale="none"), dr_grpo(r)):
        assert torch.equal(adv[0], torch.zeros(3, dtype=D))
        assert torch.equal(adv[2], torch.zeros(3, dtype=D))
        assert bool((adv[1] != 0).all())


def test_mask_excludes_samples_from_stats_and_advantages():
    # valid: [1, 0, 1] (the NaN sample is an infra failure); mean 2/3, pop std = sqrt(2/9) = 0.4714045
    # A = [(1/3)/0.4714, -(2/3)/0.4714, ., (1/3)/0.4714] = [0.7071068, -1.4142136, 0, 0.7071068]
    r = t([[1.0, 0.0, float("nan"), 1.0]])
    m = torch.tensor([[True, True, False, True]])
    adv = grpo(r, eps=0.0, mask=m)
    s2 = math.sqrt(2.0)
    assert torch.allclose(adv, t([[1 / s2, -s2, 0.0, 1 / s2]]), atol=1e-12)
    assert adv[0, 2].item() == 0.0


def test_single_valid_sample_group_gets_zero():
    r = t([[1.0, 0.0]])
    adv = grpo(r, mask=torch.tensor([[True, False]]))
    assert torch.equal(adv, t([[0.0, 0.0]]))
    assert bool(zero_variance_groups(r, torch.tensor([[True, False]]))[0])


def test_group_of_one_is_zero_not_nan():
    assert torch.equal(grpo(t([[1.0], [0.0]])), t([[0.0], [0.0]]))


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="num_groups, G"):
        grpo(t([1.0, 0.0]))
    with pytest.raises(ValueError, match="scale"):
        grpo(t([[1.0, 0.0]]), scale="bogus")
    with pytest.raises(ValueError, match="NaN"):
        grpo(t([[1.0, float("nan")]]))
    with pytest.raises(ValueError, match="mask shape"):
        grpo(t([[1.0, 0.0]]), mask=torch.ones(1, 3, dtype=torch.bool))


def test_integer_rewards_accepted():
    assert torch.allclose(grpo(torch.tensor([[1, 0]]), eps=0.0), torch.tensor([[1.0, -1.0]]))


rewards_2d = st.integers(1, 4).flatmap(
    lambda g: st.lists(
        st.lists(st.integers(-500, 500).map(lambda x: x / 100), min_size=g, max_size=g),
        min_size=1,
        max_size=5,
    )
)


@settings(max_examples=60, deadline=None, database=None)
@given(rewards_2d)
def test_property_zero_group_mean_and_unit_population_std(rows):
    r = t(rows)
    adv = grpo(r, eps=0.0)
    assert torch.allclose(adv.mean(dim=1), torch.zeros(r.shape[0], dtype=D), atol=1e-9)
    nonzero = ~zero_variance_groups(r)
    std = adv.std(dim=1, unbiased=False)
    assert torch.allclose(std[nonzero], torch.ones_like(std[nonzero]), atol=1e-6)


@settings(max_examples=40, deadline=None, database=None)
@given(rewards_2d, st.floats(0.1, 10), st.floats(-3, 3))
def test_property_grpo_invariant_to_affine_reward_change(rows, a, b):
    r = t(rows)
    assert torch.allclose(grpo(r, eps=0.0), grpo(a * r + b, eps=0.0), atol=1e-6)
