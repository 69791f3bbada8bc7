"""DPO family losses and per-pair weights against hand-worked numbers."""

import math

import pytest
import torch

from rlvr.losses.preference import (
    constrained_po,
    cpo,
    dpo,
    ipo,
    kto,
    kto_reference_point,
    log1mexp,
    orpo,
    rgpo_weights,
    reduce_logprobs,
    simpo,
    uni_dpo_calibrated_nll,
    uni_dpo_weights,
    weighted_mean,
)

D = torch.float64


def t(x):
    return torch.tensor(x, dtype=D)


def sig(x):
    """Logistic sigmoid."""
    return 1 / (1 + math.exp(-x))


def softplus(x):
    """-log sigma(-x) = log(1 + e^x)."""
    return math.log1p(math.exp(x))


# Pair 0: logp_w -10, logp_l -12, ref -11 / -11 -> chosen log-ratio +1, rejected -1, h = 2
# Pair 1: swapped policy logprobs                    -> chosen -1, rejected +1, h = -2
PC, PR, RC, RR = t([-10.0, -12.0]), t([-12.0, -10.0]), t([-11.0, -11.0]), t([-11.0, -11.0])


def test_dpo_by_hand():
    # beta 0.1: pair 0 -> -log sigma(0.2) = log(1 + e^-0.2) = 0.5981389 ; pair 1 -> log(1 + e^0.2) = 0.7981389
    losses, m = dpo(PC, PR, RC, RR, beta=0.1)
    assert torch.allclose(losses, t([softplus(-0.2), softplus(0.2)]), atol=1e-12)
    # rewards = beta * log-ratios: chosen [0.1, -0.1], rejected [-0.1, 0.1]
    assert m["rewards/chosen"] == pytest.approx(0.0) and m["rewards/margin"] == pytest.approx(0.0)
    assert m["rewards/accuracy"] == pytest.approx(0.5)
    assert m["logprobs/chosen"] == pytest.approx(-11.0)


def test_dpo_label_smoothing_by_hand():
    # cDPO ls 0.1, pair 0: 0.9 * log(1+e^-0.2) + 0.1 * log(1+e^0.2)
    #                    = 0.9 * 0.5981389 + 0.1 * 0.7981389 = 0.6181389
    losses, _ = dpo(PC[:1], PR[:1], RC[:1], RR[:1], beta=0.1, label_smoothing=0.1)
    assert losses.item() == pytest.approx(0.9 * softplus(-0.2) + 0.1 * softplus(0.2), abs=1e-12)
    # per-pair smoothing tensor; ls = 0.5 makes the loss symmetric: gradient 0 at h = 0
    pc = t([-11.0]).requires_grad_(True)
    losses, _ = dpo(pc, t([-11.0]), t([-11.0]), t([-11.0]), beta=0.1, label_smoothing=t([0.5]))
    losses.sum().backward()
    assert pc.grad.item() == pytest.approx(0.0, abs=1e-15)
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo(PC, PR, RC, RR, label_smoothing=1.5)


def test_dpo_gradient_direction_and_frozen_reference():
    pc, pr = PC.clone().requires_grad_(True), PR.clone().requires_grad_(True)
    rc = RC.clone().requires_grad_(True)
    losses, _ = dpo(pc, pr, rc, RR, beta=0.1)
    losses.sum().backward()
    # d/d pc of -log sigma(beta h) = -beta * sigma(-beta h): pair 0 -> -0.1 * sigma(-0.2) = -0.0450166
    assert pc.grad[0].item() == pytest.approx(-0.1 / (1 + math.exp(0.2)), abs=1e-12)
    assert bool((pr.grad > 0).all()) and rc.grad is None


def test_ipo_by_hand():
    # h = 2, beta 0.1: (2 - 1/(2*0.1))^2 = (2 - 5)^2 = 9
    losses, _ = ipo(PC[:1], PR[:1], RC[:1], RR[:1], beta=0.1)
    assert losses.item() == pytest.approx(9.0)
    # length-averaged (lengths 2 and 4): chosen (-10 - -11)/2 = 0.5, rejected (-12 - -11)/4 = -0.25
    # h = 0.75 -> (0.75 - 5)^2 = 18.0625
    losses, m = ipo(PC[:1], PR[:1], RC[:1], RR[:1], beta=0.1, chosen_lengths=t([2]), rejected_lengths=t([4]))
    assert losses.item() == pytest.approx(18.0625)
    assert m["rewards/chosen"] == pytest.approx(0.05) and m["rewards/rejected"] == pytest.approx(-0.025)
    with pytest.raises(ValueError, match="both"):
        ipo(PC, PR, RC, RR, chosen_lengths=t([1, 1]))


