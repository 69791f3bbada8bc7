"""The warm sandbox (host side): per process, one candidate fork server inside bubblewrap and one harness
fork server, started once and reused, so a verification forks two processes instead of starting two
interpreters (and bubblewrap).

Every job still gets a fresh candidate process, forked from a template that has run no candidate code
(``forkserver.py``), in fresh mount, PID, IPC, UTS and network namespaces (a new empty ``/tmp`` and
``/dev/shm``, its own ``/proc``), in its own cgroup, under its own leased uid with the same rlimits as a
cold run. When the job ends -- or its time is up -- the host closes the job's ``kill`` pipe: the job's
monitor SIGKILLs the worker, which is PID 1 of the job's namespace, so the kernel kills the whole tree,
and reports back once it is gone. The template lives on. A template that died is started again (the job
that was in flight is retried once, then ``infra``).

Used where the isolation level is ``bwrap+uid`` (root and bubblewrap); anywhere else runs stay cold.
``warm_report()`` says which and why; every verdict's ``details["sandbox"]`` names the path it took.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any

from rlvr.verifiers.sandbox.isolation import Isolation, bwrap_args, hidden_dirs, site_dirs
from rlvr.verifiers.sandbox.launch import PY_FLAGS, candidate_env, harness_env, script_args
from rlvr.verifiers.sandbox.limits import SandboxLimits

START_TIMEOUT_S = 30.0
MAX_SPAWN_FAILURES = 3
STATS: dict[str, int] = {"spawned": 0, "respawned": 0, "retried": 0, "jobs": 0}


class ServerDied(Exception):
    """A fork server is gone or did not answer: not the candidate's doing (retried, then infra)."""


class WarmServer:
    """One fork server process and its control socket; it runs one job at a time (see :func:`acquire`)."""

    def __init__(self, kind: str, proc: subprocess.Popen, sock: socket.socket, python: str) -> None:
        self.kind, self.proc, self.sock, self.python = kind, proc, sock, python
        self.lock = threading.Lock()
        self._buf = b""
        self.jobs = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _line(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise ServerDied(f"the {self.kind} fork server did not answer within {timeout:.0f} s")
            try:
                chunk = self.sock.recv(4096)
            except OSError as e:
                raise ServerDied(f"the {self.kind} fork server is gone: {e}") from None
            if not chunk:
                raise ServerDied(f"the {self.kind} fork server is gone (exit code {self.proc.poll()})")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def wait_ready(self) -> None:
        if not self._line(START_TIMEOUT_S).get("ready"):
            raise ServerDied(f"the {self.kind} fork server did not start")

    def submit(self, job: dict[str, Any], fds: dict[str, int]) -> None:
        """Hand the job and its descriptors to the server (no reply: a server that dies closes them)."""
        names = list(fds)
        msg = json.dumps({**job, "fds": names}).encode("utf-8")
        with self.lock:
            try:
                socket.send_fds(self.sock, [msg], [fds[n] for n in names])
            except OSError as e:
                raise ServerDied(f"the {self.kind} fork server is gone: {e}") from None
        self.jobs += 1

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        if self.alive():
            self.proc.kill()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


def _spawn(kind: str, iso: Isolation, tmpfs_mb: int) -> WarmServer:
    ours, theirs = socket.socketpair()
    try:
        if kind == "candidate":
            cfg = {"mode": "server", "ctl_fd": theirs.fileno(), "sys_path": list(site_dirs(iso.python))}
            cmd = [iso.python, *PY_FLAGS, *script_args(iso.python, "runner"), json.dumps(cfg)]
            # --as-pid-1: the server is PID 1 of the namespace, so it can kill and reap everything else in it
            cmd = bwrap_args(iso.bwrap, iso.python, tmpfs_mb, os.geteuid() == 0) + ["--as-pid-1", "--", *cmd]
            env = candidate_env()
        else:
            cfg = {"server": True, "ctl_fd": theirs.fileno(), "sys_path": list(site_dirs(sys.executable))}
            cmd = [sys.executable, *PY_FLAGS, *script_args(sys.executable, "harness"), json.dumps(cfg)]
            env = harness_env()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, pass_fds=[theirs.fileno()], env=env, cwd="/",
                                start_new_session=True, close_fds=True)
    except OSError:
        ours.close()
        raise
    finally:
        theirs.close()
    server = WarmServer(kind, proc, ours, iso.python)
    try:
        server.wait_ready()
    except ServerDied:
        server.close()
        raise
    return server


# bubblewrap's --die-with-parent (and the harness server's PR_SET_PDEATHSIG) fire when the *thread* that
# started them ends: servers are started from one thread that lives as long as the process
_requests: queue.Queue = queue.Queue()
_spawner: list[threading.Thread] = []


def _spawner_loop() -> None:
    while True:
        args, box = _requests.get()
        try:
            box.put(("ok", _spawn(*args)))
        except Exception as e:  # noqa: BLE001 - handed back to the caller
            box.put(("error", e))


