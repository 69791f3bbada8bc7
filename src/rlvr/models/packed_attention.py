"""Causal attention over ``[G, L, D]`` blocks that keeps no ``[G, L, L]`` tensor for the backward pass.

Autograd through ``softmax(q kᵀ · scale + causal mask) v`` written as batched matmuls saves the softmax
probabilities ``[G, L, L]``: at the tiny models' shapes (64 rows of ~50 tokens, 8 heads) the largest
activation of a layer (~4 KB per packed token per layer in float32, 5m model, prefix-shared GRPO batch).
:class:`CausalAttention` saves only q, k and v and recomputes the scores and probabilities in backward
(one more ``[G, L, D] x [G, D, L]`` matmul, ~2% of the update's time).

The backward runs autograd's own formulas op for op on the recomputed (bit-identical) probabilities:
``BmmBackward`` for the values and the probabilities, ``_softmax_backward_data``, ``BaddbmmBackward``
for q and k. The gradient is the plain expression's, exactly
(``tests/unit/models/test_packed_attention.py``). Precision: under autocast q, k and v are kept in bf16
and the scores, probabilities and output are float32 (see :class:`CausalAttention`).

:func:`scatter_to_view` puts the packed tokens' heads on the padded attention view; its backward needs only
the index (autograd's ``index_copy`` keeps its whole source for the backward, for the source's shape).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _probs(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """``softmax(q kᵀ · scale + causal mask)`` in q's dtype (as CPU autocast runs softmax on bf16 scores: the
    kernel accumulates in float32 and rounds its output)."""
    L = q.shape[1]
    mask = torch.full((L, L), float("-inf"), dtype=q.dtype, device=q.device).triu_(1)
    s = torch.baddbmm(mask.expand(q.shape[0], L, L), q, k.transpose(1, 2), alpha=scale)
    return torch.softmax(s, dim=-1)


def _wide(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


class CausalAttention(torch.autograd.Function):
    """``o = softmax(q kᵀ · scale + causal mask) v`` for ``q, k, v [G, L, D]`` of one dtype; saves q, k, v.

    bf16 inputs are stored as such and the arithmetic runs in float32 (``o`` float32, the gradients cast back
    to the inputs' dtype): CPU bf16 matmuls go through oneDNN, which keeps a JIT-compiled primitive (~0.6 MB)
    for every distinct shape, and the ``[H·B, L, ·]`` shapes of ragged micro-batches are nearly all distinct
    (measured: RSS +130 MB per 200 shapes, never freed); float32 batched matmuls keep nothing."""

    @staticmethod
    def forward(ctx, q, k, v, scale: float):
        with torch.autocast(q.device.type, enabled=False):
            o = torch.bmm(_probs(_wide(q), _wide(k), scale), _wide(v))
        ctx.save_for_backward(q, k, v)
        ctx.scale = scale
        return o

    @staticmethod
    def backward(ctx, do):
        q0, k0, v0 = ctx.saved_tensors
        q, k, v = _wide(q0), _wide(k0), _wide(v0)
        scale = ctx.scale
        with torch.autocast(q.device.type, enabled=False):
            p = _probs(q, k, scale)
            do = do.to(q.dtype)
            dv = p.transpose(1, 2).bmm(do)                           # BmmBackward: mat2
            dp = do.bmm(v.transpose(1, 2))                           # BmmBackward: self
            ds = torch._softmax_backward_data(dp, p, -1, p.dtype)     # SoftmaxBackward
            dq = ds.bmm(k) * scale                                   # BaddbmmBackward: batch1
            dk = (q.transpose(1, 2).bmm(ds) * scale).transpose(1, 2)  # BaddbmmBackward: batch2 = kᵀ
        return dq.to(q0.dtype), dk.to(k0.dtype), dv.to(v0.dtype), None


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """:class:`CausalAttention` of ``[G, L, D]`` blocks; under autocast q, k and v are stored in its dtype
    (cast first, as autocast casts a matmul's inputs) and the arithmetic runs in float32."""
    if torch.is_autocast_enabled(q.device.type):
        dt = torch.get_autocast_dtype(q.device.type)
        q, k, v = q.to(dt), k.to(dt), v.to(dt)
    return CausalAttention.apply(q, k, v, scale)


class ScatterToView(torch.autograd.Function):
    """``zeros [H, size, D]`` with ``src [H, S, D]`` at ``index [S]`` along dim 1; saves only the index
    (the backward of ``index_copy``: ``grad.index_select(1, index)``)."""

    @staticmethod
    def forward(ctx, src, index, size: int):
        ctx.save_for_backward(index)
        return src.new_zeros(src.shape[0], size, src.shape[2]).index_copy_(1, index, src)

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.index_select(1, index), None, None


def scatter_to_view(src: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """:class:`ScatterToView`."""
    return ScatterToView.apply(src, index, size)


class SwiGLU(torch.autograd.Function):
    """``silu(g) * u`` for ``gu = [g | u]`` (the fused gate/up projection's output, split in half on the last
    dim); saves only ``gu`` (autograd keeps ``silu(g)`` as well, one more ``[N, intermediate]`` tensor per
    layer) and recomputes ``silu(g)`` in backward. The backward is autograd's, op for op: ``MulBackward``
    then ``silu_backward``; the gradient is the plain expression's bit for bit."""

    @staticmethod
    def forward(ctx, gu):
        g, u = gu.chunk(2, dim=-1)
        ctx.save_for_backward(gu)
        return F.silu(g) * u

    @staticmethod
    def backward(ctx, grad):
        (gu,) = ctx.saved_tensors
        g, u = gu.chunk(2, dim=-1)
        dg = torch.ops.aten.silu_backward(grad * u, g)
        du = grad * F.silu(g)
        return torch.cat([dg, du], dim=-1)


def swiglu(gu: torch.Tensor) -> torch.Tensor:
    """:class:`SwiGLU`."""
    return SwiGLU.apply(gu)
