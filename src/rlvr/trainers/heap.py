"""Hand the C heap's free pages back to the OS between the micro-batches of a CPU training step.

A CPU tensor's memory comes from glibc's ``malloc``. Once a micro-batch's backward has run, its activations
are free but stay in the process's heap; the next micro-batch's activations are a little larger or shaped
differently (the planner sorts micro-batches shortest first), do not fit the freed chunks, and take new
pages on top: the process's peak grows by about one micro-batch's activations per step's worth of
fragmentation (measured on the 1m GRPO bench: the second micro-batch's forward +19 MB over the first's end,
``VmHWM`` 485 MB, ``bench/memory/peak_rss.py``). ``malloc_trim(0)`` releases the free pages inside the
heap, so the next micro-batch faults in fresh ones and the peak is one micro-batch's activations over the
baseline (475 MB there).

Off by default (``RLVR_MALLOC_TRIM=1`` turns it on): the next micro-batch re-faults every page it needs, and
that cost more than the memory was worth. Measured on an idle host (2026-12-02, session 9): the quickstart's
DPO step (32 pairs at 1m, two micro-batches under the CPU token budget) took 0.305-0.352 s with the trim and
0.254-0.275 s without it (``time/step`` medians of 60-step runs of the stage from the same SFT checkpoint and
pairs); the whole quickstart's DPO training took 148 s with it and 107 s without it (of which ~16 s came from
running its monitors every 25 steps instead of 10). The bench's peak RSS was the same with and without it (GRPO 1m 467.8 vs 467.1 MB, ``bench/run.py --only grpo,dpo --steps 8``).
Only on Linux with glibc and for CPU tensors. Nothing about the arithmetic changes (the gradients are bit for
bit the same).
"""

from __future__ import annotations

import ctypes
import os
import sys

_trim = None
_loaded = False


def _malloc_trim():
    global _trim, _loaded
    if not _loaded:
        _loaded = True
        if sys.platform.startswith("linux") and os.environ.get("RLVR_MALLOC_TRIM", "0") == "1":
            try:
                fn = ctypes.CDLL("libc.so.6").malloc_trim
                fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
                _trim = fn
            except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
                _trim = None
    return _trim


def release_free_heap(device_type: str) -> bool:
    """``malloc_trim(0)`` when training on the CPU under glibc with ``RLVR_MALLOC_TRIM=1``; returns whether it ran."""
    if device_type != "cpu":
        return False
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True
