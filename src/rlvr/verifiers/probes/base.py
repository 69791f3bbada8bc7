"""Probe type shared by every probe family (code, math, sql, env).

A probe is one known reward hack: a task, a hostile completion, the outcomes the verifier may
legitimately return for it, and optional hooks that set up and inspect the host so that side effects
(a file outside the temp dir, a surviving process, a reached socket, a changed database) are caught.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from rlvr.data.types import Task

# setup(workdir) -> state passed to host_check; host_check(state) -> list of host effects observed
SetupFn = Callable[[str], Any]
HostCheckFn = Callable[[Any], list[str]]


@dataclass
class Probe:
    """One reward hack. A probe passes when reward == 0, outcome in ``expected`` and no host effects."""

    name: str
    kind: str  # code | math | sql | env
    task: Task
    completion: str
    expected: tuple[str, ...]  # acceptable verdict outcomes, e.g. ("wrong", "crash")
    description: str = ""
    setup: SetupFn | None = None
    host_check: HostCheckFn | None = None
    verifier_options: dict[str, Any] = field(default_factory=dict)
