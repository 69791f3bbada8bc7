"""CISPO, SAPO, STEER weights and DAR against hand-worked numbers, with their gradients."""

import math

import torch

from rlvr.losses.policy_variants import cispo, clip_binds, dar, sapo, steer_weights

LN2 = math.log(2.0)


def _lp(vals):
    return torch.tensor([vals], dtype=torch.float64, requires_grad=True)


def test_cispo_clips_the_weight_not_the_gradient():
    # token 1: r = 1 -> w = 1;  token 2: r = 2 -> w = clip(2, 0, 1.28) = 1.28 (detached).
    old = torch.tensor([[0.0, math.log(0.5), math.log(0.25)]], dtype=torch.float64)
    lp = _lp([0.0, math.log(0.5), math.log(0.5)])
    mask = torch.tensor([[0.0, 1, 1]])
    adv = torch.tensor([1.0], dtype=torch.float64)
    loss, met = cispo(lp, old, adv, mask, eps_low=1.0, eps_high=0.28)
    # loss_t = -w A logp:  t1: -1*1*ln.5 = ln2;  t2: -1.28*ln.5 = 1.28 ln2
    assert torch.allclose(loss, torch.tensor([[0.0, LN2, 1.28 * LN2]], dtype=torch.float64))
    loss.sum().backward()
    # d/dlogp = -w A: the capped token still gets gradient -1.28 (PPO's clip would give it 0)
    assert torch.allclose(lp.grad, torch.tensor([[0.0, -1.0, -1.28]], dtype=torch.float64))
    assert met["clip/high_frac"] == 0.5


def test_sapo_soft_gate_value_and_gradient():
    # on-policy (r = 1): f = (4/τ) σ(0) = 2/τ, gradient wrt logp = -A * 4σ(1-σ) r = -A.
    lp = _lp([0.0, -1.0, -1.0])
    old = lp.detach().clone()
    mask = torch.tensor([[0.0, 1, 1]])
    adv = torch.tensor([[0.0, 2.0, -1.0]], dtype=torch.float64)
    loss, met = sapo(lp, old, adv, mask, tau_pos=1.0, tau_neg=2.0)
    # t1: A=2, τ=1: -(4/1)(.5)(2) = -4;  t2: A=-1, τ=2: -(4/2)(.5)(-1) = 1
    assert torch.allclose(loss, torch.tensor([[0.0, -4.0, 1.0]], dtype=torch.float64))
    loss.sum().backward()
    assert torch.allclose(lp.grad, torch.tensor([[0.0, -2.0, 1.0]], dtype=torch.float64))
    assert math.isclose(met["sapo/gate_mean"], 1.0)


def test_sapo_gate_fades_off_policy():
    # r = 2, τ = 1, A = 1: σ(1) = .7311; grad = -A * 4 σ(1-σ) * r = -4*.7311*.2689*2 = -1.5729
    old = torch.tensor([[math.log(0.25)]], dtype=torch.float64)
    lp = _lp([math.log(0.5)])
    loss, _ = sapo(lp, old, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 1), 1.0, 1.0)
    loss.sum().backward()
    s = 1 / (1 + math.exp(-1))
    assert math.isclose(float(lp.grad), -4 * s * (1 - s) * 2, rel_tol=1e-9)
    assert math.isclose(float(loss.detach()), -4 * s, rel_tol=1e-9)


def test_steer_weights_only_slow_the_fast_tokens():
    # κ_t = m_t |A p (log p + H)|, w = min(1, τ/κ).  A = 2, τ = 0.5:
    # t1: p = .9, log p = -.10536, H = .3  -> κ = 2*.9*.19464 = .35035 <= .5 -> w = 1
    # t2: p = .5, log p = -.69315, H = 2.0 -> κ = 2*.5*1.30685 = 1.30685 -> w = .5/1.30685 = .38260
    # t3: same as t2 but clipped (m = 0)   -> κ = 0 -> w = 1
    lp = torch.tensor([[0.0, math.log(0.9), math.log(0.5), math.log(0.5)]])
    ent = torch.tensor([[0.0, 0.3, 2.0, 2.0]])
    mask = torch.tensor([[0.0, 1, 1, 1]])
    clipped = torch.tensor([[False, False, False, True]])
    w, met = steer_weights(lp, ent, torch.tensor([2.0]), mask, clipped, tau=0.5)
    assert torch.allclose(w, torch.tensor([[0.0, 1.0, 0.5 / 1.306853, 1.0]]), atol=1e-5)
    assert math.isclose(met["steer/downweighted_frac"], 1 / 3, rel_tol=1e-6)


def test_clip_binds():
    # A>0, r = 2 > 1.2 binds; A<0, r = .5 < .8 binds; A>0, r = .5 does not
    lp = torch.log(torch.tensor([[0.2, 0.05, 0.05]]))
    old = torch.log(torch.tensor([[0.1, 0.1, 0.1]]))
    adv = torch.tensor([[1.0, -1.0, 1.0]])
    assert clip_binds(lp, old, adv, 0.2, 0.2).tolist() == [[True, True, False]]


def test_dar_weighted_regression():
    # two sequences, 2 tokens each.  α = .5, β = 1, w_max = 5.
    # seq 0: log π0 - log π_old = [0, -.4] -> mean -.2; A = 1  -> log w = .5*-.2 + 1 = .9 -> w = e^.9 = 2.4596
    # seq 1: ratio mean 0; A = -1 -> w = e^-1 = .36788
    lp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.5]], dtype=torch.float64)).requires_grad_(True)
    old = lp.detach().clone()
    ref = old + torch.tensor([[0.0, -0.4], [0.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(2, 2)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    loss, met = dar(lp, ref, old, adv, mask, alpha=0.5, beta=1.0, max_weight=5.0)
    w0, w1 = math.exp(0.9), math.exp(-1)
    exp = torch.tensor([[w0 * LN2, w0 * LN2], [w1 * 2 * LN2, w1 * LN2]], dtype=torch.float64)
    assert torch.allclose(loss, exp)
    loss.sum().backward()
    # d loss / d logp = -w: the negative-advantage sequence is still imitated, only much less
    assert torch.allclose(lp.grad, torch.tensor([[-w0, -w0], [-w1, -w1]], dtype=torch.float64))
    # a large advantage is clipped at w_max
    loss2, met2 = dar(lp.detach(), ref, old, torch.tensor([10.0, 0.0], dtype=torch.float64), mask, 0.5, 1.0, 5.0)
    assert math.isclose(float(loss2[0, 0]), 5.0 * LN2) and met2["dar/clipped_frac"] == 0.5
