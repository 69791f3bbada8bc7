"""Clipped surrogate (token level, clip-higher, dual clip) and GSPO (sequence level)."""

import math

import pytest
import torch

from rlvr.advantages import grpo
from rlvr.losses import AGGREGATION_MODES, aggregate
from rlvr.losses.policy import clipped_surrogate

D = torch.float64


def _logprobs(log_ratios):
    """logprobs (leaf, with grad) and old_logprobs such that logp - old_logp = log_ratios."""
    old = torch.full((len(log_ratios), len(log_ratios[0])), -2.0, dtype=D)
    logp = (old + torch.tensor(log_ratios, dtype=D)).requires_grad_(True)
    return logp, old


def test_asymmetric_clip_by_hand():
    # eps_low = 0.2, eps_high = 0.28 (DAPO clip-higher): clip range [0.8, 1.28]
    # token: ratio  A   surr=rA   clipped    min     loss   d loss / d logp
    #   0    1.5   +1   1.5       1.28      1.28   -1.28   0      (upper clip binds -> high_frac)
    #   1    1.5   -1   -1.5      -1.28     -1.5    1.5    1.5    (= -A r; no clip for A<0 above 1)
    #   2    0.5   +1   0.5       0.8       0.5    -0.5   -0.5    (no clip for A>0 below 1)
    #   3    0.5   -1   -0.5      -0.8      -0.8    0.8    0      (lower clip binds -> low_frac)
    #   4    1.25  +1   1.25      1.25      1.25   -1.25  -1.25   (inside [0.8,1.28]; eps_high=0.2 would clip)
    ratios = [1.5, 1.5, 0.5, 0.5, 1.25]
    logp, old = _logprobs([[math.log(r) for r in ratios]])
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0, 1.0]], dtype=D)
    loss, metrics = clipped_surrogate(logp, old, adv, torch.ones(1, 5), eps_low=0.2, eps_high=0.28)
    assert torch.allclose(loss, torch.tensor([[-1.28, 1.5, -0.5, 0.8, -1.25]], dtype=D), atol=1e-12)
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 1.5, -0.5, 0.0, -1.25]], dtype=D), atol=1e-12)
    assert metrics["clip/low_frac"] == pytest.approx(1 / 5)
    assert metrics["clip/high_frac"] == pytest.approx(1 / 5)
    assert metrics["ratio/mean"] == pytest.approx(5.25 / 5)  # (1.5+1.5+0.5+0.5+1.25)/5
    assert metrics["ratio/max"] == pytest.approx(1.5) and metrics["ratio/min"] == pytest.approx(0.5)
    # k3 of KL(old||new): mean of (r - 1) - log r
    k3 = [(r - 1) - math.log(r) for r in ratios]
    assert metrics["policy/approx_kl"] == pytest.approx(sum(k3) / 5)
    assert all(isinstance(v, float) for v in metrics.values())


def test_symmetric_clip_clips_what_clip_higher_lets_through():
    # ratio 1.25, A = +1, eps_high = 0.2: min(1.25, 1.2) = 1.2 -> loss -1.2 and zero gradient
    logp, old = _logprobs([[math.log(1.25)]])
    loss, metrics = clipped_surrogate(logp, old, torch.tensor([1.0], dtype=D), torch.ones(1, 1), 0.2, 0.2)
    assert loss.item() == pytest.approx(-1.2)
    loss.sum().backward()
    assert logp.grad.item() == 0.0
    assert metrics["clip/high_frac"] == 1.0


def test_dual_clip_by_hand():
    # c = 3, eps 0.2/0.2, A = -1:
    #   ratio 5: min(-5, -1.2) = -5; max(-5, c*A = -3) = -3 -> loss 3, gradient 0 (dual clip binds)
    #   ratio 2: min(-2, -1.2) = -2; max(-2, -3) = -2      -> loss 2, gradient -A r = 2
    logp, old = _logprobs([[math.log(5.0), math.log(2.0)]])
    loss, metrics = clipped_surrogate(
        logp, old, torch.tensor([-1.0], dtype=D), torch.ones(1, 2), 0.2, 0.2, dual_clip=3.0
    )
    assert torch.allclose(loss, torch.tensor([[3.0, 2.0]], dtype=D))
    loss.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 2.0]], dtype=D))
    assert metrics["clip/dual_frac"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="dual_clip"):
        clipped_surrogate(logp, old, torch.tensor([-1.0], dtype=D), torch.ones(1, 2), dual_clip=0.5)


