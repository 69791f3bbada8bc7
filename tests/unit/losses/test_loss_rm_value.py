"""Bradley-Terry reward-model loss, clipped value loss and explained variance."""

import math

import pytest
import torch

from rlvr.losses.reward_model import bradley_terry, pairwise_accuracy
from rlvr.losses.value import clipped_value_loss, explained_variance

D = torch.float64


def t(x):
    return torch.tensor(x, dtype=D)


def test_bradley_terry_by_hand():
    # r_c = [2, 0], r_r = [1, 1]: diffs [1, -1] -> log(1 + e^-1) = 0.3132617, log(1 + e) = 1.3132617
    losses, m = bradley_terry(t([2.0, 0.0]), t([1.0, 1.0]))
    assert torch.allclose(losses, t([math.log1p(math.exp(-1)), math.log1p(math.exp(1))]), atol=1e-12)
    assert m["rm/accuracy"] == 0.5 and m["rm/margin"] == pytest.approx(0.0)
    assert m["rm/chosen"] == pytest.approx(1.0) and m["rm/rejected"] == pytest.approx(1.0)


def test_bradley_terry_margin_and_centering_by_hand():
    # margin 0.5: diffs [0.5, -1.5] -> log(1+e^-0.5) = 0.4740770, log(1+e^1.5) = 1.7014133
    # center 0.01 * (r_c + r_r)^2: 0.01 * 9 = 0.09, 0.01 * 1 = 0.01
    losses, _ = bradley_terry(t([2.0, 0.0]), t([1.0, 1.0]), margin=0.5, center_coef=0.01)
    expected = [math.log1p(math.exp(-0.5)) + 0.09, math.log1p(math.exp(1.5)) + 0.01]
    assert torch.allclose(losses, t(expected), atol=1e-12)
    losses, _ = bradley_terry(t([2.0, 0.0]), t([1.0, 1.0]), margin=t([0.5, 0.0]))
    assert losses[1].item() == pytest.approx(math.log1p(math.exp(1)))


def test_bradley_terry_gradient():
    # d/d r_c of -log sigma(r_c - r_r) = -sigma(-(r_c - r_r)); diff 1 -> -0.2689414
    rc = t([2.0]).requires_grad_(True)
    losses, _ = bradley_terry(rc, t([1.0]))
    losses.sum().backward()
    assert rc.grad.item() == pytest.approx(-1 / (1 + math.e), abs=1e-12)
    assert pairwise_accuracy(t([1.0, 1.0]), t([1.0, 0.0])) == 0.5  # a tie counts as wrong
    with pytest.raises(ValueError, match=r"\[B\]"):
        bradley_terry(t([[1.0]]), t([[0.0]]))


def test_clipped_value_loss_by_hand():
    # eps 0.1
    # token 0: V 1.0, V_old 0.8, R 0.0: (1-0)^2 = 1 ; V_clip = 0.8 + 0.1 = 0.9 -> 0.81 ; max 1 -> loss 0.5
    #          gradient (V - R) = 1
    # token 1: V 0.5, V_old 0.8, R 0.4: (0.1)^2 = 0.01 ; V_clip = 0.7 -> (0.3)^2 = 0.09 ; max 0.09
    #          -> loss 0.045, clipped term wins -> gradient 0
    # token 2: masked out
    values = t([[1.0, 0.5, 7.0]]).requires_grad_(True)
    loss, m = clipped_value_loss(
        values, t([[0.8, 0.8, 0.0]]), t([[0.0, 0.4, 0.0]]), torch.tensor([[1, 1, 0]]), clip_eps=0.1
    )
    assert torch.allclose(loss, t([[0.5, 0.045, 0.0]]), atol=1e-12)
    loss.sum().backward()
    assert torch.allclose(values.grad, t([[1.0, 0.0, 0.0]]), atol=1e-12)
    assert m["value/clip_frac"] == pytest.approx(0.5)
    assert m["value/mse"] == pytest.approx((1 + 0.01) / 2)


def test_value_loss_without_clip():
    loss, m = clipped_value_loss(
        t([[1.0, 0.5]]), t([[0.0, 0.0]]), t([[0.0, 0.4]]), torch.ones(1, 2), clip_eps=None
    )
    assert torch.allclose(loss, t([[0.5, 0.005]]))
    assert m["value/clip_frac"] == 0.0


def test_explained_variance_by_hand():
    # R = [1, 2, 3], V = [1, 2, 2]: R - V = [0, 0, 1], pop var = 2/9 ; Var R = 2/3 -> 1 - (2/9)/(2/3) = 2/3
    assert explained_variance(t([1.0, 2.0, 2.0]), t([1.0, 2.0, 3.0])) == pytest.approx(2 / 3)
    # masked entry ignored; perfect critic -> 1; constant returns -> NaN (undefined)
    assert explained_variance(
        t([1.0, 2.0, 99.0]), t([1.0, 2.0, 0.0]), torch.tensor([1, 1, 0])
    ) == pytest.approx(1.0)
    assert math.isnan(explained_variance(t([1.0, 2.0]), t([3.0, 3.0])))
