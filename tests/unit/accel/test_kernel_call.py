"""Every C kernel call goes through ``rlvr.accel.kernels.call``: a tensor the kernel would misread is a clear
error before any pointer reaches C, never a segfault or silently wrong numbers."""

from __future__ import annotations

import shutil

import pytest
import torch

from rlvr.accel.kernels.call import FLOAT32_OR_BF16, KernelArgumentError, arg, call


class FakeLib:
    """Records the raw arguments each function receives (and what the tensors held during the call)."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, fn):
        return lambda *raw: self.calls.append((fn, raw)) or 0


def test_a_good_call_passes_pointers_and_scalars_through():
    lib, x = FakeLib(), torch.zeros(3, 4)
    assert call(lib, "k", arg(x, "x", shape=(3, None)), 7, 0.5, arg(None, "opt", optional=True)) == 0
    assert lib.calls == [("k", (x.data_ptr(), 7, 0.5, None))]


@pytest.mark.parametrize("bad, message", [
    (lambda: torch.zeros(3, 4, dtype=torch.float64), "dtype torch.float64, expected torch.float32"),
    (lambda: torch.zeros(4, 3).t(), "not contiguous"),
    (lambda: torch.zeros(3, 5), "shape [3, 5], expected [3, 4]"),
    (lambda: torch.zeros(12), "shape [12], expected [3, 4]"),
    (lambda: None, "is None"),
    (lambda: [0.0] * 12, "is a list, not a tensor"),
])
def test_a_tensor_the_kernel_would_misread_is_refused_before_the_call(bad, message):
    lib = FakeLib()
    with pytest.raises(KernelArgumentError, match="C kernel rlvr_k: argument 'h'") as e:
        call(lib, "rlvr_k", arg(bad(), "h", shape=(3, 4)), 3, 4)
    assert message in str(e.value)
    assert lib.calls == []  # nothing reached C


def test_a_bare_tensor_argument_is_refused():
    with pytest.raises(KernelArgumentError, match="bare tensor"):
        call(FakeLib(), "rlvr_k", torch.zeros(2))


def test_dtype_alternatives_are_named():
    with pytest.raises(KernelArgumentError, match="expected torch.float32 or torch.bfloat16"):
        call(FakeLib(), "k", arg(torch.zeros(2, dtype=torch.float16), "gu", FLOAT32_OR_BF16))


def test_the_tensors_stay_alive_for_the_call():
    """A temporary made for the call (``x.t().contiguous()``) is referenced by the wrapper until C returns."""
    import gc
    import weakref

    seen = []

    class Lib:
        def k(self, ptr):
            gc.collect()
            seen.append(ref() is not None)
            return 0

    refs = []

    def temporary():
        t = torch.zeros(4, 3).t().contiguous()
        refs.append(weakref.ref(t))
        return t

    def ref():
        return refs[0]()

    call(Lib(), "k", arg(temporary(), "x"))  # nothing but the call holds the temporary
    assert seen == [True]
    gc.collect()
    assert ref() is None  # and it is released afterwards


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_a_real_kernel_refuses_a_wrong_dtype_and_a_transposed_input(monkeypatch):
    from rlvr.accel import packed_fused

    monkeypatch.setenv("RLVR_KERNELS", "1")
    if packed_fused._kernel_lib() is None:
        pytest.skip("the C kernels could not be built here")
    h, w = torch.randn(5, 8), torch.randn(8)
    _, x = packed_fused._rms_c(h, w, 1e-6, None)
    assert torch.allclose(x, packed_fused.rms(h, w, 1e-6), atol=1e-5)
    with pytest.raises(KernelArgumentError, match="argument 'h' has dtype torch.float64"):
        packed_fused._rms_c(h.double(), w, 1e-6, None)
    with pytest.raises(KernelArgumentError, match="argument 'h' is not contiguous"):
        packed_fused._rms_c(torch.randn(8, 5).t(), w, 1e-6, None)
    with pytest.raises(KernelArgumentError, match="argument 'w' has shape \\[7\\], expected \\[8\\]"):
        packed_fused._rms_c(h, torch.randn(7), 1e-6, None)
