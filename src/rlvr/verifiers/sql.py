"""SQL verifier: the candidate query's result rows vs the gold query's, on every database variant.

The task's gold payload names the database(s): ``gold["database"]`` (a .sqlite path), ``gold["databases"]``
(several variants -- a test suite) or ``gold["schema_sql"]`` (SQL that builds it; a list of such scripts
gives variants), plus ``gold["gold_sql"]``. Reward 1 needs a match on *every* variant, so a
hard-coded literal answer fails on the variants whose data differ.

Each run: the database is copied to a fresh temporary file, opened read-only (``mode=ro``) with
``PRAGMA query_only``, ``temp_store=MEMORY``, no attached databases, a value-length limit, and an
authorizer that allows only SELECT, column reads, non-denied functions and recursive CTEs -- it
denies ATTACH and PRAGMA (both work on read-only connections), every write, ``load_extension`` and
reads of ``sqlite_master``/``sqlite_schema``. Before that, a static check requires exactly one
statement starting with SELECT/WITH/VALUES (and, when sqlglot is installed, a parse whose statement
type is a query). A progress handler enforces the time limit; rows beyond ``max_rows`` or
``max_result_bytes`` stop the fetch.

Comparison: same column count, in the gold's order (names and aliases do not matter; ``column_order="any"``
accepts any order of the columns: :mod:`rlvr.verifiers.sql_columns`); rows as multisets, or -- when the
gold query has a top-level ORDER BY -- in the gold's order, where rows tied on the gold's ORDER BY keys
may come in any order (and a LIMIT that cuts a tie group accepts any of its rows; see
:mod:`rlvr.verifiers.sql_order`); ints exactly, floats within ``float_tol`` (relative and absolute);
NULL only equals NULL.

Outcomes: ``pass``; ``wrong`` (rows differ, a row cap hit); ``format`` (no SQL found); ``violation``
(a forbidden statement, a second statement, a denied action); ``crash`` (the query raised an SQL
error -- syntax, unknown column, SQLite's memory limit: we keep it apart from ``wrong`` so a run can
see how often the policy writes invalid SQL); ``timeout``; ``infra`` (the gold query or the database
failed). Does not protect against: a gold query that is itself wrong, or variants whose data do not
tell a literal answer apart from a real query.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rlvr.data.types import Task
from rlvr.envs.sqlite_guard import (  # noqa: F401 — re-exported: the verifier's public comparison
    DENIED_FUNCTIONS,
    SCHEMA_TABLES,
    rows_match,
)
from rlvr.envs.sqlite_guard import (
    _row_eq,
    _value_eq,
)
from rlvr.envs.sqlite_guard import (
    authorizer as _authorizer,
)
from rlvr.verifiers.base import Verdict
from rlvr.verifiers.extract import extract_answer
from rlvr.verifiers.sql_columns import matching_orders
from rlvr.verifiers.sql_order import order_spec, ordered_match

_COMMENT_RE = re.compile(r"\s+|--[^\n]*(?:\n|$)|/\*.*?(?:\*/|$)|\(", re.DOTALL)
_QUERY_KEYWORDS = ("select", "with", "values")
_TRAILING_SEMICOLONS_RE = re.compile(r";(?:\s*;)+\s*$")
# sqlglot (slow, ~0.5 ms) is consulted only when one of these appears; a query without them cannot be
# more than one statement or anything but a read, and SQLite's authorizer decides in every case anyway.
_SUSPECT_RE = re.compile(r";|\b(?:insert|update|delete|drop|create|alter|attach|detach|pragma|replace|vacuum|"
                         r"reindex|analyze|begin|commit|rollback|savepoint|release|explain)\b", re.IGNORECASE)
_STATEMENT_KEYWORDS = frozenset({
    "alter", "analyze", "attach", "begin", "commit", "create", "delete", "detach", "drop", "end", "explain",
    "insert", "pragma", "reindex", "release", "replace", "rollback", "savepoint", "update", "upsert",
    "vacuum"})


class _Fail(Exception):
    """A candidate run that ends in a non-pass outcome (outcome, reason)."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome, self.reason = outcome, reason


