"""``files``: a sandboxed virtual filesystem (an in-memory dict; the host filesystem is never touched).

State: ``{"files": {path: text}}`` plus a set of read-only paths. Directories are implicit (the
prefixes of file paths). Tools: ``list``, ``read``, ``write``, ``move``.

Paths are relative, ``/``-separated, and normalised (``./a//b`` -> ``a/b``). Refused as violations:
``..`` segments and absolute or host-looking paths (``/etc/passwd``, ``~/x``, ``C:\\x``,
backslashes), NUL and other control characters (``path_traversal``); any segment starting with
``.`` — hidden names are reserved for the environment, e.g. a ``.done`` flag (``reserved``);
writing or moving a read-only file (``protected``).

Goal (``gold["goal"]``): ``{"files": {path: text_or_null}}`` — each listed path must hold exactly
that text (compared after stripping surrounding whitespace), or be absent when null.
"""

from __future__ import annotations

import random
import re
from typing import Any, ClassVar

from rlvr.data.sources import register_env_tasks
from rlvr.data.types import Task
from rlvr.envs.base import (
    ArgSpec,
    GoalResult,
    PolicyViolation,
    ToolEnv,
    ToolError,
    ToolSpec,
    generate_env_tasks,
)
from rlvr.envs.tools import ToolCall
from rlvr.errors import DataError

MAX_FILES = 64
MAX_TOTAL_CHARS = 200_000
_SEGMENT_RE = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,63}")


def normalise_path(path: str, allow_root: bool = False) -> str:
    """Normalise a virtual path; raise PolicyViolation for traversal/reserved, ToolError if malformed."""
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise PolicyViolation("path_traversal", "path contains a NUL or control character")
    if "\\" in path or path.startswith(("/", "~")) or re.match(r"[A-Za-z]:", path):
        raise PolicyViolation("path_traversal", f"absolute or host path {path[:80]!r} is not allowed; "
                                                "paths are relative to the virtual root")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PolicyViolation("path_traversal", f"'..' in path {path[:80]!r} is not allowed")
    if any(p.startswith(".") for p in parts):
        raise PolicyViolation("reserved", f"hidden names are reserved for the environment: {path[:80]!r}")
    if not parts and not allow_root:
        raise ToolError("empty path")
    if len(path) > 255 or len(parts) > 8 or not all(_SEGMENT_RE.fullmatch(p) for p in parts):
        raise ToolError(f"invalid path {path[:80]!r}: use up to 8 segments of letters, digits, '_', '-', '.'")
    return "/".join(parts)


