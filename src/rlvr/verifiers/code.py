"""Code verifier: runs the candidate in the sandbox and the task's tests in a trusted process.

Task formats (all in ``task.gold``):
  HumanEval style  ``entry_point`` + ``tests`` = Python source defining ``check(candidate)``
  assert list      ``tests`` = ["assert f(1) == 2", ...] (or a source string of bare asserts); the
                   function name is ``entry_point`` or, when absent, the first non-builtin call
  stdin/stdout     ``io_tests`` = [{"input": ..., "output": ...}], outputs compared after whitespace
                   normalisation (each line's runs of whitespace collapsed, blank ends dropped)
  ``hidden_tests`` held-out tests in any of the three shapes; they must pass too
  ``prelude``      optional public code (imports, helpers the tests use) run before the tests in the
                   harness and prepended to the candidate. When absent and the prompt is Python that
                   defines the entry point (HumanEval), the prompt is the prelude.

Which code of a completion runs, and how it joins the prompt (fences, prose, a body vs a whole
function, ``from __future__``): :mod:`rlvr.verifiers.code_extract`. How return values are compared
(by value, as the tests would compare them in-process): :mod:`rlvr.verifiers.sandbox.values`.

Only ``pass`` earns reward 1.0. What the sandbox does and does not protect against is written in
docs/verifier-security.md.
"""

from __future__ import annotations

import ast
import builtins
import textwrap
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from rlvr.data.types import Task
from rlvr.verifiers.base import Verdict
from rlvr.verifiers.code_extract import extract_code, program_source
from rlvr.verifiers.sandbox import LEVELS, SandboxLimits, detect_isolation, run_function, run_program


class TaskFormatError(ValueError):
    """The task's gold payload cannot be turned into tests."""


def defines(source: str, name: str) -> bool:
    """Does ``source`` parse and bind ``name`` at module level (def, class, assignment, import)?"""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name.split(".")[0]) == name for a in node.names
        ):
            return True
    return False


def _first_called_name(asserts: list[str]) -> str | None:
    for a in asserts:
        try:
            tree = ast.parse(a)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and not hasattr(builtins, node.func.id)
            ):
                return node.func.id
    return None


def asserts_to_check(asserts: list[str], entry_point: str) -> str:
    """Wrap assert statements in ``check(candidate)``; the entry point's name is bound to the candidate."""
    body = [f"{entry_point} = candidate"] + [textwrap.dedent(a).strip() for a in asserts]
    src = "def check(candidate):\n" + "\n".join(textwrap.indent(b, "    ") for b in body) + "\n"
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        raise TaskFormatError(f"assert tests do not parse: {e}") from None
    if not any(isinstance(node, ast.Assert) for node in ast.walk(tree)):
        raise TaskFormatError("the tests hold no assert statement (a check that cannot fail)")
    return src


def _check_block(name: str, tests: Any, entry_point: str | None) -> tuple[dict[str, str], str | None]:
    """One test block (and the entry point it implies) from a check source, an assert string or a list."""
    if isinstance(tests, str):
        if defines(tests, "check"):
            return {"name": name, "source": tests}, entry_point
        try:
            stmts = [ast.get_source_segment(tests, s) or "" for s in ast.parse(tests).body]
        except SyntaxError as e:
            raise TaskFormatError(f"gold[{name!r}] does not parse: {e}") from None
        tests = [s for s in stmts if s.strip()]
    if not (isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests)):
        raise TaskFormatError(f"gold[{name!r}] must be check() source or a non-empty list of assert strings")
    entry_point = entry_point or _first_called_name(tests)
    if not entry_point:
        raise TaskFormatError(f"gold[{name!r}]: no entry_point given and none found in the asserts")
    return {"name": name, "source": asserts_to_check(tests, entry_point)}, entry_point


def _io_list(name: str, tests: Any) -> list[dict[str, str]]:
    if not (
        isinstance(tests, list)
        and tests
        and all(
            isinstance(t, dict) and isinstance(t.get("input", ""), str) and isinstance(t.get("output"), str)
            for t in tests
        )
    ):
        raise TaskFormatError(f"gold[{name!r}] must be a non-empty list of {{'input': str, 'output': str}}")
    return tests


def normalize_output(text: str) -> str:
    """Whitespace-normalised program output: runs of spaces/tabs collapsed per line, blank ends dropped."""
    return "\n".join(" ".join(line.split()) for line in text.strip().splitlines())


