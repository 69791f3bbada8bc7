"""RoPE on the packed QKV projection, as the attention's input heads: ``rope_heads``.

HF's rotate-half RoPE (``q * cos + rotate_half(q) * sin``) on the q and k heads of a packed ``[N, H * D]`` QKV
matrix, the v heads copied, the result ``[N, H, D]`` in the attention's dtype. In PyTorch that is five
elementwise ops, a concatenation and a cast, each a pass over the heads in float32 (a bf16 projection times the
float32 cos/sin promotes), with their intermediates saved for the backward. In C (``rlvr/accel/kernels/rope.c``) it is
one pass forward and one backward (the transpose of the rotation), nothing saved but cos/sin: used for float32
or bf16 CPU tensors when the C kernels are on; the PyTorch ops otherwise (tests:
``tests/unit/accel/test_packed_rope.py``).
"""

from __future__ import annotations

import ctypes

import torch

from rlvr.accel.kernels.call import FLOAT32_OR_BF16, arg
from rlvr.accel.kernels.call import call as kernel_call

_P, _I = ctypes.c_void_p, ctypes.c_int
_SIGNATURES = {"rlvr_rope": [_P, _I, _I, _I, _I, _I, _P, _P, _P, _I, _I]}
_DTYPES = (torch.float32, torch.bfloat16)


def _kernel_lib():
    """``rope.c`` loaded, or None (``rlvr.accel.kernels.build``: off, or not buildable here)."""
    from rlvr.accel.kernels import build

    return build.load("rope", _SIGNATURES)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope_c(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, H: int, Hr: int, D: int, dtype,
            backward: bool) -> torch.Tensor:
    N = x.shape[0]
    y = torch.empty(N, H, D, dtype=dtype)
    err = kernel_call(_kernel_lib(), "rlvr_rope", arg(x.view(N, H * D), "x", FLOAT32_OR_BF16, (N, H * D)),
                      int(x.dtype == torch.bfloat16), N, H, Hr, D, arg(cos, "cos", shape=(N, D)),
                      arg(sin, "sin", shape=(N, D)), arg(y, "y", FLOAT32_OR_BF16, (N, H, D)),
                      int(dtype == torch.bfloat16), int(backward))
    if err:
        raise RuntimeError(f"rlvr_rope failed ({err}) for H={H}, Hr={Hr}, D={D}")
    return y


class RopeHeads(torch.autograd.Function):
    """``[N, H * D]`` -> ``[N, H, D]`` in ``dtype``: the first ``Hr`` heads rotated (C kernel)."""

    @staticmethod
    def forward(ctx, qkv, cos, sin, H: int, Hr: int, D: int, dtype):
        ctx.save_for_backward(cos, sin)
        ctx.shape = (H, Hr, D, qkv.dtype)
        return _rope_c(qkv, cos, sin, H, Hr, D, dtype, backward=False)

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        H, Hr, D, dtype = ctx.shape
        dx = _rope_c(dy.contiguous(), cos, sin, H, Hr, D, dtype, backward=True)
        return dx.view(dx.shape[0], H * D), None, None, None, None, None, None


def _kernel_applies(qkv: torch.Tensor, cos: torch.Tensor, dtype) -> bool:
    return (qkv.device.type == "cpu" and qkv.dtype in _DTYPES and dtype in _DTYPES and cos.dtype == torch.float32
            and qkv.dim() == 2 and qkv.is_contiguous() and not cos.requires_grad and _kernel_lib() is not None)


def rope_heads(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, H: int, Hr: int, D: int,
               dtype: torch.dtype | None = None) -> torch.Tensor:
    """The attention's input heads ``[N, H, D]`` from the packed projection ``qkv [N, H * D]``: heads ``0 .. Hr-1``
    rotated by RoPE with ``cos``, ``sin`` (``[N, D]``), the rest as they are; in ``dtype`` (None: the dtype
    PyTorch's ops give, ``qkv``'s promoted with ``cos``'s)."""
    if qkv.dim() != 2 or qkv.shape[1] != H * D or not 0 <= Hr <= H or D % 2:  # the C kernel trusts these
        raise ValueError(f"rope_heads: qkv {tuple(qkv.shape)} is not [N, H * D] with H={H}, D={D} (even), "
                         f"0 <= Hr={Hr} <= H")
    N = qkv.shape[0]
    cos, sin = cos.reshape(N, D), sin.reshape(N, D)
    out = dtype or torch.promote_types(qkv.dtype, cos.dtype)
    if _kernel_applies(qkv, cos, out):
        return RopeHeads.apply(qkv, cos.contiguous(), sin.contiguous(), H, Hr, D, out)
    c, s = cos[:, None, :], sin[:, None, :]
    qk = qkv[:, :Hr * D].view(N, Hr, D)
    qk = qk * c + rotate_half(qk) * s
    heads = torch.cat([qk, qkv[:, Hr * D:].view(N, H - Hr, D)], 1)
    return heads if dtype is None else heads.to(dtype)
