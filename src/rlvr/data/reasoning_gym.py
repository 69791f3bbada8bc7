"""Tasks from the ``reasoning-gym`` package (the optional extra ``gym``), any dataset by name.

reasoning-gym builds item ``i`` of a dataset from ``Random(seed + i)``, so two draws whose seeds are
close share most of their items. The held-out split therefore draws from a seed far from the training
seed (:data:`HELDOUT_SEED_OFFSET`) and drops every question that the training draw (of ``train_n``
items, default the same ``n``) holds, and any repeated question; a configuration with fewer distinct questions than asked is refused
(:func:`distinct_entries` says how many it found). Each task carries the dataset's own entry in
``gold["entry"]`` for the dataset's ``score_answer`` (``rlvr.verifiers.reasoning_gym``).
"""

from __future__ import annotations

import random
from typing import Any

from rlvr.data.types import Task
from rlvr.errors import DataError

KIND = "reasoning_gym"
HELDOUT_SEED_OFFSET = 1_000_003_331
"""The held-out draw's seed is the training seed plus this: far beyond any training draw's items."""
DRAW_FACTOR = 4
"""A draw looks at up to this many times the asked-for items (at least 64 more) for distinct questions."""


def import_gym():
    """The ``reasoning_gym`` module, or DataError saying how to install it."""
    try:
        import reasoning_gym
    except ImportError as e:
        raise DataError(f"reasoning_gym tasks need the reasoning-gym package ({e}); install the extra: "
                        "pip install -e '.[gym]'") from None
    return reasoning_gym


def dataset_names() -> list[str]:
    """Every dataset name in reasoning-gym's registry."""
    from reasoning_gym.factory import DATASETS

    import_gym()
    return sorted(DATASETS)


def make_dataset(name: str, config: dict[str, Any], seed: int, size: int):
    """reasoning-gym's dataset ``name`` with ``config`` passed through; DataError for an unknown name or a
    config its generator refuses."""
    rg = import_gym()
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        close = [n for n in sorted(DATASETS) if n.startswith(name[:3])][:8]
        raise DataError(f"reasoning_gym: unknown dataset {name!r} ({len(DATASETS)} known"
                        f"{', e.g. ' + ', '.join(close) if close else ''})")
    try:
        return rg.create_dataset(name, seed=seed, size=size, **config)
    except (TypeError, ValueError, AssertionError) as e:
        raise DataError(f"reasoning_gym dataset {name!r}: config {config} refused: {type(e).__name__}: {e}") from None


def distinct_entries(name: str, config: dict[str, Any], seed: int, n: int,
                     exclude: set[str] = frozenset()) -> list[dict[str, Any]]:
    """Up to ``n`` entries with distinct questions not in ``exclude``, looking at ``DRAW_FACTOR * n + 64``
    items from ``seed``; DataError naming the dataset, config and how many distinct items it found."""
    if n <= 0:
        return []
    budget = DRAW_FACTOR * n + 64
    ds = make_dataset(name, config, seed, budget)
    seen, out = set(exclude), []
    for i in range(budget):
        entry = ds[i]
        q = entry["question"]
        if q in seen:
            continue
        seen.add(q)
        out.append(entry)
        if len(out) == n:
            return out
    raise DataError(f"reasoning_gym dataset {name!r} with config {config}: asked for {n} distinct items, found "
                    f"{len(out)} in {budget} draws (seed {seed}{', after removing the training questions' if exclude else ''}); "
                    "ask for fewer or widen the configuration")


def split_entries(name: str, config: dict[str, Any], n: int, seed: int, split: str,
                  train_n: int | None = None) -> list[dict[str, Any]]:
    """``n`` entries of one side: train from ``seed``; heldout from a distant seed, minus the questions the
    training draw of ``train_n`` (default ``n``) items from ``seed`` holds."""
    if split == "train":
        return distinct_entries(name, config, seed, n)
    train_q = {e["question"] for e in distinct_entries(name, config, seed, train_n or n)}
    return distinct_entries(name, config, seed + HELDOUT_SEED_OFFSET, n, exclude=train_q)


def mix_counts(weights: list[float], n: int) -> list[int]:
    """``n`` split by ``weights`` (largest remainder: the counts sum to ``n``)."""
    total = sum(weights)
    raw = [w / total * n for w in weights]
    counts = [int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: counts[i] - raw[i])[: n - sum(counts)]:
        counts[i] += 1
    return counts


def to_task(name: str, config: dict[str, Any], entry: dict[str, Any], i: int, split: str, answer: str = "auto",
            partial: str = "clip") -> Task:
    """One entry as a task: prompt = the question; gold = the dataset's entry and configuration; solution =
    the dataset's answer alone (an answer-only demonstration; None where the dataset gives no answer)."""
    answer_text = None if entry.get("answer") is None else str(entry["answer"])
    return Task(id=f"rg-{name}-{split}-{i}", prompt=entry["question"], kind=KIND, family=name, split=split,
                answer_format="raw", solution=answer_text,
                gold={"answer": str(entry.get("answer")), "dataset": name, "config": dict(config),
                      "entry": entry, "extract": answer, "partial": partial})


def load_reasoning_gym(src) -> list[Task]:
    """Tasks for a ``ReasoningGymTasks`` config (one dataset or a weighted mix, shuffled by seed)."""
    if src.name is not None:
        parts = [(src.name, dict(src.config), src.n, src.train_n)]
    else:
        weights = [d.weight for d in src.datasets]
        counts = mix_counts(weights, src.n)
        train = mix_counts(weights, src.train_n) if src.train_n else counts
        parts = [(d.name, dict(d.config), c, t) for d, c, t in zip(src.datasets, counts, train) if c > 0]
    tasks = []
    for k, (name, config, count, train_n) in enumerate(parts):
        seed = src.seed + k * 7919  # each dataset of a mix its own stream
        for i, entry in enumerate(split_entries(name, config, count, seed, src.split, train_n or None)):
            tasks.append(to_task(name, config, entry, i, src.split, src.answer, src.partial))
    if len(parts) > 1:
        random.Random(src.seed).shuffle(tasks)
    return tasks