# GSPO: two sequences of different lengths (T = 4, sequence 0 right-padded)
#   seq 0: token log-ratios [0.1, 0.3], length 2 -> mean 0.2  -> s0 = e^0.2  = 1.2214028
#   seq 1: [0.0, -0.4, 0.2, -0.2],     length 4 -> mean -0.1 -> s1 = e^-0.1 = 0.9048374
#   A = [+1, -1], eps 0.2/0.2:
#   seq 0: s0 > 1.2 and A > 0 -> clipped: objective 1.2 -> loss -1.2 on its 2 tokens, no gradient
#   seq 1: s1 in [0.8, 1.2] -> objective s1 * -1 -> loss 0.9048374 on its 4 tokens
GSPO_LR = [[0.1, 0.3, 0.0, 0.0], [0.0, -0.4, 0.2, -0.2]]
GSPO_MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])


def test_gspo_sequence_ratio_by_hand():
    logp, old = _logprobs(GSPO_LR)
    adv = torch.tensor([1.0, -1.0], dtype=D)
    loss, metrics = clipped_surrogate(logp, old, adv, GSPO_MASK, 0.2, 0.2, level="sequence")
    s1 = math.exp(-0.1)
    assert torch.allclose(loss, torch.tensor([[-1.2, -1.2, 0, 0], [s1, s1, s1, s1]], dtype=D), atol=1e-12)
    # seq-mean-token-mean over 2 sequences: d/d logp_1t = (1/2)(1/4) * (-A_1) * s1 = s1 / 8 = 0.1131047
    aggregate(loss, GSPO_MASK, "seq-mean-token-mean").backward()
    assert torch.allclose(logp.grad, torch.tensor([[0, 0, 0, 0], [s1 / 8] * 4], dtype=D), atol=1e-12)
    assert metrics["clip/high_frac"] == pytest.approx(2 / 6)  # the 2 tokens of sequence 0
    assert metrics["ratio/max"] == pytest.approx(math.exp(0.2))
    # token level on the same inputs differs: token ratios e^0.1 = 1.105 (kept) and e^0.3 = 1.35 (clipped)
    logp2, old2 = _logprobs(GSPO_LR)
    tok, _ = clipped_surrogate(logp2, old2, adv, GSPO_MASK, 0.2, 0.2, level="token")
    assert tok[0, 0].item() == pytest.approx(-math.exp(0.1)) and tok[0, 1].item() == pytest.approx(-1.2)


def _gspo_reference(logp, old, adv, mask, eps_low, eps_high):
    """GSPO written directly from the paper: J = mean_i min(s_i A_i, clip(s_i) A_i)."""
    m = mask.to(D)
    s = torch.exp(((logp - old) * m).sum(1) / m.sum(1))
    return -torch.minimum(s * adv, torch.clamp(s, 1 - eps_low, 1 + eps_high) * adv).mean()


def test_gspo_token_form_equals_sequence_gspo_value_and_gradient():
    g = torch.Generator().manual_seed(3)
    lengths = torch.tensor([5, 2, 7, 3, 7, 1])
    mask = torch.arange(7)[None, :] < lengths[:, None]
    old = torch.randn(6, 7, generator=g, dtype=D) - 2
    logp = (old + 0.15 * torch.randn(6, 7, generator=g, dtype=D)).requires_grad_(True)
    adv = torch.randn(6, generator=g, dtype=D)
    loss, _ = clipped_surrogate(logp, old, adv, mask, 0.05, 0.08, level="sequence")
    ours = aggregate(loss, mask, "seq-mean-token-mean")
    ours.backward()
    grad_ours = logp.grad.clone()
    logp.grad = None
    ref = _gspo_reference(logp, old, adv, mask, 0.05, 0.08)
    ref.backward()
    assert abs(ours.item() - ref.item()) < 1e-12
    assert torch.allclose(grad_ours, logp.grad, atol=1e-12)


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_all_equal_group_gives_exactly_zero_gradient(level, mode):
    # beta = 0 (no KL term). A tiny model produces the logprobs; every group has all-equal rewards,
    # so GRPO advantages are exactly 0 and the model's gradient must be exactly 0 (not just small).
    torch.manual_seed(0)
    vocab, b, length = 11, 8, 5
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Linear(16, vocab)).double()
    tokens = torch.randint(vocab, (b, length))
    mask = torch.arange(length)[None, :] < torch.tensor([5, 3, 4, 1, 5, 2, 5, 4])[:, None]
    logp = torch.log_softmax(model(tokens), -1).gather(-1, tokens[..., None]).squeeze(-1)
    old = logp.detach() + 0.3 * torch.randn(b, length, dtype=D)
    rewards = torch.tensor([[0.1, 0.1, 0.1, 0.1], [1.0, 1.0, 1.0, 1.0]], dtype=D)
    adv = grpo(rewards).reshape(-1)
    loss, _ = clipped_surrogate(logp, old, adv, mask, 0.2, 0.28, level=level)
    aggregate(loss, mask, mode).backward()
    for p in model.parameters():
        assert torch.equal(p.grad, torch.zeros_like(p))


