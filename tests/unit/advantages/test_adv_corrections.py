"""SignBalance, AsymGRPO, down-weighted rows and the residual advantage, against hand-worked numbers."""

import math

import torch

from rlvr.advantages import grpo
from rlvr.advantages.corrections import asymmetric, downweight_rows, residual_advantage, sign_balance


def test_sign_balance_balanced_batch():
    # g0 = [1,0,0,0]: mean .25 -> signs [+,-,-,-];  g1 = [1,1,1,0]: mean .75 -> [+,+,+,-];  g2 all 1: zero variance.
    # N+ = 4, N- = 4, N = 8 -> λ+ = 8/(2*4) = 1, λ- = 1: every informative sample gets ±1.
    r = torch.tensor([[1.0, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    a = sign_balance(r)
    assert torch.equal(a, torch.tensor([[1.0, -1, -1, -1], [1, 1, 1, -1], [0, 0, 0, 0]]))
    # GRPO instead gives the lone (possibly guessed) correct answer of g0 sqrt(3) = 1.732, the most of all
    assert math.isclose(float(grpo(r, eps=0.0)[0, 0]), math.sqrt(3), rel_tol=1e-6)


def test_sign_balance_unbalanced_batch_restores_zero_mean():
    # two groups [1,0,0,0]: N+ = 2, N- = 6, N = 8 -> λ+ = 8/4 = 2, λ- = 8/12 = 2/3;  sum = 2*2 - 6*(2/3) = 0.
    r = torch.tensor([[1.0, 0, 0, 0], [0, 0, 1, 0]])
    a = sign_balance(r, scale=0.5)  # c = 0.5 halves everything
    exp = torch.tensor([[1.0, -1 / 3, -1 / 3, -1 / 3], [-1 / 3, -1 / 3, 1.0, -1 / 3]])
    assert torch.allclose(a, exp)
    assert abs(float(a.sum())) < 1e-6


def test_sign_balance_mask_and_all_zero_variance():
    r = torch.tensor([[1.0, 0.0, float("nan"), 0.0]])
    m = torch.tensor([[True, True, False, True]])
    # valid [1,0,0]: N+ = 1, N- = 2, N = 3 -> λ+ = 1.5, λ- = 0.75; the masked sample gets exactly 0
    assert torch.allclose(sign_balance(r, m), torch.tensor([[1.5, -0.75, 0.0, -0.75]]))
    assert torch.equal(sign_balance(torch.ones(2, 3)), torch.zeros(2, 3))


def test_asymmetric_channels():
    a = torch.tensor([[1.5, -0.5, 0.0, -1.0]])
    # α+ = 1 keeps positives, α- = 0.5 halves negatives; zero stays zero
    assert torch.equal(asymmetric(a, 1.0, 0.5), torch.tensor([[1.5, -0.25, 0.0, -0.5]]))
    assert torch.equal(asymmetric(a, 2.0, 1.0), torch.tensor([[3.0, -0.5, 0.0, -1.0]]))


def test_downweight_rows():
    a = torch.tensor([[1.0, -1.0], [2.0, -2.0]])
    rows = torch.tensor([[False, True], [True, False]])
    assert torch.equal(downweight_rows(a, rows, 0.5), torch.tensor([[1.0, -0.5], [1.0, -2.0]]))


def test_residual_advantage_centred_per_response():
    # one response of 3 tokens (position 0 is the prompt, mask 0).
    # ρ_t = π_T(y) - π_S(y):  t1: .6-.4 = .2,  t2: .1-.5 = -.4,  t3: .5-.5 = 0
    # V_t = <π_S,π_T> - <π_S,π_S>:  t1: .3-.25 = .05,  t2: .2-.3 = -.1,  t3: .4-.4 = 0
    # g = ρ - V = [.15, -.3, 0];  mean = -.05  ->  centred [.2, -.25, .05]  (sums to 0)
    mask = torch.tensor([[0.0, 1, 1, 1]])
    s_tok = torch.tensor([[0.0, 0.4, 0.5, 0.5]])
    t_tok = torch.tensor([[0.0, 0.6, 0.1, 0.5]])
    ss = torch.tensor([[0.0, 0.25, 0.3, 0.4]])
    st = torch.tensor([[0.0, 0.3, 0.2, 0.4]])
    g = residual_advantage(ss, st, s_tok, t_tok, mask)
    assert torch.allclose(g, torch.tensor([[0.0, 0.2, -0.25, 0.05]]), atol=1e-6)
    assert abs(float(g.sum())) < 1e-6
