"""Read-only SQLite pieces shared by the SQL verifier and the SQL agent environment: the authorizer
that allows only reads, and the comparison of result rows.

Lives below both (envs is lower than verifiers in the layer order) so the environment's goal
predicate and the verifier compare rows with the same function.
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from collections.abc import Callable
from typing import Any

SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"})
DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer",
                              "sqlite_dbpage"})
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                              getattr(sqlite3, "SQLITE_RECURSIVE", 33)})
_ACTION_NAMES = {v: k[len("SQLITE_"):] for k, v in vars(sqlite3).items()
                 if k.startswith("SQLITE_") and isinstance(v, int) and not k.startswith("SQLITE_LIMIT")
                 and k not in ("SQLITE_OK", "SQLITE_DENY", "SQLITE_IGNORE")}


def authorizer(denied: list[str]) -> Callable[..., int]:
    """An SQLite authorizer allowing SELECT, column reads, non-denied functions and recursive CTEs;
    every refusal is appended to ``denied``."""

    def auth(action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None) -> int:
        if action == sqlite3.SQLITE_READ and arg1 and arg1.lower() in SCHEMA_TABLES:
            denied.append(f"reading {arg1}")
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and arg2 and arg2.lower() in DENIED_FUNCTIONS:
            denied.append(f"function {arg2}")
            return sqlite3.SQLITE_DENY
        if action in _ALLOWED_ACTIONS:
            return sqlite3.SQLITE_OK
        denied.append(_ACTION_NAMES.get(action, str(action)) + (f" {arg1}" if arg1 else ""))
        return sqlite3.SQLITE_DENY
    return auth


def rows_match(gold: list[tuple], cand: list[tuple], ordered: bool, tol: float) -> bool:
    """Rows equal as multisets (or sequences when ``ordered``); floats within ``tol``."""
    if len(gold) != len(cand):
        return False
    if not ordered and not _has_float(gold) and not _has_float(cand):
        return Counter(gold) == Counter(cand)
    if not ordered:
        gold, cand = sorted(gold, key=_row_key), sorted(cand, key=_row_key)
    return all(_row_eq(g, c, tol) for g, c in zip(gold, cand))


def _has_float(rows: list[tuple]) -> bool:
    return any(isinstance(v, float) for r in rows for v in r)


def _value_key(v: Any) -> tuple:
    if v is None:
        return (0, 0)
    if isinstance(v, (int, float)):
        return (1, float(f"{float(v):.6g}") if math.isfinite(float(v)) else float(v))
    if isinstance(v, str):
        return (2, v)
    return (3, bytes(v))


def _row_key(row: tuple) -> tuple:
    return tuple(_value_key(v) for v in row)


def _row_eq(g: tuple, c: tuple, tol: float) -> bool:
    return len(g) == len(c) and all(_value_eq(a, b, tol) for a, b in zip(g, c))


def _value_eq(a: Any, b: Any, tol: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol)
    return type(a) is type(b) and a == b
