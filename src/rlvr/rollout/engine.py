"""The rollout engine protocol. Any engine (HF in-process, vLLM, a remote server) implements it.

``generate(prompts, params)`` takes token-id prompts and returns, per sample, the completion ids, the
per-token logprobs of the sampling policy (``old_logprobs``: under logits / temperature, restricted to the
top-k / top-p tokens and renormalised when those are set — the distribution actually drawn from) and why it
stopped (``eos``: a stop token; ``stop``: a stop string, the completion ends with the token that
completed it; ``length``: the budget ran out). ``sync_weights(model)`` pushes trained weights into the engine (a
no-op for the in-process HF engine, which samples from the training model itself). Engines that hold
their own copy of the weights (Ray workers, vLLM) tag each sample with its ``policy_version``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass
class SamplingParams:
    """How to sample. ``n`` samples per prompt are returned consecutively (prompt-major)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """Sample from the ``top_k`` most probable tokens only (0: all), before ``top_p``; the recorded logprobs are
    those of the truncated, renormalised distribution (``rlvr.models.truncation``)."""
    max_new_tokens: int = 64
    greedy: bool = False
    stop_token_ids: list[int] = field(default_factory=list)
    stop_strings: list[str] = field(default_factory=list)
    seed: int | None = None
    row_seeds: list[int] | None = None
    """One seed per returned row (prompt-major, ``len(prompts) * n``): row i's sample depends on
    ``row_seeds[i]`` only, not on the batch it shares (``rollout.seeds``). None: one stream from ``seed``."""
    threads: int | str | None = None
    """Intra-op CPU threads for this call (in-process engines; restored afterwards). None: torch's setting;
    "auto": the engine decides from the batch's size (HFEngine: one thread for small CPU batches)."""


@dataclass
class Generation:
    """Engine output for ``len(prompts) * n`` samples, prompt-major."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    old_logprobs: list[list[float]]
    finish_reason: list[str]
    texts: list[str]
    prompt_index: list[int]
    policy_version: list[int] = field(default_factory=list)
    """Per sample: the optimizer step whose weights sampled it (empty: the live training model)."""


@runtime_checkable
class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Generation: ...

    def sync_weights(self, model) -> None: ...
