"""KL estimators, chunked entropy and the SFT loss."""

import math

import pytest
import torch
import torch.nn.functional as F

from rlvr.losses.entropy import entropy_from_logits, mean_entropy
from rlvr.losses.kl import adaptive_kl_coef, kl_penalty
from rlvr.losses.sft import sft_loss

D = torch.float64


# logp = -1.0, ref = -1.5  ->  log r = ref - logp = -0.5, r = e^-0.5 = 0.6065307
#   k1 = -log r = 0.5
#   k2 = (log r)^2 / 2 = 0.125
#   k3 = (r - 1) - log r = 0.6065307 - 1 + 0.5 = 0.1065307
#   gradients w.r.t. logp: k1 -> 1, k2 -> logp - ref = 0.5, k3 -> 1 - r = 0.3934693
@pytest.mark.parametrize(
    "kind,value,grad",
    [("k1", 0.5, 1.0), ("k2", 0.125, 0.5), ("k3", math.exp(-0.5) - 0.5, 1 - math.exp(-0.5))],
)
def test_kl_estimators_by_hand(kind, value, grad):
    logp = torch.tensor([[-1.0]], dtype=D, requires_grad=True)
    ref = torch.tensor([[-1.5]], dtype=D, requires_grad=True)
    out = kl_penalty(logp, ref, kind=kind)
    assert out.item() == pytest.approx(value, abs=1e-12)
    out.sum().backward()
    assert logp.grad.item() == pytest.approx(grad, abs=1e-12)
    assert ref.grad is None  # the reference is frozen


def test_kl_nonnegativity_and_clamp_and_mask():
    g = torch.Generator().manual_seed(0)
    logp, ref = torch.randn(4, 6, generator=g, dtype=D), torch.randn(4, 6, generator=g, dtype=D)
    assert bool((kl_penalty(logp, ref, "k2") >= 0).all()) and bool((kl_penalty(logp, ref, "k3") >= 0).all())
    # huge log-ratio: clamp 20 keeps k3 finite: e^20 - 20 - 1
    big = kl_penalty(torch.tensor([[-100.0]], dtype=D), torch.tensor([[0.0]], dtype=D), "k3")
    assert big.item() == pytest.approx(math.exp(20) - 21)
    # masked positions are 0 in value and gradient even with -inf padding
    logp = torch.tensor([[-1.0, -float("inf")]], dtype=D, requires_grad=True)
    out = kl_penalty(logp, torch.tensor([[-1.5, -2.0]], dtype=D), "k3", loss_mask=torch.tensor([[1, 0]]))
    assert out[0, 1].item() == 0.0
    out.sum().backward()
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 1].item() == 0.0
    with pytest.raises(ValueError, match="kind"):
        kl_penalty(logp, logp, "k4")


def test_adaptive_kl_coef_by_hand():
    # e = clip(12/6 - 1, -0.2, 0.2) = 0.2 ; coef = 0.1 * (1 + 0.2 * 256 / 10000) = 0.100512
    assert adaptive_kl_coef(0.1, 12.0, 6.0, 256, 10_000) == pytest.approx(0.100512)
    # e = clip(3/6 - 1) = -0.2 -> 0.1 * (1 - 0.2 * 256/10000) = 0.099488
    assert adaptive_kl_coef(0.1, 3.0, 6.0, 256, 10_000) == pytest.approx(0.099488)


def test_entropy_by_hand():
    # uniform over V = 4 -> log 4 = 1.3862944 ; logits [ln 2, 0, 0] -> p = [.5, .25, .25]
    # H = -(.5 ln .5 + 2 * .25 ln .25) = .5 ln 2 + ln 2 = 1.5 ln 2 = 1.0397208
    assert entropy_from_logits(torch.zeros(1, 1, 4)).item() == pytest.approx(math.log(4), abs=1e-6)
    logits = torch.tensor([[[math.log(2.0), 0.0, 0.0]]])
    assert entropy_from_logits(logits).item() == pytest.approx(1.5 * math.log(2), abs=1e-6)
    # huge logit scale: still exact (logsumexp form), no NaN
    assert entropy_from_logits(torch.tensor([[[1e4, 0.0, 0.0]]])).item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("chunk", [1, 3, 1024])
