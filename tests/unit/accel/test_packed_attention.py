"""CausalAttention (saves q, k, v; recomputes the probabilities in backward) against the plain autograd
expression: the same output and gradient, bit for bit; under bf16 autocast, float32 arithmetic on bf16
inputs. ScatterToView against index_copy."""

import pytest
import torch

from rlvr.accel.packed_attention import causal_attention, scatter_to_view, swiglu


def plain(q, k, v, scale):
    L = q.shape[1]
    mask = torch.full((L, L), float("-inf"), dtype=q.dtype).triu_(1)
    s = torch.baddbmm(mask.expand(q.shape[0], L, L), q, k.transpose(1, 2), alpha=scale)
    return torch.bmm(torch.softmax(s, dim=-1), v)


def grads(fn, bf16: bool, seed: int = 0, round_inputs: bool = False):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(6, 9, 8, generator=g) for _ in range(3))
    if round_inputs:
        q, k, v = (t.bfloat16().float() for t in (q, k, v))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    w = torch.randn(6, 9, 8, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        o = fn(q, k, v, 8 ** -0.5)
    (o.float() * w).sum().backward()
    return o.detach().float(), q.grad, k.grad, v.grad


def test_output_and_gradient_equal_the_plain_expressions():
    for name, a, b in zip(("out", "dq", "dk", "dv"), grads(causal_attention, False), grads(plain, False)):
        assert torch.equal(a, b), f"{name}: max |diff| {float((a - b).abs().max()):.3g}"


def test_under_autocast_the_arithmetic_is_float32_on_bf16_inputs():
    """Under autocast: q, k, v rounded to bf16 (autocast's cast), then the float32 expression; the gradients
    reach the float32 inputs through the cast, rounded to bf16."""
    got = grads(causal_attention, True)
    ref = grads(plain, False, round_inputs=True)
    assert got[0].dtype == torch.float32 and torch.equal(got[0], ref[0])
    for name, a, b in zip(("dq", "dk", "dv"), got[1:], ref[1:]):
        assert torch.equal(a, b.bfloat16().float()), f"{name}: max |diff| {float((a - b).abs().max()):.3g}"


def test_causal_and_saves_no_square_tensor():
    """Changing a later key/value leaves earlier outputs unchanged; the graph keeps only [G, L, D] tensors."""
    q, k, v = (torch.randn(2, 5, 4, requires_grad=True) for _ in range(3))
    o = causal_attention(q, k, v, 0.5)
    k2, v2 = k.detach().clone(), v.detach().clone()
    k2[:, 3:] += 1.0
    v2[:, 3:] -= 1.0
    o2 = causal_attention(q, k2, v2, 0.5)
    assert torch.equal(o[:, :3], o2[:, :3]) and not torch.equal(o[:, 3:], o2[:, 3:])
    saved = [t.shape for t in o.grad_fn.saved_tensors]
    assert saved == [torch.Size([2, 5, 4])] * 3


def test_scatter_to_view_is_index_copy_and_saves_only_the_index():
    src = torch.randn(3, 4, 2, requires_grad=True)
    idx = torch.tensor([5, 0, 2, 3])
    out = scatter_to_view(src, idx, 7)
    ref = torch.zeros(3, 7, 2).index_copy(1, idx, src)
    assert torch.equal(out, ref)
    assert [t.dtype for t in out.grad_fn.saved_tensors] == [torch.int64]
    w = torch.randn(3, 7, 2)
    (g,) = torch.autograd.grad((out * w).sum(), src)
    (g_ref,) = torch.autograd.grad((ref * w).sum(), src)
    assert torch.equal(g, g_ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_equals_silu_times_up_and_saves_only_its_input(dtype):
    gu = torch.randn(5, 12).to(dtype).requires_grad_()
    w = torch.randn(5, 6).to(dtype)
    out = swiglu(gu)
    g, u = gu.chunk(2, dim=-1)
    ref = torch.nn.functional.silu(g) * u
    assert torch.equal(out, ref)
    assert [t.shape for t in out.grad_fn.saved_tensors] == [gu.shape]
    (a,) = torch.autograd.grad((out * w).sum(), gu)
    (b,) = torch.autograd.grad((ref * w).sum(), gu)
    assert torch.equal(a, b)
