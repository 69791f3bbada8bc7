"""Projections fused with the op before them, keeping fewer activations for the backward pass.

Autograd through ``linear(rmsnorm(h))`` keeps, per token, the norm's input ``h``, its normalised ``y`` and the
projection's input ``w * y`` (three ``[N, hidden]`` tensors); through ``linear(silu(g) * u)`` it keeps
``[g | u]`` and the product (``[N, 3 · intermediate]``). :func:`norm_linear` keeps only ``h`` and
:func:`swiglu_linear` only ``[g | u]``: the dropped tensors are elementwise functions of the kept ones and
are recomputed in backward (no matmul is recomputed). In the packed forward of a tiny model that is about a
third of a micro-batch's saved tensors (``docs/packed_forward.md``, "Fewer saved tensors").

The backward is autograd's, op for op: the projection's ``mm`` formulas, then the norm's or SwiGLU's
derivative formulas on the recomputed values (``NormLinear`` hands its two contributions to ``h`` back
separately so that they are summed with the residual's in autograd's order); the output and every gradient
are the plain expression's bit for bit, alone and inside the whole packed forward
(``tests/unit/accel/test_packed_fused.py``). Under CPU autocast the projection runs as autocast runs it
(input, weight and bias cast to the autocast dtype, the gradients cast back).
"""

from __future__ import annotations

import contextlib
import ctypes

import torch
import torch.nn.functional as F

from rlvr.accel.kernels.call import FLOAT32_OR_BF16, arg
from rlvr.accel.kernels.call import call as kernel_call
from rlvr.accel.packed_attention import silu_mul, swiglu_backward


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's RMSNorm: ``w * (x / sqrt(mean(x²) + eps))`` in float32, cast back to x's dtype before ``w *``."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * y.to(x.dtype)


def _cast(t: torch.Tensor | None, dtype) -> torch.Tensor | None:
    return t if t is None or dtype is None else t.to(dtype)


def _autocast_dtype(t: torch.Tensor):
    dev = t.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None


def _project(x, W, b, cast):
    """``linear(x, W, b)`` as autocast runs it (inputs cast to ``cast``), autocast itself off."""
    with torch.autocast(x.device.type, enabled=False):
        return F.linear(_cast(x, cast), _cast(W, cast), _cast(b, cast))


def _project_backward(ctx, dout, x, W, b, w_dtype):
    """``(dx, dW, db)`` of :func:`_project`: autograd's ``mm`` formulas on the cast operands, the gradients
    cast back to the operands' dtypes (``dW`` to ``w_dtype``, the weights' own; None where not needed)."""
    cast, (need_x, need_W, need_b) = ctx.cast, ctx.needs
    xc, Wc = _cast(x, cast), _cast(W, cast)
    with torch.autocast(x.device.type, enabled=False):
        dx = dout.mm(Wc).to(x.dtype) if need_x else None                   # MmBackward: self
        dW = dout.t().mm(xc).to(w_dtype) if need_W else None               # MmBackward: mat2 (= Wᵀ)
        db = dout.sum(0).to(b.dtype) if b is not None and need_b else None
    return dx, dW, db


# ------------------------------------------------------------------ the GEMM's weight, built once per step

_REUSE = [0]
_BUILT: dict = {}


@contextlib.contextmanager
def reuse_weights():
    """Inside: the weight a fused projection multiplies by (``torch.cat`` of q/k/v or gate/up, RoPE-permuted,
    cast to the autocast dtype: a copy of the weights) is built once and reused by every forward and backward
    of the block's micro-batches, while the weights it is built from are unchanged (their version counters and
    storage; any in-place update, an optimizer step included, makes the next call rebuild it). On the CPU only
    (on a GPU it would keep a second copy of the weights for the block's length). Outside, and on leaving, the
    copies are dropped. The trainers open it around a step's micro-batch loop (``trainers.common.accumulate``)
    and the no-grad reference / old-logprob passes."""
    _REUSE[0] += 1
    try:
        yield
    finally:
        _REUSE[0] -= 1
        if not _REUSE[0]:
            _BUILT.clear()


