"""FastDecoder's C decode step (``rlvr/accel/kernels/decode_step.c`` via ``rlvr/accel/decode_step.py``) against its PyTorch
step: the same logits (float32 rounding; with bf16 projections, bf16 rounding) over a generation with left
padding, grouped-query heads, q/k/v biases and row compaction; taken exactly where it applies, with the reason
where it does not."""

import shutil

import pytest
import torch
from test_fast_decode import (
    batch,
    check_against_hf,
    llama_tied,
    llama_untied_biased_scaled_rope,
    qwen2_gqa,
    sharpen,
)

from rlvr.rollout.fast_decode import FastDecoder

pytestmark = [pytest.mark.accel,
              pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                 reason="no C compiler: the C kernels cannot be built here")]


@torch.no_grad()
def both_paths(model, steps=9, drop_at=4, keep=(5, 1, 2, 4), cd=None):
    """Max |native - PyTorch| over the logits of ``steps`` decode steps of one left-padded batch (rows dropped in
    swap-remove order at ``drop_at``), and the largest logit."""
    lengths, P = [5, 5, 2, 7, 1, 4], 7
    ids, att = batch(lengths, P)
    pos = (att.cumsum(-1) - 1).clamp_min(0)
    decs = [FastDecoder(model, att, P + steps + 1, cd, kernel=n) for n in (True, False)]
    assert decs[0].kernel is not None and decs[1].kernel is None
    outs = [d(ids, pos).float() for d in decs]
    worst, top = 0.0, 0.0
    cur = pos[:, -1:]
    for s in range(steps):
        nxt = outs[1].argmax(-1, keepdim=True)
        cur = cur + 1
        outs = [d(nxt, cur).float() for d in decs]
        worst = max(worst, float((outs[0] - outs[1]).abs().max()))
        top = max(top, float(outs[1].abs().max()))
        if s == drop_at:
            k = torch.tensor(keep)
            for d in decs:
                d.select(k)
            outs, cur = [o[k] for o in outs], cur[k]
    return worst, top


@pytest.mark.parametrize("build", [llama_tied, qwen2_gqa])
def test_kernel_step_computes_the_pytorch_steps_logits(monkeypatch, build):
    monkeypatch.setenv("RLVR_KERNELS", "1")
    torch.manual_seed(0)
    worst, top = both_paths(sharpen(build()))
    assert top > 1.0 and worst <= 2e-6 * top, (worst, top)


@pytest.mark.parametrize("build", [llama_tied, qwen2_gqa])
def test_native_bf16_step_computes_the_pytorch_bf16_steps_logits(monkeypatch, build):
    """bf16 projections (torch's bf16 matmuls between the C calls): the PyTorch bf16 step's values, up to a bf16
    rounding that lands the other way now and then (sums in another order before a rounding)."""
    monkeypatch.setenv("RLVR_KERNELS", "1")
    torch.manual_seed(0)
    worst, top = both_paths(sharpen(build()), cd=torch.bfloat16)
    assert top > 1.0 and worst <= 2 ** -6 * top, (worst, top)


def test_kernel_step_matches_hf_and_is_the_path_taken(monkeypatch):
    monkeypatch.setenv("RLVR_KERNELS", "1")
    torch.manual_seed(0)
    model = sharpen(qwen2_gqa())
    calls = []
    from rlvr.accel import decode_step

    orig = decode_step.KernelStep.step
    monkeypatch.setattr(decode_step.KernelStep, "step", lambda self, d, i, p: (calls.append(1), orig(self, d, i, p))[1])
    check_against_hf(model)  # HF's uncached forward, within 1e-5, through the C step
    assert len(calls) == 5


def test_where_the_native_step_does_not_apply_it_says_why(monkeypatch):
    monkeypatch.setenv("RLVR_KERNELS", "1")
    torch.manual_seed(0)
    _, att = batch([3, 3, 5], 5)
    biased = FastDecoder(sharpen(llama_untied_biased_scaled_rope()), att, 8)
    assert biased.kernel is None and "MLP biases" in biased.kernel_reason
    tied = sharpen(llama_tied())
    bf16 = FastDecoder(tied, att, 8, torch.bfloat16)
    assert bf16.kernel is not None and bf16.kv.dtype == torch.bfloat16  # bf16 projections, K and V kept in bf16
    half = FastDecoder(sharpen(llama_tied()).to(torch.bfloat16), att, 8)
    assert half.kernel is None and half.kernel_reason == "not float32 weights with float32 or bf16 compute"
    monkeypatch.setenv("RLVR_KERNELS", "0")
    off = FastDecoder(tied, att, 8)
    assert off.kernel is None and off.kernel_reason == "C kernels off (RLVR_KERNELS=0)"
    assert FastDecoder(tied, att, 8, torch.bfloat16).kv.dtype == torch.float32  # the PyTorch step's float32 cache


def test_kernel_step_refuses_to_write_past_the_cache(monkeypatch):
    monkeypatch.setenv("RLVR_KERNELS", "1")
    torch.manual_seed(0)
    ids, att = batch([3, 3, 5], 5)
    dec = FastDecoder(sharpen(llama_tied()), att, 6)
    assert dec.kernel is not None
    with torch.no_grad():
        dec(ids, (att.cumsum(-1) - 1).clamp_min(0))
        dec(ids[:, -1:], torch.full((3, 1), 5))
        with pytest.raises(ValueError, match="exceed the cache capacity 6"):
            dec(ids[:, -1:], torch.full((3, 1), 6))


def test_a_dropped_decoder_is_freed_at_once(monkeypatch):
    """No reference cycle between FastDecoder and its KernelStep: dropping the decoder frees its KV cache right away,
    not at the garbage collector's next full pass (which let a GRPO run's memory grow ~40 MB a generate at 5m)."""
    import gc
    import weakref

    monkeypatch.setenv("RLVR_KERNELS", "1")
    torch.manual_seed(0)
    _, att = batch([3, 3, 5], 5)
    for cd in (None, torch.bfloat16):
        dec = FastDecoder(sharpen(llama_tied()), att, 8, cd)
        assert dec.kernel is not None
        ref = weakref.ref(dec)
        gc.disable()
        try:
            del dec
            assert ref() is None
        finally:
            gc.enable()
