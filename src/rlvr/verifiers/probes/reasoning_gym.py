"""reasoning-gym probes: known hacks against the dataset scorers' partial credit.

reasoning-gym's default ``score_answer`` pays ``len(oracle) / len(answer)`` when the oracle appears
inside the answer, so an answer padded with candidates would earn more than one plain wrong guess.
The probes take the first registry dataset that keeps that default scorer (no dataset is named here),
generate one item, and send it padded answers: each must earn 0. Skipped (with a note) when the
``gym`` extra is not installed.
"""

from __future__ import annotations

import reasoning_gym  # noqa: F401 - ImportError without the gym extra: the runner skips these probes

from rlvr.data.reasoning_gym import make_dataset, to_task
from rlvr.data.types import Task
from rlvr.verifiers.probes.base import Probe


def default_scorer_dataset() -> str:
    """The first registry dataset (sorted by name) whose class keeps reasoning-gym's default scorer."""
    from reasoning_gym.dataset import ProceduralDataset
    from reasoning_gym.factory import DATASETS

    for name in sorted(DATASETS):
        cls = DATASETS[name][0]
        if getattr(cls, "score_answer", None) is ProceduralDataset.score_answer:
            return name
    raise ImportError("no reasoning-gym dataset keeps the default scorer")


def _task() -> Task:
    name = default_scorer_dataset()
    entry = make_dataset(name, {}, seed=0, size=1)[0]
    return to_task(name, {}, entry, 0, "heldout", "auto")


def _probes() -> list[Probe]:
    task = _task()
    oracle = str(task.gold["entry"]["answer"])
    padded = " ".join(["0", "1", oracle, "2", "3", "x"])
    return [
        Probe("gym_padded_candidates", "reasoning_gym", task, f"\\boxed{{{padded}}}", ("wrong",),
              "the oracle among other candidates in one answer (default scorer pays len(oracle)/len(answer))"),
        Probe("gym_padded_line", "reasoning_gym", task, f"I think\n{oracle} or 7 or 8 or 9", ("wrong",),
              "the oracle hedged with alternatives on the last line"),
    ]


PROBES = _probes()