class FilesEnv(ToolEnv):
    """A virtual filesystem environment; see the module docstring for tools, rules and goal."""

    name: ClassVar[str] = "files"
    tool_specs: ClassVar[tuple[ToolSpec, ...]] = (
        ToolSpec("list", "list the files and folders in a folder ('' is the root)",
                 {"dir": ArgSpec("str", required=False, default="", max_chars=255)}),
        ToolSpec("read", "return the text of a file", {"path": ArgSpec("str", max_chars=255)}),
        ToolSpec("write", "create or overwrite a file with the given text",
                 {"path": ArgSpec("str", max_chars=255), "content": ArgSpec("str", max_chars=8000)}),
        ToolSpec("move", "rename or move a file (the destination must not exist)",
                 {"src": ArgSpec("str", max_chars=255), "dst": ArgSpec("str", max_chars=255)}),
    )

    def _load(self, init: dict[str, Any]) -> None:
        self.files: dict[str, str] = {normalise_path(p): c for p, c in init["files"].items()}
        self.readonly: set[str] = {normalise_path(p) for p in init.get("readonly", [])}

    def end_state(self) -> dict[str, Any]:
        return {"files": dict(sorted(self.files.items()))}

    # ----- tools -----
    def _is_dir(self, path: str) -> bool:
        return path == "" or any(p.startswith(path + "/") for p in self.files)

    def tool_list(self, dir: str) -> str:
        d = normalise_path(dir, allow_root=True)
        if not self._is_dir(d):
            raise ToolError(f"no such folder: {d}")
        prefix = d + "/" if d else ""
        names = {p[len(prefix):].split("/")[0] + ("/" if "/" in p[len(prefix):] else "")
                 for p in self.files if p.startswith(prefix)}
        return "\n".join(sorted(names)) or "(empty)"

    def tool_read(self, path: str) -> str:
        p = normalise_path(path)
        if p not in self.files:
            raise ToolError(f"no such file: {p}" + (" (it is a folder)" if self._is_dir(p) else ""))
        return self.files[p]

    def tool_write(self, path: str, content: str) -> str:
        p = normalise_path(path)
        if p in self.readonly:
            raise PolicyViolation("protected", f"{p} is read-only")
        self._check_writable(p, len(content) - len(self.files.get(p, "")))
        self.files[p] = content
        return f"ok: wrote {p}"

    def tool_move(self, src: str, dst: str) -> str:
        s, d = normalise_path(src), normalise_path(dst)
        if s in self.readonly or d in self.readonly:
            raise PolicyViolation("protected", f"{s if s in self.readonly else d} is read-only")
        if s not in self.files:
            raise ToolError(f"no such file: {s}")
        if d in self.files or self._is_dir(d):
            raise ToolError(f"destination exists: {d}")
        self._check_writable(d, 0, moving=s)
        self.files[d] = self.files.pop(s)
        return f"ok: moved {s} to {d}"

    def _check_writable(self, p: str, grow: int, moving: str | None = None) -> None:
        if self._is_dir(p):
            raise ToolError(f"{p} is a folder")
        parts = p.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in self.files:
                raise ToolError(f"{'/'.join(parts[:i])} is a file, not a folder")
        if p not in self.files and moving is None and len(self.files) >= MAX_FILES:
            raise ToolError(f"too many files (limit {MAX_FILES})")
        if sum(map(len, self.files.values())) + grow > MAX_TOTAL_CHARS:
            raise ToolError(f"the filesystem is full (limit {MAX_TOTAL_CHARS} characters)")

    # ----- gold -----
    @classmethod
    def validate_gold(cls, gold: dict[str, Any]) -> None:
        init, goal = gold.get("init"), gold.get("goal")
        if not isinstance(init, dict) or not isinstance(init.get("files"), dict):
            raise DataError("files task: gold['init'] must be {'files': {path: text}, 'readonly': [path]}")
        if not all(isinstance(c, str) for c in init["files"].values()):
            raise DataError("files task: every gold['init']['files'] value must be a string")
        if not isinstance(init.get("readonly", []), list):
            raise DataError("files task: gold['init']['readonly'] must be a list of paths")
        if not isinstance(goal, dict) or not isinstance(goal.get("files"), dict) or not goal["files"]:
            raise DataError("files task: gold['goal'] must be {'files': {path: text or null}} (non-empty)")
        for p, c in goal["files"].items():
            if c is not None and not isinstance(c, str):
                raise DataError(f"files task: goal for {p!r} must be a string or null")
        for p in [*init["files"], *init.get("readonly", []), *goal["files"]]:
            try:
                normalise_path(p)
            except (PolicyViolation, ToolError) as e:
                raise DataError(f"files task: bad path {p!r} in gold: {e}") from None

    @classmethod
    def check_goal(cls, end_state: dict[str, Any], goal: dict[str, Any]) -> GoalResult:
        files, failures = end_state["files"], []
        for path, want in goal["files"].items():
            p = normalise_path(path)
            if want is None and p in files:
                failures.append(f"{p}: should not exist")
            elif want is not None and p not in files:
                failures.append(f"{p}: missing")
            elif want is not None and files[p].strip() != want.strip():
                failures.append(f"{p}: content differs")
        return GoalResult(not failures, tuple(failures))

    @classmethod
    def secret_values(cls, gold: dict[str, Any]) -> list[str]:
        """Goal contents the policy cannot see at the start (not inside any initial file or path)."""
        seen = list(gold["init"]["files"].values()) + list(gold["init"]["files"])
        wants = [w.strip() for w in gold["goal"]["files"].values() if w is not None]
        return [w for w in wants if not any(w in s for s in seen)]


