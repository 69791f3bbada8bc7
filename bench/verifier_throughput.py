"""Verifier throughput: verdicts per second for the math fast path, the math-verify path and SQL.

    PYTHONPATH=src python bench/verifier_throughput.py [--workers 2] [--scale 1.0]

Inline = one process calling ``verify`` in a loop; pool = ``verify_batch`` over persistent worker
processes (start-up excluded: the pool is warmed first, as in a training run).
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

from rlvr.data.types import Task
from rlvr.verifiers.math import MathVerifier
from rlvr.verifiers.pool import close_pools, verify_batch
from rlvr.verifiers.sql import SqlVerifier, build_database


def arithmetic(n: int, rng: random.Random) -> tuple[list[Task], list[str]]:
    tasks, comps = [], []
    for i in range(n):
        a, b = rng.randint(1, 999), rng.randint(1, 999)
        tasks.append(Task(id=f"a{i}", kind="math", gold={"answer": str(a + b)}))
        guess = a + b if rng.random() < 0.5 else a + b + 1
        comps.append(f"We add {a} and {b}. Carrying the digits step by step gives {guess}. "
                     f"So the answer is \\boxed{{{guess}}}.")
    return tasks, comps


def symbolic(n: int, rng: random.Random) -> tuple[list[Task], list[str]]:
    tasks, comps = [], []
    for i in range(n):
        p, q = rng.randint(1, 9), rng.randint(2, 9)
        tasks.append(Task(id=f"s{i}", kind="math", gold={"answer": f"\\frac{{{p}}}{{{q}}}"}))
        form = rng.choice([f"{p / q:.6f}", f"\\frac{{{2 * p}}}{{{2 * q}}}", f"{p}/{q}", f"\\frac{{{p + 1}}}{{{q}}}"])
        comps.append(f"Simplifying, the ratio is \\boxed{{{form}}}.")
    return tasks, comps


def sql(n: int, rng: random.Random, folder: str) -> tuple[list[Task], list[str]]:
    rows = ",".join(f"({i},'n{i}','{rng.choice('abc')}',{rng.randint(1, 100)})" for i in range(200))
    db = os.path.join(folder, "emp.sqlite")
    build_database(f"CREATE TABLE emp(id INT, name TEXT, dept TEXT, pay INT); INSERT INTO emp VALUES {rows};", db)
    gold = "SELECT dept, count(*), avg(pay) FROM emp GROUP BY dept"
    cands = [gold, "SELECT dept, count(*), sum(pay) * 1.0 / count(*) FROM emp GROUP BY dept",
             "SELECT dept, count(*), max(pay) FROM emp GROUP BY dept", "DELETE FROM emp"]
    tasks = [Task(id=f"q{i}", kind="sql", gold={"database": db, "gold_sql": gold}, answer_format="code_fence")
             for i in range(n)]
    return tasks, [f"```sql\n{rng.choice(cands)}\n```" for _ in range(n)]


def rate(fn, n: int) -> float:
    t0 = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t0)


def bench(name: str, verifier, tasks, comps, workers: int) -> None:
    n = len(tasks)
    verifier.verify(tasks[0], comps[0])  # warm the verifier (math worker, gold cache)
    inline = rate(lambda: [verifier.verify(t, c) for t, c in zip(tasks, comps)], n)
    verify_batch(verifier, tasks[: workers * 4], comps[: workers * 4], workers=workers)  # warm the pool
    pooled = rate(lambda: verify_batch(verifier, tasks, comps, workers=workers, timeout_s=60), n)
    print(f"{name:<22} n={n:<6} inline {inline:>9.0f}/s ({1e6 / inline:8.1f} us each)   "
          f"pool({workers}) {pooled:>8.0f}/s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args()
    rng = random.Random(0)
    s = args.scale
    mv = MathVerifier()
    with tempfile.TemporaryDirectory() as folder:
        bench("math fast path", mv, *arithmetic(int(20000 * s), rng), args.workers)
        bench("math-verify path", mv, *symbolic(int(400 * s), rng), args.workers)
        bench("sql (200-row table)", SqlVerifier(), *sql(int(2000 * s), rng, folder), args.workers)
    mv.close()
    close_pools()


if __name__ == "__main__":
    main()
