"""Loss aggregation modes by hand, and exact gradient accumulation over micro-batches."""

import pytest
import torch

from rlvr.losses import AGGREGATION_MODES, aggregate, count_seqs, count_tokens, global_counts, masked_mean

D = torch.float64

# per-token loss and mask used by the hand-worked cases:
#   row 0: [1, 2, 3] all masked in      (3 tokens, sum 6, mean 2)
#   row 1: [4, 5, 9] last one masked out (2 tokens, sum 9, mean 4.5)
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]], dtype=D)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_seq_mean_token_mean_by_hand():
    # (2 + 4.5) / 2 sequences = 3.25
    assert aggregate(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx(3.25)


def test_token_mean_by_hand():
    # (6 + 9) / 5 tokens = 3.0
    assert aggregate(LOSS, MASK, "token-mean").item() == pytest.approx(3.0)


def test_seq_mean_token_sum_norm_by_hand():
    # (6 + 9) / (B * T = 2 * 3) = 2.5 ; with norm_constant 10 -> 1.5
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm").item() == pytest.approx(2.5)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm", norm_constant=10).item() == pytest.approx(1.5)


def test_overrides_replace_the_denominators():
    assert aggregate(LOSS, MASK, "token-mean", num_tokens=10).item() == pytest.approx(1.5)  # 15 / 10
    assert aggregate(LOSS, MASK, "seq-mean-token-mean", num_seqs=4).item() == pytest.approx(1.625)  # 6.5 / 4
    # irrelevant overrides are ignored
    assert aggregate(LOSS, MASK, "token-mean", num_seqs=99, norm_constant=99).item() == pytest.approx(3.0)


def test_fully_masked_row_is_not_a_sequence_and_nan_is_ignored():
    loss = torch.tensor([[1.0, 3.0], [float("nan"), float("inf")]], dtype=D, requires_grad=True)
    mask = torch.tensor([[1, 1], [0, 0]])
    out = aggregate(loss, mask, "seq-mean-token-mean")
    assert out.item() == pytest.approx(2.0)  # only row 0 counts: mean(1, 3) / 1
    out.backward()
    assert torch.equal(loss.grad, torch.tensor([[0.5, 0.5], [0.0, 0.0]], dtype=D))
    assert count_seqs(mask) == 1 and count_tokens(mask) == 2


def test_nothing_masked_in_gives_zero_connected_to_graph():
    loss = torch.ones(2, 3, requires_grad=True)
    for mode in AGGREGATION_MODES:
        out = aggregate(loss, torch.zeros(2, 3), mode)
        assert out.item() == 0.0
        out.backward()
        assert torch.equal(loss.grad, torch.zeros(2, 3))
        loss.grad = None


def test_errors():
    with pytest.raises(ValueError, match="mode must be one of"):
        aggregate(LOSS, MASK, "sum")
    with pytest.raises(ValueError, match="loss_mask shape"):
        aggregate(LOSS, MASK[:, :2], "token-mean")
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        aggregate(LOSS[0], MASK[0], "token-mean")


def test_masked_mean():
    assert masked_mean(LOSS, MASK).item() == pytest.approx(3.0)
    assert torch.allclose(masked_mean(LOSS, MASK, dim=1), torch.tensor([2.0, 4.5], dtype=D))


def _batch(seed=0, rows=8, length=6):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([6, 1, 3, 0, 5, 2, 6, 4])[:rows]  # row 3 fully masked out
    mask = torch.arange(length)[None, :] < lengths[:, None]
    weights = torch.randn(rows, length, generator=g, dtype=D)
    coef = torch.randn(rows, length, generator=g, dtype=D)
    return weights, coef, mask


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_accumulation_4x2_equals_2x4_equals_1x8(mode):
    weights, coef, mask = _batch()
    results = []
    for micro in (1, 2, 4):  # number of micro-batches of size 8 / micro
        w = weights.clone().requires_grad_(True)
        chunks = list(zip((w * coef).chunk(micro), mask.chunk(micro)))
        counts = global_counts(m for _, m in chunks)
        total = sum(aggregate(x, m, mode, **counts.overrides(mode)) for x, m in chunks)
        total.backward()
        results.append((total.detach(), w.grad.clone()))
    full = aggregate(weights * coef, mask, mode)  # the 1x8 default denominators are the global ones
    for value, grad in results:
        assert abs(value.item() - full.item()) < 1e-6
        assert torch.allclose(grad, results[0][1], atol=1e-6)


def test_accumulation_with_micro_batches_padded_differently():
    # rows 4..7 have at most 5 tokens, so their micro-batch is padded to T = 5 instead of 6.
    # Dr.GRPO: pass the generation budget as norm_len so the constant does not depend on padding.
    weights, coef, mask = _batch()
    order = torch.tensor([0, 1, 2, 6, 4, 5, 3, 7])  # lengths [6, 1, 3, 6 | 5, 2, 0, 4]
    loss_full, mask = (weights * coef)[order], mask[order]
    micro = [(loss_full[:4], mask[:4]), (loss_full[4:, :5], mask[4:, :5])]
    assert not bool(mask[4:, 5:].any())
    counts = global_counts(m for _, m in micro)
    for mode, full in (
        ("token-mean", aggregate(loss_full, mask, "token-mean")),
        ("seq-mean-token-mean", aggregate(loss_full, mask, "seq-mean-token-mean")),
        (
            "seq-mean-token-sum-norm",
            aggregate(loss_full, mask, "seq-mean-token-sum-norm", norm_constant=8 * 10),
        ),
    ):
        total = sum(aggregate(x, m, mode, **counts.overrides(mode, norm_len=10)) for x, m in micro)
        assert abs(total.item() - full.item()) < 1e-9
