"""Held-out checks and verifier rotation for code and SQL tasks.

A code task's list-shaped tests (``gold["tests"]`` as a list of asserts, or ``gold["io_tests"]``) — or a SQL
task's database variants (``gold["databases"]``, or a list of ``gold["schema_sql"]`` scripts) — are split,
deterministically by (seed, task id), into a **training pool** the RL verifier uses and **held-out tests**
it never sees (``gold["hidden_tests"]`` always count as held out). With rotation, each step's verifier uses
a subset of the training pool that changes every ``rotate_every`` steps, so no fixed set of asserts can be
memorised. A completion that passes the training tests but fails the held-out ones (a SQL query that matches
the gold rows on the training databases only: a literal answer, a condition fitted to their data) is the
signature of verifier overfitting (the health rule ``verifier_overfit`` reads its share per step).
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from rlvr.data.types import Task

POOLS: dict[str, tuple[str, ...]] = {"code": ("tests", "io_tests"), "sql": ("databases", "schema_sql")}
"""The gold keys whose list a task kind's check can be split on: a code task's tests, a SQL task's database
variants (files, or scripts that build them)."""


def _pool(gold: dict, kind: str) -> tuple[str, list] | None:
    for key in POOLS.get(kind, ()):
        v = gold.get(key)
        if isinstance(v, list) and len(v) >= 2:
            return key, list(v)
    return None


def split_tests(task: Task, heldout_frac: float, seed: int = 0) -> tuple[list, list, str] | None:
    """(training pool, held-out checks, the gold key they come from), or None when the task's checks cannot
    be split (not code or SQL, fewer than two list-shaped tests or database variants, or a HumanEval
    ``check()`` source)."""
    if task.kind not in POOLS or not isinstance(task.gold, dict):
        return None
    found = _pool(task.gold, task.kind)
    if found is None:
        return None
    key, tests = found
    order = list(range(len(tests)))
    random.Random(f"{seed}:{task.id}").shuffle(order)
    n_held = min(len(tests) - 1, max(1, math.ceil(heldout_frac * len(tests))))
    held = sorted(order[:n_held])
    train = sorted(order[n_held:])
    return [tests[i] for i in train], [tests[i] for i in held], key


def training_task(task: Task, heldout_frac: float, seed: int = 0, step: int = 0, rotate_every: int = 0,
                  rotate_frac: float = 0.5) -> Task:
    """The task as the training verifier sees it: its training pool only (with rotation, this step's subset
    of it); unchanged when its tests cannot be split."""
    sp = split_tests(task, heldout_frac, seed)
    if sp is None:
        return task
    train, _, key = sp
    if rotate_every:
        k = max(1, round(rotate_frac * len(train)))
        rnd = random.Random(f"{seed}:{task.id}:round{step // rotate_every}")
        train = [train[i] for i in sorted(rnd.sample(range(len(train)), k))]
    gold = {k2: v for k2, v in task.gold.items() if k2 != "hidden_tests"}
    gold[key] = train
    return replace(task, gold=gold)


def heldout_task(task: Task, heldout_frac: float, seed: int = 0) -> Task | None:
    """The task with only its held-out tests (and its ``hidden_tests``), or None when it has none."""
    sp = split_tests(task, heldout_frac, seed)
    if sp is None:
        return None
    _, held, key = sp
    gold = {k2: v for k2, v in task.gold.items() if k2 not in POOLS[task.kind]}
    gold[key] = held
    return replace(task, gold=gold)
