"""Which isolation this machine gives the candidate, detected once per process and reported.

Levels, strongest first:
  bwrap+uid    bubblewrap (mount, PID, network, IPC, UTS namespaces; read-only system dirs only; private
               /tmp) and the candidate under its own unprivileged uid (RLIMIT_NPROC enforced)
  bwrap        bubblewrap through an unprivileged user namespace (not root: no uid switch, no NPROC cap)
  rlimits+uid  no bubblewrap; rlimits + own unprivileged uid; as root the runner also unshares the
               network (loopback down) and IPC, and mounts a private /tmp where the kernel allows it
  rlimits      rlimits only (not root, no bubblewrap): weakest; the candidate runs as the caller's uid
Anything below ``bwrap+uid`` is logged as a loud warning once per process.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import threading
from dataclasses import asdict, dataclass, field

from rlvr.verifiers.sandbox import uids

log = logging.getLogger("rlvr.verifiers.sandbox")

LEVELS = ("bwrap+uid", "bwrap", "rlimits+uid", "rlimits")
CANDIDATE_PATH = "/usr/local/bin:/usr/bin:/bin"
_SYSTEM_DIRS = ("/usr", "/etc")
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@dataclass(frozen=True)
class Isolation:
    """What a sandboxed run will get on this machine."""

    level: str
    python: str  # interpreter the candidate runs under
    bwrap: str | None = None  # bubblewrap binary, when used
    uid_base: int | None = None  # first uid of the leased range, when the uid switch is on
    unshare: dict = field(default_factory=dict)  # fallback: which unshares the runner managed as root
    notes: tuple[str, ...] = ()

    @property
    def uid_switch(self) -> bool:
        return self.uid_base is not None

    @property
    def uses_bwrap(self) -> bool:
        return self.bwrap is not None


_PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/dev")  # replaced by fresh ones inside the sandbox


@functools.cache
def site_dirs(python: str) -> tuple[str, ...]:
    """site-packages dirs for the candidate's sys.path (no .pth processing) when ``python`` is our
    interpreter: sysconfig's, plus every site-/dist-packages dir on our sys.path (a venv made with
    --system-site-packages reaches its base interpreter's through it)."""
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return ()
    paths = sysconfig.get_paths()
    found = [paths["purelib"], paths["platlib"]]
    found += [p for p in sys.path if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages")]
    return tuple(dict.fromkeys(p for p in found if os.path.isdir(p)))


def python_dirs(python: str) -> list[str]:
    """Directories the interpreter and its packages live in (prefixes, site dirs), outermost first,
    nested ones and those under the read-only system dirs dropped."""
    real = os.path.realpath(python)
    cands = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    cands.add(os.path.dirname(os.path.dirname(real)))
    cands.update(os.path.realpath(p) for p in site_dirs(python))
    roots: list[str] = []
    for p in sorted(cands, key=len):
        if p in ("/", "") or any(p == r or p.startswith(r + "/") for r in roots):
            continue
        if any(p == s or p.startswith(s + "/") for s in _SYSTEM_DIRS):
            continue
        roots.append(p)
    return roots


def hidden_dirs(python: str) -> list[str]:
    """The interpreter's directories that a private /tmp, /var/tmp or /dev/shm would hide."""
    return [d for d in python_dirs(python) if any(d.startswith(p + "/") for p in _PRIVATE_DIRS)]


def interpreter_names_under_tmp(python: str | None = None) -> list[str]:
    """What a candidate sees in its private ``/tmp``: nothing, except where the interpreter or its
    environment lives under ``/tmp`` itself (e.g. a virtual environment made there), whose top directory is
    bound back read-only so the interpreter can run. Sorted names, as ``os.listdir("/tmp")`` would give."""
    python = python or sys.executable
    return sorted({d[len("/tmp/"):].split("/")[0] for d in hidden_dirs(python) if d.startswith("/tmp/")})


def bwrap_args(bwrap: str, python: str, tmpfs_mb: int, as_root: bool) -> list[str]:
    """bubblewrap command prefix: fresh namespaces, read-only system dirs, private /tmp as cwd."""
    args = [
        bwrap,
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
    ]
    if not as_root:
        args.append("--unshare-user")
    for d in _SYSTEM_DIRS:
        if os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for d in _SYSTEM_LINKS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    args += [
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--size",
        str(tmpfs_mb << 20),
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        "--chdir",
        "/tmp",
        "--setenv",
        "HOME",
        "/tmp",
    ]
    # after /tmp and /dev: an interpreter or venv that lives under them is bound on top, read-only
    made: set[str] = {"/tmp", "/dev", "/proc"}
    for root in python_dirs(python):
        parts = root.strip("/").split("/")
        for i in range(1, len(parts)):
            anc = "/" + "/".join(parts[:i])
            if anc not in made and not any(anc == s or anc.startswith(s + "/") for s in _SYSTEM_DIRS):
                args += ["--perms", "0755", "--dir", anc]
                made.add(anc)
        args += ["--ro-bind", root, root]
    return args


def _world_usable(path: str) -> bool:
    """Can an arbitrary unprivileged uid traverse to and execute/read this path?"""
    path = os.path.realpath(path)
    try:
        st = os.stat(path)
        if not st.st_mode & (stat.S_IXOTH if stat.S_ISREG(st.st_mode) else stat.S_IROTH | stat.S_IXOTH):
            return False
        d = os.path.dirname(path)
        while True:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return False
            if d == "/":
                return True
            d = os.path.dirname(d)
    except OSError:
        return False


def _unprivileged_python() -> str | None:
    """An interpreter an unprivileged uid can run without bubblewrap (ours if its prefix is reachable)."""
    cands = [sys.executable, "/usr/bin/python3", "/usr/local/bin/python3", shutil.which("python3") or ""]
    for p in cands:
        if not p or not _world_usable(p):
            continue
        if os.path.realpath(p) == os.path.realpath(sys.executable) and not _world_usable(
            os.path.join(sys.base_prefix, "lib")
        ):
            continue
        return p
    return None


def _try(cmd: list[str], timeout: float = 10.0) -> tuple[bool, str]:
    try:
        r = subprocess.run(
            cmd,
            check=False,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env={"PATH": CANDIDATE_PATH, "LANG": "C.UTF-8"},
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    return r.returncode == 0, (r.stdout + r.stderr).decode("utf-8", "replace").strip()[-500:]


_PROBE_UNSHARE = r"""
import json, sys
exec(sys.argv[1])
print(json.dumps(_unshare(8)))
"""


def _fallback_unshare(python: str) -> dict:
    """As root, ask a throwaway runner which unshares (network, IPC, private /tmp) the kernel allows."""
    from rlvr.verifiers.sandbox import launch

    ok, out = _try([python, "-s", "-B", "-c", _PROBE_UNSHARE, launch.runner_source(with_main=False)])
    try:
        return json.loads(out.splitlines()[-1]) if ok else {}
    except (ValueError, IndexError):
        return {}


def _detect(mode: str, tmpfs_mb: int = 64) -> Isolation:
    as_root = os.geteuid() == 0
    base = uids.uid_base() if as_root else None
    notes: list[str] = []
    if as_root and base is None:
        notes.append("no unmapped-free uid range for the uid switch in this user namespace")
    bwrap = shutil.which("bwrap") if mode in ("auto", "bwrap") else None
    if bwrap:
        python = os.path.realpath(sys.executable)
        ok, out = _try(
            bwrap_args(bwrap, python, tmpfs_mb, as_root) + ["--", python, "-s", "-B", "-c", "pass"]
        )
        if ok:
            return Isolation(
                "bwrap+uid" if base is not None else "bwrap", python, bwrap, base, {}, tuple(notes)
            )
        notes.append(f"bubblewrap at {bwrap} does not work here: {out}")
    elif mode in ("auto", "bwrap"):
        notes.append("bubblewrap (bwrap) is not installed: apt-get install -y bubblewrap")
    if mode == "rlimits":
        notes.append("fallback requested (isolation='rlimits')")
    if mode == "bwrap":
        raise RuntimeError("isolation 'bwrap' requested but unavailable: " + "; ".join(notes))
    python = (_unprivileged_python() if base is not None else None) or sys.executable
    if base is not None and not _world_usable(python):
        notes.append("no interpreter an unprivileged uid can run; candidates run as the caller's uid")
        base = None
    unshare = _fallback_unshare(python) if as_root else {}
    return Isolation(
        "rlimits+uid" if base is not None else "rlimits", python, None, base, unshare, tuple(notes)
    )


_cache: dict[tuple[int, str], Isolation] = {}
_lock = threading.Lock()


def detect_isolation(mode: str = "auto") -> Isolation:
    """Detect (once per process and mode) the isolation sandboxed runs get; mode: auto | bwrap | rlimits."""
    if mode not in ("auto", "bwrap", "rlimits"):
        raise ValueError(f"isolation mode must be auto, bwrap or rlimits, got {mode!r}")
    key = (os.getpid(), mode)
    with _lock:
        if key not in _cache:
            iso = _detect(mode)
            if iso.level != "bwrap+uid":
                log.warning(
                    "SANDBOX ISOLATION IS WEAKER THAN bwrap+uid: running candidates with %r (%s). "
                    "Install bubblewrap (apt-get install -y bubblewrap) and run as root for full "
                    "isolation; see docs/verifier-security.md.",
                    iso.level,
                    "; ".join(iso.notes) or "-",
                )
            _cache[key] = iso
        return _cache[key]


def isolation_report(mode: str = "auto") -> dict:
    """What isolation sandboxed code gets here, as a dict (level, interpreter, namespaces, limits, notes)."""
    iso = detect_isolation(mode)
    d = asdict(iso)
    d["notes"] = list(iso.notes)
    d["uid_switch"] = iso.uid_switch
    d["root"] = os.geteuid() == 0
    d["namespaces"] = (
        ["mount", "pid", "net", "ipc", "uts", "cgroup"] + ([] if d["root"] else ["user"])
        if iso.uses_bwrap
        else [k for k in ("net", "ipc", "tmp") if iso.unshare.get(k)]
    )
    d["network"] = (
        "none (own network namespace)" if iso.uses_bwrap or iso.unshare.get("net") else "host network"
    )
    d["tree_kill"] = (
        "pid namespace + kill by uid"
        if iso.uses_bwrap and iso.uid_switch
        else "pid namespace"
        if iso.uses_bwrap
        else "kill by uid"
        if iso.uid_switch
        else "process group only (setsid children escape)"
    )
    from rlvr.verifiers.sandbox.cgroups import tree_limit_report

    d["cgroup_v1"] = {c: os.path.isdir(f"/sys/fs/cgroup/{c}") for c in ("pids", "memory")}
    d.update(tree_limit_report())
    d["cgroup_used"] = not d["tree_limits"].startswith("none")
    from rlvr.verifiers.sandbox.launch import harness_can_drop_root
    from rlvr.verifiers.sandbox.warm import warm_report

    d.update(warm_report(iso))  # "sandbox": warm | cold (function tests under sandbox="auto"), and why

    d["harness"] = (
        "own unprivileged uid + no_new_privs"
        if iso.uid_switch and harness_can_drop_root()
        else "caller's uid, rlimits (the interpreter's directories are not readable by other uids)"
        if iso.uid_switch
        else "caller's uid, rlimits"
    )
    return d
