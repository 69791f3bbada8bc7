"""Unprivileged uids for candidates: one per concurrent run, leased with a lock file, killed by uid.

RLIMIT_NPROC counts processes per real uid and is not enforced for uid 0, so each candidate runs
under its own unprivileged uid (no passwd entry needed). Because nothing else runs under that uid,
"kill every process of the uid" (``kill(-1, SIGKILL)`` sent *as* that uid) removes the whole tree,
including grandchildren that started their own session, with or without a PID namespace.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import random
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

UID_COUNT = 4096
_BASES = (1_500_000_000, 200_000, 40_000)


def _mapped_extents() -> list[tuple[int, int]]:
    """(first, count) uid ranges usable in this user namespace (from /proc/self/uid_map)."""
    try:
        with open("/proc/self/uid_map") as f:
            return [(int(a), int(c)) for a, _, c in (line.split() for line in f if line.strip())]
    except OSError:
        return [(0, 65536)]


def uid_base() -> int | None:
    """First uid of our range: a block of UID_COUNT uids that this namespace maps, or None."""
    for base in _BASES:
        if any(first <= base and base + UID_COUNT <= first + count for first, count in _mapped_extents()):
            return base
    return None


def _lock_dir() -> str:
    for d in ("/run/rlvr-sandbox", os.path.join(tempfile.gettempdir(), "rlvr-sandbox-uids")):
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            if os.access(d, os.W_OK):
                return d
        except OSError:
            continue
    raise OSError("no writable directory for sandbox uid locks")


@dataclass
class UidLease:
    """An unprivileged uid (gid = uid) held exclusively while its lock file is locked."""

    uid: int
    _fd: int

    @property
    def gid(self) -> int:
        return self.uid

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1


def acquire_uid(base: int, tries: int = 256) -> UidLease:
    """Lease a free uid from [base, base + UID_COUNT): not in passwd, not locked by another run."""
    lock_dir = _lock_dir()
    rng = random.SystemRandom()
    for _ in range(tries):
        uid = base + rng.randrange(UID_COUNT)
        try:
            pwd.getpwuid(uid)
            continue  # a real account: never borrow it
        except KeyError:
            pass
        fd = os.open(os.path.join(lock_dir, f"{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return UidLease(uid, fd)
    raise OSError(f"no free sandbox uid in [{base}, {base + UID_COUNT}) after {tries} tries")


def kill_uid(uid: int, rounds: int = 1) -> int:
    """SIGKILL every process of ``uid`` (``kill -9 -1`` run as that uid); returns rounds that found some.

    ``kill(-1)`` signals every process the sender may signal except itself, atomically with respect to
    fork (a fork either lands in the list being signalled or fails on its parent's pending SIGKILL), so a
    fork bomb cannot outrun it and one round suffices; a round that finds no process ends the loop.
    """
    if uid < 1000 or uid == os.geteuid():  # as root (or as ourselves) kill -1 would take down the machine
        raise ValueError(f"refusing to kill by uid {uid}: not a leased sandbox uid")
    found = 0
    for _ in range(rounds):
        r = subprocess.run(
            ["/bin/sh", "-c", "kill -9 -1 2>/dev/null"],
            check=False,
            user=uid,
            group=uid,
            extra_groups=[],
            env={},
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        if r.returncode != 0:  # ESRCH: nothing left
            break
        found += 1
        time.sleep(0.002)
    return found


def remove_uid_files(uid: int, dirs: tuple[str, ...] = ("/tmp", "/var/tmp", "/dev/shm")) -> list[str]:
    """Delete top-level entries of the shared temp dirs owned by ``uid`` (fallback isolation only)."""
    removed = []
    for d in dirs:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                if e.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    os.unlink(e.path)
                removed.append(e.path)
            except OSError:
                continue
    return removed


_KEPT: list[UidLease] = []
_KEPT_OWNER = [0]


def reuse_uid(base: int) -> UidLease:
    """A uid this process leased before and kept (:func:`keep_uid`), else a fresh lease."""
    if _KEPT_OWNER[0] != os.getpid():  # a forked child: its parent's locks are not its own
        _KEPT.clear()
        _KEPT_OWNER[0] = os.getpid()
    while _KEPT:
        lease = _KEPT.pop()
        if lease._fd >= 0 and lease.uid - base in range(UID_COUNT):
            return lease
    return acquire_uid(base)


def keep_uid(lease: UidLease) -> None:
    """Keep ``lease`` (still locked) for this process's next run: only once no process of its uid is left."""
    if _KEPT_OWNER[0] == os.getpid():
        _KEPT.append(lease)
    else:
        lease.release()
