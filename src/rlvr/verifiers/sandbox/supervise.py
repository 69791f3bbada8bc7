"""Read a run's pipes until it is done, its wall-clock deadline passes or its output goes over the cap."""

from __future__ import annotations

import os
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Stream:
    """One pipe the supervisor drains; ``keep`` bytes are stored, all are counted."""

    fd: int
    keep: int
    counted: bool = True  # counts toward the candidate's output cap
    data: bytearray = field(default_factory=bytearray)
    total: int = 0
    eof: bool = False

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def pump(streams: list[Stream], done: Callable[[], bool], deadline: float, output_cap: int) -> str | None:
    """Drain ``streams``; return None when ``done()``, "timeout" at the deadline, "output" over the cap."""
    sel = selectors.DefaultSelector()
    for s in streams:
        os.set_blocking(s.fd, False)
        sel.register(s.fd, selectors.EVENT_READ, s)
    try:
        while True:
            if done():
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            for key, _ in sel.select(min(remaining, 0.05 if sel.get_map() else 0.002)):
                s: Stream = key.data
                try:
                    chunk = os.read(s.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    s.eof = True
                    sel.unregister(s.fd)
                    continue
                s.total += len(chunk)
                if len(s.data) < s.keep:
                    s.data += chunk[: s.keep - len(s.data)]
                if sum(x.total for x in streams if x.counted) > output_cap:
                    return "output"
    finally:
        sel.close()
