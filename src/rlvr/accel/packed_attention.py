"""Causal attention over ``[G, L, D]`` blocks that keeps no ``[G, L, L]`` tensor for the backward pass.

Autograd through ``softmax(q kᵀ · scale + causal mask) v`` written as batched matmuls saves the softmax
probabilities ``[G, L, L]``: at the tiny models' shapes (64 rows of ~50 tokens, 8 heads) the largest
activation of a layer (~4 KB per packed token per layer in float32, 5m model, prefix-shared GRPO batch).
:class:`CausalAttention` saves only q, k and v and recomputes the scores and probabilities in backward
(one more ``[G, L, D] x [G, D, L]`` matmul, ~2% of the update's time).

The backward runs autograd's own formulas op for op on the recomputed (bit-identical) probabilities:
``BmmBackward`` for the values and the probabilities, ``_softmax_backward_data``, ``BaddbmmBackward``
for q and k. The gradient is the plain expression's, exactly
(``tests/unit/accel/test_packed_attention.py``). Precision: under autocast q, k and v are kept in bf16
and the scores, probabilities and output are float32 (see :class:`CausalAttention`).

:func:`scatter_to_view` puts the packed tokens' heads on the padded attention view; its backward needs only
the index (autograd's ``index_copy`` keeps its whole source for the backward, for the source's shape).
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F

from rlvr.accel.kernels.call import BYTE, FLOAT32_OR_BF16, LONG, arg
from rlvr.accel.kernels.call import call as kernel_call


def _probs(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """``softmax(q kᵀ · scale + causal mask)`` in q's dtype (as CPU autocast runs softmax on bf16 scores: the
    kernel accumulates in float32 and rounds its output)."""
    L = q.shape[1]
    mask = torch.full((L, L), float("-inf"), dtype=q.dtype, device=q.device).triu_(1)
    s = torch.baddbmm(mask.expand(q.shape[0], L, L), q, k.transpose(1, 2), alpha=scale)
    return torch.softmax(s, dim=-1)


def _wide_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype attention's arithmetic runs in for inputs like ``t``: float64 / float32 kept, else float32."""
    return t.dtype if t.dtype in (torch.float32, torch.float64) else torch.float32


def _wide(t: torch.Tensor) -> torch.Tensor:
    return t.to(_wide_dtype(t))


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """``softmax(q kᵀ · scale + causal mask) v`` in float32 (autocast off)."""
    with torch.autocast(q.device.type, enabled=False):
        return torch.bmm(_probs(_wide(q), _wide(k), scale), _wide(v))


