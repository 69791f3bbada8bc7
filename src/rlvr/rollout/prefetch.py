"""Asynchronous rollouts with bounded staleness: the next batches are generated while this one trains.

A single background thread runs the stage's rollout function (the single-turn source's draw, wrapped by
``trainers/sources.AsynchronousSource``) for steps ``t+1 .. t+K`` (``K`` =
``distributed.max_staleness``) while the trainer updates on step ``t``'s batch: a bounded queue of
version-tagged samples. A batch queued for step ``s`` is started once the batches before it are done,
on the weights the workers hold then (at least those after step ``s - K``), so by construction its
staleness ``s - policy_version`` is at most ``K``; a batch older than that anyway (a worker that missed
a weight sync) is dropped, counted in ``rollout/stale_dropped``, and generated again. ``K = 0`` is the
synchronous, on-policy default and does not use this class.

For a stale batch the trainer takes the clipped ratio against the **sampler's** logprobs (the behaviour
policy that generated it), not against its current weights: an unclipped importance-sampled loss is
known to destabilise at staleness 3, the clipped ratio bounds each update.

Resume is not exact in this mode: prefetched batches are not in the checkpoint, the run regenerates
them on the restored weights.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from rlvr.rollout.source import staleness


class Prefetcher:
    """The bounded queue of :meth:`next` results, produced in step order by one background thread."""

    def __init__(self, max_staleness: int):
        if max_staleness < 1:
            raise ValueError(f"Prefetcher needs max_staleness >= 1, got {max_staleness}")
        self.max_staleness = max_staleness
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="rlvr-rollout")
        self._queue: deque[tuple[int, Future]] = deque()
        self.dropped = 0

    def next(self, make: Callable[[int], object], step: int):
        """``make(step)``'s result (a batch with ``policy_version``), produced ahead of time; the
        queue is topped up to ``step + max_staleness`` before waiting."""
        while self._queue and self._queue[0][0] < step:  # e.g. the stage resumed further on
            self._queue.popleft()[1].cancel()
        if not self._queue:
            self._queue.append((step, self._pool.submit(make, step)))
        while self._queue[-1][0] < step + self.max_staleness:
            s = self._queue[-1][0] + 1
            self._queue.append((s, self._pool.submit(make, s)))
        _, fut = self._queue.popleft()
        out = fut.result()
        while staleness(out.policy_version, step) > self.max_staleness:
            self.dropped += 1
            out = self._pool.submit(make, step).result()
        return out

    def close(self) -> None:
        for _, fut in self._queue:
            fut.cancel()
        self._queue.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)
