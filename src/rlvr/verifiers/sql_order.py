"""Row order under an ordered gold query: ties on the gold's ORDER BY keys may come in any order.

A gold ``... ORDER BY score DESC`` fixes the order of rows with different scores only; rows with equal
scores come out in whatever order SQLite happens to produce, so a correct candidate that adds a
tie-breaking key (``ORDER BY score DESC, name``) may list them differently. The gold's rows are cut
into *tie groups* (consecutive rows with equal ORDER BY keys); a candidate passes when, position by
position, each group's span holds the same rows in any order. With ``LIMIT n [OFFSET k]`` the gold's
last group may be cut: the candidate's rows in that span may be *any* of the tied rows (it is read
from the gold without its LIMIT).

Where the keys come from: ORDER BY terms that are output columns (by alias, by name, by position, or
the same expression as a selected one) are read from the gold's rows; other terms are added to a
copy of the gold query as extra columns (a plain SELECT only). Everything else (sqlglot missing, a
compound query ordered by a non-output term, keys that cannot be computed) keeps the strict rule:
rows in exactly the gold's order.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KEY_PREFIX = "__rlvr_order_key_"


@dataclass(frozen=True)
class OrderSpec:
    """How to recover the gold's tie groups: ``positions`` of key columns in the output, or extra key
    columns appended by ``keyed_sql``; ``unlimited_sql`` is the gold without LIMIT/OFFSET (or None)."""

    positions: tuple[int, ...] | None
    keyed_sql: str | None
    unlimited_sql: str | None
    offset: int = 0


def _output_position(term: Any, select: list[Any]) -> int | None:
    from sqlglot import exp

    if isinstance(term, exp.Literal) and term.is_int:
        pos = int(term.this) - 1
        return pos if 0 <= pos < len(select) else None
    if isinstance(term, exp.Column) and not term.table:
        for i, e in enumerate(select):
            if e.alias_or_name.lower() == term.name.lower() and not isinstance(e, exp.Star):
                return i
    text = term.sql(dialect="sqlite").lower()
    for i, e in enumerate(select):
        inner = e.this if isinstance(e, exp.Alias) else e
        if inner.sql(dialect="sqlite").lower() == text:
            return i
    return None


@functools.lru_cache(maxsize=4096)
def order_spec(gold_sql: str) -> OrderSpec | None:
    """The spec for ``gold_sql``'s top-level ORDER BY, or None (no sqlglot, or keys not recoverable)."""
    try:
        import sqlglot
        from sqlglot import exp

        logging.getLogger("sqlglot").setLevel(logging.ERROR)
        tree = sqlglot.parse_one(gold_sql, read="sqlite")
        while isinstance(tree, exp.Subquery):
            tree = tree.this
        order = tree.args.get("order")
        if order is None:
            return None
        terms = [o.this for o in order.expressions]
        select = list(tree.expressions) if isinstance(tree, exp.Select) else []
        if select and any(isinstance(e, exp.Star) for e in select):
            select = []
        positions = [_output_position(t, select) if select else _compound_position(t) for t in terms]
        offset = 0
        unlimited = None
        if tree.args.get("limit") is not None or tree.args.get("offset") is not None:
            off = tree.args.get("offset")
            if off is not None:
                value = off.expression if hasattr(off, "expression") else off.this
                if not (isinstance(value, exp.Literal) and value.is_int):
                    return None
                offset = int(value.this)
            bare = tree.copy()
            bare.set("limit", None)
            bare.set("offset", None)
            unlimited = bare.sql(dialect="sqlite")
        if all(p is not None for p in positions):
            return OrderSpec(tuple(positions), None, unlimited, offset)  # type: ignore[arg-type]
        if not isinstance(tree, exp.Select) or tree.args.get("distinct") is not None:
            return None
        keyed = tree.copy()
        keyed.set("limit", None)
        keyed.set("offset", None)
        for i, t in enumerate(terms):
            keyed.append("expressions", exp.alias_(t.copy(), f"{KEY_PREFIX}{i}"))
        return OrderSpec(None, keyed.sql(dialect="sqlite"), unlimited, offset)
    except Exception:  # noqa: BLE001 - sqlglot cannot read it: the strict rule applies
        return None


def _compound_position(term: Any) -> int | None:
    from sqlglot import exp

    if isinstance(term, exp.Literal) and term.is_int:
        return int(term.this) - 1
    return None


def tie_groups(keys: list[tuple], same: Callable[[Any, Any], bool]) -> list[tuple[int, int]]:
    """[start, end) spans of consecutive rows whose keys are equal (NULL ties with NULL)."""
    spans: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or not _keys_equal(keys[i], keys[start], same):
            spans.append((start, i))
            start = i
    return spans


def _keys_equal(a: tuple, b: tuple, same: Callable[[Any, Any], bool]) -> bool:
    return len(a) == len(b) and all((x is None and y is None) or (x is not None and same(x, y)) for x, y in zip(a, b))


def ordered_match(full: list[tuple], keys: list[tuple], start: int, cand: list[tuple], row_eq: Callable,
                  value_eq: Callable) -> bool:
    """Does ``cand`` equal ``full[start:start+len(cand)]`` up to the order of rows in each tie group
    (a group cut by the window may contribute any of its rows)?"""
    end = start + len(cand)
    if end > len(full):
        return False
    for a, b in tie_groups(keys, value_eq):
        lo, hi = max(a, start), min(b, end)
        if lo >= hi:
            continue
        pool = list(full[a:b])
        for row in cand[lo - start:hi - start]:
            hit = next((j for j, g in enumerate(pool) if row_eq(g, row)), None)
            if hit is None:
                return False
            pool.pop(hit)
    return True