class SqlVerifier:
    """Verifier for ``kind == "sql"`` tasks (see the module docstring for the rules).

    timeout_s: time budget of one candidate across all variants (progress handler);
    max_rows: rows fetched before the result counts as too large; max_result_bytes: the same for
    text/blob bytes; float_tol: relative and absolute tolerance for floats; max_sql_chars: longer SQL
    is a violation; max_completion_chars: longer completions are ``format``; max_value_bytes: SQLite's
    length limit for one string/blob; heap_mb: SQLite's process-wide hard heap limit (0 = leave it);
    use_sqlglot: also check the statement type with sqlglot when it is installed; column_order: "strict"
    (columns in the gold's order, BIRD's rule: the default) or "any" (a reordering of the candidate's
    columns may match, one for every variant -- Spider's test-suite rule, :mod:`rlvr.verifiers.sql_columns`).
    """

    name = "sql"

    def __init__(self, timeout_s: float = 5.0, max_rows: int = 10_000, max_result_bytes: int = 16_000_000,
                 float_tol: float = 1e-6, max_sql_chars: int = 20_000, max_completion_chars: int = 100_000,
                 max_value_bytes: int = 1_000_000, heap_mb: int = 512, use_sqlglot: bool = True,
                 column_order: str = "strict") -> None:
        if column_order not in ("any", "strict"):
            raise ValueError(f"SqlVerifier column_order: {column_order!r} is not 'any' or 'strict'")
        self.column_order = column_order
        self.timeout_s = float(timeout_s)
        self.max_rows = int(max_rows)
        self.max_result_bytes = int(max_result_bytes)
        self.float_tol = float(float_tol)
        self.max_sql_chars = int(max_sql_chars)
        self.max_completion_chars = int(max_completion_chars)
        self.max_value_bytes = int(max_value_bytes)
        self.heap_mb = int(heap_mb)
        self.use_sqlglot = bool(use_sqlglot)
        self._gold_cache: dict[tuple[str, str], tuple[list[tuple], int]] = {}
        self._templates: dict[str, str] = {}
        self._tmpdir: tempfile.TemporaryDirectory | None = None
        self._lock = threading.Lock()
        self._runs = itertools.count()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()
                if k not in ("_gold_cache", "_templates", "_tmpdir", "_lock", "_runs")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._gold_cache, self._templates, self._tmpdir = {}, {}, None
        self._lock = threading.Lock()
        self._runs = itertools.count()

    # ------------------------------------------------------------------ public
    @staticmethod
    def check_task(task: Task) -> str | None:
        """Why no completion of ``task`` could be judged (None when one can): no gold query, no database, or a
        database file that does not exist."""
        gold_sql = task.gold.get("gold_sql")
        if not isinstance(gold_sql, str) or not gold_sql.strip():
            return "field 'gold_sql': a SQL task needs the gold query (a non-empty string)"
        try:
            sources = database_sources(task.gold)
        except ValueError as e:
            return f"field 'database': {e}"
        missing = [v for kind, v in sources if kind == "file" and not os.path.isfile(v)]
        if missing:
            key = "databases" if task.gold.get("databases") else "database"
            return f"field {key!r}: database file {missing[0]} not found (relative paths start at the task file's folder)"
        return None

    def verify(self, task: Task, completion: str) -> Verdict:
        t0 = time.perf_counter()
        try:
            outcome, details = self._judge(task, completion)
        except _Fail as f:
            outcome, details = f.outcome, {"reason": f.reason}
        except (OSError, sqlite3.Error) as e:  # copying or opening a database failed: not the policy's fault
            outcome, details = "infra", {"error": f"{type(e).__name__}: {e}"}
        return Verdict(1.0 if outcome == "pass" else 0.0, outcome == "pass", outcome, details,
                       time.perf_counter() - t0)

    def _judge(self, task: Task, completion: str) -> tuple[str, dict[str, Any]]:
        gold_sql = task.gold.get("gold_sql")
        if not isinstance(gold_sql, str) or not gold_sql.strip():
            return "infra", {"error": f"task {task.id!r} has no gold_sql"}
        try:
            sources = database_sources(task.gold)
        except ValueError as e:
            return "infra", {"error": f"task {task.id!r}: {e}"}
        if not isinstance(completion, str) or len(completion) > self.max_completion_chars:
            return "format", {"reason": "completion is not text or is too long"}
        fmt = task.answer_format if task.answer_format in ("code_fence", "raw") else "code_fence"
        ext = extract_answer(completion, fmt, lang="sql")
        sql = _TRAILING_SEMICOLONS_RE.sub(";", (ext.answer or "").strip())  # "SELECT ...;;" is one statement
        if not sql:
            return "format", {"reason": "no SQL found" + (f" ({ext.note})" if ext.note else "")}
        details: dict[str, Any] = {"sql": sql[:300], "variants": len(sources)}
        if ext.ambiguous:
            details["note"] = f"{len(ext.candidates)} different SQL blocks; the last one is graded"
        refused = self.static_check(sql)
        if refused:
            return refused[0], {**details, "reason": refused[1]}
        ordered = has_top_level_order_by(gold_sql, self.use_sqlglot)
        deadline = time.monotonic() + self.timeout_s
        orders: set[tuple[int, ...]] | None = None  # the column orders that matched every variant so far
        for i, src in enumerate(sources):
            try:
                gold_rows, gold_cols = self._gold(src, gold_sql)
                ties = self._ties(src, gold_sql, gold_rows, gold_cols) if ordered else None
            except _Fail as f:
                return "infra", {**details, "error": f"gold query failed on variant {i}: {f.reason}"}
            rows, ncols = self._run(src, sql, deadline, trusted=False)
            if ncols != gold_cols:
                return "wrong", {**details, "variant": i, "reason": f"{ncols} columns, expected {gold_cols}"}
            orders = matching_orders(gold_rows, rows, ncols, self.float_tol,
                                     self._rows_equal(gold_rows, ties, ordered), orders,
                                     self.column_order == "any")
            if not orders:
                why = " (order matters; rows tied on the ORDER BY keys may come in any order)" if ordered else ""
                return "wrong", {**details, "variant": i, "reason": "rows differ" + why}
        if orders and tuple(range(len(next(iter(orders))))) not in orders:
            details["column_order"] = list(min(orders))
        return "pass", details

    def _rows_equal(self, gold_rows: list[tuple], ties: tuple | None, ordered: bool):
        """``same(rows)``: do candidate rows (columns already in the gold's order) match the gold's?"""
        if ties is None:
            return lambda rows: rows_match(gold_rows, rows, ordered, self.float_tol)
        row_eq = functools.partial(_row_eq, tol=self.float_tol)
        value_eq = functools.partial(_value_eq, tol=self.float_tol)
        return lambda rows: len(rows) == len(gold_rows) and ordered_match(ties[0], ties[1], ties[2], rows,
                                                                          row_eq, value_eq)

    def _ties(self, src: tuple[str, str], gold_sql: str, gold_rows: list[tuple], ncols: int) -> tuple | None:
        """(the gold's full ordered rows, their ORDER BY keys, the gold's offset into them), or None
        when the keys cannot be recovered (then rows must come in exactly the gold's order)."""
        spec = order_spec(gold_sql) if self.use_sqlglot else None
        if spec is None:
            return None
        try:
            if spec.keyed_sql is not None:
                keyed, _ = self._gold(src, spec.keyed_sql)
                full, keys = [r[:ncols] for r in keyed], [tuple(r[ncols:]) for r in keyed]
            else:
                full = self._gold(src, spec.unlimited_sql)[0] if spec.unlimited_sql else gold_rows
                keys = [tuple(r[p] for p in spec.positions or ()) for r in full]
        except _Fail:
            return None
        if spec.unlimited_sql is None and len(full) != len(gold_rows):
            return None
        return full, keys, spec.offset

    def static_check(self, sql: str) -> tuple[str, str] | None:
        """``(outcome, reason)`` when ``sql`` is refused before it runs, else None.

        ``violation`` for a statement other than one SELECT/WITH/VALUES query; ``format`` when the
        text does not start with an SQL keyword at all (prose).
        """
        if len(sql) > self.max_sql_chars:
            return "violation", f"SQL longer than {self.max_sql_chars} chars"
        first = _first_keyword(sql)
        if first not in _QUERY_KEYWORDS:
            if first in _STATEMENT_KEYWORDS:
                return "violation", f"only SELECT/WITH queries are allowed (statement starts with {first.upper()})"
            return "format", f"no SQL query found (text starts with {first[:20]!r})"
        if re.search(r"load_extension", sql, re.IGNORECASE):
            return "violation", "load_extension is not allowed"
        why = _sqlglot_check(sql) if self.use_sqlglot and _SUSPECT_RE.search(sql) else ""
        return ("violation", why) if why else None

    # ------------------------------------------------------------------ running
    def _gold(self, src: tuple[str, str], gold_sql: str) -> tuple[list[tuple], int]:
        key = (self._source_key(src), gold_sql)
        hit = self._gold_cache.get(key)
        if hit is None:
            try:
                hit = self._run(src, gold_sql, time.monotonic() + max(self.timeout_s, 30.0), trusted=True)
            except _Fail as f:
                raise _Fail("infra", f.reason) from None
            if len(self._gold_cache) > 1024:
                self._gold_cache.clear()
            self._gold_cache[key] = hit
        return hit

    def _run(self, src: tuple[str, str], sql: str, deadline: float, trusted: bool) -> tuple[list[tuple], int]:
        """Run ``sql`` on a fresh read-only copy of ``src``; returns (rows, column count) or raises _Fail."""
        template = self._template(src)
        path = os.path.join(self._scratch(), f"run-{next(self._runs)}.sqlite")  # a fresh copy per run
        shutil.copyfile(template, path)
        try:
            denied: list[str] = []
            conn = self._connect(path, deadline, None if trusted else denied)
            try:
                return self._fetch(conn, sql, denied, deadline)
            finally:
                conn.close()
        finally:
            os.unlink(path)

    def _connect(self, path: str, deadline: float, denied: list[str] | None) -> sqlite3.Connection:
        conn = sqlite3.connect(Path(path).as_uri() + "?mode=ro", uri=True, isolation_level=None,
                               check_same_thread=False, timeout=0)
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA temp_store = MEMORY")
        if self.heap_mb > 0:
            conn.execute(f"PRAGMA hard_heap_limit = {self.heap_mb * 1024 * 1024}")
        if hasattr(conn, "setlimit"):
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.max_value_bytes)
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)
        if denied is not None:
            conn.set_authorizer(_authorizer(denied))
        return conn

    def _fetch(self, conn: sqlite3.Connection, sql: str, denied: list[str], deadline: float) -> tuple[list[tuple], int]:
        try:
            cur = conn.execute(sql)
            if cur.description is None:
                raise _Fail("violation", "the statement is not a query")
            ncols = len(cur.description)
            rows: list[tuple] = []
            nbytes = 0
            while True:
                chunk = cur.fetchmany(1000)
                if not chunk:
                    return rows, ncols
                rows.extend(chunk)
                nbytes += sum(len(v) for r in chunk for v in r if isinstance(v, (str, bytes)))
                if len(rows) > self.max_rows or nbytes > self.max_result_bytes:
                    raise _Fail("wrong", f"result larger than the cap ({self.max_rows} rows / "
                                         f"{self.max_result_bytes} bytes)")
        except sqlite3.ProgrammingError as e:
            if "one statement" in str(e):
                raise _Fail("violation", "more than one statement") from None
            raise _Fail("crash", f"SQL error: {e}") from None
        except sqlite3.Error as e:
            if denied:
                raise _Fail("violation", f"not allowed: {', '.join(dict.fromkeys(denied))}") from None
            if time.monotonic() > deadline or "interrupted" in str(e):
                raise _Fail("timeout", f"time limit {self.timeout_s:g}s") from None
            raise _Fail("crash", f"SQL error: {e}") from None
        except MemoryError:
            raise _Fail("crash", "SQLite memory limit") from None

    # ------------------------------------------------------------------ databases
    def _scratch(self) -> str:
        """This instance's private temporary folder (templates and per-run copies), made once."""
        if self._tmpdir is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="rlvr-sql-")
        return self._tmpdir.name

    def _source_key(self, src: tuple[str, str]) -> str:
        kind, value = src
        if kind == "schema":
            return "schema:" + hashlib.sha256(value.encode()).hexdigest()
        try:
            st = os.stat(value)
        except OSError as e:
            raise _Fail("infra", f"database file not readable: {value} ({e.strerror})") from None
        return f"file:{value}:{st.st_mtime_ns}:{st.st_size}"

    def _template(self, src: tuple[str, str]) -> str:
        """The file a run copies: the database itself, or one built once from ``schema_sql``."""
        kind, value = src
        if kind == "file":
            if not os.path.isfile(value):
                raise _Fail("infra", f"database file not found: {value}")
            return value
        key = self._source_key(src)
        with self._lock:
            path = self._templates.get(key)
            if path is None or not os.path.exists(path):
                path = os.path.join(self._scratch(), key.split(":")[1][:32] + ".sqlite")
                try:
                    build_database(value, path)
                except sqlite3.Error as e:
                    raise _Fail("infra", f"schema_sql failed: {e}") from None
                self._templates[key] = path
            return path


