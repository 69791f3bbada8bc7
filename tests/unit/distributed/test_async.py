"""The bounded-staleness prefetcher (no Ray needed): batches come back in step order, at most
``max_staleness`` steps are generated ahead, and a batch older than the bound is dropped and regenerated."""

import threading
import time
from types import SimpleNamespace

import pytest

from rlvr.rollout.prefetch import Prefetcher
from rlvr.rollout.source import staleness


class Workers:
    """Stands in for rollout workers: batches are tagged with the version the trainer last published."""

    def __init__(self):
        self.version, self.calls, self.lock = 0, [], threading.Lock()
        self.force_old: set[int] = set()

    def make(self, step):
        with self.lock:
            self.calls.append(step)
            v = -10 if step in self.force_old and self.calls.count(step) == 1 else self.version
        time.sleep(0.01)
        return SimpleNamespace(policy_version=[v, v], step=step, cursor=step * 10)


def test_staleness_of_a_batch():
    assert staleness([3, 5, 4], 6) == 3 and staleness([], 6) == 0


def test_prefetch_is_ordered_bounded_and_drops_old_batches():
    w = Workers()
    w.force_old = {3}
    pre = Prefetcher(max_staleness=2)
    seen = []
    for step in range(6):
        batch = pre.next(w.make, step)
        assert batch.step == step and batch.cursor == step * 10
        seen.append(staleness(batch.policy_version, step))
        assert max(w.calls) <= step + 2  # never more than max_staleness batches ahead
        w.version = step + 1              # the trainer publishes after its update
    pre.close()
    assert max(seen) <= 2 and seen[0] == 0
    assert pre.dropped == 1 and w.calls.count(3) == 2  # step 3's first batch was too old: regenerated


def test_prefetcher_needs_a_positive_bound():
    with pytest.raises(ValueError, match="max_staleness >= 1"):
        Prefetcher(0)