def _spawn_via_thread(kind: str, iso: Isolation, tmpfs_mb: int) -> WarmServer:
    if not _spawner or not _spawner[0].is_alive() or _spawner[0].ident is None:
        _spawner[:] = [threading.Thread(target=_spawner_loop, daemon=True, name="rlvr-warm-spawner")]
        _spawner[0].start()
    box: queue.Queue = queue.Queue()
    _requests.put(((kind, iso, tmpfs_mb), box))
    status, value = box.get()
    if status == "error":
        raise ServerDied(f"could not start the {kind} fork server: {value}")
    return value


_idle: dict[str, list[tuple[WarmServer, WarmServer]]] = {}
_failures: dict[str, int] = {}
_lock = threading.Lock()
_owner = [os.getpid()]


def warm_unavailable(iso: Isolation) -> str | None:
    """Why the warm path cannot run with this isolation (None: it can)."""
    if not (iso.uses_bwrap and iso.uid_switch):
        return f"needs bubblewrap and the uid switch (level bwrap+uid), this is {iso.level!r}"
    if not hasattr(os, "pidfd_open") or not hasattr(socket, "send_fds"):
        return "needs Python >= 3.9 (os.pidfd_open, socket.send_fds)"
    if _failures.get(iso.python, 0) >= MAX_SPAWN_FAILURES:
        return f"the fork servers failed to start {MAX_SPAWN_FAILURES} times in this process"
    return None


def acquire(iso: Isolation, limits: SandboxLimits) -> tuple[WarmServer, WarmServer]:
    """An idle (candidate server, harness server) pair of this process -- each runs one job at a time --
    started now if there is none (or the idle one died: it is replaced and counted)."""
    with _lock:
        if _owner[0] != os.getpid():  # a forked child: the parent's servers are not ours to use
            _idle.clear()
            _owner[0] = os.getpid()
        pool = _idle.setdefault(iso.python, [])
        while pool:
            pair = pool.pop()
            if pair[0].alive() and pair[1].alive():
                return pair
            for srv in pair:
                srv.close()
            STATS["respawned"] += 1
    cand = None
    try:
        cand = _spawn_via_thread("candidate", iso, limits.tmpfs_mb)
        harness = _spawn_via_thread("harness", iso, limits.tmpfs_mb)
    except ServerDied:
        if cand is not None:
            cand.close()
        _failures[iso.python] = _failures.get(iso.python, 0) + 1
        raise
    STATS["spawned"] += 1
    return cand, harness


def release(pair: tuple[WarmServer, WarmServer], reusable: bool) -> None:
    """Give a pair back after its job (reusable: both alive and idle), else stop it."""
    if reusable and all(srv.alive() for srv in pair):
        with _lock:
            if _owner[0] == os.getpid():
                _idle.setdefault(pair[0].python, []).append(pair)
                return
    for srv in pair:
        srv.close()


def close_servers() -> None:
    """Stop this process's idle fork servers (all of them also die with the process)."""
    with _lock:
        for pool in _idle.values():
            for pair in pool:
                for srv in pair:
                    srv.close()
        _idle.clear()


@functools.cache
def _hidden(python: str) -> tuple[str, ...]:
    return tuple(hidden_dirs(python))


def candidate_job(iso: Isolation, limits: SandboxLimits, uid: int) -> dict[str, Any]:
    return {
        "rlimits": limits.candidate_rlimits(True),
        "uid": uid,
        "tmpfs_mb": limits.tmpfs_mb,
        "message_limit": limits.message_limit_bytes,
        "keep": _hidden(iso.python),
    }


STATUS = struct.Struct(">id")


def read_status(fd: int, wait_s: float) -> tuple[int, float] | None:
    """``(wait status, CPU seconds)`` of the job's worker, sent by its server once the job's whole tree is
    gone (None if nothing came within ``wait_s``)."""
    if not select.select([fd], [], [], wait_s)[0]:
        return None
    try:
        data = os.read(fd, STATUS.size)
    except OSError:
        return None
    return STATUS.unpack(data) if len(data) == STATUS.size else None


def exit_details(status: int | None) -> dict[str, Any]:
    """``exit_code``/``signal`` as a cold bubblewrap run reports them (a signalled child: 128 + signal)."""
    import signal as _signal

    if status is None:
        return {"exit_code": None}
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = _signal.Signals(sig).name if sig in _signal.Signals._value2member_map_ else sig
        return {"exit_code": 128 + sig, "signal": name}
    return {"exit_code": os.WEXITSTATUS(status)}


def warm_report(iso: Isolation) -> dict[str, Any]:
    """For ``isolation_report()``: whether verifications use the warm sandbox here."""
    reason = warm_unavailable(iso)
    return {"sandbox": "cold" if reason else "warm", **({"warm_unavailable": reason} if reason else {}),
            "warm_stats": dict(STATS)}
