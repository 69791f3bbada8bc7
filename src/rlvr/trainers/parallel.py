"""The distributed context a stage runs in: where rollouts come from, which rows this process trains on,
and how numbers are combined across processes.

A trainer is written once against :class:`DistContext`. This single-process default makes every method
trivial; ``rlvr.distributed`` builds the torch.distributed one (torchrun ranks: gloo on CPU, NCCL on
GPU) and the Ray one (rollout workers and a verifier pool as actors). Nothing here imports ray.

The one rule that makes 1 process == N processes: every loss is divided by the **whole batch's**
denominator (:func:`global_denominators` sums the token, sequence and row counts of all ranks), each
rank back-propagates its share, and the gradients are **summed** across ranks (:meth:`reduce_grads`)
before clipping. Dividing each rank's loss by its own count and averaging (the mean of per-rank means)
weighs a token on a rank with few tokens more than one on a rank with many.
"""

from __future__ import annotations

from rlvr.losses.aggregate import GlobalCounts


class DistContext:
    """One process: generate with the training model, train on every row, nothing to combine."""

    rank: int = 0
    world_size: int = 1
    max_staleness: int = 0
    """Steps a batch's sampling weights may lag the trained ones (> 0: the RL stage prefetches its rollouts,
    ``trainers/sources.AsynchronousSource``); only contexts whose engines hold their own weights set it."""

    @property
    def is_main(self) -> bool:
        """This process writes metrics, checkpoints and the final model (rank 0)."""
        return self.rank == 0

    def engine(self, model, tokenizer, bf16: bool = False):
        """The rollout engine of the stage (here: the in-process HF engine sampling from ``model``)."""
        from rlvr.rollout.hf_engine import HFEngine

        return HFEngine(model, tokenizer, bf16=bf16)

    def wrap_judge(self, judge):
        """The judge the stage verifies with (here: ``judge`` itself)."""
        return judge

    def publish(self, model, version: int) -> None:
        """Send the trainer's weights (after ``version`` optimizer steps) to engines holding a copy."""

    def shard(self, lengths: list[int]) -> list[int]:
        """Indices of the rows (of these ``lengths``) this process forwards and back-propagates."""
        return list(range(len(lengths)))

    def all_reduce(self, values: list[float], op: str = "sum") -> list[float]:
        """Element-wise ``sum``, ``max`` or ``min`` of ``values`` over processes."""
        return list(values)

    def gather(self, obj) -> list:
        """``obj`` of every process, in rank order (picklable objects)."""
        return [obj]

    def reduce_grads(self, model) -> None:
        """Sum the gradients of all processes into every process's ``.grad`` (before clipping)."""

    def agree(self, obj):
        """Rank 0's ``obj`` on every process (the health monitor's stop and knobs; picklable)."""
        return obj

    def barrier(self) -> None:
        """Wait for every process."""

    def step_metrics(self) -> dict:
        """Events of the last step to log (worker restarts, stale batches dropped, ...)."""
        return {}

    def close(self) -> None:
        """Release workers and process groups."""


LOCAL = DistContext()
"""The single-process context (every stage's default)."""


def global_denominators(counts: GlobalCounts, dist: DistContext) -> GlobalCounts:
    """The whole batch's loss denominators over all processes: masked tokens (``token-mean``), sequences
    with a masked token (``seq-mean-token-mean``) and rows (Dr.GRPO's constant) are summed; the padded
    length ``max_len`` is the maximum. One process: ``counts`` unchanged."""
    tokens, seqs, rows = dist.all_reduce([counts.num_tokens, counts.num_seqs, counts.num_rows], "sum")
    (max_len,) = dist.all_reduce([counts.max_len], "max")
    return GlobalCounts(num_tokens=int(tokens), num_seqs=int(seqs), num_rows=int(rows), max_len=int(max_len))


def reduce_metrics(met: dict[str, float], dist: DistContext) -> dict[str, float]:
    """Combine :func:`~rlvr.trainers.common.accumulate`'s metrics over processes the way it combines
    micro-batches: ``*max`` keys by max, ``*min`` by min, the rest (sums, ``train/loss`` and row-weighted
    means already weighted by the global row count) by sum."""
    if dist.world_size == 1:
        return met
    out: dict[str, float] = {}
    for part in dist.gather(met):  # a rank without rows has fewer keys: combine what each one has
        for k, v in part.items():
            if k not in out:
                out[k] = v
            elif k.endswith("max"):
                out[k] = max(out[k], v)
            elif k.endswith("min"):
                out[k] = min(out[k], v)
            else:
                out[k] += v
    return out