@dataclass
class CodeVerifier:
    """Runs code completions against their tests in the sandbox. Picklable: it holds settings only."""

    name: ClassVar[str] = "code"

    timeout_s: float = 10.0
    """Wall-clock limit of one sandboxed run (the whole check, or one stdin/stdout test)."""
    memory_mb: int = 1024
    """Address-space limit of each candidate process, in MiB."""
    max_procs: int = 32
    """Processes and threads the candidate may hold at once."""
    file_size_mb: int = 16
    """Largest file the candidate may write, in MiB."""
    output_limit_bytes: int = 64 << 20
    """Flood guard for stdin/stdout tests, where the output is the answer: stdout + stderr the program may
    print before it is stopped (outcome violation). In function-call tests the candidate's prints never
    decide the verdict: they are drained without a cap (the timeout bounds them) and the first 4 KiB kept
    in the details."""
    isolation: str = "auto"
    """auto (best available) | bwrap (fail if bubblewrap is unusable) | rlimits (force the fallback)."""
    require_isolation: str | None = None
    """Weakest isolation level accepted (e.g. "bwrap+uid"); weaker -> every verdict is infra."""
    sandbox: str = "auto"
    """How function tests run: ``warm`` (a fork server per worker process inside the isolation: each candidate
    is a fresh process forked from a clean template, in fresh namespaces; ``infra`` where it cannot run),
    ``cold`` (a fresh bubblewrap + interpreter and a fresh harness interpreter per candidate) or ``auto``
    (warm where the isolation level is ``bwrap+uid``, else cold). Every verdict's ``details["sandbox"]`` says
    which ran. stdin/stdout programs always run cold."""
    tree_limits: bool = True
    """A cgroup per run bounding the candidate's whole process tree (memory_mb + the private /tmp, max_procs)
    where the machine allows; a loud warning and per-process rlimits only where it does not."""

    def limits(self) -> SandboxLimits:
        return SandboxLimits(
            timeout_s=self.timeout_s,
            memory_mb=self.memory_mb,
            max_procs=self.max_procs,
            file_size_mb=self.file_size_mb,
            output_limit_bytes=self.output_limit_bytes,
            tree_limits=self.tree_limits,
        )

    @staticmethod
    def check_task(task: Task) -> str | None:
        """Why no completion of ``task`` could be judged (None when one can): no tests, or tests that cannot be
        turned into a check (no assert, a syntax error, no entry point)."""
        gold = task.gold or {}
        try:
            blocks, io_tests = CodeVerifier._plan(gold, gold.get("entry_point"))
        except TaskFormatError as e:
            given = [k for k in ("tests", "io_tests", "hidden_tests") if gold.get(k) is not None]
            return f"field {' / '.join(map(repr, given))}: {e}"
        if not blocks and not io_tests:
            return ("missing field 'tests': a code task needs 'tests' (asserts or check() source) or 'io_tests' "
                    "([{input, output}]): without them nothing can judge a completion")
        return None

    def verify(self, task: Task, completion: str) -> Verdict:
        t0 = time.monotonic()
        try:
            verdict = self._verify(task, completion)
        except TaskFormatError as e:
            verdict = Verdict.infra(f"task {task.id}: {e}")
        except Exception as e:  # noqa: BLE001 - a verifier failure is infra, never a wrong answer
            verdict = Verdict.infra(f"code verifier failed on task {task.id}: {type(e).__name__}: {e}")
        verdict.seconds = time.monotonic() - t0
        return verdict

    def _verify(self, task: Task, completion: str) -> Verdict:
        if self.require_isolation is not None:
            level = detect_isolation(self.isolation).level
            if LEVELS.index(level) > LEVELS.index(self.require_isolation):
                return Verdict.infra(
                    f"sandbox isolation {level!r} is weaker than the required {self.require_isolation!r}"
                )
        gold = task.gold or {}
        entry_point = gold.get("entry_point")
        code = extract_code(completion or "", entry_point)
        if not code.strip():
            return Verdict(0.0, False, "format", {"error": "no code in the completion"})
        blocks, io_tests = self._plan(gold, entry_point)
        if not blocks and not io_tests:
            raise TaskFormatError("gold has no tests, hidden_tests or io_tests")
        details: dict[str, Any] = {}
        if blocks:
            entry_point = entry_point or blocks[0][1]
            prelude = gold.get("prelude")
            if prelude is None and task.prompt and defines(task.prompt, entry_point):
                prelude = task.prompt
            res = run_function(
                program_source(completion, prelude, entry_point),
                entry_point,
                [b for b, _ in blocks],
                prelude,
                self.limits(),
                self.isolation,
                self.sandbox,
            )
            details = dict(res.details)
            if res.outcome != "pass":
                return Verdict(0.0, False, res.outcome, details)
        if io_tests:
            outcome, io_details = self._run_io(code, io_tests)
            details.update(io_details)
            if outcome != "pass":
                return Verdict(0.0, False, outcome, details)
        return Verdict(1.0, True, "pass", details)

    @staticmethod
    def _plan(gold: dict, entry_point: str | None) -> tuple[list, list]:
        """Test blocks for the harness (with implied entry points) and stdin/stdout cases."""
        blocks, io_tests = [], []
        if gold.get("tests") is not None:
            blocks.append(_check_block("tests", gold["tests"], entry_point))
        if gold.get("io_tests") is not None:
            io_tests += [dict(t, block="io_tests") for t in _io_list("io_tests", gold["io_tests"])]
        hidden = gold.get("hidden_tests")
        if hidden is not None:
            if isinstance(hidden, list) and hidden and all(isinstance(t, dict) for t in hidden):
                io_tests += [dict(t, block="hidden_tests") for t in _io_list("hidden_tests", hidden)]
            else:
                ep = entry_point or (blocks[0][1] if blocks else None)
                blocks.append(_check_block("hidden_tests", hidden, ep))
        return blocks, io_tests

    def _run_io(self, code: str, io_tests: list[dict]) -> tuple[str, dict[str, Any]]:
        """Run the program once per case; the first case that does not match decides."""
        limits = self.limits()
        for i, case in enumerate(io_tests):
            res = run_program(code, case.get("input", ""), limits, self.isolation)
            details = {**res.details, "io_case": i, "block": case["block"]}
            if res.outcome != "ok":
                return res.outcome, details
            if normalize_output(res.stdout) != normalize_output(case["output"]):
                return "wrong", {**details, "error": "output differs"}
        return "pass", {"io_cases": len(io_tests), "isolation": details.get("isolation"), "sandbox": "cold"}
