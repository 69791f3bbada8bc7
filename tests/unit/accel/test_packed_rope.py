"""RoPE on the packed QKV projection (``rlvr.accel.packed_rope``): the C kernel against HF's rotate-half formula
in float64, forward and backward (its transpose), for MHA and GQA head layouts and for cos/sin whose halves
differ (so a backward that swapped the wrong sin half would show); bf16 within one rounding; and the packed
training forward under bf16 autocast the same with the kernel on and off."""

import shutil

import pytest
import torch

from rlvr.accel import packed_rope
from rlvr.accel.packed_rope import rope_heads, rotate_half

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler: the native kernels cannot be built here")


def reference(qkv, cos, sin, H, Hr, D):
    """HF's apply_rotary_pos_emb on the first Hr heads, in float64."""
    N = qkv.shape[0]
    x = qkv.double().view(N, H, D)
    c, s = cos.double()[:, None], sin.double()[:, None]
    qk = x[:, :Hr] * c + rotate_half(x[:, :Hr]) * s
    return torch.cat([qk, x[:, Hr:]], 1)


def inputs(N, H, D, dtype, seed=0, equal_halves=False):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(N, H * D, generator=g).to(dtype)
    cos, sin = torch.randn(N, D, generator=g), torch.randn(N, D, generator=g)
    if equal_halves:  # HF's cos/sin: cat(freqs, freqs)
        cos, sin = cos[:, :D // 2].repeat(1, 2), sin[:, :D // 2].repeat(1, 2)
    return qkv, cos, sin


@pytest.fixture
def native(monkeypatch):
    monkeypatch.setenv("RLVR_KERNELS", "1")
    if packed_rope._kernel_lib() is None:
        pytest.skip("native kernels cannot be built here")
    calls = []
    orig = packed_rope._rope_c
    monkeypatch.setattr(packed_rope, "_rope_c", lambda *a, **k: (calls.append(k["backward"]), orig(*a, **k))[1])
    return calls


@pytest.mark.parametrize("heads", [(24, 16), (12, 8), (3, 2)], ids=["mha", "gqa", "one-kv"])
@pytest.mark.parametrize("equal", [False, True], ids=["halves-differ", "hf-halves"])
def test_float32_kernel_matches_the_formula_and_its_transpose(native, heads, equal):
    H, Hr = heads
    D = 8
    qkv, cos, sin = inputs(37, H, D, torch.float32, equal_halves=equal)
    qkv.requires_grad_(True)
    y = rope_heads(qkv, cos, sin, H, Hr, D, torch.float32)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    (y * dy).sum().backward()
    assert native == [False, True]  # forward and backward both in C
    x64 = qkv.detach().double().requires_grad_(True)
    ref = reference(x64, cos, sin, H, Hr, D)
    (ref * dy.double()).sum().backward()
    assert torch.allclose(y.double(), ref, atol=1e-5, rtol=1e-5)
    assert torch.allclose(qkv.grad.double(), x64.grad, atol=1e-5, rtol=1e-5)
    assert torch.equal(y[:, Hr:], qkv.detach().view(37, H, D)[:, Hr:])  # v copied exactly


def test_bf16_in_and_out_within_one_rounding(native):
    H, Hr, D = 24, 16, 32
    qkv, cos, sin = inputs(50, H, D, torch.bfloat16, equal_halves=True)
    qkv.requires_grad_(True)
    y = rope_heads(qkv, cos, sin, H, Hr, D, torch.bfloat16)
    assert y.dtype == torch.bfloat16
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(2)).bfloat16()
    y.backward(dy)
    assert qkv.grad.dtype == torch.bfloat16
    x64 = qkv.detach().double().requires_grad_(True)
    ref = reference(x64, cos, sin, H, Hr, D)
    ref.backward(dy.double())
    for got, want in ((y, ref), (qkv.grad, x64.grad)):
        err = (got.double() - want).abs()
        assert float((err / want.abs().clamp_min(1e-3)).max().detach()) <= 2 ** -8 + 1e-6  # one round to nearest


def test_pytorch_path_when_native_is_off(monkeypatch):
    monkeypatch.setenv("RLVR_KERNELS", "0")
    called = []
    monkeypatch.setattr(packed_rope, "_rope_c", lambda *a, **k: called.append(1))
    H, Hr, D = 6, 4, 8
    qkv, cos, sin = inputs(9, H, D, torch.float32)
    y = rope_heads(qkv, cos, sin, H, Hr, D)
    assert not called and y.dtype == torch.float32
    assert torch.allclose(y.double(), reference(qkv, cos, sin, H, Hr, D), atol=1e-6)


def test_packed_forward_under_bf16_autocast_same_with_and_without_the_kernel(monkeypatch, tmp_path):
    from rlvr.accel import packed_forward
    from rlvr.models.tiny import build_tiny

    model, _ = build_tiny(tmp_path, size="1m", seed=0)
    ids = torch.randint(5, 100, (4, 20), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # left padding
    mask[2, 14:] = 0  # right padding

    def run(flag):
        monkeypatch.setenv("RLVR_KERNELS", flag)
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = packed_forward.packed_logits(model, ids, mask)[0]
        logits.float().pow(2).mean().backward()
        return logits.detach().float(), {n: p.grad.clone() for n, p in model.named_parameters()}

    calls = []
    orig = packed_rope._rope_c
    monkeypatch.setattr(packed_rope, "_rope_c", lambda *a, **k: (calls.append(1), orig(*a, **k))[1])
    out, grads = run("1")
    if not calls:
        pytest.skip("native kernels cannot be built here")
    calls.clear()
    ref, ref_grads = run("0")
    assert not calls
    scale = float(ref.abs().max())
    assert float((out - ref).abs().max()) <= 2 ** -5 * scale
    for k, g in grads.items():
        r = ref_grads[k]
        assert float((g - r).abs().max()) <= 2 ** -4 * float(r.abs().max()) + 1e-8, k


@pytest.mark.parametrize("shape, H, Hr, D", [((5, 3 * 8), 4, 2, 8),   # columns are not H * D
                                              ((5, 4 * 8), 4, 5, 8),   # more rotated heads than heads
                                              ((5, 4 * 7), 4, 2, 7),   # odd head size
                                              ((5, 4, 8), 4, 2, 8)])   # not a 2-D projection
def test_a_shape_the_kernel_cannot_take_is_an_error_not_a_bad_read(shape, H, Hr, D):
    qkv = torch.randn(*shape)
    cos, sin = torch.randn(5, D), torch.randn(5, D)
    with pytest.raises(ValueError, match=r"rope_heads: qkv .* is not \[N, H \* D\]"):
        rope_heads(qkv, cos, sin, H, Hr, D)
