"""Per-token entropy of the policy from logits, computed in row chunks (memory-bounded)."""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.losses.aggregate import masked_mean
from rlvr.losses.chunked import map_row_chunks, upcast


def entropy_rows(logits: Tensor) -> Tensor:
    """``H = logsumexp(z) - sum_v softmax(z)_v z_v`` per row of ``[n, V]`` (at least float32) -> ``[n]``."""
    z = upcast(logits)
    lse = torch.logsumexp(z, dim=-1)
    p = torch.exp(z - lse[:, None])
    return lse - (p * z).sum(dim=-1)


def entropy_from_logits(logits: Tensor, loss_mask: Tensor | None = None, chunk_size: int = 1024) -> Tensor:
    """Entropy ``H_t = -sum_v pi(v) log pi(v)`` of each position's next-token distribution -> ``[B, T]``.

    Logsumexp form ``H = logsumexp(z) - sum_v softmax(z)_v z_v``, exact for any logit scale. Rows are
    processed ``chunk_size`` at a time in float32 (float64 stays float64; the result has that dtype);
    with a gradient each chunk is checkpointed, so the extra memory is one ``[chunk_size, V]`` float32
    block, not ``[B, T, V]``. With ``loss_mask`` only the masked-in positions are computed (the others
    are 0). Gradients flow when ``logits`` requires grad (for an entropy bonus). ``logits`` may also be
    ``[N, V]`` (then the result is ``[N]``).
    """
    if logits.dim() not in (2, 3):
        raise ValueError(
            f"entropy_from_logits: logits must be [B, T, V] or [N, V], got {tuple(logits.shape)}"
        )
    lead = logits.shape[:-1]
    rows = logits.reshape(-1, logits.shape[-1])
    if loss_mask is None:
        return map_row_chunks(entropy_rows, rows, chunk_size=chunk_size).reshape(lead)
    if loss_mask.shape != lead:
        raise ValueError(
            f"entropy_from_logits: loss_mask shape {tuple(loss_mask.shape)} != logits lead {tuple(lead)}"
        )
    flat_mask = loss_mask.reshape(-1).to(device=logits.device, dtype=torch.bool)
    idx = flat_mask.nonzero(as_tuple=True)[0]
    values = map_row_chunks(entropy_rows, rows.index_select(0, idx), chunk_size=chunk_size)
    out = torch.zeros(rows.shape[0], dtype=values.dtype, device=logits.device)
    out = out.index_put((idx,), values)
    return out.reshape(lead)


def mean_entropy(logits: Tensor, loss_mask: Tensor, chunk_size: int = 1024) -> Tensor:
    """Mean per-token entropy over the masked-in tokens (``policy/entropy``) -> scalar (differentiable)."""
    return masked_mean(entropy_from_logits(logits, loss_mask, chunk_size), loss_mask.to(torch.bool))
