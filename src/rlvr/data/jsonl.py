"""JSONL reading and writing. Every error names the file and line; writes are append-only or atomic."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from rlvr.data.types import TASK_KINDS, Task
from rlvr.errors import DataError

# Flat task-line fields that belong to the hidden gold payload (never shown to the policy).
GOLD_FIELDS = ("answer", "entry_point", "tests", "io_tests", "database", "databases", "schema_sql",
               "gold_sql", "goal", "hidden_tests")
TASK_FIELDS = ("id", "prompt", "messages", "kind", "family", "difficulty", "split", "answer_format",
               "solution", "meta", "gold")
PATH_FIELDS = ("database", "databases")


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; a bad line raises DataError naming it."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: file not found")
    with p.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{p}:{lineno}: malformed JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise DataError(f"{p}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def require(obj: dict[str, Any], key: str, where: str, types: type | tuple[type, ...] = object) -> Any:
    """Return ``obj[key]`` or raise DataError naming the missing/mistyped field and its location."""
    if key not in obj:
        raise DataError(f"{where}: missing required field {key!r} (fields present: {sorted(obj)})")
    val = obj[key]
    if not isinstance(val, types):
        names = types.__name__ if isinstance(types, type) else "/".join(t.__name__ for t in types)
        raise DataError(f"{where}: field {key!r} must be {names}, got {type(val).__name__}")
    return val


def task_from_record(obj: dict[str, Any], where: str, base_dir: Path | None = None) -> Task:
    """Build a Task from one flat JSONL record (see docs: task line format)."""
    tid = require(obj, "id", where, (str, int))
    if "prompt" not in obj and "messages" not in obj:
        raise DataError(f"{where}: missing required field 'prompt' (or 'messages')")
    kind = obj.get("kind", "math")
    if kind not in TASK_KINDS:
        raise DataError(f"{where}: field 'kind' is {kind!r}; expected one of {list(TASK_KINDS)}")
    unknown = set(obj) - set(TASK_FIELDS) - set(GOLD_FIELDS)
    if unknown:
        raise DataError(f"{where}: unknown field(s) {sorted(unknown)}; known: "
                        f"{sorted(set(TASK_FIELDS) | set(GOLD_FIELDS))}")
    gold = dict(obj.get("gold") or {})
    for k in GOLD_FIELDS:
        if k in obj:
            gold[k] = obj[k]
    if base_dir is not None:
        for k in PATH_FIELDS:
            if k in gold:
                gold[k] = _resolve(gold[k], base_dir)
    return Task(
        id=str(tid), prompt=obj.get("prompt", ""), kind=kind, gold=gold, messages=obj.get("messages"),
        family=obj.get("family", kind), difficulty=int(obj.get("difficulty", 1)),
        split=obj.get("split", "train"), answer_format=obj.get("answer_format", _default_format(kind)),
        solution=obj.get("solution"), meta=obj.get("meta") or {},
    )


def _default_format(kind: str) -> str:
    return {"math": "boxed", "code": "code_fence", "sql": "code_fence"}.get(kind, "raw")


def _resolve(value: Any, base_dir: Path) -> Any:
    if isinstance(value, list):
        return [_resolve(v, base_dir) for v in value]
    if isinstance(value, str) and not os.path.isabs(value):
        return str((base_dir / value).resolve())
    return value


def load_tasks(path: str | os.PathLike) -> list[Task]:
    """Load tasks from a JSONL file; relative database paths resolve against the file's folder."""
    p = Path(path)
    tasks = [task_from_record(obj, f"{p}:{ln}", p.parent) for ln, obj in read_jsonl(p)]
    seen: dict[str, int] = {}
    for i, t in enumerate(tasks):
        if t.id in seen:
            raise DataError(f"{p}: duplicate task id {t.id!r}")
        seen[t.id] = i
    return tasks


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[dict[str, Any]]) -> None:
    """Write all records to a temp file in the same folder, then rename over ``path``."""
    write_text_atomic(path, "".join(json.dumps(r, default=_json_default) + "\n" for r in records))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, Path):
        return str(o)
    return str(o)