def test_zero_variance_rows_get_zero_gradient_in_a_mixed_batch():
    torch.manual_seed(1)
    logp = torch.randn(4, 3, dtype=D).requires_grad_(True)
    adv = grpo(torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=D)).reshape(-1)
    loss, _ = clipped_surrogate(logp, logp.detach() + 0.1, adv, torch.ones(4, 3), 0.2, 0.28)
    aggregate(loss, torch.ones(4, 3), "token-mean").backward()
    assert torch.equal(logp.grad[:2], torch.zeros(2, 3, dtype=D))
    assert bool((logp.grad[2:] != 0).all())


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_vectorised_equals_per_sample_loop(level):
    g = torch.Generator().manual_seed(7)
    mask = torch.arange(6)[None, :] < torch.tensor([6, 2, 4, 5, 1])[:, None]
    old = torch.randn(5, 6, generator=g, dtype=D) - 1
    logp = old + 0.3 * torch.randn(5, 6, generator=g, dtype=D)
    adv = torch.randn(5, 6, generator=g, dtype=D)  # per-token advantages
    batch, _ = clipped_surrogate(logp, old, adv, mask, 0.2, 0.28, level=level, dual_clip=3.0)
    for i in range(5):
        row, _ = clipped_surrogate(
            logp[i : i + 1],
            old[i : i + 1],
            adv[i : i + 1],
            mask[i : i + 1],
            0.2,
            0.28,
            level=level,
            dual_clip=3.0,
        )
        assert torch.allclose(batch[i : i + 1], row, atol=1e-12)


def test_padding_with_inf_logprobs_does_not_leak_nan():
    logp = torch.tensor([[-1.0, -float("inf")]], dtype=D, requires_grad=True)
    old = torch.tensor([[-1.2, float("nan")]], dtype=D)
    mask = torch.tensor([[1, 0]])
    for level in ("token", "sequence"):
        loss, metrics = clipped_surrogate(logp, old, torch.tensor([1.0], dtype=D), mask, level=level)
        aggregate(loss, mask, "token-mean").backward()
        assert torch.isfinite(logp.grad).all() and logp.grad[0, 1].item() == 0.0
        assert all(math.isfinite(v) for v in metrics.values())
        logp.grad = None


def test_nan_advantage_of_a_fully_masked_row_does_not_poison_gradients():
    logp = torch.zeros(2, 2, dtype=D, requires_grad=True)
    adv = torch.tensor([1.0, float("nan")], dtype=D)
    mask = torch.tensor([[1, 1], [0, 0]])
    loss, _ = clipped_surrogate(logp, logp.detach(), adv, mask)
    aggregate(loss, mask, "token-mean").backward()
    assert torch.equal(logp.grad, torch.tensor([[-0.5, -0.5], [0.0, 0.0]], dtype=D))


def test_input_errors():
    logp, old = _logprobs([[0.0, 0.0]])
    with pytest.raises(ValueError, match="advantages must be"):
        clipped_surrogate(logp, old, torch.ones(3, dtype=D), torch.ones(1, 2))
    with pytest.raises(ValueError, match="level"):
        clipped_surrogate(logp, old, torch.ones(1, dtype=D), torch.ones(1, 2), level="turn")
    with pytest.raises(ValueError, match="eps_low"):
        clipped_surrogate(logp, old, torch.ones(1, dtype=D), torch.ones(1, 2), eps_low=1.5)
    with pytest.raises(ValueError, match="old_logprobs shape"):
        clipped_surrogate(logp, old[:, :1], torch.ones(1, dtype=D), torch.ones(1, 2))