def database_sources(gold: dict[str, Any]) -> list[tuple[str, str]]:
    """The variants of a task: ``[("file", path) | ("schema", sql), ...]``; ValueError when none."""
    out: list[tuple[str, str]] = []
    for key, kind in (("database", "file"), ("databases", "file"), ("schema_sql", "schema")):
        val = gold.get(key)
        if val is None:
            continue
        vals = val if isinstance(val, list) else [val]
        if not vals or not all(isinstance(v, str) and v for v in vals):
            raise ValueError(f"gold[{key!r}] must be a non-empty string or list of strings")
        out.extend((kind, v) for v in vals)
    if not out:
        raise ValueError("no database: give 'database', 'databases' or 'schema_sql'")
    return out


def build_database(schema_sql: str, path: str) -> None:
    """Create the SQLite file ``path`` from trusted ``schema_sql`` (written atomically)."""
    tmp = path + ".building"
    if os.path.exists(tmp):
        os.unlink(tmp)
    conn = sqlite3.connect(tmp)
    try:
        conn.executescript(schema_sql)
        conn.commit()
    finally:
        conn.close()
    os.replace(tmp, path)


def _first_keyword(sql: str) -> str:
    pos = 0
    while True:
        m = _COMMENT_RE.match(sql, pos)
        if not m or m.end() == pos:
            break
        pos = m.end()
    m = re.match(r"[A-Za-z_]+", sql[pos:])
    return m.group().lower() if m else sql[pos:pos + 10]