# ----- task generator -----
_DOCS = ["report", "draft", "memo", "summary", "notes", "letter", "minutes", "plan"]
_FINAL = ["final", "approved", "published", "v2", "clean", "release"]
_NUMS = ["a", "numbers", "values", "data", "figures", "counts"]
_TOTAL = ["total", "sum", "result", "answer"]
_WORDS = ["budget", "meeting", "river", "orange", "quiet", "harbor", "signal", "maple", "copper", "window",
          "garden", "lantern", "pencil", "rocket", "silver", "thunder"]


def _sentence(rng: random.Random, n: int = 5) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _rename_sum(rng: random.Random) -> tuple[str, dict, dict, list[str]]:
    doc, final = rng.choice(_DOCS), rng.choice(_FINAL)
    nums, total = rng.choice(_NUMS), rng.choice(_TOTAL)
    values = [rng.randint(10, 99) for _ in range(rng.randint(3, 5))]
    src, dst, nf, tf = f"{doc}.txt", f"{final}.txt", f"{nums}.txt", f"{total}.txt"
    body = _sentence(rng).capitalize() + "."
    init = {"files": {src: body, nf: "\n".join(map(str, values)), "notes/todo.txt": _sentence(rng, 4)},
            "readonly": [nf]}
    goal = {"files": {src: None, dst: body, tf: str(sum(values)), nf: init["files"][nf]}}
    prompt = (f"Rename {src} to {dst}. Then write the sum of the numbers in {nf} (one per line) into "
              f"{tf}, as a bare integer. {nf} is read-only.")
    actions = [_call("read", path=nf), _call("move", src=src, dst=dst),
               _call("write", path=tf, content=str(sum(values))), "Done."]
    return prompt, init, goal, actions


def _merge(rng: random.Random) -> tuple[str, dict, dict, list[str]]:
    n = rng.randint(2, 4)
    parts = {f"parts/part{i + 1}.txt": _sentence(rng, rng.randint(3, 6)) for i in range(n)}
    out = rng.choice(["merged.txt", "all.txt", "combined.txt"])
    merged = "\n".join(parts.values())
    init = {"files": {**parts, "README.txt": "Parts of a document."}, "readonly": ["README.txt"]}
    goal = {"files": {out: merged, **{f"old/{p.split('/')[1]}": c for p, c in parts.items()},
                      **{p: None for p in parts}}}
    prompt = (f"The folder parts/ holds {n} one-line files part1.txt ... part{n}.txt. Write their lines, in "
              f"order, one per line, into {out}; then move every part file into the folder old/ "
              f"(keeping its name).")
    actions = [_call("list", dir="parts")] + [_call("read", path=p) for p in parts]
    actions += [_call("write", path=out, content=merged)]
    actions += [_call("move", src=p, dst="old/" + p.split("/")[1]) for p in parts] + ["Done."]
    return prompt, init, goal, actions


def _call(name: str, **args: Any) -> str:
    return ToolCall(name, args).render()


FAMILIES = {"rename_sum": _rename_sum, "merge": _merge}


def generate_files_tasks(n: int, seed: int = 0, split: str = "train",
                         families: tuple[str, ...] = ("rename_sum", "merge")) -> list[Task]:
    """``n`` files tasks, deterministic by ``seed``; ``task.solution`` is a JSON list of oracle turns."""
    return generate_env_tasks(FilesEnv, "files", FAMILIES, n, seed, split, families)


register_env_tasks("files", generate_files_tasks)
