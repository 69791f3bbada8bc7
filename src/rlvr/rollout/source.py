"""Where an RL step's batch comes from: the :class:`RolloutSource` protocol and the one batch every phase of
the step carries (:class:`RolloutBatch`).

A stage picks its source once, at setup, from a table (``trainers/sources.py``: single-turn, multi-turn,
and the asynchronous wrapper that prefetches a single-turn source); the remote engines (Ray workers, vLLM)
are the engine a source samples from, and the 2026 rollout methods (EDEN, OC-GRPO, Double-Rollout,
guidance, residual) are wrappers inside the single-turn source's collection (``rollout/methods.py``). The
step then reads the same whatever the source::

    batch = source.next_batch(step, stage)          # generate + verify: the sampled episodes, rewards, metrics
    source.advantages(batch, stage, needs_all)      # advantages -> the [B, T] training rows of the same batch
    batch.ref_logprobs = reference pass             # optional (KL): a [B, T] tensor of the same batch
    policy update on batch                          # mini-batches and micro-batches are row slices of it
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Protocol, runtime_checkable

from rlvr.data.collate import TokenBatch


def staleness(versions: list[int], step: int) -> int:
    """``step - min(policy_version)`` of a batch (0 when it carries no version: sampled by the live model)."""
    return max((step - v for v in versions), default=0)


@dataclass
class RolloutBatch(TokenBatch):
    """One step's batch from generation to the update. As a :class:`~rlvr.data.collate.TokenBatch` it holds
    the training rows as ``[B, T]`` tensors (ids, attention and loss masks, the sampler's logprobs, advantages,
    then the reference's logprobs; the skipped rows' masks), filled once by the source's advantages phase and
    read in place by the reference pass and the update (mini- and micro-batches are row slices of it); around
    them, what the step logs and checks:

    ``episodes`` (what was sampled: ``Rollouts`` or multi-turn trajectories; read only by its source),
    ``metrics`` (the rollout's and verifier's metrics row), ``task_ids`` (for the non-finite log, None when
    the source does not name rows), ``cursor`` (the task stream's position after this batch: the resumable
    state), ``verdicts`` / ``reward_errors`` (the infra guard's total and records), ``stale`` (steps between
    the weights that sampled the batch and the trained ones; > 0 only for prefetched batches),
    ``policy_version`` (per row, the weights' version; empty: the live model)."""

    episodes: object = None
    metrics: dict = field(default_factory=dict)
    task_ids: list[str] | None = None
    cursor: int = 0
    verdicts: int = 0
    reward_errors: list[dict] = field(default_factory=list)
    stale: int = 0
    policy_version: list[int] = field(default_factory=list)

    @classmethod
    def empty(cls, **kw) -> RolloutBatch:
        """A batch with no training rows yet (the advantages phase adds them with :meth:`set_rows`)."""
        e = TokenBatch.empty()
        return cls(e.input_ids, e.attention_mask, e.loss_mask, **kw)

    def set_rows(self, rows: TokenBatch) -> RolloutBatch:
        """Take ``rows``' training rows (every :class:`TokenBatch` field) into this batch; returns it."""
        for f in fields(TokenBatch):
            setattr(self, f.name, getattr(rows, f.name))
        return self


@runtime_checkable
class RolloutSource(Protocol):
    """Where a stage's batches come from; chosen once at stage setup (``trainers/sources.rollout_source``)."""

    def start(self, state: dict) -> None:
        """After the stage opened (and restored a checkpoint's ``state``): load what the source keeps."""

    def next_batch(self, step: int, stage) -> RolloutBatch:
        """Step ``step``'s sampled and verified batch (``stage``: with the health actions' knobs applied)."""

    def advantages(self, batch: RolloutBatch, stage, needs_all: bool) -> None:
        """Fill ``batch``'s training rows with their advantages; rows whose advantages are all 0 are not
        forwarded unless ``needs_all`` (KL, entropy), but still counted (``skipped_mask``)."""

    def log_samples(self, step: int, batch: RolloutBatch) -> None:
        """Write sampled completions with their verdicts (``logging.samples_every``)."""

    def state_dict(self) -> dict:
        """The source's part of the stage's resumable state."""

    def save(self, folder) -> None:
        """Write what the source trained beside the final policy."""

    def close(self) -> None:
        """Stop background work (prefetching)."""
