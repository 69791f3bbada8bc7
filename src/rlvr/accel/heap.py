"""How a CPU training process's C heap gives memory back to the OS: ``RLVR_HEAP`` = ``keep`` (default),
``trim`` or ``glibc``.

A CPU tensor's memory comes from glibc's ``malloc``. A training step frees and re-takes the same few hundred
MB of activations, gradients and attention views every micro-batch. Under glibc's defaults much of it goes
back to the OS when freed (chunks over the dynamic mmap threshold are unmapped; the heap's top is trimmed
once 2x that threshold is free there) and is faulted in again, page by page, by the next micro-batch:
~6,600 minor page faults and 12-20 ms of kernel time per update on the 1m GRPO bench (``/proc/self/stat``
around the update, 2026-12-04).

- ``keep`` (:func:`keep_freed_heap`, set once per process when a stage opens on the CPU): ``mallopt`` fixes
  the mmap threshold at :data:`MMAP_THRESHOLD` (glibc's dynamic ceiling, so no tensor under 32 MB is
  unmapped when freed) and the trim threshold at :data:`TRIM_THRESHOLD`: the freed pages stay in the heap
  for the next micro-batch. The same update then takes ~2 page faults and 0.4 ms of kernel time. Peak RSS
  is unchanged (the pages kept are the ones the step's peak needs anyway): ``bench/grpo_vs_trl.py`` 1m
  413-416 MB, 5m 528-534 MB both ways. The speed gain is small and noisy: a first A/B read rlvr's step at
  0.461 / 0.547 of TRL's with it and 0.514 / 0.608 without (two interleaved rounds, 1m; 5m 0.567 vs 0.613), a
  later one at 1m 0.527-0.538 with it and 0.527-0.571 without (within noise); on an AMX host's 20m SFT step
  0.868 s against 0.979 s (bench/grpo_vs_trl.py).
- ``trim``: ``malloc_trim(0)`` between the micro-batches of a step (:func:`release_free_heap`). The next
  micro-batch takes fresh pages rather than fragments, so the peak is one micro-batch's activations over
  the baseline (measured on the 1m GRPO bench: ``VmHWM`` 485 -> 475 MB), but
  it re-faults every page: the quickstart's DPO step took 0.305-0.352 s with it and 0.254-0.275 s under
  glibc's defaults (2026-12-02, idle host, 60-step runs from the same SFT checkpoint).
- ``glibc``: leave glibc's defaults alone.

Only on Linux with glibc and for CPU tensors; elsewhere every setting is ``glibc``. Nothing about the
arithmetic changes (the allocator only places memory: gradients are bit for bit the same).
"""

from __future__ import annotations

import ctypes
import os
import sys

from rlvr.errors import ConfigError

MODES = ("keep", "trim", "glibc")
MMAP_THRESHOLD = 32 << 20
"""Bytes: larger allocations are mmapped (and unmapped when freed). 32 MB is glibc's own upper bound for its
dynamic threshold (``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit)."""
TRIM_THRESHOLD = 512 << 20
"""Bytes of free memory at the heap's top before glibc returns it to the OS."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameter numbers (malloc.h)

_libc = None
_loaded = False
_kept = False


def mode() -> str:
    """``RLVR_HEAP`` (default ``keep``); an unknown value is an error naming the variable."""
    value = os.environ.get("RLVR_HEAP", "keep").strip().lower() or "keep"
    if value not in MODES:
        raise ConfigError(f"environment variable RLVR_HEAP={value!r}: expected one of {', '.join(MODES)}")
    return value


def _glibc():
    global _libc, _loaded
    if not _loaded:
        _loaded = True
        if sys.platform.startswith("linux"):
            try:
                lib = ctypes.CDLL("libc.so.6")
                lib.malloc_trim.argtypes, lib.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
                lib.mallopt.argtypes, lib.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
                _libc = lib
            except (OSError, AttributeError):  # not glibc (musl): nothing to call
                _libc = None
    return _libc


def keep_freed_heap(device_type: str) -> bool:
    """Under ``RLVR_HEAP=keep`` on the CPU with glibc, fix the mmap and trim thresholds (once per process;
    see the module doc). Returns whether they are set in this process."""
    global _kept
    want = mode()  # a bad value fails when the stage opens, not mid-step
    if _kept:
        return True
    if device_type != "cpu" or want != "keep":
        return False
    lib = _glibc()
    if lib is None:
        return False
    _kept = bool(lib.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(lib.mallopt(_M_TRIM_THRESHOLD,
                                                                                         TRIM_THRESHOLD))
    return _kept


def release_free_heap(device_type: str) -> bool:
    """``malloc_trim(0)`` when training on the CPU under glibc with ``RLVR_HEAP=trim``; returns whether it ran."""
    if device_type != "cpu" or mode() != "trim":
        return False
    lib = _glibc()
    if lib is None:
        return False
    lib.malloc_trim(0)
    return True


IDEEP_CACHE = 4
"""``LRU_CACHE_CAPACITY`` (ideep's cache of oneDNN computations, the CPU bf16 matmuls': 1024 by default) when a
CPU stage opens and the environment does not set it. Each cached entry keeps buffers for its shape; a bf16 GRPO
step on the 5m tiny model meets a few dozen shapes. Measured: at 16 entries against 1024 (the 5m
GRPO step under ``autocast_bf16: train``, two A/B pairs) peak RSS 674 -> 654-659 MB, step time
unchanged (0.512-0.530 s vs 0.516-0.517 s); at 4 or 2 entries against 16 (the
bench's GRPO stage in its own process, ``auto``: bf16 training and generation, six alternating runs)
``VmHWM`` 557-559 MB against 562-576 MB, and bf16 matmuls cycling through 15 training-sized or 20 decode-sized
shapes took the same time with 2 entries as with 16 (a miss rebuilds a primitive oneDNN's own cache still holds);
the DPO 1m step, four alternating pairs, +1.4% on average (0.128 vs 0.126 s, within the host's noise). oneDNN's own
primitive cache is left at its default: capped at 16 as well it cut more memory but recompiled kernels every step
(+7% step time)."""


def cap_ideep_cache(device_type: str) -> bool:
    """On the CPU, set :data:`IDEEP_CACHE` as ``LRU_CACHE_CAPACITY`` unless the user set one (ideep reads it when
    its cache is first used: a process that already ran a bf16 matmul keeps its size). Returns whether set."""
    if device_type != "cpu" or "LRU_CACHE_CAPACITY" in os.environ:
        return False
    os.environ["LRU_CACHE_CAPACITY"] = str(IDEEP_CACHE)
    return True


def stage_memory_settings(device_type: str) -> None:
    """When a stage opens: ``RLVR_HEAP`` (:func:`keep_freed_heap`) and ideep's cache (:func:`cap_ideep_cache`)."""
    keep_freed_heap(device_type)
    cap_ideep_cache(device_type)

