"""NormLinear's and SwiGLULinear's C kernels (``rlvr/accel/kernels/norm_swiglu.c``) against their PyTorch paths: the same
outputs and gradients (h, the norm weight, the projections' weights and biases) up to float32 summation order, in
float32 and under bf16 autocast (there: up to the bf16 roundings), and the C path taken where it applies."""

import shutil

import pytest
import torch
from test_packed_fused import run

from rlvr.accel import packed_fused

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler: the native kernels cannot be built here")


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_native_norm_and_swiglu_give_the_pytorch_paths_values(monkeypatch, bf16, bias):
    calls = []
    for name in ("_rms_c", "_swiglu_c"):
        orig = getattr(packed_fused, name)
        monkeypatch.setattr(packed_fused, name, lambda *a, _o=orig, _n=name: (calls.append(_n), _o(*a))[1])
    monkeypatch.setenv("RLVR_KERNELS", "1")
    out, grads, _ = run(True, bias, bf16)
    assert sorted(set(calls)) == ["_rms_c", "_swiglu_c"]  # forward and backward both took the C path
    monkeypatch.setenv("RLVR_KERNELS", "0")
    ref, ref_grads, _ = run(True, bias, bf16)
    tol = 2 ** -6 if bf16 else 1e-5
    scale = float(ref.abs().max())
    assert float((out.float() - ref.float()).abs().max()) <= tol * scale
    for k, g in grads.items():
        r = ref_grads[k]
        assert float(r.abs().max()) > 0
        assert float((g - r).abs().max()) <= tol * float(r.abs().max()), (k, float((g - r).abs().max()))


def test_swiglu_kernel_rounds_as_torchs_bf16_ops():
    """bf16: silu(g) rounded to bf16, then the product rounded: torch's two bf16 ops, value for value (away from
    a rounding boundary the polynomial exp can cross)."""
    if packed_fused._kernel_lib() is None:
        pytest.skip("native kernels cannot be built here")
    g = torch.Generator().manual_seed(0)
    gu = (torch.randn(64, 96, generator=g) * 3).bfloat16()
    a = packed_fused._swiglu_c(gu)
    ref = torch.nn.functional.silu(gu[:, :48]) * gu[:, 48:]
    assert a.dtype == torch.bfloat16
    assert (a != ref).float().mean() < 0.01 and float((a.float() - ref.float()).abs().max()) <= 2 ** -7 * 12
