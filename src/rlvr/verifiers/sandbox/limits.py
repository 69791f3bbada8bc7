"""Resource limits of one sandboxed run."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxLimits:
    """Limits applied to the candidate (and, looser, to the trusted harness). Soft = hard for every rlimit."""

    timeout_s: float = 10.0
    """Wall-clock limit of one run: the whole check (function tasks) or one stdin/stdout test."""
    cpu_s: int | None = None
    """CPU seconds per candidate process (default ceil(timeout_s) + 1, so the wall limit fires first)."""
    memory_mb: int = 1024
    """Address-space limit (RLIMIT_AS) of each candidate process, in MiB."""
    max_procs: int = 32
    """Processes and threads the candidate's uid may hold at once (RLIMIT_NPROC; needs the uid switch)."""
    file_size_mb: int = 16
    """Largest file the candidate may write (RLIMIT_FSIZE), in MiB."""
    open_files: int = 256
    """Open file descriptors per candidate process (RLIMIT_NOFILE)."""
    tmpfs_mb: int = 64
    """Size of the candidate's private /tmp (bubblewrap or unshare), in MiB."""
    output_limit_bytes: int = 64 << 20
    """Flood guard: stdout + stderr the candidate may write before it is stopped (outcome ``violation``).
    Output below it never changes a verdict: function tasks keep its first 4 KiB for the details only;
    program tasks compare stdout (so it is held in memory up to this size)."""
    message_limit_bytes: int = 16 << 20
    """Largest message (return value, load error) the candidate may send back across the boundary."""
    harness_memory_mb: int = 4096
    """Address-space limit of the trusted harness process, in MiB."""
    tree_memory_mb: int | None = None
    """Resident memory of the candidate's whole process tree, its private /tmp included (a cgroup; default
    memory_mb + tmpfs_mb). ``max_procs`` bounds the tree's processes + threads there too."""
    tree_limits: bool = True
    """Put each run in its own cgroup (whole-tree memory and process limits) where the machine allows."""

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        for name in (
            "memory_mb",
            "max_procs",
            "file_size_mb",
            "open_files",
            "tmpfs_mb",
            "output_limit_bytes",
            "message_limit_bytes",
            "harness_memory_mb",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    @property
    def tree_memory(self) -> int:
        return self.tree_memory_mb if self.tree_memory_mb is not None else self.memory_mb + self.tmpfs_mb

    @property
    def cpu_seconds(self) -> int:
        return self.cpu_s if self.cpu_s is not None else math.ceil(self.timeout_s) + 1

    def candidate_rlimits(self, uid_switch: bool) -> list[tuple[str, int]]:
        """(resource name, value) pairs the candidate sets on itself before it drops privileges."""
        limits = [
            ("RLIMIT_AS", self.memory_mb << 20),
            ("RLIMIT_CPU", self.cpu_seconds),
            ("RLIMIT_FSIZE", self.file_size_mb << 20),
            ("RLIMIT_NOFILE", self.open_files),
            ("RLIMIT_CORE", 0),
        ]
        if uid_switch:  # counted per real uid: only meaningful under the candidate's own uid
            limits.append(("RLIMIT_NPROC", self.max_procs))
        return limits

    def harness_rlimits(self) -> list[tuple[str, int]]:
        """Limits of the trusted harness: generous, but a runaway test still ends."""
        return [
            ("RLIMIT_AS", self.harness_memory_mb << 20),
            ("RLIMIT_CPU", self.cpu_seconds + 1),
            ("RLIMIT_CORE", 0),
        ]
