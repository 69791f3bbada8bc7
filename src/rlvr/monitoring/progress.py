"""Progress of long work: a rich bar on a terminal, plain log lines otherwise (a file, a pipe, CI).

With stdout redirected, a stage prints a line when it starts ("starting: N steps" or "resuming from step
K of N"), one every ``logging.every`` steps (the recipe's; 10 outside a pipeline) with the trainer's
progress info, and one when it ends. Every line counts as output for the heartbeat (:mod:`rlvr.console`),
which fills any longer silence with a line naming the work under way.
"""

from __future__ import annotations

import time

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from rlvr.console import make_console, note_output, say


class BarProgress(Progress):
    """rich's Progress whose updates count as output for the heartbeat (the bar moving is a sign of life)."""

    def update(self, *args, **kwargs) -> None:
        super().update(*args, **kwargs)
        note_output()


def make_progress(transient: bool = False):
    """A rich Progress on a terminal, else a :class:`PlainProgress` with the same calls."""
    if make_console().is_terminal:
        return BarProgress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TimeRemainingColumn(), TextColumn("{task.fields[info]}"), transient=transient,
        )
    from rlvr.monitoring.sinks import active

    ctx = active()
    return PlainProgress(ctx.cfg.every if ctx is not None else 10)


class PlainProgress:
    """``add_task`` / ``update`` / ``console`` like rich's Progress, printing timestamped lines instead."""

    def __init__(self, every: int = 10):
        self.every = max(1, every)
        self.console = make_console(highlight=False, soft_wrap=True)
        self.tasks: dict[int, dict] = {}

    def __enter__(self) -> "PlainProgress":
        return self

    def start(self) -> None:
        """Nothing to draw (rich's Progress.start shows the bar)."""

    def stop(self) -> None:
        """Print the closing line of every task that ran to its end (an interrupted one gets none)."""
        for t in self.tasks.values():
            if t["total"] is not None and t["done"] >= t["total"] > t["start"]:
                self._line(t, f"finished at step {t['done']}/{t['total']} in {time.time() - t['t0']:.0f}s")
        self.tasks = {}

    def __exit__(self, *exc) -> None:
        for t in self.tasks.values():
            if exc[0] is None and t["done"] > t["start"]:
                self._line(t, f"finished at step {t['done']}/{t['total']} in {time.time() - t['t0']:.0f}s")

    def _line(self, t: dict, text: str) -> None:
        say(f"{t['name']} {text}", self.console)

    def add_task(self, description: str, total: int | None = None, completed: int = 0, **fields) -> int:
        tid = len(self.tasks)
        t = self.tasks[tid] = {"name": description, "total": total, "done": completed, "start": completed,
                               "t0": time.time()}
        self._line(t, f"resuming from step {completed} of {total}" if completed else f"starting: {total} steps")
        return tid

    def update(self, tid: int, advance: int = 0, completed: int | None = None, info: str = "", **fields) -> None:
        t = self.tasks[tid]
        t["done"] = completed if completed is not None else t["done"] + advance
        if t["done"] % self.every == 0 or t["done"] == t["total"]:
            el = time.time() - t["t0"]
            self._line(t, f"step {t['done']}/{t['total']} {info} ({el:.0f}s)".replace("  ", " "))
