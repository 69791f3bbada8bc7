"""FastDecoder's per-token step as one C call (``rlvr/accel/kernels/decode_step.c``), for float32 decoding.

At the tiny models' decode shapes (64 rows x 128 hidden) a step is ~25 tensor ops per layer of a few
microseconds each, and Python and the dispatcher cost as much as the arithmetic. :class:`KernelStep` runs the
same function (RMSNorm, fused QKV projection, RoPE on adjacent pairs, K/V into the cache, one query's masked
softmax attention over the cache, output projection into the residual, SwiGLU MLP, final norm, logits) in one
call: the five projections a layer go to the ``sgemm`` torch itself uses (MKL's, in libtorch_cpu), the rest
are loops in C. It reads FastDecoder's own buffers (weights, fused QKV and gate/up copies, the KV cache, the
padding mask, the RoPE table), so the prompt pass (PyTorch) and the steps (C) share one cache, and
``FastDecoder.select`` moves rows for both.

Used when :func:`kernel_reason` is None: float32 weights and compute, no MLP biases, fused gate/up, contiguous
weights, a torch that exports ``sgemm_``, and a C compiler (``rlvr.accel.kernels.build``; ``RLVR_KERNELS=0`` turns it
off). The values are FastDecoder's up to float rounding (sums in another order, a polynomial ``exp``):
``tests/unit/rollout/test_kernel_decode_step.py`` compares the two paths' logits over a whole generation.
"""

from __future__ import annotations

import ctypes

import torch

from rlvr.accel.kernels import build
from rlvr.accel.kernels.call import LONG, arg
from rlvr.accel.kernels.call import call as kernel_call

_P = ctypes.c_void_p


class _Dec(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("L", "Hd", "H", "Hkv", "D", "F", "V", "cap", "Bcap", "nqkv")] + [
        ("scale", ctypes.c_float), ("norm_eps", ctypes.c_float),
        ("embed", _P), ("cis", _P), ("norm", _P), ("lm", _P), ("kv", _P), ("mask", _P),
        *[(n, ctypes.POINTER(_P)) for n in ("ln1", "ln2", "wqkv", "bqkv", "wo", "bo", "wgu", "wd")],
        ("eps1", ctypes.POINTER(ctypes.c_float)), ("eps2", ctypes.POINTER(ctypes.c_float)),
        *[(n, _P) for n in ("h", "x", "qkv", "att", "gu", "sc")],
        ("sgemm", _P),
        *[(n, _P) for n in ("xb", "qkvb", "attb", "yb", "gub")],
    ]


_D, _I = ctypes.POINTER(_Dec), ctypes.c_int
_SIGNATURES = {"rlvr_decode_step": [_D, _I, _I, _P, _P, _P], "rlvr_bf16_embed_rms": [_D, _I, _I, _P],
               "rlvr_bf16_add_rms": [_D, _I, _I, _P, ctypes.c_float], "rlvr_bf16_attend": [_D, _I, _I, _I, _I, _P],
               "rlvr_bf16_swiglu": [_D, _I]}


def _library():
    """The compiled step and torch's sgemm address, or (None, None) (the C kernels off, or not buildable here)."""
    lib = build.load("decode_step", _SIGNATURES)
    sgemm = build.torch_sgemm() if lib is not None else None
    return (lib, sgemm) if sgemm is not None else (None, None)


def kernel_reason(dec) -> str | None:
    """None when FastDecoder ``dec`` can step in C, else why not."""
    if not build.enabled():
        return "C kernels off (RLVR_KERNELS=0)"
    if dec.dtype != torch.float32 or dec.cd not in (None, torch.bfloat16):
        return "not float32 weights with float32 or bf16 compute"
    if dec.embed.device.type != "cpu":
        return "not on the CPU"
    for L in dec.layers:
        if L.bmlp is not None or L.wgu_t is None:
            return "MLP biases or unfused gate/up"
        if not (L.ln1.is_contiguous() and L.ln2.is_contiguous()):
            return "non-contiguous norm weights"
        if dec.cd is None and not all(w.is_contiguous() and w.dtype == torch.float32 for w in (
                L.wqkv_t.t(), L.wo_t.t(), L.wgu_t.t(), L.wd_t.t(), *(b for b in (L.bqkv, L.bo) if b is not None))):
            return "non-contiguous or non-float32 weights"
    if not (dec.embed.is_contiguous() and (dec.cd is not None or dec.lm_t.t().is_contiguous())):
        return "non-contiguous embedding or head"
    if not dec.cis.is_complex():
        return "no complex RoPE table"
    if _library()[0] is None:
        return "C kernel unavailable (see the log)"
    return None


def _ptrs(ts) -> ctypes.Array:
    return (_P * len(ts))(*[None if t is None else t.data_ptr() for t in ts])


