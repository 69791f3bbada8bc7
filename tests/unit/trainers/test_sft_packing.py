"""SFT packing: a packed row computes each example exactly as alone, and the step's loss and gradient do not
change with packing (same tokens, same denominator)."""

from __future__ import annotations

import pytest
import torch

from rlvr.data.packing import pack_rows, packed_batch
from rlvr.models.tiny import build_tiny
from rlvr.trainers.common import micro_batches, sft_step

torch.set_num_threads(1)


def _examples(seed: int = 0):
    """Ragged (ids, loss_mask) examples: prompt masked out, one with a masked 'tool observation' in the middle
    (agent SFT), one trained from its very first token (which unpacked is never a label either)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n, prompt in ((3, 1), (11, 4), (5, 2), (17, 5), (2, 1), (7, 0), (9, 3), (4, 2)):
        ids = torch.randint(3, 60, (n,), generator=g).tolist()
        mask = [0] * prompt + [1] * (n - prompt)
        out.append((ids, mask))
    ids, _ = out[6]
    out[6] = (ids, [0, 0, 0, 1, 1, 0, 0, 1, 1])  # tool tokens 5-6 not trained
    return out


def _model():
    model, tok = build_tiny(size="test", seed=3)
    return model.float(), tok


def test_pack_rows_first_fit_decreasing():
    # lengths 5,3,9,9,2,4 into capacity 9: 9 | 9 | 5+4 | 3+2
    assert pack_rows([5, 3, 9, 9, 2, 4], 9) == [[2], [3], [0, 5], [1, 4]]
    # an item longer than the capacity gets its own row
    assert pack_rows([12, 1], 9) == [[0], [1]]
    assert pack_rows([], 9) == []


def test_packed_row_logits_equal_each_example_alone():
    model, _ = _model()
    ex = _examples()
    rows = pack_rows([len(e[0]) for e in ex], 17)
    assert any(len(r) > 1 for r in rows)
    ids, pos, lm = packed_batch([[ex[i] for i in r] for r in rows], pad_id=0)
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=pos, attention_mask=None, use_cache=False).logits
        for r, row in enumerate(rows):
            o = 0
            for i in row:
                n = len(ex[i][0])
                alone = model(input_ids=torch.tensor([ex[i][0]]), use_cache=False).logits[0]
                torch.testing.assert_close(packed[r, o:o + n], alone, atol=1e-5, rtol=1e-5)
                # the loss mask is the example's, except its first token (no label unpacked either)
                assert lm[r, o:o + n].tolist() == [0.0] + [float(m) for m in ex[i][1][1:]]
                o += n
            assert lm[r, o:].sum() == 0  # padding


def _step(model, ex, packing: bool, micro: int):
    model.zero_grad(set_to_none=True)
    rec = sft_step(model, ex, list(range(len(ex))), micro, True, 0, False, packing=packing)
    return rec, [p.grad.clone() for p in model.parameters()]


def test_packing_leaves_loss_and_gradient_unchanged():
    model, _ = _model()
    ex = _examples(1)
    # the packed plan really packs: fewer rows than examples
    micros = micro_batches(ex, list(range(len(ex))), 64, True, packing=True)
    assert sorted(i for mb in micros for i in mb) == list(range(len(ex)))
    assert len(pack_rows([len(ex[i][0]) for i in micros[0]], 17)) < len(ex)
    base, g0 = _step(model, ex, packing=False, micro=64)
    for micro in (64, 2):  # one micro-batch, and accumulation over several packed micro-batches
        rec, g1 = _step(model, ex, packing=True, micro=micro)
        # normaliser: the step's loss-mask tokens, as unpacked (example 6's first token is masked 0 here)
        assert rec["train/tokens"] == base["train/tokens"] == sum(sum(m) for _, m in ex)
        assert abs(rec["train/loss"] - base["train/loss"]) < 1e-5
        for a, b in zip(g0, g1):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_packing_changes_nothing_when_no_two_examples_fit_a_row():
    model, _ = _model()
    ex = [(list(range(3, 3 + n)), [0] + [1] * (n - 1)) for n in (7, 8, 9)]  # 7 + 8 > 9: one per row
    assert micro_batches(ex, [0, 1, 2], 64, True, packing=True) == [[2, 1, 0]]
    base, g0 = _step(model, ex, packing=False, micro=64)
    rec, g1 = _step(model, ex, packing=True, micro=64)
    assert abs(rec["train/loss"] - base["train/loss"]) < 1e-6  # same rows, padded path (order differs)
    for a, b in zip(g0, g1):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_a_model_that_attends_across_packed_examples_is_not_packed():
    model, _ = _model()
    ex = _examples(2)

    class Leaky(torch.nn.Module):  # ignores position_ids: attends across examples
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        @property
        def device(self):
            return self.inner.device

        def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)

    leaky = Leaky(model)
    with pytest.warns(UserWarning, match="attends across packed examples"):
        rec = sft_step(leaky, ex, list(range(len(ex))), 64, True, 0, False, packing=True)
    g1 = [p.grad.clone() for p in model.parameters()]
    base, g0 = _step(model, ex, packing=False, micro=64)
    assert abs(rec["train/loss"] - base["train/loss"]) < 1e-5
    for a, b in zip(g0, g1):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_native_module_is_padding_free_without_packing_or_warning(recwarn):
    """rlvr's own module computes only real tokens (its forward is the packed forward): SFT does not pack rows
    for it and does not warn that packing is off; the loss and gradient are the HF class's."""
    from rlvr.accel.llama import from_hf

    model, _ = _model()
    native = from_hf(_model()[0])
    ex = _examples(4)
    rec = sft_step(native, ex, list(range(len(ex))), 64, True, 0, False, packing=True)
    assert not [w for w in recwarn.list if "packed" in str(w.message)]
    assert getattr(native, "_rlvr_packing_ok", None) is None  # no packing probe was run either
    base, g0 = _step(model, ex, packing=False, micro=64)
    assert abs(rec["train/loss"] - base["train/loss"]) < 1e-5
    for a, b in zip(g0, [p.grad for p in native.parameters()]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