def _sqlglot_check(sql: str) -> str:
    try:
        import sqlglot
        from sqlglot import exp
    except ImportError:
        return ""
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    try:
        stmts = [s for s in sqlglot.parse(sql, read="sqlite") if s is not None and not isinstance(s, exp.Semicolon)]
    except Exception:  # noqa: BLE001 - sqlglot is a second opinion; SQLite decides on what it cannot parse
        return ""
    if len(stmts) > 1:
        return f"{len(stmts)} statements; exactly one is allowed"
    query_types = tuple(t for t in (getattr(exp, n, None) for n in
                                    ("Select", "Union", "Intersect", "Except", "Values", "Subquery")) if t)
    if stmts and not isinstance(stmts[0], query_types):
        return f"only SELECT/WITH queries are allowed (parsed as {type(stmts[0]).__name__})"
    return ""


@functools.lru_cache(maxsize=4096)
def has_top_level_order_by(sql: str, use_sqlglot: bool = True) -> bool:
    """True when the outermost query of ``sql`` has ORDER BY (then row order is compared)."""
    if use_sqlglot:
        try:
            import sqlglot
            from sqlglot import exp

            logging.getLogger("sqlglot").setLevel(logging.ERROR)
            tree = sqlglot.parse_one(sql, read="sqlite")
            while isinstance(tree, exp.Subquery):
                tree = tree.this
            return tree.args.get("order") is not None
        except Exception:  # noqa: BLE001, S110 - fall back to the scanner below
            pass
    depth, out = 0, []
    for tok in re.finditer(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|[()]|[^'\"()\-/]+|.", sql, re.DOTALL):
        t = tok.group()
        if t == "(":
            depth += 1
        elif t == ")":
            depth -= 1
        elif depth == 0 and t[0] not in "'\"-/":
            out.append(t)
    return re.search(r"\border\s+by\b", " ".join(out), re.IGNORECASE) is not None