def fused_weight(Ws: tuple[torch.Tensor, ...], perm: torch.Tensor | None, dtype) -> torch.Tensor:
    """``cat(Ws)[perm]`` in ``dtype`` (None: the weights' own), no grad: the matrix the projection multiplies by
    (a single weight in its own dtype is returned as is). Kept across calls inside :func:`reuse_weights`."""
    W0 = Ws[0]
    dtype = dtype or W0.dtype
    if len(Ws) == 1 and perm is None and dtype == W0.dtype:
        return W0.detach()
    stamp = tuple((W._version, W.data_ptr()) for W in Ws)
    key = (tuple(id(W) for W in Ws), None if perm is None else id(perm), dtype)
    keep = _REUSE[0] and W0.device.type == "cpu"
    if keep:
        hit = _BUILT.get(key)
        if hit is not None and hit[0] == stamp and all(a is b for a, b in zip(hit[1], Ws)):
            return hit[2]
    with torch.no_grad():
        m = torch.cat(Ws) if len(Ws) > 1 else W0
        if perm is not None:
            m = m.index_select(0, perm)
        m = m.to(dtype)
    if keep:
        _BUILT[key] = (stamp, Ws, m)  # the weights themselves held: their ids cannot be reused meanwhile
    return m


# ------------------------------------------------------------------ the C kernels (rlvr/accel/kernels/norm_swiglu.c)

_P, _I, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
_SIGNATURES = {"rlvr_rms_fwd": [_P, _I, _I, _P, _F, _P, _P, _I], "rlvr_rms_bwd": [_P, _P, _P, _P, _I, _I, _P, _P],
               "rlvr_swiglu_fwd": [_P, _I, _I, _I, _P], "rlvr_swiglu_bwd": [_P, _P, _I, _I, _I, _P]}


def _kernel_lib():
    """``norm_swiglu.c`` loaded, or None (``rlvr.accel.kernels.build``: off, or not buildable here)."""
    from rlvr.accel.kernels import build

    return build.load("norm_swiglu", _SIGNATURES)


def _kernel_norm(h: torch.Tensor, w: torch.Tensor, cast) -> bool:
    """Whether :class:`NormLinear` runs its norm in C: float32 CPU ``h`` and ``w``, contiguous, projection in
    float32 or bf16."""
    return (h.device.type == "cpu" and h.dtype == w.dtype == torch.float32 and h.dim() == 2 and h.is_contiguous()
            and w.is_contiguous() and cast in (None, torch.float32, torch.bfloat16) and _kernel_lib() is not None)


def _kernel_swiglu(gu: torch.Tensor) -> bool:
    """Whether :class:`SwiGLULinear` runs SwiGLU in C: a contiguous 2-D float32 or bf16 CPU ``gu``."""
    return (gu.device.type == "cpu" and gu.dtype in (torch.float32, torch.bfloat16) and gu.dim() == 2
            and gu.is_contiguous() and gu.shape[1] % 2 == 0 and _kernel_lib() is not None)


def _rms_c(h: torch.Tensor, w: torch.Tensor, eps: float, cast):
    """``(r [N, 1], x = w · h r)`` by ``rlvr_rms_fwd``, x in ``cast`` (None: float32)."""
    N, n = h.shape
    r = torch.empty(N, 1, dtype=torch.float32)
    x = torch.empty(N, n, dtype=cast or torch.float32)
    kernel_call(_kernel_lib(), "rlvr_rms_fwd", arg(h, "h", shape=(N, n)), N, n, arg(w, "w", shape=(n,)), eps,
                arg(r, "r", shape=(N, 1)), arg(x, "x", FLOAT32_OR_BF16, (N, n)), int(x.dtype == torch.bfloat16))
    return r, x


