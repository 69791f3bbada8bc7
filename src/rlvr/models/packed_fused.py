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
(``tests/unit/models/test_packed_fused.py``). Under CPU autocast the projection runs as autocast runs it
(input, weight and bias cast to the autocast dtype, the gradients cast back).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlvr.models.packed_attention import silu_mul, swiglu_backward


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


def _project_backward(ctx, dout, x, W, b):
    """``(dx, dW, db)`` of :func:`_project`: autograd's ``mm`` formulas on the cast operands, the gradients
    cast back to the operands' dtypes (None where not needed)."""
    cast, (need_x, need_W, need_b) = ctx.cast, ctx.needs
    xc, Wc = _cast(x, cast), _cast(W, cast)
    with torch.autocast(x.device.type, enabled=False):
        dx = dout.mm(Wc).to(x.dtype) if need_x else None                   # MmBackward: self
        dW = dout.t().mm(xc).to(W.dtype) if need_W else None               # MmBackward: mat2 (= Wᵀ)
        db = dout.sum(0).to(b.dtype) if b is not None and need_b else None
    return dx, dW, db


class NormLinear(torch.autograd.Function):
    """``linear(rms(h, w, eps), W, b)`` for a 2-D ``h``; saves ``h``, ``r = rsqrt(mean(h²) + eps)`` ``[N, 1]`` and
    the weights (not the normalised ``h`` nor the projection's input).

    ``h`` is passed twice (``apply(h, h, ...)``): the backward returns RMSNorm's two gradient contributions
    to it separately, as autograd's ``MulBackward`` (``y = h · r``: ``dy · r``) and ``PowBackward`` (through
    ``r``) produce them, each computed with autograd's own formulas, so autograd adds them to ``h``'s other
    gradients (the residual's) in the order and association the unfused graph does: the gradient is the
    unfused graph's bit for bit."""

    @staticmethod
    def forward(ctx, h, h_again, w, W, b, eps: float):
        hf = h.float()
        r = torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
        x = w * (hf * r).to(h.dtype)
        ctx.cast, ctx.has_b = _autocast_dtype(h), b is not None
        need = ctx.needs_input_grad
        ctx.needs = (need[0] or need[1] or need[2], need[3], need[4])
        ctx.save_for_backward(h, r, w, W, b if b is not None else W.new_empty(0))
        return _project(x, W, b, ctx.cast)

    @staticmethod
    def backward(ctx, dout):
        h, r, w, W, b = ctx.saved_tensors
        b = b if ctx.has_b else None
        hf = h.float()
        y = (hf * r).to(h.dtype)
        dx, dW, db = _project_backward(ctx, dout, w * y, W, b)
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
        return dh_mul, dh_pow, dw, dW, db, None


class SwiGLULinear(torch.autograd.Function):
    """``linear(silu(g) * u, W, b)`` for a 2-D ``gu = [g | u]``; saves ``gu`` (not the product) and the weights.
    Backward: the projection's ``mm`` formulas, then SwiGLU's as :class:`~rlvr.models.packed_attention.SwiGLU`
    (``MulBackward``, ``silu_backward``)."""

    @staticmethod
    def forward(ctx, gu, W, b):
        ctx.cast, ctx.has_b = _autocast_dtype(gu), b is not None
        ctx.needs = ctx.needs_input_grad[:3]
        ctx.save_for_backward(gu, W, b if b is not None else W.new_empty(0))
        return _project(silu_mul(gu), W, b, ctx.cast)

    @staticmethod
    def backward(ctx, dout):
        gu, W, b = ctx.saved_tensors
        b = b if ctx.has_b else None
        g, u = gu.chunk(2, dim=-1)
        sg = F.silu(g)
        ds, dW, db = _project_backward(ctx, dout, sg * u, W, b)
        return (None if ds is None else swiglu_backward(ds, gu, sg)), dW, db


def norm_linear(h: torch.Tensor, w: torch.Tensor, eps: float, W: torch.Tensor, b: torch.Tensor | None = None):
    """``linear(rms(h, w, eps), W, b)`` for a 2-D ``h``, saving ``h`` (not the normalised ``h``, not the
    projection's input)."""
    return NormLinear.apply(h, h, w, W, b, eps)


def swiglu_linear(gu: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None = None):
    """``linear(silu(g) * u, W, b)`` for a 2-D ``gu = [g | u]``, saving ``gu`` (not the product)."""
    return SwiGLULinear.apply(gu, W, b)
