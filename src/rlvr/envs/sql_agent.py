"""``sql``: a SQL agent over a small SQLite database — explore with a read-only query tool, then answer
with a query whose result rows are compared with the gold rows (the SQL verifier's comparison,
:func:`rlvr.envs.sqlite_guard.rows_match`).

Tool: ``query(sql)`` runs one read-only statement on the task's database and answers with the column
names and up to ``MAX_SHOWN_ROWS`` rows (cells separated by `` | ``); an SQL error is an error observation. The
connection is in-memory, built from the task's trusted ``init["schema_sql"]``, with ``PRAGMA
query_only``, an authorizer that allows only reads (no ATTACH, PRAGMA, writes, ``load_extension`` or
``sqlite_master``) and a time limit per statement. The final turn (no tool call) is the answer: the
SQL inside a ```sql fence if there is one, else the whole turn.

State: ``{"answer_sql": str or None, "answer_rows": [[...], ...] or None, "answer_error": str or None}``
(the final query's result on the same database). Goal: ``{"rows": [[...], ...], "ordered": bool}``.
The rows a policy's own queries return are not secrets (finding them is the task); the guard watches
the goal payload itself.
"""

from __future__ import annotations

import random
import re
import sqlite3
import time
from typing import Any, ClassVar

from rlvr.data.types import Task
from rlvr.envs.base import ArgSpec, GoalResult, ToolEnv, ToolError, ToolSpec, generate_env_tasks
from rlvr.envs.calculator import compact_call
from rlvr.envs.sqlite_guard import authorizer, rows_match
from rlvr.errors import DataError
from rlvr.data.sources import register_env_tasks

MAX_SHOWN_ROWS = 20
QUERY_SECONDS = 1.0
_FENCE = re.compile(r"```(?:sql)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def open_readonly(schema_sql: str) -> sqlite3.Connection:
    """An in-memory database built from trusted ``schema_sql``, then locked to reads."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.executescript(schema_sql)
    conn.execute("PRAGMA query_only = ON")
    if hasattr(conn, "setlimit"):
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    return conn


def run_query(conn: sqlite3.Connection, sql: str, max_rows: int = 10_000) -> tuple[list[str], list[tuple]]:
    """``(column names, rows)`` of one read-only statement; ToolError on an SQL error or a refusal."""
    denied: list[str] = []
    deadline = time.monotonic() + QUERY_SECONDS
    conn.set_authorizer(authorizer(denied))
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)
    try:
        cur = conn.execute(sql)
        if cur.description is None:
            raise ToolError("not a query")
        rows = cur.fetchmany(max_rows + 1)
    except sqlite3.Error as e:
        why = f"not allowed: {', '.join(dict.fromkeys(denied))}" if denied else str(e)
        raise ToolError(f"sql error: {why}") from None
    except ValueError as e:  # e.g. "You can only execute one statement at a time."
        raise ToolError(f"sql error: {e}") from None
    finally:
        conn.set_authorizer(None)
        conn.set_progress_handler(None, 0)
    if len(rows) > max_rows:
        raise ToolError(f"more than {max_rows} rows")
    return [d[0] for d in cur.description], rows


def answer_sql(text: str) -> str:
    """The SQL of a final answer: the first ```sql fence, else the whole text."""
    m = _FENCE.search(text)
    return (m.group(1) if m else text).strip().rstrip(";").strip()


class SqlAgentEnv(ToolEnv):
    """A SQL agent environment; see the module docstring for the tool, state and goal."""

    name: ClassVar[str] = "sql"
    tool_specs: ClassVar[tuple[ToolSpec, ...]] = (
        ToolSpec("query", "run one read-only SQL query; returns the columns and up to 20 rows",
                 {"sql": ArgSpec("str", max_chars=2000)}),
    )

    def _load(self, init: dict[str, Any]) -> None:
        self.conn = open_readonly(init["schema_sql"])
        self._answer: tuple[str | None, dict[str, Any]] = (None, {})

    def tool_query(self, sql: str) -> str:
        cols, rows = run_query(self.conn, sql, max_rows=10_000)
        shown = [" | ".join(cols)] + [" | ".join("NULL" if v is None else str(v) for v in r)
                                      for r in rows[:MAX_SHOWN_ROWS]]
        more = f"\n... {len(rows) - MAX_SHOWN_ROWS} more rows" if len(rows) > MAX_SHOWN_ROWS else ""
        return "\n".join(shown) + more

    def end_state(self) -> dict[str, Any]:
        sql = answer_sql(self.final_text) if self.final_text is not None else None
        if self._answer[0] != sql:
            state: dict[str, Any] = {"answer_sql": sql, "answer_rows": None, "answer_error": None}
            if sql:
                try:
                    state["answer_rows"] = [list(r) for r in run_query(self.conn, sql)[1]]
                except ToolError as e:
                    state["answer_error"] = str(e)
            self._answer = (sql, state)
        return dict(self._answer[1])

    def _instructions(self, task: Task) -> str:
        return (f"{super()._instructions(task)}\nAnswer with the final SQL query in a ```sql block, without "
                f"a tool call.")

    # ----- gold -----
    @classmethod
    def validate_gold(cls, gold: dict[str, Any]) -> None:
        init, goal = gold.get("init"), gold.get("goal")
        if not isinstance(init, dict) or not isinstance(init.get("schema_sql"), str):
            raise DataError("sql task: gold['init'] must be {'schema_sql': '<SQL that builds the database>'}")
        if not isinstance(goal, dict) or not isinstance(goal.get("rows"), list) or \
                not all(isinstance(r, list) for r in goal["rows"]):
            raise DataError("sql task: gold['goal'] must be {'rows': [[...], ...], 'ordered': bool}")

    @classmethod
    def check_goal(cls, end_state: dict[str, Any], goal: dict[str, Any]) -> GoalResult:
        if end_state.get("answer_sql") is None:
            return GoalResult(False, ("no final answer",))
        if end_state.get("answer_rows") is None:
            return GoalResult(False, ("the final query failed",))
        got = [tuple(r) for r in end_state["answer_rows"]]
        ok = rows_match([tuple(r) for r in goal["rows"]], got, bool(goal.get("ordered")), 1e-6)
        return GoalResult(ok, () if ok else ("rows differ",))

    @classmethod
    def secret_values(cls, gold: dict[str, Any]) -> list[str]:
        return []  # the policy's own queries find the answer rows (module docstring)


