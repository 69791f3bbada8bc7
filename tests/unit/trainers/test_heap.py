"""release_free_heap: glibc's malloc_trim between CPU micro-batches when RLVR_MALLOC_TRIM=1 (off by default),
nothing elsewhere; gradients unchanged."""

import sys

import pytest
import torch

import rlvr.trainers.heap as heap
from rlvr.trainers.common import accumulate


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(heap, "_loaded", False)
    monkeypatch.setattr(heap, "_trim", None)
    return monkeypatch


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_the_environment_turns_it_on_for_cpu_only(fresh):
    fresh.setenv("RLVR_MALLOC_TRIM", "1")
    assert heap.release_free_heap("cpu") is True
    assert heap.release_free_heap("cuda") is False


@pytest.mark.parametrize("value", [None, "0", "yes"])
def test_off_by_default(fresh, value):
    if value is None:
        fresh.delenv("RLVR_MALLOC_TRIM", raising=False)
    else:
        fresh.setenv("RLVR_MALLOC_TRIM", value)
    assert heap.release_free_heap("cpu") is False


def test_accumulate_trims_between_micro_batches_and_the_gradient_is_unchanged(fresh):
    calls = []
    fresh.setattr(heap, "_loaded", True)
    fresh.setattr(heap, "_trim", lambda pad: calls.append(pad) or 1)
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    x = torch.arange(12, dtype=torch.float32).view(4, 3)

    def forward(rows):
        return (x[rows] @ w).pow(2).sum() / 4, {"n_sum": len(rows)}

    met = accumulate([[0], [1, 2], [3]], forward, 4)
    g = w.grad.clone()
    assert calls == [0, 0]  # between the three micro-batches, not after the last
    w.grad = None
    fresh.setattr(heap, "_trim", None)
    accumulate([[0, 1, 2, 3]], forward, 4)
    assert torch.allclose(g, w.grad) and met["n_sum"] == 4