def test_simpo_by_hand():
    # logp_w -6 over 3 tokens -> -2 ; logp_l -12 over 4 -> -3 ; beta 2, gamma 0.5
    # 2*(-2) - 2*(-3) - 0.5 = 1.5 -> -log sigma(1.5) = log(1 + e^-1.5) = 0.2014133
    losses, m = simpo(t([-6.0]), t([-12.0]), t([3]), t([4]), beta=2.0, gamma=0.5)
    assert losses.item() == pytest.approx(softplus(-1.5), abs=1e-12)
    assert m["rewards/chosen"] == pytest.approx(-4.0) and m["rewards/margin"] == pytest.approx(2.0)
    assert m["rewards/accuracy"] == 1.0


def test_kto_reference_point_by_hand():
    # mismatched pairs: policy [-5, -7], ref [-6, -6] -> diffs [1, -1], mean 0 -> z0 = 0
    assert kto_reference_point(t([-5.0, -7.0]), t([-6.0, -6.0])).item() == 0.0
    # [-5, -5] vs [-6, -6] -> mean 1 -> z0 = 1 ; negative mean clamps to 0
    assert kto_reference_point(t([-5.0, -5.0]), t([-6.0, -6.0])).item() == 1.0
    assert kto_reference_point(t([-7.0]), t([-6.0])).item() == 0.0
    assert not kto_reference_point(t([-5.0]).requires_grad_(True), t([-6.0])).requires_grad


def test_kto_by_hand():
    # r = logp - ref = [1, -1]; desirable [T, F]; z0 0.5; beta 0.1; lambda_d 1, lambda_u 1.5
    # desirable:   1   * (1 - sigma(0.1 * (1 - 0.5)))  = 1 - sigma(0.05) = 0.4875026
    # undesirable: 1.5 * (1 - sigma(0.1 * (0.5 + 1))) = 1.5 * (1 - sigma(0.15)) = 0.6938544
    losses, m = kto(
        t([-9.0, -13.0]),
        t([-10.0, -12.0]),
        torch.tensor([True, False]),
        0.5,
        beta=0.1,
        lambda_d=1.0,
        lambda_u=1.5,
    )
    assert torch.allclose(losses, t([1 - sig(0.05), 1.5 * (1 - sig(0.15))]), atol=1e-12)
    assert m["rewards/chosen"] == pytest.approx(0.1) and m["rewards/rejected"] == pytest.approx(-0.1)
    assert m["rewards/accuracy"] == 1.0 and m["kto/kl_ref_point"] == 0.5
    # only desirable examples: no rejected/margin keys
    _, m = kto(t([-9.0]), t([-10.0]), torch.tensor([True]), 0.0)
    assert "rewards/rejected" not in m and "rewards/margin" not in m


def test_log1mexp_is_stable():
    # log(1 - e^x): x = log 0.5 -> log 0.5 ; x = -50 -> ~ -e^-50 ; x = -1e-20 -> log(1e-20)
    assert log1mexp(t([math.log(0.5)])).item() == pytest.approx(math.log(0.5))
    assert log1mexp(t([-50.0])).item() == pytest.approx(-math.exp(-50), rel=1e-9)
    assert log1mexp(t([-1e-20])).item() == pytest.approx(math.log(1e-20), rel=1e-9)
    x = t([0.0, -1e-30, -0.5, -1000.0]).requires_grad_(True)
    y = log1mexp(x)
    y.sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()


