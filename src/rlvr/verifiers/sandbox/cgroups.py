"""Whole-tree limits for one sandboxed run: a cgroup holding the candidate and everything it starts.

rlimits are per process (``RLIMIT_AS``) or per uid (``RLIMIT_NPROC``); a candidate that forks 30 children
of 1 GiB each stays under both. A cgroup per run bounds the **tree**: ``memory`` (resident memory and the
private ``/tmp``'s pages, no swap) and ``pids`` (processes + threads). cgroup v1 (``memory`` and ``pids``
hierarchies) and v2 (``memory.max`` / ``pids.max``) are supported; the run's cgroup is created under the
verifier's own cgroup (so any limit above it still applies), joined by the candidate's launcher *before*
it execs the sandbox (race-free: nothing the candidate starts is outside), and removed afterwards, its
stragglers SIGKILLed. A run whose tree hit a limit is a ``violation`` naming it.

Where cgroups are not writable (not root, read-only ``/sys/fs/cgroup``, a v2 parent with processes in it)
runs fall back to the rlimits with a loud one-time warning; ``isolation_report()`` says which.
"""

from __future__ import annotations

import atexit
import itertools
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from functools import cache

ROOT = "/sys/fs/cgroup"
_COUNTER = itertools.count()
_WARNED: list[str] = []


@dataclass
class TreeCgroup:
    """The cgroup directories of one run (one per v1 hierarchy, or one v2 directory)."""

    dirs: dict[str, str]                      # controller ("memory", "pids", or "unified") -> directory
    version: int
    procs_files: list[str] = field(default_factory=list)
    limits: tuple[int, int] = (0, 0)          # (memory MiB, tasks) as last written
    baseline: dict[str, int] = field(default_factory=dict)  # counters when this run began (a reused cgroup)

    def events(self) -> dict[str, int]:
        """Limit hits during this run: ``oom_kill`` (the memory limit killed a process), ``pids_max`` (a fork
        refused)."""
        raw = self._counters()
        return {k: v - self.baseline.get(k, 0) for k, v in raw.items()}

    def empty(self) -> bool:
        return not any(_pids(d) for d in self.dirs.values())

    def _counters(self) -> dict[str, int]:
        out = {"oom_kill": 0, "pids_max": 0}
        if self.version == 1:
            out["oom_kill"] = _field(os.path.join(self.dirs["memory"], "memory.oom_control"), "oom_kill")
            out["pids_max"] = _field(os.path.join(self.dirs["pids"], "pids.events"), "max")
        else:
            d = self.dirs["unified"]
            out["oom_kill"] = _field(os.path.join(d, "memory.events"), "oom_kill")
            out["pids_max"] = _field(os.path.join(d, "pids.events"), "max")
        return out

    def close(self) -> None:
        """SIGKILL whatever is still inside, then remove the directories."""
        for d in self.dirs.values():
            for _ in range(50):
                pids = _pids(d)
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                try:
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.02)


def _kill_inside(cg: TreeCgroup) -> None:
    for d in cg.dirs.values():
        for _ in range(50):
            pids = _pids(d)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.002)


_FREE: list[TreeCgroup] = []
_FREE_OWNER = [0]


def lease_tree_cgroup(memory_mb: int, max_procs: int) -> TreeCgroup | None:
    """As :func:`open_tree_cgroup`, but an empty cgroup this process used before is taken again when there
    is one (its limits rewritten, its event counters taken as the new baseline): the warm sandbox's runs
    skip two ``mkdir`` and two ``rmdir`` each. Give it back with :func:`return_tree_cgroup`."""
    if _FREE_OWNER[0] != os.getpid():  # a forked child must not share its parent's cgroups
        _FREE.clear()
        _FREE_OWNER[0] = os.getpid()
        _sweep_stale()
    while _FREE:
        cg = _FREE.pop()
        try:
            if (memory_mb, max_procs) != cg.limits:
                _set_limits(cg, memory_mb, max_procs)
            cg.baseline = cg._counters()
            return cg
        except OSError:
            cg.close()
    return open_tree_cgroup(memory_mb, max_procs)


def return_tree_cgroup(cg: TreeCgroup) -> None:
    """SIGKILL what is left in ``cg``; keep it for the next run when it is empty, else remove it."""
    _kill_inside(cg)
    if cg.empty():
        _FREE.append(cg)
    else:
        cg.close()


def close_free_cgroups() -> None:
    while _FREE:
        _FREE.pop().close()


atexit.register(close_free_cgroups)


def _sweep_stale() -> None:
    """Remove empty run cgroups left by a process of ours that was killed (its pid no longer exists)."""
    bases = cgroup_bases()
    if isinstance(bases, str):
        return
    for parent in bases[1].values():
        try:
            names = [n for n in os.listdir(parent) if n.startswith("rlvr-sbx-")]
        except OSError:
            continue
        for name in names:
            try:
                pid = int(name.split("-")[2])
                os.kill(pid, 0)
                continue  # its owner is alive
            except (ValueError, IndexError):
                continue
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass


def _field(path: str, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
    except (OSError, ValueError):
        pass
    return 0


def _pids(d: str) -> list[int]:
    try:
        with open(os.path.join(d, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _own_paths() -> dict[str, str]:
    """controller -> this process's cgroup path (v1 per hierarchy; "unified" for v2)."""
    out = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                for c in ctrls.split(",") if ctrls else ["unified"]:
                    out[c] = path
    except OSError:
        pass
    return out


@cache
def cgroup_bases() -> tuple[int, dict[str, str]] | str:
    """``(version, {controller: writable parent dir})`` for the per-run cgroups, or why there are none."""
    if os.geteuid() != 0:
        return "not root: cgroups are not writable"
    own = _own_paths()
    v1 = {c: os.path.join(ROOT, c, own.get(c, "/").lstrip("/")) for c in ("memory", "pids")}
    if all(os.path.isfile(os.path.join(ROOT, c, "cgroup.procs")) for c in ("memory", "pids")):
        if all(_probe(d) for d in v1.values()):
            return 1, v1
        return "cgroup v1 memory/pids hierarchies are not writable here"
    unified = os.path.join(ROOT, own.get("unified", "/").lstrip("/"))
    if os.path.isfile(os.path.join(ROOT, "cgroup.controllers")):
        try:
            with open(os.path.join(unified, "cgroup.subtree_control")) as f:
                enabled = f.read().split()
        except OSError:
            enabled = []
        if {"memory", "pids"} <= set(enabled) and _probe(unified):
            return 2, {"unified": unified}
        return "cgroup v2: memory and pids are not enabled for child cgroups of this process's cgroup"
    return "no cgroup memory/pids controllers mounted at /sys/fs/cgroup"


def _probe(parent: str) -> bool:
    d = os.path.join(parent, f"rlvr-probe-{os.getpid()}")
    try:
        os.mkdir(d)
        os.rmdir(d)
        return True
    except OSError:
        return False


def open_tree_cgroup(memory_mb: int, max_procs: int) -> TreeCgroup | None:
    """A fresh cgroup limiting a run's whole tree to ``memory_mb`` MiB and ``max_procs`` tasks; None (after a
    loud one-time warning) where cgroups are not available."""
    bases = cgroup_bases()
    if isinstance(bases, str):
        _warn(bases)
        return None
    version, parents = bases
    name = f"rlvr-sbx-{os.getpid()}-{next(_COUNTER)}"
    cg = TreeCgroup({c: os.path.join(p, name) for c, p in parents.items()}, version)
    try:
        for d in cg.dirs.values():
            os.mkdir(d)
        _set_limits(cg, memory_mb, max_procs)
    except OSError as e:
        cg.close()
        _warn(f"could not set up a cgroup ({e})")
        return None
    cg.procs_files = [os.path.join(d, "cgroup.procs") for d in cg.dirs.values()]
    return cg


def _set_limits(cg: TreeCgroup, memory_mb: int, max_procs: int) -> None:
    mem = str(memory_mb << 20)
    if cg.version == 1:
        _write(cg.dirs["memory"], "memory.limit_in_bytes", mem)
        _write(cg.dirs["memory"], "memory.memsw.limit_in_bytes", mem, optional=True)  # no swap
        _write(cg.dirs["pids"], "pids.max", str(max_procs))
    else:
        _write(cg.dirs["unified"], "memory.max", mem)
        _write(cg.dirs["unified"], "memory.swap.max", "0", optional=True)
        _write(cg.dirs["unified"], "pids.max", str(max_procs))
    cg.limits = (memory_mb, max_procs)


def _write(d: str, name: str, value: str, optional: bool = False) -> None:
    try:
        with open(os.path.join(d, name), "w") as f:
            f.write(value)
    except OSError:
        if not optional:
            raise


def join_command(cg: TreeCgroup | None, cmd: list[str]) -> list[str]:
    """``cmd`` prefixed by a shell that moves itself into the run's cgroup, then execs ``cmd`` (so the whole
    tree starts inside); exit 97 if it cannot join."""
    if cg is None:
        return cmd
    script = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 97; shift; done; shift; exec "$@"'
    return ["/bin/sh", "-c", script, "rlvr-join", *cg.procs_files, "--", *cmd]


def _warn(reason: str) -> None:
    if reason in _WARNED:
        return
    _WARNED.append(reason)
    print(f"WARNING: SANDBOX HAS NO WHOLE-TREE LIMITS ({reason}): a candidate's memory and process count are "
          "capped per process (rlimits) only, so a tree of processes can hold max_procs x memory_mb",
          file=sys.stderr, flush=True)


def tree_limit_report() -> dict:
    """For ``isolation_report()``: how whole-tree limits are enforced here."""
    bases = cgroup_bases()
    if isinstance(bases, str):
        return {"tree_limits": "none (rlimits per process only)", "tree_limits_reason": bases}
    return {"tree_limits": f"cgroup v{bases[0]} (memory, pids)"}
