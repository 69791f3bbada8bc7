"""Deterministic data order: which examples or tasks a step sees, as a pure function of (seed, step).

Both orders are epochs of seeded permutations laid end to end, so a resumed run that restores the step
(or the task cursor) sees exactly what the uninterrupted run saw.
"""

from __future__ import annotations

import numpy as np


def data_order(n_examples: int, seed: int, step: int, batch_size: int) -> list[int]:
    """Example indices for optimizer step ``step``: epochs are seeded permutations, concatenated."""
    start = step * batch_size
    idx: list[int] = []
    while len(idx) < batch_size:
        epoch, off = divmod(start + len(idx), n_examples)
        perm = np.random.default_rng([seed, epoch]).permutation(n_examples)
        idx.extend(perm[off: off + batch_size - len(idx)].tolist())
    return idx


class TaskStream:
    """Tasks in a seeded order, epoch after epoch; the cursor is part of the resumable state."""

    def __init__(self, tasks, seed: int, cursor: int = 0):
        self.tasks, self.seed, self.cursor = tasks, seed, cursor

    def take(self, n: int):
        out = []
        while len(out) < n:
            epoch, off = divmod(self.cursor, len(self.tasks))
            perm = np.random.default_rng([self.seed, 7, epoch]).permutation(len(self.tasks))
            out.append(self.tasks[int(perm[off])])
            self.cursor += 1
        return out


def minibatch_rows(n: int, mini_batches: int, epochs: int, seed: int, step: int) -> list[list[list[int]]]:
    """Per epoch, its mini-batches (row ids): a permutation of the ``n`` rows seeded by (seed, step, epoch),
    cut into ``mini_batches`` consecutive slices. The one mini-batch shuffle of the RL and PPO updates."""
    size = -(-n // mini_batches)
    orders = [np.random.default_rng([seed, step, epoch]).permutation(n).tolist() for epoch in range(epochs)]
    return [[order[s:s + size] for s in range(0, n, size)] for order in orders]
