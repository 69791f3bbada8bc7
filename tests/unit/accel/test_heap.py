"""RLVR_HEAP: ``keep`` (default) fixes glibc's mmap/trim thresholds so a CPU step's freed pages stay in the heap
(fewer page faults, measured below in a fresh process); ``trim`` runs malloc_trim between CPU micro-batches;
``glibc`` leaves the defaults. Bad values are a ConfigError naming the variable; gradients unchanged."""

import json
import os
import subprocess
import sys

import pytest
import torch

import rlvr.accel.heap as heap
from rlvr.errors import ConfigError
from rlvr.trainers.common import accumulate

GLIBC = sys.platform.startswith("linux") and heap._glibc() is not None


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(heap, "_kept", False)
    return monkeypatch


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_trim_runs_for_cpu_only(fresh):
    fresh.setenv("RLVR_HEAP", "trim")
    assert heap.release_free_heap("cpu") is True
    assert heap.release_free_heap("cuda") is False
    assert heap.keep_freed_heap("cpu") is False


@pytest.mark.parametrize("value", [None, "keep", "glibc"])
def test_no_trim_unless_asked(fresh, value):
    if value is None:
        fresh.delenv("RLVR_HEAP", raising=False)
    else:
        fresh.setenv("RLVR_HEAP", value)
    assert heap.release_free_heap("cpu") is False


def test_a_bad_value_names_the_variable(fresh):
    fresh.setenv("RLVR_HEAP", "yes")
    with pytest.raises(ConfigError, match="RLVR_HEAP='yes'.*keep, trim, glibc"):
        heap.keep_freed_heap("cpu")
    with pytest.raises(ConfigError, match="RLVR_HEAP"):
        heap.release_free_heap("cpu")


def test_keep_is_for_the_cpu_and_the_keep_mode_only(fresh):
    fresh.setenv("RLVR_HEAP", "glibc")
    assert heap.keep_freed_heap("cpu") is False
    fresh.setenv("RLVR_HEAP", "keep")
    assert heap.keep_freed_heap("cuda") is False


PROBE = r"""
import ctypes, json
import rlvr.accel.heap as heap
import torch


class MallInfo2(ctypes.Structure):
    _fields_ = [(k, ctypes.c_size_t) for k in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
kept = heap.keep_freed_heap("cpu")
before = libc.mallinfo2()
t = torch.ones(2 << 20)  # 8 MB: over glibc's mmap threshold here, under the kept one
live = libc.mallinfo2()
del t
ts = [torch.ones(1 << 18) for _ in range(48)]  # 48 MB more, at the heap's top when it comes from the heap
top = libc.mallinfo2()
del ts
freed = libc.mallinfo2()
print(json.dumps({"kept": kept, "mapped": live.hblkhd - before.hblkhd, "heap_top": top.arena,
                  "heap_freed": freed.arena}))
"""


def _probes(*modes: str) -> list[dict]:
    """PROBE in a fresh process per mode (mallopt is per process), side by side."""
    procs = [subprocess.Popen([sys.executable, "-c", PROBE], env={**os.environ, "RLVR_HEAP": m},
                              stdout=subprocess.PIPE, text=True) for m in modes]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return [json.loads(o.strip().splitlines()[-1]) for o in outs]


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_keep_holds_freed_tensors_in_the_heap():
    keep, default = _probes("keep", "glibc")
    assert keep["kept"] is True and default["kept"] is False
    mb = 1 << 20
    # glibc's defaults mmap an 8 MB tensor and unmap it when freed (the next one faults its pages in again);
    # kept, it comes from the heap, and 48 MB freed at the heap's top stay there for the next micro-batch
    assert default["mapped"] >= 8 * mb, default
    assert keep["mapped"] < mb, keep
    assert keep["heap_freed"] == keep["heap_top"], keep


def test_accumulate_trims_between_micro_batches_and_the_gradient_is_unchanged(fresh):
    calls = []
    fresh.setattr(heap, "release_free_heap", lambda device: calls.append(device) or True)  # the memory hook's
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    x = torch.arange(12, dtype=torch.float32).view(4, 3)

    def forward(rows):
        return (x[rows] @ w).pow(2).sum() / 4, {"n_sum": len(rows)}

    met = accumulate([[0], [1, 2], [3]], forward, 4)
    g = w.grad.clone()
    assert calls == ["cpu", "cpu"]  # between the three micro-batches, not after the last
    w.grad = None
    accumulate([[0, 1, 2, 3]], forward, 4)
    assert torch.allclose(g, w.grad) and met["n_sum"] == 4


def test_a_cpu_stage_caps_ideeps_cache_unless_the_user_sized_it(monkeypatch):
    """LRU_CACHE_CAPACITY (ideep's cache of oneDNN computations) is set to IDEEP_CACHE when a CPU stage opens,
    left alone when the environment already sets it, and never set for a GPU stage."""
    monkeypatch.delenv("LRU_CACHE_CAPACITY", raising=False)
    assert not heap.cap_ideep_cache("cuda") and "LRU_CACHE_CAPACITY" not in os.environ
    assert heap.cap_ideep_cache("cpu") and os.environ["LRU_CACHE_CAPACITY"] == str(heap.IDEEP_CACHE)
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "512")
    assert not heap.cap_ideep_cache("cpu") and os.environ["LRU_CACHE_CAPACITY"] == "512"


def test_loading_a_policy_on_the_cpu_sets_the_cap_before_any_training_forward(tiny_dir, tmp_path, monkeypatch):
    from rlvr.config.model import ModelConfig
    from rlvr.trainers.common import load_policy
    monkeypatch.delenv("LRU_CACHE_CAPACITY", raising=False)
    load_policy(tmp_path, "s", ModelConfig(path=tiny_dir), None, 0)
    assert os.environ["LRU_CACHE_CAPACITY"] == str(heap.IDEEP_CACHE)
