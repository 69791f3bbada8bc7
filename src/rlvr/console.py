"""Console output shared by every layer: a console that is full width when stdout is not a terminal, and the
heartbeat that keeps a run from going quiet.

* :func:`make_console`: rich's Console, except that off a terminal (a file, a pipe, CI) it is
  :data:`WIDE` columns wide instead of rich's 80, so tables keep every column whole (rich shortens cells
  to ``calcu…`` to fit 80). ``COLUMNS`` in the environment still decides where it is set.
* :func:`phase` names the long work under way (``"dpo: building preference pairs"``) and :func:`detail`
  says how far it got (``"generated 512 of 40000 rows"``).
* :class:`Heartbeat` (``rlvr run`` and the stage commands start one): whenever nothing was printed for
  ``quiet_s`` seconds (:data:`QUIET_S`, or ``RLVR_HEARTBEAT_S``) it prints one plain line naming the
  current phase, its detail and how long it has run, so a run is never silent for 10 s, on a terminal or in
  a log file. Anything that prints progress calls :func:`note_output`.

Imports nothing of rlvr: every layer may use it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

from rich.console import Console

WIDE = 1000
"""Columns of a console whose output is not a terminal (wide enough that no table is cut)."""

QUIET_S = 5.0
"""Seconds without output after which the heartbeat prints a line (half the 10 s a run may stay quiet)."""

_lock = threading.RLock()
_state = {"last": time.monotonic(), "phases": [], "detail": ""}


def make_console(**kw) -> Console:
    """A rich Console; off a terminal (and without ``COLUMNS`` or an explicit ``width``) :data:`WIDE` columns."""
    console = Console(**kw)
    if "width" not in kw and not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = WIDE
    return console


def note_output() -> None:
    """Something was just printed: the heartbeat waits another ``quiet_s``."""
    _state["last"] = time.monotonic()


def detail(text: str) -> None:
    """How far the current phase got (shown by the next heartbeat line)."""
    _state["detail"] = text


@contextlib.contextmanager
def keep_detail():
    """Restore the current :func:`detail` after the block (for progress reported inside a phase's step)."""
    saved = _state["detail"]
    try:
        yield
    finally:
        _state["detail"] = saved


@contextlib.contextmanager
def phase(name: str):
    """Name the work inside the block for the heartbeat (phases nest: the innermost is shown after the outer)."""
    entry = (name, time.monotonic())
    with _lock:
        _state["phases"].append(entry)
        saved, _state["detail"] = _state["detail"], ""
    try:
        yield
    finally:
        with _lock:
            if entry in _state["phases"]:
                _state["phases"].remove(entry)
            _state["detail"] = saved


def current() -> str:
    """The heartbeat's text: the phases (outer to inner), the detail and the innermost phase's seconds."""
    with _lock:
        phases, text = list(_state["phases"]), _state["detail"]
    if not phases:
        return f"working{': ' + text if text else ''}"
    names = ": ".join(n for n, _ in phases)
    return f"{names}{': ' + text if text else ''} ({time.monotonic() - phases[-1][1]:.0f}s)"


def say(text: str, console: Console | None = None) -> None:
    """Print one timestamped plain line (no markup) and count it as output."""
    line = f"{time.strftime('%H:%M:%S')} {text}"
    with _lock:
        if console is not None:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
        note_output()


def quiet_seconds() -> float:
    """:data:`QUIET_S`, or ``RLVR_HEARTBEAT_S`` from the environment when it is a positive number."""
    try:
        v = float(os.environ.get("RLVR_HEARTBEAT_S", ""))
    except ValueError:
        return QUIET_S
    return v if v > 0 else QUIET_S


class Heartbeat:
    """A daemon thread printing :func:`current` whenever nothing was printed for ``quiet_s`` seconds
    (a context manager; ``enabled=False`` makes it a no-op, e.g. on a torchrun rank other than 0). Nested
    heartbeats (``rlvr run`` around the pipeline's own) leave the outermost one alone."""

    def __init__(self, quiet_s: float | None = None, enabled: bool = True):
        self.quiet_s = quiet_s if quiet_s is not None else quiet_seconds()
        self.enabled = enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Heartbeat":
        with _lock:
            if self.enabled and not _state.get("beating"):
                _state["beating"] = True
                note_output()
                self._thread = threading.Thread(target=self._loop, name="rlvr-heartbeat", daemon=True)
                self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            _state["beating"] = False

    def _loop(self) -> None:
        tick = min(0.25, self.quiet_s / 4)
        while not self._stop.wait(tick):
            if time.monotonic() - _state["last"] >= self.quiet_s:
                try:
                    say(current())
                except (OSError, ValueError):  # stdout closed under us: nothing left to tell
                    return