def _swiglu_c(gu: torch.Tensor) -> torch.Tensor:
    N, F2 = gu.shape
    a = torch.empty(N, F2 // 2, dtype=gu.dtype)
    kernel_call(_kernel_lib(), "rlvr_swiglu_fwd", arg(gu, "gu", FLOAT32_OR_BF16, (N, F2)), N, F2 // 2,
                int(gu.dtype == torch.bfloat16), arg(a, "a", (gu.dtype,), (N, F2 // 2)))
    return a


def _split_grad(ctx, dmat: torch.Tensor | None):
    """The gradient of each weight from the gradient of the matrix :func:`fused_weight` built from them (as
    autograd's ``IndexSelectBackward`` and ``CatBackward`` would give it)."""
    if dmat is None:
        return (None,) * len(ctx.sizes)
    if ctx.perm is not None:
        dmat = dmat.new_zeros(dmat.shape).index_add_(0, ctx.perm, dmat)
    return dmat.split(ctx.sizes) if len(ctx.sizes) > 1 else (dmat,)


class NormLinear(torch.autograd.Function):
    """``linear(rms(h, w, eps), cat(Ws)[perm], b)`` for a 2-D ``h``, the weights ``Ws`` stacked along their
    output dim (one weight, or q/k/v, gate/up) and their rows reordered by ``perm`` (None: not reordered);
    ``mat`` is that matrix, already built (:func:`fused_weight`). Saves ``h``, ``r = rsqrt(mean(h²) + eps)``
    ``[N, 1]``, ``w`` and ``mat`` (not the normalised ``h`` nor the projection's input).

    ``h`` is passed twice (``apply(h, h, ...)``): the backward returns RMSNorm's two gradient contributions
    to it separately, as autograd's ``MulBackward`` (``y = h · r``: ``dy · r``) and ``PowBackward`` (through
    ``r``) produce them, each computed with autograd's own formulas, so autograd adds them to ``h``'s other
    gradients (the residual's) in the order and association the unfused graph does: the gradient is the
    unfused graph's bit for bit. The weights' gradients are the matrix's, un-permuted and split as autograd's
    ``IndexSelectBackward`` and ``CatBackward`` give them."""

    @staticmethod
    def forward(ctx, h, h_again, w, b, eps: float, mat, perm, *Ws):
        cast = _autocast_dtype(h)
        ctx.kernel = _kernel_norm(h, w, cast)
        if ctx.kernel:  # rlvr/accel/kernels/norm_swiglu.c: the same function in one pass, float32 arithmetic
            r, x = _rms_c(h, w, eps, cast)
            ctx.cast, ctx.has_b, ctx.eps = cast, b is not None, eps
            need = ctx.needs_input_grad
            ctx.needs = (need[0] or need[1] or need[2], any(need[7:]), need[3])
            ctx.perm, ctx.sizes, ctx.w_dtype = perm, [W.shape[0] for W in Ws], Ws[0].dtype
            ctx.save_for_backward(h, r, w, mat, b if b is not None else mat.new_empty(0))
            return _project(x, mat, b, cast)
        hf = h.float()
        r = torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
        x = w * (hf * r).to(h.dtype)
        ctx.cast, ctx.has_b = _autocast_dtype(h), b is not None
        need = ctx.needs_input_grad
        ctx.needs = (need[0] or need[1] or need[2], any(need[7:]), need[3])
        ctx.perm, ctx.sizes, ctx.w_dtype = perm, [W.shape[0] for W in Ws], Ws[0].dtype
        ctx.save_for_backward(h, r, w, mat, b if b is not None else mat.new_empty(0))
        return _project(x, mat, b, ctx.cast)

    @staticmethod
    def backward(ctx, dout):
        h, r, w, mat, b = ctx.saved_tensors
        b = b if ctx.has_b else None
        if ctx.kernel:
            return NormLinear._kernel_backward(ctx, dout, h, r, w, mat, b)
        hf = h.float()
        y = (hf * r).to(h.dtype)
        dx, dmat, db = _project_backward(ctx, dout, w * y, mat, b, ctx.w_dtype)
        dh_mul = dh_pow = dw = None
        if dx is not None:
            need = ctx.needs_input_grad
            if need[2]:
                dw = (dx * y).sum(0)                                     # MulBackward (w · y): w
            dy = (dx * w).to(hf.dtype)                                   # MulBackward: y; ToCopyBackward
            dh_mul = dy * r                                              # MulBackward (h · r): h
            dr = (dy * hf).sum(-1, keepdim=True)                         # MulBackward: r
            dmean = -0.5 * dr * r.pow(3)                                 # RsqrtBackward
            dpow = dmean.expand(hf.shape) / hf.shape[-1]                 # MeanBackward
            dh_pow = dpow * (2 * hf.pow(1))                              # PowBackward
            dh_mul, dh_pow = dh_mul.to(h.dtype), dh_pow.to(h.dtype)
        return (dh_mul, dh_pow, dw, db, None, None, None, *_split_grad(ctx, dmat))

    @staticmethod
    def _kernel_backward(ctx, dout, h, r, w, mat, b):
        """The C norm's backward: the projection's ``mm`` formulas on the recomputed (same) projection input, then
        ``rlvr_rms_bwd`` for h's whole gradient (one tensor: the two contributions summed in C) and w's."""
        _, xc = _rms_c(h, w, ctx.eps, ctx.cast)
        need_x, need_W, need_b = ctx.needs
        with torch.autocast(h.device.type, enabled=False):
            dx = dout.mm(mat).float() if need_x else None                      # MmBackward: self
            dmat = dout.t().mm(xc).to(ctx.w_dtype) if need_W else None         # MmBackward: mat2
            db = dout.sum(0).to(b.dtype) if b is not None and need_b else None
        dh = dw = None
        if dx is not None:
            N, n = h.shape
            dh = torch.empty_like(h)
            dw = torch.empty_like(w) if ctx.needs_input_grad[2] else None
            kernel_call(_kernel_lib(), "rlvr_rms_bwd", arg(h, "h", shape=(N, n)), arg(r, "r", shape=(N, 1)),
                        arg(w, "w", shape=(n,)), arg(dx.contiguous(), "dx", shape=(N, n)), N, n,
                        arg(dh, "dh", shape=(N, n)), arg(dw, "dw", shape=(n,), optional=True))
        return (dh, None, dw, db, None, None, None, *_split_grad(ctx, dmat))


class SwiGLULinear(torch.autograd.Function):
    """``linear(silu(g) * u, W, b)`` for a 2-D ``gu = [g | u]``, ``mat`` = W in the compute dtype
    (:func:`fused_weight`); saves ``gu`` (not the product) and ``mat``. Backward: the projection's ``mm``
    formulas, then SwiGLU's as :class:`~rlvr.accel.packed_attention.SwiGLU` (``MulBackward``,
    ``silu_backward``)."""

    @staticmethod
    def forward(ctx, gu, W, b, mat):
        ctx.cast, ctx.has_b, ctx.w_dtype = _autocast_dtype(gu), b is not None, W.dtype
        ctx.needs = ctx.needs_input_grad[:3]
        ctx.save_for_backward(gu, mat, b if b is not None else mat.new_empty(0))
        ctx.kernel = _kernel_swiglu(gu)
        return _project(_swiglu_c(gu) if ctx.kernel else silu_mul(gu), mat, b, ctx.cast)

    @staticmethod
    def backward(ctx, dout):
        gu, mat, b = ctx.saved_tensors
        b = b if ctx.has_b else None
        if ctx.kernel:  # rlvr/accel/kernels/norm_swiglu.c: the product recomputed, then SwiGLU's backward in one pass
            ds, dW, db = _project_backward(ctx, dout, _swiglu_c(gu), mat, b, ctx.w_dtype)
            if ds is None:
                return None, dW, db, None
            ds = ds.contiguous()
            dgu = torch.empty_like(gu)
            N, F2 = gu.shape
            kernel_call(_kernel_lib(), "rlvr_swiglu_bwd", arg(gu, "gu", FLOAT32_OR_BF16, (N, F2)),
                        arg(ds, "ds", (gu.dtype,), (N, F2 // 2)), N, F2 // 2, int(gu.dtype == torch.bfloat16),
                        arg(dgu, "dgu", (gu.dtype,), (N, F2)))
            return dgu, dW, db, None
        g, u = gu.chunk(2, dim=-1)
        sg = F.silu(g)
        ds, dW, db = _project_backward(ctx, dout, sg * u, mat, b, ctx.w_dtype)
        return (None if ds is None else swiglu_backward(ds, gu, sg)), dW, db, None


def norm_linear(h: torch.Tensor, w: torch.Tensor, eps: float, W, b: torch.Tensor | None = None,
                perm: torch.Tensor | None = None):
    """``linear(rms(h, w, eps), cat(W)[perm], b)`` for a 2-D ``h`` (``W``: a weight or a tuple of weights
    stacked along their output dim; ``b``: the stacked, reordered bias), saving ``h`` (not the normalised
    ``h``, not the projection's input)."""
    Ws = (W,) if isinstance(W, torch.Tensor) else tuple(W)
    return NormLinear.apply(h, h, w, b, eps, fused_weight(Ws, perm, _autocast_dtype(h)), perm, *Ws)


def swiglu_linear(gu: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None = None):
    """``linear(silu(g) * u, W, b)`` for a 2-D ``gu = [g | u]``, saving ``gu`` (not the product)."""
    return SwiGLULinear.apply(gu, W, b, fused_weight((W,), None, _autocast_dtype(gu)))