class KernelStep:
    """Binds FastDecoder ``dec``'s buffers once; ``step(dec, ids, pos)`` is ``dec.step``'s function in one C call.
    It keeps no reference to ``dec`` (``dec`` owns it: a cycle would keep each decoder's KV cache alive until the
    garbage collector's next full pass, ~40 MB a ``generate()`` at 5m), only raw pointers into its buffers, which
    live as long as ``dec``."""

    def __init__(self, dec):
        lib, sgemm = _library()
        self.lib = lib
        L0 = dec.layers[0]
        B, Hd = dec.kv.shape[2], dec.embed.shape[1]
        F = L0.wgu_t.shape[1] // 2
        nqkv = L0.wqkv_t.shape[1]
        self.V = dec.lm_t.shape[1]
        f32 = {"dtype": torch.float32}
        # scratch, owned here (the struct holds raw pointers)
        self._bufs = {"h": torch.empty(B, Hd, **f32), "x": torch.empty(B, Hd, **f32),
                      "qkv": torch.empty(B, nqkv, **f32), "att": torch.empty(B, dec.H * dec.D, **f32),
                      "gu": torch.empty(B, 2 * F, **f32), "sc": torch.empty(B, dec.capacity, **f32)}
        self._cis = torch.view_as_real(dec.cis).contiguous()  # [cap, D/2, 2]
        layers = dec.layers
        self._arrays = {
            "ln1": _ptrs([la.ln1 for la in layers]), "ln2": _ptrs([la.ln2 for la in layers]),
            "wqkv": _ptrs([la.wqkv_t for la in layers]), "bqkv": _ptrs([la.bqkv for la in layers]),
            "wo": _ptrs([la.wo_t for la in layers]), "bo": _ptrs([la.bo for la in layers]),
            "wgu": _ptrs([la.wgu_t for la in layers]), "wd": _ptrs([la.wd_t for la in layers])}
        self._eps = [(ctypes.c_float * len(layers))(*[e[i] for e in dec.eps]) for i in (0, 1)]
        self.s = _Dec(L=len(layers), Hd=Hd, H=dec.H, Hkv=dec.Hkv, D=dec.D, F=F, V=self.V, cap=dec.capacity,
                      Bcap=B, nqkv=nqkv, scale=dec.scale, norm_eps=dec.norm_eps, embed=dec.embed.data_ptr(),
                      cis=self._cis.data_ptr(), norm=dec.norm.data_ptr(), lm=dec.lm_t.data_ptr(),
                      kv=dec.kv.data_ptr(), mask=dec.mask.data_ptr() if dec.mask is not None else None,
                      eps1=self._eps[0], eps2=self._eps[1], sgemm=sgemm,
                      **self._arrays, **{k: v.data_ptr() for k, v in self._bufs.items()})
        self.bf16 = dec.cd is not None
        if self.bf16:  # the projections' bf16 inputs and outputs (FastDecoder's own q/k/v and gate/up buffers)
            R = dec._qkv.shape[0]
            bf = {"dtype": dec.cd}
            self._bb = {"xb": torch.zeros(R, Hd, **bf), "qkvb": dec._qkv, "attb": torch.zeros(R, dec.H * dec.D, **bf),
                        "yb": torch.zeros(R, Hd, **bf), "gub": dec._gu}
            for k, v in self._bb.items():
                setattr(self.s, k, v.data_ptr())
        self._ref = ctypes.byref(self.s)

    def step(self, dec, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        B, t = ids.shape[0], dec.t
        if t + 1 > dec.capacity:
            raise ValueError(f"FastDecoder: {t + 1} positions exceed the cache capacity {dec.capacity}")
        ids = ids.reshape(-1).to(torch.long).contiguous()
        pos = pos.reshape(-1).to(torch.long).contiguous()
        if self.bf16:
            return self._step_bf16(dec, B, t, ids, pos)
        out = torch.empty(B, self.V, dtype=torch.float32)
        kernel_call(self.lib, "rlvr_decode_step", self._ref, B, t, arg(ids, "ids", LONG, (B,)), arg(pos, "pos", LONG, (B,)),
                    arg(out, "logits", shape=(B, self.V)))
        dec.t = t + 1
        return out

    def _step_bf16(self, dec, B: int, t: int, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """bf16 projections: torch's bf16 matmuls (oneDNN, at row counts rounded up to a bucket: fast_decode's
        ROW_BUCKET) with the code between them in C, on the values FastDecoder's bf16 step computes."""
        from rlvr.rollout.fast_decode import _bucket

        lib, ref, bb = self.lib, self._ref, self._bb
        m = _bucket(B)
        xb, qkvb, attb, yb, gub = (bb[k][:m] for k in ("xb", "qkvb", "attb", "yb", "gub"))
        F = gub.shape[1] // 2
        g = gub[:, :F]
        hd = xb.shape[1]
        kernel_call(lib, "rlvr_bf16_embed_rms", ref, B, m, arg(ids, "ids", LONG, (B,)))
        n = len(dec.layers)
        for i, L in enumerate(dec.layers):
            if L.bqkv is None:
                torch.mm(xb, L.wqkv_t, out=qkvb)
            else:
                torch.addmm(L.bqkv, xb, L.wqkv_t, out=qkvb)
            kernel_call(lib, "rlvr_bf16_attend", ref, i, B, m, t, arg(pos, "pos", LONG, (B,)))
            if L.bo is None:
                torch.mm(attb, L.wo_t, out=yb)
            else:
                torch.addmm(L.bo, attb, L.wo_t, out=yb)
            kernel_call(lib, "rlvr_bf16_add_rms", ref, B, m, arg(L.ln2, "w", shape=(hd,)), dec.eps[i][1])
            torch.mm(xb, L.wgu_t, out=gub)
            kernel_call(lib, "rlvr_bf16_swiglu", ref, m)
            torch.mm(g, L.wd_t, out=yb)
            w, eps = (dec.layers[i + 1].ln1, dec.eps[i + 1][0]) if i + 1 < n else (dec.norm, dec.norm_eps)
            kernel_call(lib, "rlvr_bf16_add_rms", ref, B, m, arg(w, "w", shape=(hd,)), eps)
        dec.t = t + 1
        return torch.mm(xb, dec.lm_t)[:B]
