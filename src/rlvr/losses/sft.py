"""Supervised fine-tuning loss: masked token cross-entropy (completion-only), for exact accumulation."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rlvr.losses.chunked import map_row_chunks, upcast


def _nll_rows(logits: Tensor, labels: Tensor) -> Tensor:
    """``-log softmax(z)[label]`` per row of ``[n, V]`` (at least float32) -> ``[n]``."""
    z = upcast(logits)
    return torch.logsumexp(z, dim=-1) - z.gather(1, labels[:, None]).squeeze(1)


def sft_loss(
    logits: Tensor, labels: Tensor, loss_mask: Tensor, shift: bool = False, chunk_size: int = 1024,
    trim_confidence: float | None = None,
) -> tuple[Tensor, int, dict[str, float]]:
    """Masked next-token cross-entropy -> ``(loss_sum, num_tokens, metrics)``.

    ``loss_sum = sum_t m_t * (-log softmax(z_t)[y_t])`` over the masked-in tokens (the completion;
    prompt and padding have ``loss_mask = 0``); ``num_tokens = sum_t m_t``. The trainer divides by the
    token count of the *whole* optimizer step (summed over micro-batches and processes), which makes
    gradient accumulation exact — the per-micro-batch mean does not.

    Alignment: ``logits [B, T, V]`` at position t scores ``labels [B, T]`` at position t. With
    ``shift=True`` the HF causal-LM convention is applied instead: ``logits[:, :-1]`` score
    ``labels[:, 1:]`` and ``loss_mask[:, 1:]`` is used (``loss_mask`` is aligned with ``labels``).
    Labels at masked-out positions are never read (``-100`` is fine). Computed in float32 row chunks.

    ``trim_confidence = τ`` (TrimSFT, an entropy-preserving SFT): tokens the model already predicts with
    probability ``p_t = exp(-nll_t) >= τ`` are trimmed from ``loss_sum`` (no gradient) but still counted in
    ``num_tokens``::

        loss_sum = sum_t m_t · 1[p_t < τ] · (-log p_t)

    so learned tokens are not pushed further towards probability 1 (what collapses the sampling entropy RL
    later needs), and the remaining tokens are not up-weighted. Metric ``sft/trimmed_frac``.

    Metrics: ``sft/nll`` (mean per token, trimmed tokens included), ``sft/ppl`` (exp of it),
    ``sft/token_accuracy`` (argmax == label), ``sft/num_tokens``.
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2] or loss_mask.shape != labels.shape:
        raise ValueError(
            f"sft_loss: need logits [B, T, V], labels [B, T], loss_mask [B, T]; got {tuple(logits.shape)}, "
            f"{tuple(labels.shape)}, {tuple(loss_mask.shape)}"
        )
    if shift:
        logits, labels, loss_mask = logits[:, :-1], labels[:, 1:], loss_mask[:, 1:]
    mask = loss_mask.reshape(-1).to(device=logits.device, dtype=torch.bool)
    idx = mask.nonzero(as_tuple=True)[0]
    rows = logits.reshape(-1, logits.shape[-1]).index_select(0, idx)
    targets = labels.reshape(-1).to(logits.device).index_select(0, idx).long()
    if targets.numel() and bool(((targets < 0) | (targets >= logits.shape[-1])).any()):
        raise ValueError(f"sft_loss: a label at a masked-in position is outside [0, {logits.shape[-1]})")
    nll = map_row_chunks(_nll_rows, rows, targets, chunk_size=chunk_size)
    with torch.no_grad():
        hits = rows.argmax(dim=-1) == targets
    return sft_loss_from_nll(nll, hits, trim_confidence)


def sft_loss_from_nll(nll: Tensor, hits: Tensor, trim_confidence: float | None = None
                      ) -> tuple[Tensor, int, dict[str, float]]:
    """:func:`sft_loss` from the per-token NLL ``[N]`` of the masked-in tokens (differentiable) and whether each
    label is the argmax ``hits [N]`` (computed where the logits are, e.g. chunked with the output projection:
    ``rlvr.models.lm_head``) -> ``(loss_sum, num_tokens, metrics)``, the same formula and metrics."""
    num_tokens = int(nll.numel())
    trimmed = None
    if trim_confidence is not None:
        trimmed = nll.detach() <= -math.log(trim_confidence)  # p_t >= τ
        loss_sum = torch.where(trimmed, torch.zeros_like(nll), nll).sum()
    else:
        loss_sum = nll.sum()
    with torch.no_grad():
        correct = hits.sum() if num_tokens else torch.zeros(())
        mean_nll = float(nll.detach().sum()) / max(num_tokens, 1)
        metrics = {
            "sft/nll": mean_nll,
            "sft/ppl": math.exp(min(mean_nll, 50.0)),
            "sft/token_accuracy": float(correct) / max(num_tokens, 1),
            "sft/num_tokens": float(num_tokens),
        }
        if trimmed is not None:
            metrics["sft/trimmed_frac"] = float(trimmed.float().mean()) if num_tokens else 0.0
    return loss_sum, num_tokens, metrics
