"""The warm sandbox's fork server: a long-lived template process that forks one fresh process per job.

Stdlib only and free of rlvr imports: this file's source is sent into the sandboxed candidate server (inside
bubblewrap) and into the trusted harness server, after wire.py and values.py and before runner.py /
harness.py, exactly like those files. The template itself never runs a job's code: it only receives a
request (JSON + the job's file descriptors, ``SCM_RIGHTS`` over its control socket), forks and goes back
to waiting. So every candidate starts from the same clean interpreter that has imported nothing of any
candidate's, and nothing a candidate does (files, monkeypatches, environment, threads, children, limits,
memory) can reach the template or the next candidate.

Per job the server forks a **monitor** ``M`` (trusted, still privileged) that optionally unshares fresh
namespaces for the job (candidate side: mount, PID, IPC, UTS, network) and forks the **worker** ``W``
(in the fresh PID namespace ``W`` is PID 1, so when it dies the kernel kills everything it started). ``M``
then waits for ``W`` to exit or for its ``kill`` pipe to reach end-of-file (the host closed its end: the
job is over, or its time is up, or the host itself died) -- then it SIGKILLs ``W``, reaps it and writes
``W``'s wait status (4 bytes, big-endian) on the job's ``status`` pipe. ``W`` never holds ``kill`` or
``status``.
"""

import json
import os
import select
import signal
import socket
import struct
import sys

_MAX_FDS = 16


def _close_other_fds(keep):
    """Close every descriptor of this process except ``keep`` (and 0-2)."""
    last = 2
    for fd in sorted(f for f in keep if f > 2):
        if fd > last + 1:
            os.closerange(last + 1, fd)
        last = fd
    os.closerange(last + 1, 1 << 16)


def _monitor(job, fds, run, unshare):
    """In the forked monitor: fresh namespaces (``unshare(flags)``), fork the worker, supervise it."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    kill_fd, status_fd = fds.pop("kill"), fds.pop("status")
    _close_other_fds(set(fds.values()) | {kill_fd, status_fd})
    if unshare is not None:
        unshare(job)
    pid = os.fork()
    if pid == 0:  # the worker: runs the job and exits, never returning into the server loop
        code = 1
        try:
            os.close(kill_fd)
            os.close(status_fd)
            code = run(job, fds) or 0
        except SystemExit as e:  # as the interpreter would exit on it
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        except BaseException as e:  # noqa: BLE001 - reported to the host through the job's own pipes
            try:
                os.write(2, f"rlvr forkserver worker: {type(e).__name__}: {e}\n".encode())
            except OSError:
                pass
        os._exit(code)
    for fd in fds.values():
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(kill_fd, select.POLLIN | select.POLLHUP)
    poller.register(pidfd, select.POLLIN)
    while True:
        ready = [fd for fd, _ in poller.poll()]
        if pidfd in ready:
            break
        if kill_fd in ready:
            try:
                data = os.read(kill_fd, 64)
            except OSError:
                data = b""
            if not data:  # EOF: the host is done with this job (or gone)
                os.kill(pid, signal.SIGKILL)
                break
    _, status = os.waitpid(pid, 0)
    try:
        os.write(status_fd, struct.pack(">i", status))
    except OSError:
        pass
    os._exit(0)


def serve_forever(ctl_fd, run, unshare=None):
    """Answer job requests on the control socket until it closes. Each request: one JSON message
    ``{"fds": [names...], ...}`` with as many descriptors. No reply: the host learns that the job started
    from the job's own pipes (a server that died closes them unused)."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    ctl = socket.socket(fileno=ctl_fd)
    ctl.sendall(b'{"ready": true}\n')
    while True:
        try:
            data, received, _, _ = socket.recv_fds(ctl, 1 << 16, _MAX_FDS)
        except OSError:
            return
        if not data:
            return
        try:
            job = json.loads(data.decode("utf-8"))
            names = job["fds"]
            if len(names) != len(received):
                raise ValueError(f"{len(names)} descriptors named, {len(received)} received")
            fds = dict(zip(names, received))
        except (ValueError, KeyError, TypeError) as e:
            for fd in received:
                os.close(fd)
            os.write(2, f"rlvr forkserver: bad request: {e}\n".encode())
            continue
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                ctl.close()
                _monitor(job, fds, run, unshare)
            finally:
                os._exit(70)
        for fd in received:
            os.close(fd)