def test_orpo_by_hand():
    # chosen mean logp ln 0.5 -> odds 0.5/0.5 = 1 -> log odds 0
    # rejected mean logp ln 0.2 -> odds 0.2/0.8 -> log odds ln 0.25 = -1.3862944
    # -log sigma(0 - ln 0.25) = log(1 + 0.25) = 0.2231436 ; nll 0.6931472, lam 0.1
    # loss = 0.6931472 + 0.1 * 0.2231436 = 0.7154615
    losses, m = orpo(t([math.log(2)]), t([math.log(0.5)]), t([math.log(0.2)]), lam=0.1)
    assert losses.item() == pytest.approx(math.log(2) + 0.1 * math.log(1.25), abs=1e-12)
    assert m["orpo/log_odds_ratio"] == pytest.approx(math.log(4))
    assert m["rewards/accuracy"] == 1.0
    # scalar batch NLL broadcasts
    losses, _ = orpo(t(0.5), t([math.log(0.5), math.log(0.5)]), t([math.log(0.2), math.log(0.2)]), lam=0.1)
    assert losses.shape == (2,)


def test_cpo_by_hand():
    # h = -10 - -12 = 2, beta 0.1 -> log(1 + e^-0.2) = 0.5981389 ; + alpha 1 * nll 1.5 -> 2.0981389
    losses, m = cpo(t([-10.0]), t([-12.0]), t([1.5]), beta=0.1, alpha=1.0)
    assert losses.item() == pytest.approx(softplus(-0.2) + 1.5, abs=1e-12)
    assert m["rewards/chosen"] == pytest.approx(-1.0)


def test_constrained_po_by_hand():
    # pair 0: the reference prefers the rejected answer strongly (rc -4, rr -1); the policy moved the chosen one
    #   up by 2 nats: h = (-2 - -4) - (-1 - -1) = 2, beta 1 -> DPO -log sigma(2) = log(1 + e^-2) = 0.1269280
    #   but the policy itself still prefers the rejected answer: m = -2 - -1 = -1 -> hinge max(0, 0 - -1) = 1,
    #   weight 0.5 -> 0.5; loss 0.6269280
    # pair 1: h = (-1 - -1) - (-3 - -2) = 1 -> log(1 + e^-1) = 0.3132617; m = -1 - -3 = 2 >= 0: no penalty
    pc, pr, rc, rr = t([-2.0, -1.0]), t([-1.0, -3.0]), t([-4.0, -1.0]), t([-1.0, -2.0])
    pc.requires_grad_(True)
    losses, m = constrained_po(pc, pr, rc, rr, beta=1.0, weight=0.5, margin=0.0)
    assert losses.tolist() == pytest.approx([0.6269280, 0.3132617], abs=1e-6)
    assert m["constraint/violation"] == 0.5 and m["constraint/penalty"] == pytest.approx(0.5)
    assert m["rewards/accuracy"] == 1.0          # DPO's implicit-reward accuracy says both pairs are right
    # d loss_0 / d logp_w = -beta sigma(-beta h) - weight = -sigma(-2) - 0.5 = -0.1192029 - 0.5 = -0.6192029;
    # pair 1 has no hinge gradient: -sigma(-1) = -0.2689414
    losses.sum().backward()
    assert pc.grad.tolist() == pytest.approx([-0.6192029, -0.2689414], abs=1e-6)
    # weight 0 is DPO exactly; a margin of 3 nats makes pair 1 (m = 2) violate by 1
    assert torch.allclose(constrained_po(pc, pr, rc, rr, 1.0, 0.0)[0], dpo(pc, pr, rc, rr, 1.0)[0])
    assert constrained_po(pc, pr, rc, rr, 1.0, 1.0, margin=3.0)[0][1].item() == pytest.approx(0.3132617 + 1.0, abs=1e-6)


