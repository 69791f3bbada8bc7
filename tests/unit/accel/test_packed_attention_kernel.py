"""PackedCausalAttention's C kernels (``rlvr/accel/kernels/packed_attention.c``) against the plain expression in float64:
outputs and gradients of the packed heads, float32 and bf16 heads, head dims that are and are not multiples of the
kernels' 32-wide blocks, rows longer than a block, prefix-shared rows and dummy padding tokens; the PyTorch path
when native kernels are off."""

import shutil

import pytest
import torch

from rlvr.accel import packed_attention as pa
from rlvr.accel.packed_forward import Packing

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler: the native kernels cannot be built here")


def grpo_like(groups: int, G: int, P: int, T: int, seed: int, pad_to: int = 16) -> Packing:
    """``groups`` prompts of P tokens, G rows each with 1..T completion tokens: the prompt is packed once."""
    g = torch.Generator().manual_seed(seed)
    B = groups * G
    ids = torch.randint(3, 100, (B, P + T), generator=g)
    ids[:, :P] = ids[::G, :P].repeat_interleave(G, 0)
    am = torch.ones(B, P + T, dtype=torch.long)
    for b in range(B):
        am[b, P + int(torch.randint(1, T + 1, (), generator=g)):] = 0
    return Packing(ids, am, share=True, pad_to=pad_to)


def reference(heads: torch.Tensor, pk: Packing, scale: float, w: torch.Tensor):
    """The zero-padded view's causal attention in float64 by autograd: (output at the owner slots, d heads)."""
    h = heads.detach().double().requires_grad_()
    H3, D = h.shape[1:]
    H = H3 // 3
    B, L = pk.B, pk.L
    real = torch.zeros(B * L, dtype=torch.bool)
    real[pk.slot_view] = True
    view = h.index_select(0, pk.view_tok) * real[:, None, None]                 # padding: zeros
    q, k, v = view.view(B, L, 3, H, D).permute(2, 0, 3, 1, 4).reshape(3, B * H, L, D)
    s = q @ k.transpose(1, 2) * scale + torch.full((L, L), float("-inf"), dtype=h.dtype).triu(1)
    o = (torch.softmax(s, -1) @ v).view(B, H, L, D).permute(0, 2, 1, 3).reshape(B * L, H * D)[pk.owner_view]
    (o * w.double()).sum().backward()
    return o.detach(), h.grad


def native(heads: torch.Tensor, pk: Packing, scale: float, w: torch.Tensor):
    h = heads.detach().clone().requires_grad_()
    assert pa.kernel_attention(h)
    o = pa.packed_causal_attention(h, pk.view_tok, pk.owner_view, pk.B, pk.L, scale)
    (o * w).sum().backward()
    return o.detach(), h.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("H,D,P,T", [(2, 32, 5, 9), (3, 16, 4, 70), (1, 48, 7, 40), (2, 64, 3, 5), (4, 8, 2, 33)])
def test_native_kernels_compute_the_padded_views_attention(monkeypatch, dtype, H, D, P, T):
    monkeypatch.setenv("RLVR_KERNELS", "1")
    pk = grpo_like(groups=3, G=4, P=P, T=T, seed=H * 100 + D)
    g = torch.Generator().manual_seed(1)
    heads = (torch.randn(pk.N, 3 * H, D, generator=g) * 1.5).to(dtype)
    w = torch.randn(pk.N, H * D, generator=g)
    o, dh = native(heads, pk, D ** -0.5, w)
    ro, rdh = reference(heads, pk, D ** -0.5, w)
    assert o.dtype == torch.float32 and dh.dtype == dtype
    torch.testing.assert_close(o.double(), ro, rtol=0, atol=2e-6 * ro.abs().max().item())
    if dtype == torch.float32:
        torch.testing.assert_close(dh.double(), rdh, rtol=0, atol=1e-5 * rdh.abs().max().item())
    else:  # a bf16 gradient: the float64 one rounded once, up to one bf16 unit
        torch.testing.assert_close(dh.double(), rdh.to(dtype).double(), rtol=2 ** -7, atol=1e-6)
    assert float(dh.abs().max()) > 0.1  # the gradient is not trivially zero


def test_shared_prompt_tokens_get_the_sum_of_their_rows_gradients(monkeypatch):
    """A prompt token read by G rows: its gradient is the sum over the rows (not the last row's)."""
    monkeypatch.setenv("RLVR_KERNELS", "1")
    pk = grpo_like(groups=2, G=8, P=6, T=12, seed=3, pad_to=0)
    assert pk.N < pk.slot_view.numel()  # prompts are shared
    g = torch.Generator().manual_seed(2)
    heads = torch.randn(pk.N, 6, 32, generator=g)
    w = torch.randn(pk.N, 64, generator=g)
    _, dh = native(heads, pk, 32 ** -0.5, w)
    _, rdh = reference(heads, pk, 32 ** -0.5, w)
    torch.testing.assert_close(dh.double(), rdh, rtol=0, atol=1e-5 * rdh.abs().max().item())


def test_native_off_takes_the_pytorch_path(monkeypatch):
    monkeypatch.setenv("RLVR_KERNELS", "0")
    heads = torch.randn(8, 6, 16)
    assert not pa.kernel_attention(heads)
    pk = grpo_like(groups=1, G=2, P=2, T=3, seed=0, pad_to=0)
    heads = torch.randn(pk.N, 6, 16, requires_grad=True)
    o = pa.packed_causal_attention(heads, pk.view_tok, pk.owner_view, pk.B, pk.L, 0.25)
    assert len(o.grad_fn.saved_tensors) == 3  # heads, view_tok, owner_view: no `need` mask
