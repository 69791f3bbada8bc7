"""Rich progress bars for long work (quiet when not attached to a terminal unless forced)."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def make_progress(transient: bool = False) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), TextColumn("{task.fields[info]}"), transient=transient,
    )