# ----- task generator -----
_NAMES = ["ada", "bob", "cyd", "dee", "eli", "fay", "gus", "hal", "ivy", "jon", "kim", "lea", "max", "nia"]
_DEPTS = ["eng", "ops", "sales", "legal", "hr"]


def _staff(rng: random.Random) -> tuple[str, list[tuple]]:
    people = rng.sample(_NAMES, rng.randint(6, 10))
    rows = [(i + 1, n, rng.choice(_DEPTS), rng.randint(40, 160) * 1000) for i, n in enumerate(people)]
    values = ",".join(f"({i},'{n}','{d}',{s})" for i, n, d, s in rows)
    schema = ("CREATE TABLE emp (id INTEGER PRIMARY KEY, name TEXT, dept TEXT, salary INTEGER);\n"
              f"INSERT INTO emp VALUES {values};")
    return schema, rows


def _question(kind: str):
    def build(rng: random.Random) -> tuple[str, dict, dict, list[str]]:
        schema, rows = _staff(rng)
        dept = rng.choice(sorted({r[2] for r in rows}))
        if kind == "count":
            prompt, sql = f"How many employees work in {dept}?", f"SELECT COUNT(*) FROM emp WHERE dept = '{dept}'"
        elif kind == "total":
            prompt, sql = (f"What is the total salary of the {dept} department?",
                           f"SELECT SUM(salary) FROM emp WHERE dept = '{dept}'")
        else:
            cut = sorted(r[3] for r in rows)[len(rows) // 2]
            prompt, sql = (f"List the names of employees earning more than {cut}, highest salary first.",
                           f"SELECT name FROM emp WHERE salary > {cut} ORDER BY salary DESC")
        conn = open_readonly(schema)
        gold_rows = [list(r) for r in conn.execute(sql).fetchall()]
        conn.close()
        goal = {"rows": gold_rows, "ordered": kind == "top"}
        actions = [compact_call("query", sql="SELECT * FROM emp LIMIT 3"), f"```sql\n{sql}\n```"]
        return prompt + " The table is emp.", {"schema_sql": schema}, goal, actions

    return build


FAMILIES = {"count": _question("count"), "total": _question("total"), "top": _question("top")}


def generate_sql_tasks(n: int, seed: int = 0, split: str = "train",
                       families: tuple[str, ...] = ("count", "total", "top")) -> list[Task]:
    """``n`` SQL agent tasks of ``split`` (by a hash of the task), deterministic by ``seed``."""
    return generate_env_tasks(SqlAgentEnv, "sql", FAMILIES, n, seed, split, families)


register_env_tasks("sql", generate_sql_tasks)
