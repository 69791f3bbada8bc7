"""Wall-clock checkpoints: the process's age and the marks a stage's ``save_every_s`` saves at.

The clock is the process's own age (Linux: ``/proc/self/stat``'s start time against ``/proc/uptime``;
elsewhere the time since this module was imported), so the marks are the seconds a user's time budget
runs on -- imports, model loading and evaluation included -- and the same for any program that reads it
(bench/time_to_accuracy.py saves TRL's checkpoints on this clock too).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

_IMPORTED = time.perf_counter()


def process_age_s() -> float:
    """Seconds since this process started."""
    try:
        after_name = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start_ticks = int(after_name[19])  # field 22 of proc(5), "starttime", in clock ticks after boot
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _IMPORTED


class WallClockMarks:
    """Marks every ``every`` seconds of process age (``every``, ``2 * every``, ...): :meth:`due` is True once
    the clock has passed the next mark, then the mark after the current time is the next one (a step that
    spans several marks saves once). Marks already passed when it is built are skipped."""

    def __init__(self, every: float, clock: Callable[[], float] | None = None) -> None:
        if every <= 0:
            raise ValueError(f"every must be > 0 seconds, got {every}")
        self.every, self.clock = float(every), clock
        self.next = self._after(self._now())

    def _now(self) -> float:
        return (self.clock or process_age_s)()

    def _after(self, now: float) -> float:
        return (math.floor(now / self.every) + 1) * self.every

    def due(self) -> float | None:
        """The clock's reading when a mark has passed since the last call that returned one, else None."""
        now = self._now()
        if now < self.next:
            return None
        self.next = self._after(now)
        return now
