"""How a per-token loss ``[B, T]`` becomes the scalar that is back-propagated.

Three modes, named as in veRL and each matching one paper:

| mode                        | scalar                                              | paper    |
|-----------------------------|-----------------------------------------------------|----------|
| ``seq-mean-token-mean``     | ``(1/S) sum_i [ sum_t m_it l_it / sum_t m_it ]``    | GRPO     |
| ``token-mean``              | ``sum_it m_it l_it / N``                            | DAPO     |
| ``seq-mean-token-sum-norm`` | ``sum_it m_it l_it / C``                            | Dr.GRPO  |

with S the number of sequences holding at least one masked token, N the number of masked tokens and
C a constant (default ``B * T`` of the tensor: rows times padded length).

Exact gradient accumulation: a mini-batch split into micro-batches gives the same gradient as the
whole mini-batch only if every micro-batch divides by the *mini-batch* denominator and the
micro-batch losses are summed (not averaged). :func:`global_counts` computes those denominators from
the micro-batches' masks and :meth:`GlobalCounts.overrides` turns them into the keyword arguments of
:func:`aggregate`. With several processes, all-reduce the counts (sum ``num_tokens``, ``num_seqs``,
``num_rows``; max ``max_len``) and multiply the loss by the world size if the gradient all-reduce
averages (as DDP does).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

AggregationMode = Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"]
AGGREGATION_MODES: tuple[str, ...] = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm")


def _check(fn: str, values: Tensor, loss_mask: Tensor) -> Tensor:
    if values.shape != loss_mask.shape:
        raise ValueError(
            f"{fn}: values shape {tuple(values.shape)} != loss_mask shape {tuple(loss_mask.shape)}"
        )
    return loss_mask.to(device=values.device, dtype=torch.bool)


def masked_sum(values: Tensor, loss_mask: Tensor, dim: int | None = None) -> Tensor:
    """``sum m * x`` over ``dim`` (all dims when None); masked-out entries add exactly 0, even NaN ones."""
    m = _check("masked_sum", values, loss_mask)
    x = torch.where(m, values, torch.zeros_like(values))
    return x.sum() if dim is None else x.sum(dim=dim)


def masked_mean(values: Tensor, loss_mask: Tensor, dim: int | None = None) -> Tensor:
    """``sum m * x / max(sum m, 1)`` over ``dim`` (all dims when None); 0 where nothing is masked in."""
    m = _check("masked_mean", values, loss_mask)
    count = m.sum() if dim is None else m.sum(dim=dim)
    return masked_sum(values, m, dim) / count.clamp(min=1).to(values.dtype)


def count_tokens(loss_mask: Tensor) -> int:
    """Number of masked-in tokens: the ``token-mean`` denominator."""
    return int(loss_mask.to(torch.bool).sum())


def count_seqs(loss_mask: Tensor) -> int:
    """Number of rows with at least one masked-in token: the ``seq-mean-token-mean`` denominator."""
    return int(loss_mask.to(torch.bool).any(dim=-1).sum())


@dataclass(frozen=True)
class GlobalCounts:
    """Denominators of a whole mini-batch, for exact accumulation over its micro-batches."""

    num_tokens: int
    """Masked-in tokens over all micro-batches (``token-mean``)."""
    num_seqs: int
    """Rows with >= 1 masked-in token over all micro-batches (``seq-mean-token-mean``)."""
    num_rows: int
    """All rows over all micro-batches (``seq-mean-token-sum-norm`` default constant, times max_len)."""
    max_len: int
    """Largest padded length T over the micro-batches."""

    def overrides(self, mode: str, norm_len: int | None = None) -> dict[str, int]:
        """Keyword arguments for :func:`aggregate` so a micro-batch divides by the mini-batch denominator.

        For ``seq-mean-token-sum-norm`` the constant is ``num_rows * (norm_len or max_len)``; pass
        ``norm_len`` (e.g. the generation budget ``max_new_tokens``, as Dr.GRPO does) to make the
        constant independent of how the batch happened to be padded.
        """
        _check_mode(mode)
        if mode == "token-mean":
            return {"num_tokens": self.num_tokens}
        if mode == "seq-mean-token-mean":
            return {"num_seqs": self.num_seqs}
        return {"norm_constant": self.num_rows * (norm_len if norm_len is not None else self.max_len)}


def global_counts(loss_masks: Iterable[Tensor]) -> GlobalCounts:
    """Sum the denominators of several micro-batch masks (each ``[b, t]``) into a :class:`GlobalCounts`."""
    tokens = seqs = rows = max_len = 0
    for m in loss_masks:
        if m.dim() != 2:
            raise ValueError(f"global_counts: each loss_mask must be [B, T], got {tuple(m.shape)}")
        tokens += count_tokens(m)
        seqs += count_seqs(m)
        rows += m.shape[0]
        max_len = max(max_len, m.shape[1])
    return GlobalCounts(num_tokens=tokens, num_seqs=seqs, num_rows=rows, max_len=max_len)


def _check_mode(mode: str) -> None:
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"aggregate: mode must be one of {AGGREGATION_MODES}, got {mode!r}")


def aggregate(
    per_token: Tensor,
    loss_mask: Tensor,
    mode: AggregationMode = "token-mean",
    norm_constant: float | None = None,
    num_tokens: int | None = None,
    num_seqs: int | None = None,
) -> Tensor:
    """Reduce ``per_token [B, T]`` under ``loss_mask [B, T]`` to a scalar; the divisor depends on ``mode``.

    - ``"seq-mean-token-mean"`` (GRPO, Shao et al. 2024): mean over each sequence's masked tokens, then
      sum over sequences divided by ``num_seqs`` (default: rows of this tensor with >= 1 masked token;
      fully masked rows contribute nothing and are not counted). Every sequence weighs the same,
      whatever its length.
    - ``"token-mean"`` (DAPO, Yu et al. 2025, arXiv:2503.14476): sum over all masked tokens divided by
      ``num_tokens`` (default: masked tokens of this tensor). Every token weighs the same.
    - ``"seq-mean-token-sum-norm"`` (Dr.GRPO, Liu et al. 2025, arXiv:2503.20783): sum over all masked
      tokens divided by ``norm_constant`` (default ``B * T``, the rows times the padded length of this
      tensor). A constant denominator removes GRPO's length bias.

    ``norm_constant`` is used only by the Dr.GRPO mode, ``num_tokens`` only by ``token-mean`` and
    ``num_seqs`` only by ``seq-mean-token-mean``; the others are ignored, so a trainer may always pass
    ``**GlobalCounts.overrides(mode)``. A zero denominator (nothing masked in) gives 0 (still connected to
    the graph). Masked-out entries contribute exactly 0 to value and gradient, even if they hold NaN.
    """
    _check_mode(mode)
    if per_token.dim() != 2:
        raise ValueError(f"aggregate: per_token must be [B, T], got {tuple(per_token.shape)}")
    m = _check("aggregate", per_token, loss_mask)
    x = torch.where(m, per_token, torch.zeros_like(per_token))
    if mode == "token-mean":
        denom = count_tokens(m) if num_tokens is None else num_tokens
        return x.sum() / max(denom, 1)
    if mode == "seq-mean-token-mean":
        seq_means = x.sum(dim=1) / m.sum(dim=1).clamp(min=1).to(x.dtype)
        denom = count_seqs(m) if num_seqs is None else num_seqs
        return seq_means.sum() / max(denom, 1)
    denom = per_token.shape[0] * per_token.shape[1] if norm_constant is None else norm_constant
    if denom <= 0:
        return x.sum() * 0.0
    return x.sum() / denom
