"""Column order in SQL results: ``SELECT name, age`` answers the same question as ``SELECT age, name``.

Column names and aliases never matter to the SQL verifier. By default the columns' order does (BIRD's
rule: the question usually names what to list, in order); with ``column_order="any"`` (the rule of
Spider's test-suite evaluation) it does not: the candidate passes when
*some* reordering of its columns matches the gold's rows (the row rules unchanged: multisets, or the
gold's ORDER BY order with ties free). One reordering must serve every database variant, so a candidate
cannot pass variant 0 as ``(a, b)`` and variant 1 as ``(b, a)``.

Only reorderings that can possibly match are tried: candidate column ``j`` may stand in for gold column
``i`` only when the two hold the same values (as multisets, floats within the tolerance). On real
results that leaves one or a few reorderings; :data:`MAX_REORDERINGS` caps the search (the identity is
always tried first), so a wide result of identical columns cannot make verification exponential.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from rlvr.envs.sqlite_guard import _row_key, _value_eq

MAX_REORDERINGS = 720
"""At most this many column reorderings are tried per candidate (6! -- every order of a 6-column result)."""


def _column(rows: list[tuple], j: int) -> list[Any]:
    return sorted((r[j] for r in rows), key=lambda v: _row_key((v,)))


def _same_values(a: list[Any], b: list[Any], tol: float) -> bool:
    return len(a) == len(b) and all(_value_eq(x, y, tol) for x, y in zip(a, b))


def reorderings(gold: list[tuple], cand: list[tuple], ncols: int, tol: float,
                limit: int = MAX_REORDERINGS) -> Iterator[tuple[int, ...]]:
    """Candidate column orders ``perm`` (gold column ``i`` <- candidate column ``perm[i]``) worth trying:
    the identity first, then every assignment in which each gold column gets a candidate column with the
    same values, at most ``limit`` in all."""
    identity = tuple(range(ncols))
    yield identity
    if ncols < 2 or len(gold) != len(cand):
        return
    gcols = [_column(gold, i) for i in range(ncols)]
    ccols = [_column(cand, j) for j in range(ncols)]
    options = [[j for j in range(ncols) if _same_values(gcols[i], ccols[j], tol)] for i in range(ncols)]
    if any(not o for o in options):
        return
    budget = [limit - 1]
    perm: list[int] = []
    used = [False] * ncols

    def walk(i: int) -> Iterator[tuple[int, ...]]:
        if budget[0] <= 0:
            return
        if i == ncols:
            p = tuple(perm)
            if p != identity:
                budget[0] -= 1
                yield p
            return
        for j in options[i]:
            if not used[j]:
                used[j] = True
                perm.append(j)
                yield from walk(i + 1)
                perm.pop()
                used[j] = False

    yield from walk(0)


def permute(rows: list[tuple], perm: tuple[int, ...]) -> list[tuple]:
    return [tuple(r[j] for j in perm) for r in rows]


def matching_orders(gold: list[tuple], cand: list[tuple], ncols: int, tol: float,
                    same: Callable[[list[tuple]], bool], allowed: set[tuple[int, ...]] | None,
                    any_order: bool) -> set[tuple[int, ...]]:
    """The column orders under which ``same(reordered candidate rows)`` holds, among ``allowed`` (the
    orders that matched the earlier variants; None: all). Strict column order tries the identity only."""
    orders = reorderings(gold, cand, ncols, tol) if any_order else iter([tuple(range(ncols))])
    out = set()
    for perm in orders:
        if allowed is not None and perm not in allowed:
            continue
        if same(permute(cand, perm) if perm != tuple(range(ncols)) else cand):
            out.add(perm)
    return out
