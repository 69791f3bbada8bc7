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
               "solution", "completion", "meta", "gold")
PATH_FIELDS = ("database", "databases")


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; a bad line raises DataError naming it."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: file not found")
    with p.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{p}:{lineno}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                                "save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
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


def parse_messages(val: Any, where: str, key: str) -> list[dict[str, str]]:
    """A chat: a non-empty list of ``{"role", "content"}`` objects with string values (extra keys dropped)."""
    if not isinstance(val, list) or not val:
        raise DataError(f"{where}: field {key!r} must be a non-empty list of {{role, content}} messages")
    for i, m in enumerate(val):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise DataError(f"{where}: field {key!r} message {i} must be an object with string 'role' and 'content'")
    return [{"role": m["role"], "content": m["content"]} for m in val]


def _prompt_and_solution(obj: dict[str, Any], where: str) -> tuple[str, list | None, str | None]:
    """``(prompt text, messages or None, demonstration or None)`` from rlvr's or TRL's columns.

    ``prompt``: a string or a chat; ``messages``: a chat whose final assistant turn (if any) is the
    demonstration; ``completion`` (TRL) or ``solution`` (rlvr): a string or a chat ending in an assistant turn.
    """
    if "completion" in obj and "solution" in obj:
        raise DataError(f"{where}: give the demonstration as 'completion' or as 'solution', not both")
    sol = obj.get("completion", obj.get("solution"))
    sol_key = "completion" if "completion" in obj else "solution"
    if isinstance(sol, list):
        turns = parse_messages(sol, where, sol_key)
        if turns[-1]["role"] != "assistant":
            raise DataError(f"{where}: field {sol_key!r} is a chat whose last turn is {turns[-1]['role']!r}, "
                            "not 'assistant'")
        sol = turns[-1]["content"]
    elif sol is not None and not isinstance(sol, str):
        raise DataError(f"{where}: field {sol_key!r} must be a string or a chat, got {type(sol).__name__}")
    if "messages" in obj:
        if "prompt" in obj:
            raise DataError(f"{where}: give the prompt as 'prompt' or as 'messages', not both")
        msgs = parse_messages(obj["messages"], where, "messages")
        if msgs[-1]["role"] == "assistant" and sol is None:
            sol, msgs = msgs[-1]["content"], msgs[:-1]
        if not msgs:
            raise DataError(f"{where}: field 'messages' holds only an assistant turn: no prompt")
        return msgs[-1]["content"], msgs, sol
    if "prompt" not in obj:
        raise DataError(f"{where}: missing required field 'prompt' (or 'messages'); fields present: {sorted(obj)}")
    p = obj["prompt"]
    if isinstance(p, list):
        msgs = parse_messages(p, where, "prompt")
        return msgs[-1]["content"], msgs, sol
    if not isinstance(p, str):
        raise DataError(f"{where}: field 'prompt' must be a string or a chat, got {type(p).__name__}")
    return p, None, sol


def task_from_record(obj: dict[str, Any], where: str, base_dir: Path | None = None,
                     extra: str = "error") -> Task:
    """Build a Task from one flat record (docs/data.md); ``where`` ("file:line") names it in errors and is
    the id when the record has none. ``extra``: ``error`` (JSONL: a typo is caught) or ``meta`` (dataset
    rows: other columns go to ``task.meta``, where custom rewards find them)."""
    tid = obj.get("id", where)
    if not isinstance(tid, (str, int)) or isinstance(tid, bool):
        raise DataError(f"{where}: field 'id' must be a string or integer, got {type(tid).__name__}")
    kind = obj.get("kind", "math")
    if kind not in TASK_KINDS:
        raise DataError(f"{where}: field 'kind' is {kind!r}: no verifier judges that kind; expected one of "
                        f"{list(TASK_KINDS)}")
    unknown = sorted(set(obj) - set(TASK_FIELDS) - set(GOLD_FIELDS))
    meta = dict(obj.get("meta") or {})
    if unknown and extra == "meta":
        meta.update({k: obj[k] for k in unknown})
    elif unknown:
        raise DataError(f"{where}: unknown field(s) {unknown}; known: {sorted(set(TASK_FIELDS) | set(GOLD_FIELDS))} "
                        "(put columns of your own under \"meta\": {...}; custom rewards read task.meta)")
    prompt, messages, solution = _prompt_and_solution(obj, where)
    gold = dict(obj.get("gold") or {})
    for k in GOLD_FIELDS:
        if k in obj:
            gold[k] = obj[k]
    if base_dir is not None:
        for k in PATH_FIELDS:
            if k in gold:
                gold[k] = _resolve(gold[k], base_dir)
    return Task(
        id=str(tid), prompt=prompt, kind=kind, gold=gold, messages=messages,
        family=obj.get("family", kind), difficulty=int(obj.get("difficulty", 1)),
        split=obj.get("split", ""), answer_format=obj.get("answer_format", _default_format(kind)),
        solution=solution, meta=meta, source=where,
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
    """Load tasks from a JSONL file; relative database paths resolve against the file's folder. Each task's
    ``source`` is its ``file:line``. Whether a task's verifier can judge it is checked by the caller
    (:func:`rlvr.verifiers.registry.refuse_unjudgeable`: this layer does not know the verifiers)."""
    p = Path(path)
    lines = list(read_jsonl(p))
    if not lines:
        raise DataError(f"{p}: no tasks: the file is empty (one JSON object per line expected, see docs/data.md)")
    tasks = [task_from_record(obj, f"{p}:{ln}", p.parent) for ln, obj in lines]
    seen: dict[str, int] = {}
    for (ln, _), t in zip(lines, tasks):
        if t.id in seen:
            raise DataError(f"{p}:{ln}: field 'id': duplicate task id {t.id!r} (first on line {seen[t.id]}); "
                            "ids must be unique (results and held-out checks are keyed by them)")
        seen[t.id] = ln
    return tasks


def append_jsonl(path: str | os.PathLike, record: dict[str, Any]) -> None:
    """Append one record and flush it to disk (append-only logs such as ``config_changes.jsonl``)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=_json_default) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[dict[str, Any]]) -> None:
    """Write all records to a temp file in the same folder, then rename over ``path``."""
    write_text_atomic(path, "".join(json.dumps(r, default=_json_default) + "\n" for r in records))


def umask_mode(directory: bool = False) -> int:
    """The mode a plain ``open`` / ``mkdir`` would give under the current umask (0644 / 0755 with 022).

    Temp files and dirs (``mkstemp`` / ``mkdtemp``) are created 0600 / 0700; whatever is renamed into
    place gets this mode first, so teammates can read a run.
    """
    mask = os.umask(0)
    os.umask(mask)
    return (0o777 if directory else 0o666) & ~mask


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, umask_mode())
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
