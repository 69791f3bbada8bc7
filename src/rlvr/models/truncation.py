"""The distribution a sampler actually draws from: top-k, then top-p (nucleus), renormalised.

With ``top_k`` or ``top_p`` set, tokens are drawn from the tempered softmax ``π = softmax(z / T)``
restricted to a kept set ``K`` and renormalised:

    K      = the k most probable tokens (top-k, ``k > 0``), then, of those renormalised, the smallest
             prefix in descending probability whose mass reaches ``top_p`` (a token is kept while the
             mass before it is < top_p: the one that crosses the threshold is in)
    π_K(y) = π(y) / Σ_{v ∈ K} π(v)   for y ∈ K, else 0

This is the behaviour policy: the engines record ``log π_K(y)`` for each sampled token, and the RL update
computes its ratio, its old / reference logprobs and the sampler/trainer mismatch correction under the same
truncation (``rlvr.models.logprobs.token_logprobs(..., truncation=)``), so that a truncation is never
mistaken for a sampler/trainer gap (top-p 0.9 at T 1 shifts every logprob by −log Σ_K π ≈ 0.08 nats).
The order (top-k first, top-p over the renormalised top-k) is HF transformers' and vLLM's.

The trainer's kept set is its own forward's. A taken token outside it (the sampler's set differed at the
boundary, or the weights moved) is counted as kept, ``K ∪ {y}``: its logprob stays finite (the sampler's
own ``K`` always holds ``y``, so its value is unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Truncation:
    """``top_p`` in (0, 1] (1: off) and ``top_k`` >= 0 (0: off) of a sampling configuration."""

    top_p: float = 1.0
    top_k: int = 0

    @property
    def active(self) -> bool:
        return self.top_p < 1.0 or self.top_k > 0

    @classmethod
    def of(cls, sampling) -> Truncation:
        """The truncation of anything with ``top_p`` (and optionally ``top_k``) attributes: a sampling config
        or ``SamplingParams``."""
        return cls(float(getattr(sampling, "top_p", 1.0)), int(getattr(sampling, "top_k", 0) or 0))


NONE = Truncation()


SORT_ROWS = 256
"""Rows sorted at a time by :func:`kept_tokens`: the sort's values and indices take 12 bytes a vocabulary entry,
1.8 GB for 1024 rows of a 152k vocabulary, so the training forward's [tokens, V] logits are cut."""


@torch.no_grad()
def kept_tokens(z: torch.Tensor, trunc: Truncation) -> torch.Tensor:
    """Bool ``[N, V]``: the tokens each row of tempered logits ``z [N, V]`` may sample (see the module doc)."""
    if z.shape[0] > SORT_ROWS:
        return torch.cat([kept_tokens(z[s:s + SORT_ROWS], trunc) for s in range(0, z.shape[0], SORT_ROWS)])
    V = z.shape[-1]
    sz, si = z.float().sort(-1, descending=True)
    keep = torch.ones_like(sz, dtype=torch.bool)
    if 0 < trunc.top_k < V:
        keep[..., trunc.top_k:] = False
    if trunc.top_p < 1.0:
        sp = torch.softmax(sz.masked_fill(~keep, float("-inf")), -1)
        keep &= (sp.cumsum(-1) - sp) < trunc.top_p
    return torch.zeros_like(keep).scatter(-1, si, keep)


def truncated_logprobs(z: torch.Tensor, targets: torch.Tensor, trunc: Truncation) -> torch.Tensor:
    """``log π_K(target)`` per row of tempered float32 logits ``z [N, V]`` (``targets [N]``), differentiable in ``z``
    (the kept set is not): ``z[y] − logsumexp(z[K ∪ {y}])``. Without truncation, ``log_softmax(z)[y]``."""
    pick = z.gather(-1, targets[:, None]).squeeze(-1)
    if not trunc.active:
        return pick - torch.logsumexp(z, -1)
    keep = kept_tokens(z.detach(), trunc).scatter(-1, targets[:, None], True)
    return pick - torch.logsumexp(z.masked_fill(~keep, float("-inf")), -1)