def test_entropy_chunked_matches_reference_value_and_gradient(chunk):
    g = torch.Generator().manual_seed(1)
    logits = (3 * torch.randn(2, 5, 7, generator=g, dtype=D)).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]])
    ref = -(F.softmax(logits, -1) * F.log_softmax(logits, -1)).sum(-1)
    ref_mean = (ref * mask).sum() / mask.sum()
    ours = entropy_from_logits(logits, chunk_size=chunk)
    assert torch.allclose(ours.double(), ref.detach(), atol=1e-5)
    mean = mean_entropy(logits, mask, chunk_size=chunk)
    assert mean.item() == pytest.approx(ref_mean.item(), abs=1e-5)
    (grad_ours,) = torch.autograd.grad(mean, logits)
    (grad_ref,) = torch.autograd.grad(ref_mean, logits)
    assert torch.allclose(grad_ours, grad_ref, atol=1e-5)
    masked = entropy_from_logits(logits, mask, chunk_size=chunk)
    assert bool((masked[mask == 0] == 0).all())


def test_sft_loss_by_hand():
    # V = 3. row logits [0, 0, 0], label 1 -> -log(1/3) = ln 3 = 1.0986123
    #        row logits [ln 2, 0, 0], label 0 -> -log(2/4) = ln 2 = 0.6931472 (argmax correct)
    #        row logits [ln 2, 0, 0], label 2 -> -log(1/4) = ln 4 (masked out -> not counted)
    logits = torch.tensor([[[0.0, 0.0, 0.0], [math.log(2), 0.0, 0.0], [math.log(2), 0.0, 0.0]]], dtype=D)
    labels = torch.tensor([[1, 0, 2]])
    loss_sum, n, metrics = sft_loss(logits, labels, torch.tensor([[1, 1, 0]]))
    assert n == 2
    assert loss_sum.item() == pytest.approx(math.log(3) + math.log(2), abs=1e-6)
    assert metrics["sft/nll"] == pytest.approx((math.log(3) + math.log(2)) / 2, abs=1e-6)
    assert metrics["sft/token_accuracy"] == pytest.approx(0.5)  # row 0 argmax is 0 != 1 (tie -> index 0)


def test_sft_loss_shift_and_ignore_labels():
    # shift=True: logits[:, t] score labels[:, t+1]; label -100 at a masked-out position is never read
    logits = torch.tensor([[[0.0, 0.0, 0.0], [math.log(2), 0.0, 0.0], [9.0, 9.0, 9.0]]], dtype=D)
    labels = torch.tensor([[-100, 1, 0]])
    loss_sum, n, _ = sft_loss(logits, labels, torch.tensor([[0, 1, 1]]), shift=True)
    assert n == 2 and loss_sum.item() == pytest.approx(math.log(3) + math.log(2), abs=1e-6)
    with pytest.raises(ValueError, match="outside"):
        sft_loss(logits, torch.tensor([[0, 5, 0]]), torch.ones(1, 3))


def test_sft_matches_cross_entropy_and_accumulates_exactly():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(4, 6, 9, generator=g, dtype=D, requires_grad=True)
    labels = torch.randint(9, (4, 6), generator=g)
    mask = torch.arange(6)[None, :] < torch.tensor([6, 2, 0, 4])[:, None]
    total, n, _ = sft_loss(logits, labels, mask, chunk_size=5)
    ref = F.cross_entropy(logits[mask], labels[mask], reduction="sum")
    assert total.item() == pytest.approx(ref.item(), abs=1e-9)
    (total / n).backward()
    full_grad = logits.grad.clone()
    logits.grad = None
    parts = [sft_loss(logits[i : i + 2], labels[i : i + 2], mask[i : i + 2]) for i in (0, 2)]
    global_n = sum(p[1] for p in parts)
    sum(p[0] / global_n for p in parts).backward()
    assert torch.allclose(logits.grad, full_grad, atol=1e-12)


def test_sft_empty_mask_is_zero_and_backpropagates():
    logits = torch.randn(1, 2, 3, requires_grad=True)
    loss_sum, n, metrics = sft_loss(logits, torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2))
    assert n == 0 and loss_sum.item() == 0.0 and metrics["sft/num_tokens"] == 0.0
    loss_sum.backward()
    assert torch.equal(logits.grad, torch.zeros(1, 2, 3))
