"""One run at a time in a run directory: ``run.lock`` names the process that holds it.

Two processes in one run directory would move each other's stage directories aside and interleave their
checkpoints and metrics. A run takes the lock before it writes anything; a second run there is refused with the
holder's pid and start time. A lock whose process is gone (killed, machine rebooted) is taken over; one held
from another host cannot be checked and is refused with the file to remove. The holder may nest runs in the
same directory (the lock is its own).
"""

from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from rlvr.errors import RlvrError

LOCK = "run.lock"


class RunDirBusy(RlvrError):
    """Another live run holds the run directory."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder(path: Path) -> dict | None:
    """The lock's content; None when it is unreadable for longer than its writer needs (then it is stale)."""
    for _ in range(20):
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (json.JSONDecodeError, OSError):
            time.sleep(0.05)  # created, not yet written
    return None


@contextmanager
def run_dir_lock(run_dir: Path):
    """Hold ``run_dir/run.lock`` for the block (see the module)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            held = _holder(path)
            if held == {}:
                continue  # released meanwhile
            if held and held.get("host") == me["host"] and held.get("pid") == me["pid"]:
                yield  # a run nested in this process's own run
                return
            if held and held.get("host") != me["host"]:
                raise RunDirBusy(f"{run_dir} is in use by process {held.get('pid')} on {held.get('host')} (since "
                                 f"{held.get('started')}): two runs in one directory would overwrite each other; "
                                 f"if that run is gone, remove {path}") from None
            if held and _alive(int(held.get("pid", -1))):
                raise RunDirBusy(f"{run_dir} is in use by process {held['pid']} (since {held.get('started')}): two "
                                 "runs in one directory would overwrite each other's stages; wait for it, stop it, "
                                 "or give this run another --run-dir") from None
            try:
                path.unlink()  # its process is gone: a stale lock
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    try:
        yield
    finally:
        if (_holder(path) or {}).get("pid") == me["pid"]:
            path.unlink(missing_ok=True)
