"""The warm sandbox's fork server: a long-lived template process that forks one fresh process per job.

Stdlib only and free of rlvr imports: this file's source is sent into the sandboxed candidate server (inside
bubblewrap) and into the trusted harness server, after wire.py and values.py and before runner.py /
harness.py, exactly like those files. The template itself never runs a job's code: it receives a request
(JSON + the job's file descriptors, ``SCM_RIGHTS`` over its control socket), forks the job's **worker**,
and supervises it. So every candidate starts from the same clean interpreter that has imported nothing of
any candidate's, and nothing a candidate does (files, monkeypatches, environment, threads, children,
limits, memory) reaches the template or the next candidate.

One job at a time per server. The server waits for the worker to exit or for the job's ``kill`` pipe to
reach end-of-file (the host closed its end: the job is over, its time is up, or the host died), then kills
the job's whole tree and reports the worker's wait status (4 bytes, big-endian) on the job's ``status``
pipe once the tree is gone; only then does it read the next request. The candidate server is PID 1 of
bubblewrap's PID namespace (``--as-pid-1``), so "the whole tree" is everything else in that namespace:
``kill(-1, SIGKILL)`` from PID 1 reaches every other process in it (daemons that called ``setsid``
included, atomically with respect to fork), and orphans are reparented to it and reaped. The harness server
kills the worker's process group (the worker starts its own session), as a cold run kills its harness.
The worker never holds ``kill``, ``status`` or the control socket.
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


def _worker(job, fds, run, pid1):
    """In the forked worker: its own session (harness), only its own descriptors, then the job."""
    code = 1
    try:
        if not pid1:
            os.setsid()
        _close_other_fds(set(fds.values()))
        code = run(job, fds) or 0
    except SystemExit as e:  # as the interpreter would exit on it
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    except BaseException as e:  # noqa: BLE001 - reported to the host through the job's own pipes
        try:
            os.write(2, f"rlvr forkserver worker: {type(e).__name__}: {e}\n".encode())
        except OSError:
            pass
    os._exit(code)


def _kill_tree(pid, pid1):
    if pid1:  # PID 1 of the namespace: every other process in it
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def _supervise(pid, kill_fd, pid1):
    """Wait for the worker's exit or the kill pipe's EOF; kill the tree; return the worker's wait status
    once nothing of the job is left."""
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(kill_fd, select.POLLIN | select.POLLHUP)
    poller.register(pidfd, select.POLLIN)
    done = False
    while not done:
        for fd, _ in poller.poll():
            if fd == pidfd:
                done = True
            elif fd == kill_fd:
                try:
                    data = os.read(kill_fd, 64)
                except OSError:
                    data = b""
                done = done or not data  # EOF: the host is done with this job (or gone)
    os.close(pidfd)
    _kill_tree(pid, pid1)
    _, status, usage = os.wait4(pid, 0)
    while pid1:  # reap every orphan; a round that finds none left ends it
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        _kill_tree(pid, pid1)
    return status, usage.ru_utime + usage.ru_stime


def serve_forever(ctl_fd, run, pid1=False):
    """Run job requests from the control socket one at a time until it closes. A request is one JSON
    message ``{"fds": [names...], ...}`` with as many descriptors, ``kill`` and ``status`` among them. No
    reply on the socket: the job's own pipes tell the host everything (a server that died closes them)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
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
            fds = dict(zip(job["fds"], received, strict=True))
            kill_fd, status_fd = fds.pop("kill"), fds.pop("status")
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
                os.close(kill_fd)
                os.close(status_fd)
            finally:
                _worker(job, fds, run, pid1)
        for fd in fds.values():
            os.close(fd)
        status, cpu = _supervise(pid, kill_fd, pid1)
        try:
            os.write(status_fd, struct.pack(">id", status, cpu))
        except OSError:
            pass
        os.close(status_fd)
        os.close(kill_fd)
