"""Row-chunked evaluation of a vocabulary-wide function, so [N, V] float32 copies stay small."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint


def upcast(x: Tensor) -> Tensor:
    """Half-precision floats -> float32; float32 and float64 are kept as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def map_row_chunks(fn: Callable[..., Tensor], rows: Tensor, *extra: Tensor, chunk_size: int = 1024) -> Tensor:
    """Apply ``fn(rows[i:j], *[e[i:j] for e in extra]) -> [j - i]`` chunk by chunk and concatenate -> ``[N]``.

    ``rows`` is ``[N, V]``. When a gradient is needed, each chunk runs under activation checkpointing:
    the float32 intermediates of one chunk are freed after the forward pass and recomputed during
    backward, so peak extra memory is one chunk rather than the whole ``[N, V]`` tensor.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if rows.shape[0] == 0:
        return upcast(rows[:0].sum(dim=-1))  # empty, but still attached to the graph
    need_grad = torch.is_grad_enabled() and rows.requires_grad
    outs = []
    for start in range(0, rows.shape[0], chunk_size):
        args = (rows[start : start + chunk_size], *(e[start : start + chunk_size] for e in extra))
        if need_grad:
            outs.append(checkpoint(fn, *args, use_reentrant=False))
        else:
            outs.append(fn(*args))
    return torch.cat(outs)
