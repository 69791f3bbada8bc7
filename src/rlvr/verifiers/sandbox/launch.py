"""Start the sandboxed candidate and the trusted harness; kill whole process trees afterwards."""

from __future__ import annotations

import binascii
import functools
import json
import marshal
import os
import signal
import subprocess
import sys
import threading
import zlib
from pathlib import Path

from rlvr.verifiers.sandbox.cgroups import TreeCgroup, join_command
from rlvr.verifiers.sandbox.isolation import CANDIDATE_PATH, Isolation, bwrap_args, hidden_dirs, site_dirs
from rlvr.verifiers.sandbox.limits import SandboxLimits
from rlvr.verifiers.sandbox.uids import UidLease, kill_uid

_HERE = Path(__file__).parent
# -S: no site processing (its .pth files cost ~50 ms a start here); site-packages go on sys.path by hand.
PY_FLAGS = ["-S", "-s", "-B"]


@functools.cache
def _source(name: str) -> str:
    return (_HERE / name).read_text()


def runner_source(with_main: bool = True) -> str:
    """The candidate-side script: wire format + values + runner (+ a call to main)."""
    body = "\n".join(_source(f) for f in ("wire.py", "values.py", "forkserver.py", "runner.py"))
    return body + ("\nmain()\n" if with_main else "")


def harness_source() -> str:
    """The trusted harness script: wire format + values + harness + a call to main."""
    return "\n".join(_source(f) for f in ("wire.py", "values.py", "forkserver.py", "harness.py")) + "\nmain()\n"


_LOAD_COMPILED = "import binascii,marshal,sys,zlib;exec(marshal.loads(zlib.decompress(binascii.a2b_base64(sys.argv.pop(1)))))"


@functools.cache
def _compiled(name: str) -> str:
    source = runner_source() if name == "runner" else harness_source()
    code = marshal.dumps(compile(source, f"<rlvr-{name}>", "exec", dont_inherit=True))  # not our __future__s
    return binascii.b2a_base64(zlib.compress(code, 9), newline=False).decode("ascii")  # ~35 kB: one argv string


def script_args(python: str, name: str) -> list[str]:
    """``-c`` arguments that run the runner or harness script. Under our own interpreter the script is
    compiled once here and handed over as compressed marshalled bytecode (compiling ~40 kB of source
    cost each start ~5 ms); another interpreter gets the source."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return ["-c", _LOAD_COMPILED, _compiled(name)]
    return ["-c", runner_source() if name == "runner" else harness_source()]


def candidate_env() -> dict[str, str]:
    """The whole environment of the candidate: nothing of the host's."""
    return {
        "PATH": CANDIDATE_PATH,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "TMPDIR": "/tmp",
        "HOME": "/tmp",
        "OPENBLAS_NUM_THREADS": "1",  # numpy & co.: one thread, not one per core (the process cap)
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def spawn_candidate(
    iso: Isolation,
    limits: SandboxLimits,
    lease: UidLease | None,
    mode: str,
    cwd: str,
    fd_in: int,
    fd_out: int | None,
    stdin,
    stdout,
    stderr,
    cgroup: TreeCgroup | None = None,
) -> subprocess.Popen:
    """Launch the runner (as root when a uid switch follows) inside bubblewrap or bare, in its own session,
    inside ``cgroup`` (the run's whole-tree limits) when given."""
    cfg = {
        "mode": mode,
        "fd_in": fd_in,
        "fd_out": fd_out,
        "cwd": "/tmp" if iso.uses_bwrap else cwd,
        "rlimits": limits.candidate_rlimits(lease is not None),
        "uid": lease.uid if lease else None,
        "unshare": bool(iso.unshare) and not iso.uses_bwrap,
        "keep": hidden_dirs(iso.python) if iso.unshare and not iso.uses_bwrap else [],
        "tmpfs_mb": limits.tmpfs_mb,
        "message_limit": limits.message_limit_bytes,
        "sys_path": list(site_dirs(iso.python)),
        "no_new_privs": not iso.uses_bwrap,  # bubblewrap has set it already (saves importing ctypes)
    }
    cmd = [iso.python, *PY_FLAGS, *script_args(iso.python, "runner"), json.dumps(cfg)]
    if iso.uses_bwrap:
        cmd = bwrap_args(iso.bwrap, iso.python, limits.tmpfs_mb, os.geteuid() == 0) + ["--", *cmd]
    fds = tuple(fd for fd in (fd_in, fd_out) if fd is not None)
    return subprocess.Popen(
        join_command(cgroup, cmd),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        pass_fds=fds,
        env=candidate_env(),
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
    )


@functools.cache
def harness_can_drop_root() -> bool:
    """The harness may run under an unprivileged uid only if that uid can still import what the tests import:
    every directory of the interpreter's stdlib and site-packages (and each of their parents) must be
    traversable by others. An interpreter under ``/root`` (pyenv's default) or in a private venv is not."""
    import sysconfig

    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= set(site_dirs(sys.executable)) | {os.path.dirname(os.path.realpath(sys.executable))}
    for p in paths:
        p = os.path.realpath(p)
        while True:
            try:
                if not os.stat(p).st_mode & 0o001:
                    return False
            except OSError:
                break
            parent = os.path.dirname(p)
            if parent == p:
                break
            p = parent
    return True


def spawn_harness(
    limits: SandboxLimits, cwd: str, fd_to: int, fd_from: int, fd_result: int, stdout: int,
    lease: UidLease | None = None,
) -> subprocess.Popen:
    """Launch the trusted harness with its own (looser) limits, under its own unprivileged uid (``lease``,
    when the machine allows a uid switch; the caller's uid otherwise): least privilege that still judges."""
    cfg = {
        "uid": lease.uid if lease else None,
        "fd_to": fd_to,
        "fd_from": fd_from,
        "fd_result": fd_result,
        "rlimits": limits.harness_rlimits(),
        "message_limit": limits.message_limit_bytes,
        "sys_path": list(site_dirs(sys.executable)),
    }
    return subprocess.Popen(
        [sys.executable, *PY_FLAGS, *script_args(sys.executable, "harness"), json.dumps(cfg)],
        stdin=subprocess.PIPE,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        pass_fds=(fd_to, fd_from, fd_result),
        env=harness_env(),
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
    )


def harness_env() -> dict[str, str]:
    """The trusted harness's environment: nothing of the host's either."""
    return {"PATH": CANDIDATE_PATH, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}


def feed(fd_or_file, data: bytes) -> threading.Thread:
    """Write ``data`` on a daemon thread, then close; a reader that died just ends the write."""

    def _write() -> None:
        try:
            if isinstance(fd_or_file, int):
                view = memoryview(data)
                while view:
                    view = view[os.write(fd_or_file, view) :]
            else:
                fd_or_file.write(data)
        except (OSError, ValueError):
            pass
        finally:
            try:
                os.close(fd_or_file) if isinstance(fd_or_file, int) else fd_or_file.close()
            except OSError:
                pass

    t = threading.Thread(target=_write, daemon=True, name="rlvr-sandbox-feed")
    t.start()
    return t


def kill_tree(proc: subprocess.Popen | None, lease: UidLease | None = None) -> None:
    """SIGKILL the process group (and so bubblewrap's PID namespace), then every process of the leased uid."""
    if proc is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if lease is not None:
        kill_uid(lease.uid)
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