def test_reduce_logprobs():
    lp = t([[-1.0, -2.0, -9.0], [-0.5, -0.5, -0.5]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert torch.allclose(reduce_logprobs(lp, mask), t([-3.0, -1.5]))
    assert torch.allclose(reduce_logprobs(lp, mask, "mean"), t([-1.5, -0.5]))


def test_uni_dpo_weights_by_hand():
    # w_qual = sigma(0.7 * 1) = 0.6681878
    # pair 0: policy margin 0.5 -> w_perf = (1 - sigma(2 * 0.5 - 1))^3 = (1 - 0.5)^3 = 0.125
    # pair 1: policy margin -1  -> w_perf = (1 - sigma(-3))^3 = sigma(3)^3 = 0.9525741^3 = 0.8643735
    w = uni_dpo_weights(t([1.0, 1.0]), t([0.5, -1.0]), beta=2.0, eta=0.7, tau_ref=1.0, gamma=3.0)
    assert torch.allclose(w, t([sig(0.7) * 0.125, sig(0.7) * sig(3) ** 3]), atol=1e-12)
    # larger quality margin -> larger weight (the paper's direction)
    w2 = uni_dpo_weights(t([3.0]), t([0.5]))
    assert w2.item() > w[0].item()
    # detached by default; detach=False lets the focal factor carry gradient (reference code)
    pm = t([0.5]).requires_grad_(True)
    assert not uni_dpo_weights(t([1.0]), pm).requires_grad
    assert uni_dpo_weights(t([1.0]), pm, detach=False).requires_grad


def test_uni_dpo_calibrated_nll_by_hand():
    # pair 0: ref -4 > policy -5 and score 8 >= 7 -> 0.01 * 5 = 0.05 ; pair 1: ref -4 < policy -3 -> 0
    out = uni_dpo_calibrated_nll(t([-5.0, -3.0]), t([-4.0, -4.0]), t([8.0, 8.0]), tau_good=7.0, lam=0.01)
    assert torch.allclose(out, t([0.05, 0.0]))


def test_weighted_mean():
    losses, w = t([1.0, 3.0]), t([0.5, 1.5])
    # count: (0.5 + 4.5) / 2 = 2.5 ; weights: 5 / 2 = 2.5 ; explicit denominator 10 -> 0.5
    assert weighted_mean(losses, w).item() == pytest.approx(2.5)
    assert weighted_mean(losses, t([1.0, 3.0]), normalize="weights").item() == pytest.approx(10 / 4)
    assert weighted_mean(losses, w, denominator=10).item() == pytest.approx(0.5)


def test_rgpo_single_e_step_by_hand():
    # initial reliability 0.8 -> vote weight log(0.8/0.2) = ln 4
    # pair 0 votes (+,+,+): q = sigma(3 ln 4) = 64/65 = 0.9846154 -> weight 0.9692308, ls 1/65
    # pair 1 votes (+,-,0): q = 0.5 -> weight 0, ls 0.5
    # pair 2 votes (-,-,+): q = sigma(-ln 4) = 0.2 -> swap, weight 0.6, ls 0.2
    # M-step for annotator 0 (votes +,+,-): correct = 64/65 + 0.5 + 0.8 = 2.2846154;
    #   prior a = 1.6, b = 0.4 -> (2.2846154 + 1.6) / (3 + 2) = 0.7769231
    votes = torch.tensor([[1, 1, 1], [1, -1, 0], [-1, -1, 1]])
    out = rgpo_weights(votes, num_iters=1)
    assert torch.allclose(out.posterior, torch.tensor([64 / 65, 0.5, 0.2]), atol=1e-6)
    assert torch.allclose(out.weights, torch.tensor([63 / 65, 0.0, 0.6]), atol=1e-6)
    assert torch.allclose(out.label_smoothing, torch.tensor([1 / 65, 0.5, 0.2]), atol=1e-6)
    assert out.swap.tolist() == [False, False, True]
    assert out.reliability[0].item() == pytest.approx((64 / 65 + 0.5 + 0.8 + 1.6) / 5, abs=1e-6)


def test_rgpo_em_finds_the_unreliable_annotator():
    # annotators 0 and 1 agree (mostly right), annotator 2 is random-ish / adversarial
    g = torch.Generator().manual_seed(0)
    truth = torch.ones(40)
    good = torch.where(torch.rand(40, 2, generator=g) < 0.9, 1.0, -1.0) * truth[:, None]
    bad = -truth[:, None]
    out = rgpo_weights(torch.cat([good, bad], dim=1), num_iters=30)
    assert out.reliability[2] < 0.5 < out.reliability[0]
    assert float(out.swap.float().mean()) < 0.2
    with pytest.raises(ValueError, match="votes"):
        rgpo_weights(torch.tensor([[2, 0]]))


def test_shape_errors():
    with pytest.raises(ValueError, match=r"\[B\]"):
        dpo(PC, PR[:1], RC, RR)
