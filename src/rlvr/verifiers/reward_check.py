"""What ``rlvr validate`` (and every run's pre-run checks) does with a stage's ``name: python`` rewards.

Each function is imported (an import error names the module's own file:line), its form is read from its
parameters (:mod:`rlvr.verifiers.reward_call`; a signature of neither form is refused), and it is **called**
under its ``timeout_s`` on two sample rows of the stage's own tasks: its first two tasks (the first one twice
when there is one), each with its demonstration (``solution``/``completion``; a plain sentence when it has
none), as the trainer would call it (one row at a time, or TRL's form once with both rows). A call that raises,
hangs past ``timeout_s``, returns something that is not a reward (a string, None, NaN, a list of the wrong
length, ...) or, in TRL's form, needs a keyword rlvr never passes is a problem naming the stage, the reward
key, the sample task and the function's own traceback. At validate the sample's ``completion_ids`` are a
stand-in (the text's UTF-8 bytes: no tokenizer is loaded); a run passes the sampled ids.
"""

from __future__ import annotations

from typing import Any

from rlvr.data.types import Completion, Task
from rlvr.errors import ConfigError, RlvrError
from rlvr.verifiers.python_reward import Failure, PythonReward, RewardTimeout, load_reward, time_limit
from rlvr.verifiers.reward_call import TRL_ARGS, TRL_CALLBACKS, missing_batch_args, task_columns

PLAIN = "I think the answer is 42."
IMPORT_TIMEOUT_S = 60.0  # importing a reward's module (it may import heavy libraries) at most this long


def check_python_rewards(i: int, st: Any) -> list[tuple[str, str]]:
    """``(recipe key, message)`` for every problem of stage ``i``'s python rewards (empty: all fine)."""
    terms = [(j, t) for j, t in enumerate(getattr(st, "rewards", None) or []) if t.name == "python"]
    out: list[tuple[str, str]] = []
    usable = []
    for j, t in terms:
        key = f"stages.{i}.rewards.{j}.function"
        try:
            with time_limit(max(t.timeout_s, IMPORT_TIMEOUT_S)):
                fn, form = load_reward(t.function)
        except ConfigError as e:
            out.append((key, f"stage {st.name}, reward {t.key!r}: {e}"))
            continue
        except RewardTimeout:
            why = (f"importing {t.function!r} timed out after {max(t.timeout_s, IMPORT_TIMEOUT_S):g}s (does the "
                   "module run a loop when imported?)")
            out.append((key, f"stage {st.name}, reward {t.key!r}: {why}"))
            continue
        usable.append((key, t, fn, form))
    rows = sample_rows(st) if usable else None
    if rows is None:  # no tasks to call it on (an unreadable source is reported by the task checks)
        return out
    tasks, completions = rows
    for key, t, fn, form in usable:
        why = _call_check(t, fn, form, tasks, completions)
        if why:
            out.append((key, f"stage {st.name}, reward {t.key!r} ({t.function}): {why}"))
    return out


def sample_rows(st: Any) -> tuple[list[Task], list[str]] | None:
    """Two ``(task, completion)`` sample rows from the stage's own data (module docstring); None without tasks."""
    from rlvr.data.sources import load_task_source

    src = getattr(st, "data", None)
    if src is None:
        return None
    try:
        tasks = load_task_source(src)[:2]
    except (RlvrError, OSError, ValueError):
        return None
    if not tasks:
        return None
    tasks = [tasks[0], tasks[-1]]  # two rows even from one task: TRL's form must return one value per row
    texts = [t.solution or PLAIN for t in tasks]
    return tasks, [Completion(c, list(c.encode("utf-8"))) for c in texts]


def _call_check(term: Any, fn: Any, form: str, tasks: list[Task], completions: list[str]) -> str | None:
    """Why calling the reward on the sample rows fails, or None."""
    reward = PythonReward(term.function, term.timeout_s)
    if form == "batch":
        cols = sorted({k for t in tasks for k in task_columns(t)})
        missing = missing_batch_args(fn, cols)
        if missing:
            return (f"TRL-form parameter(s) {missing} get no value: rlvr passes {list(TRL_ARGS)}, "
                    f"{list(TRL_CALLBACKS)} and the task's columns {cols}")
        results = reward.score_batch(tasks, completions)
        fail = next(((i, f) for i, (_, f) in enumerate(results) if f is not None), None)
        if fail is None:
            return None
        return _failure_text(fail[1], tasks, completions, batch=True)
    for task, completion in zip(tasks, completions):
        _, fail = reward.score(task, completion)
        if fail is not None:
            return _failure_text(fail, [task], [completion], batch=False)
    return None


def _failure_text(f: Failure, tasks: list[Task], completions: list[str], batch: bool) -> str:
    rows = ", ".join(f"task {t.id!r} with completion {str(c)[:60]!r}" for t, c in zip(tasks, completions))
    call = f"called {'once with TRL keyword lists for ' if batch else 'on '}{rows}"
    err = f["error"]
    if err.startswith("timeout: "):
        return f"{call}, it timed out: {err[len('timeout: '):]} (a reward that hangs is stopped by timeout_s)"
    at = f" at {f['where']}" if f["where"] else ""
    frames = f["traceback"].rsplit("\n" + err.split(":", 1)[0] + ":", 1)[0].rstrip()  # the error is said once
    tail = "\n      " + frames.replace("\n", "\n      ") if frames else ""
    return f"{call}, it failed{at}: {err}{tail}"