def _scatter(src: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """``zeros [H, size, D]`` with ``src [H, S, D]`` at ``index [S]`` along dim 1."""
    return src.new_zeros(src.shape[0], size, src.shape[2]).index_copy_(1, index, src)


class CausalAttention(torch.autograd.Function):
    """``o = softmax(q kᵀ · scale + causal mask) v`` for ``q, k, v [G, L, D]`` of one dtype; saves q, k, v.

    bf16 inputs are stored as such and the arithmetic runs in float32 (``o`` float32, the gradients cast back
    to the inputs' dtype): CPU bf16 matmuls go through oneDNN, which keeps a JIT-compiled primitive (~0.6 MB)
    for every distinct shape, and the ``[H·B, L, ·]`` shapes of ragged micro-batches are nearly all distinct
    (measured: RSS +130 MB per 200 shapes, never freed); float32 batched matmuls keep nothing."""

    @staticmethod
    def forward(ctx, q, k, v, scale: float):
        o = _attend(q, k, v, scale)
        ctx.save_for_backward(q, k, v)
        ctx.scale = scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v = ctx.saved_tensors
        return (*_attention_grads(q, k, v, do, ctx.scale), None)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """:class:`CausalAttention` of ``[G, L, D]`` blocks; under autocast q, k and v are stored in its dtype
    (cast first, as autocast casts a matmul's inputs) and the arithmetic runs in float32."""
    if torch.is_autocast_enabled(q.device.type):
        dt = torch.get_autocast_dtype(q.device.type)
        q, k, v = q.to(dt), k.to(dt), v.to(dt)
    return CausalAttention.apply(q, k, v, scale)


def _attention_grads(q, k, v, do, scale: float):
    """``(dq, dk, dv)`` of :class:`CausalAttention` (float32 arithmetic, cast back to the inputs' dtype)."""
    return _attention_grads_into(q, k, v, do, scale, q.dtype).split(q.shape[0])


def _attention_grads_into(q, k, v, do, scale: float, dtype) -> torch.Tensor:
    """``dq, dk, dv`` of the causal attention ``[G, L, D]`` stacked in one ``[3G, L, D]`` tensor (as ``SplitBackward``
    stacks them, so a packed view's gradient needs no concatenation): autograd's formulas in float32, cast to
    ``dtype``."""
    q, k, v = _wide(q), _wide(k), _wide(v)
    G, L, D = q.shape
    out = q.new_empty(3 * G, L, D)
    dq, dk, dv = out.split(G)
    with torch.autocast(q.device.type, enabled=False):
        p = _probs(q, k, scale)
        do = do.to(q.dtype)
        torch.bmm(p.transpose(1, 2), do, out=dv)                  # BmmBackward: mat2
        dp = do.bmm(v.transpose(1, 2))                           # BmmBackward: self
        ds = torch._softmax_backward_data(dp, p, -1, p.dtype)     # SoftmaxBackward
        torch.bmm(ds, k, out=dq).mul_(scale)                     # BaddbmmBackward: batch1
        dk.copy_(q.transpose(1, 2).bmm(ds).mul_(scale).transpose(1, 2))  # BaddbmmBackward: batch2 = kᵀ
    return out.to(dtype)


def _packed_view(heads: torch.Tensor, view_tok: torch.Tensor, B: int, L: int) -> torch.Tensor:
    """The attention view of the packed heads ``[N, 3H, D]`` (token-major, as the fused q/k/v projection writes
    them) as ``[3, H·B, L, D]`` in float32 (:func:`_wide`'s dtype): one row gather (``view_tok [B·L]``: the
    packed token at each view position; padding positions read any token, see :class:`PackedCausalAttention`)
    and one copy that casts and puts the heads first."""
    H3, D = heads.shape[1:]
    g = heads.index_select(0, view_tok).view(B, L, 3, H3 // 3, D).permute(2, 3, 0, 1, 4)
    return torch.empty(g.shape, dtype=_wide_dtype(heads), device=heads.device).copy_(g).view(3, H3 // 3 * B, L, D)


_HEAD = [ctypes.c_void_p, *[ctypes.c_int] * 6, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float]
_SIGNATURES = {"rlvr_pattn_fwd": [*_HEAD, ctypes.c_void_p, ctypes.c_int],
               "rlvr_pattn_bwd": [*_HEAD, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]}


def _kernel_lib():
    """``rlvr/accel/kernels/packed_attention.c`` loaded, or None (``rlvr.accel.kernels.build``: off, or not buildable here)."""
    from rlvr.accel.kernels import build

    return build.load("packed_attention", _SIGNATURES)


def kernel_attention(heads: torch.Tensor) -> bool:
    """Whether :class:`PackedCausalAttention` runs its C kernels for ``heads``: CPU, float32 or bf16, contiguous,
    C kernels on (``RLVR_KERNELS``) and built."""
    return (heads.device.type == "cpu" and heads.dtype in (torch.float32, torch.bfloat16) and heads.is_contiguous()
            and _kernel_lib() is not None)


def _run_kernel(fn: str, heads, view_tok, need, B: int, L: int, scale: float, *bufs) -> None:
    N, H3, D = heads.shape
    shapes = {"rlvr_pattn_fwd": [("out", (B * L, H3 // 3 * D))],
              "rlvr_pattn_bwd": [("dout", (B * L, H3 // 3 * D)), ("dheads", (N, H3, D))]}[fn]
    rc = kernel_call(_kernel_lib(), fn, arg(heads, "heads", FLOAT32_OR_BF16, (N, H3, D)),
                     int(heads.dtype == torch.bfloat16), N, H3 // 3, D, B, L, arg(view_tok, "view_tok", LONG, (B * L,)),
                     arg(need, "need", BYTE, (B * L,)), scale,
                     *[arg(t, name, shape=shape) for t, (name, shape) in zip(bufs, shapes, strict=True)],
                     torch.get_num_threads())
    if rc:
        raise MemoryError(f"{fn}: could not allocate its work buffers (B={B}, L={L}, D={D})")


class PackedCausalAttention(torch.autograd.Function):
    """Causal attention of the packed heads ``heads [N, 3H, D]`` (q, k, v heads of the packed tokens,
    token-major) on the padded attention view (each row's tokens at ``0 .. len-1``) -> ``o [N, H·D]``, each
    packed token's output read at its owner view position (``owner_view [N]``). Saves the packed heads and the
    two indices, not the view: the view holds every row's whole sequence (a GRPO group's prompt once per row)
    and its padding, ~3x the packed tokens of a prefix-shared GRPO micro-batch.

    ``view_tok [B·L]``: the packed token at each view position (:attr:`Packing.view_tok`). Padding positions
    read a real token instead of zeros: no real query attends to them (they come after every real token of
    their row: the causal mask gives them probability exactly 0), nothing reads their outputs, and their
    gradients are exactly 0, so the outputs and gradients are those of the zero-padded view. The view is one
    row gather (was: a gather along the head dim, a zero fill and a scatter: ~4x the time), the backward one
    ``index_add`` along the tokens, in view order (= slot order, as ``IndexSelectBackward`` accumulates a shared
    token's rows). In float32 the gradient is the unfused expression's bit for bit; with bf16 heads ``index_add``
    along the first dim sums a shared token's rows in float32 and rounds once, where autograd's backward of a bf16
    ``index_select`` rounds after every row: the unfused expression's gradient with its gather done in float32,
    bit for bit (``tests/unit/accel/test_packed_fused.py``)."""

    @staticmethod
    def forward(ctx, heads, view_tok, owner_view, B: int, L: int, scale: float):
        ctx.B, ctx.L, ctx.scale = B, L, scale
        if kernel_attention(heads):  # rlvr/accel/kernels/packed_attention.c: the same function, float32 arithmetic
            view_tok = view_tok.contiguous()
            need = torch.zeros(B * L, dtype=torch.uint8, device=heads.device).index_fill_(0, owner_view, 1)
            out = torch.empty(B * L, heads.shape[1] // 3 * heads.shape[2], dtype=torch.float32, device=heads.device)
            _run_kernel("rlvr_pattn_fwd", heads, view_tok, need, B, L, scale, out)
            ctx.save_for_backward(heads, view_tok, owner_view, need)
            return out.index_select(0, owner_view)
        q, k, v = _packed_view(heads, view_tok, B, L)
        H, D = heads.shape[1] // 3, heads.shape[2]
        o = _attend(q, k, v, scale)                                              # [H·B, L, D]
        ctx.save_for_backward(heads, view_tok, owner_view)
        return o.view(H, B * L, D).transpose(0, 1).reshape(B * L, H * D).index_select(0, owner_view)

    @staticmethod
    def backward(ctx, do):
        heads, view_tok, owner_view, *kernel = ctx.saved_tensors
        B, L = ctx.B, ctx.L
        H3, D = heads.shape[1:]
        H = H3 // 3
        if kernel:
            dfull = torch.zeros(B * L, H * D, dtype=torch.float32, device=do.device).index_add_(0, owner_view, do.float())
            dheads = torch.zeros(heads.shape, dtype=torch.float32, device=heads.device)
            _run_kernel("rlvr_pattn_bwd", heads, view_tok, kernel[0], B, L, ctx.scale, dfull, dheads)
            return dheads.to(heads.dtype), None, None, None, None, None
        q, k, v = _packed_view(heads, view_tok, B, L)
        dfull = do.new_zeros(B * L, H * D).index_add_(0, owner_view, do)       # IndexSelectBackward
        dfull = dfull.view(B, L, H, D).permute(2, 0, 1, 3).reshape(H * B, L, D)  # TransposeBackward, ViewBackward
        dview = _attention_grads_into(q, k, v, dfull, ctx.scale, q.dtype).view(3, H, B, L, D)
        dtm = torch.empty(B, L, 3, H, D, dtype=heads.dtype, device=heads.device).copy_(dview.permute(2, 3, 0, 1, 4))
        return heads.new_zeros(heads.shape).index_add_(0, view_tok, dtm.view(B * L, H3, D)), None, None, None, None, None


def packed_causal_attention(heads: torch.Tensor, view_tok: torch.Tensor, owner_view: torch.Tensor,
                            B: int, L: int, scale: float) -> torch.Tensor:
    """:class:`PackedCausalAttention` (q, k and v heads alike: no grouped-query heads)."""
    return PackedCausalAttention.apply(heads, view_tok, owner_view, B, L, scale)


class ScatterToView(torch.autograd.Function):
    """``zeros [H, size, D]`` with ``src [H, S, D]`` at ``index [S]`` along dim 1; saves only the index
    (the backward of ``index_copy``: ``grad.index_select(1, index)``)."""

    @staticmethod
    def forward(ctx, src, index, size: int):
        ctx.save_for_backward(index)
        return _scatter(src, index, size)

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
        ctx.save_for_backward(gu)
        return silu_mul(gu)

    @staticmethod
    def backward(ctx, grad):
        (gu,) = ctx.saved_tensors
        return swiglu_backward(grad, gu)


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """``silu(g) * u`` for ``gu = [g | u]``."""
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


def swiglu_backward(grad: torch.Tensor, gu: torch.Tensor, silu_g: torch.Tensor | None = None) -> torch.Tensor:
    """The gradient of :func:`silu_mul` at ``gu`` (autograd's ``MulBackward`` then ``silu_backward``);
    ``silu_g``: ``silu(g)`` if already computed."""
    g, u = gu.chunk(2, dim=-1)
    gd = grad * u
    out = gd.new_empty(gu.shape)  # the two halves written in place (no concatenation)
    half = g.shape[-1]
    torch.ops.aten.silu_backward.grad_input(gd, g, grad_input=out[..., :half])
    torch.mul(grad, F.silu(g) if silu_g is None else silu_g, out=out[..., half:])
    return out


def swiglu(gu: torch.Tensor) -> torch.Tensor:
    """:class:`SwiGLU`."""
    return SwiGLU.apply(gu)
