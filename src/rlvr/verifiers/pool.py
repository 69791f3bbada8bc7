"""Verify a batch across persistent worker processes with bounded concurrency.

``verify_batch(verifier, tasks, completions, workers=N, timeout_s=T)`` returns one Verdict per input,
in input order. Each of the N workers is a long-lived process (started once, reused across batches)
that holds its own unpickled copy of the verifier and judges one item at a time. A hung item is
killed at ``timeout_s`` (outcome ``timeout``) and a verification that kills its process (segfault,
OOM kill, ``os._exit``) gives outcome ``infra``; in both cases the worker -- its whole process group --
is replaced and the batch goes on. ``workers=0`` runs inline in the caller (no hard timeout there:
the verifier's own limits apply; an exception still becomes ``infra``).

**Storms.** A worker busy for longer than a short stall time (a twentieth of the timeout, at most 0.5 s) no longer
counts against the N: the next items go to a warm **spare** (max(N, 4) of them are started with the pool;
while a worker is stuck, more start so that as many stay ready, up to 16 beyond), so when many verifications hang at once (sleeping or spinning on the CPU) they run
out their timeouts side by side instead of in N-wide waves, and a batch takes about one timeout plus its
normal time (docs/faults.md has the measurement). Spares beyond the warm ones are stopped after the batch.

Pools are cached per verifier object and worker count, so the RL trainer pays process start-up once;
the verifier is re-pickled on each call and a changed verifier gets a fresh pool. ``close_pools()``
(also run at exit) stops them all.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from rlvr.data.types import Task
from rlvr.verifiers.base import Verdict, Verifier

STARTUP_TIMEOUT_S = 120.0
MAX_START_FAILURES = 3
STALL_FRAC = 0.05   # a worker busy past this fraction of the timeout (at most STALL_MAX_S) counts as stuck
STALL_MAX_S = 0.5
MAX_EXTRA = 16      # spares started on demand in a storm, beyond the warm ones
MIN_SPARES = 4      # warm spares started with a pool (at least its worker count)


@dataclass
class PoolStats:
    """Counters since the pool started: items judged, hard timeouts, dead workers, restarts."""

    items: int = 0
    timeouts: int = 0
    crashes: int = 0
    restarts: int = 0
    outcomes: Counter = field(default_factory=Counter)


def outcome_counts(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """How many verdicts per outcome (``{"pass": 3, "timeout": 1, ...}``)."""
    return dict(Counter(v.outcome for v in verdicts))


def _safe_verify(verifier: Verifier, task: Task, completion: str) -> Verdict:
    t0 = time.perf_counter()
    try:
        v = verifier.verify(task, completion)
        if not isinstance(v, Verdict):
            return Verdict.infra(f"verifier returned {type(v).__name__}, not a Verdict", time.perf_counter() - t0)
        return v
    except Exception as e:  # noqa: BLE001 - one failed verification never kills the batch
        msg = f"{type(e).__name__}: {e}"[:500]
        return Verdict(0.0, False, "infra", {"error": msg, "where": traceback.format_exc(limit=3)[-800:]},
                       time.perf_counter() - t0)


_BOOT = ("import sys, json, os; sys.path[:0] = json.loads(os.environ['RLVR_POOL_SYS_PATH']); "
         "from rlvr.verifiers.pool import _worker_main; _worker_main(int(sys.argv[1]))")


def _worker_main(fd: int) -> None:
    """Worker loop: get the pickled verifier, then ``(index, task, completion)`` -> ``(index, verdict)``."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn = Connection(fd)
    verifier = pickle.loads(conn.recv_bytes())
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if msg is None:
            break
        idx, task, completion = msg
        verdict = _safe_verify(verifier, task, completion)
        try:
            conn.send((idx, verdict))
        except Exception as e:  # noqa: BLE001 - e.g. unpicklable details
            conn.send((idx, Verdict.infra(f"verdict could not be sent back: {e}", verdict.seconds)))
    close = getattr(verifier, "close", None)
    if callable(close):
        close()


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Slot:
    """One worker process (its own session, so a kill takes its helpers too) and what it is doing.

    Workers are plain ``python -c`` children talking over a socket pair -- not multiprocessing's
    spawn, which re-imports the caller's ``__main__`` (a training script without a main guard would
    run again in every worker).
    """

    def __init__(self, verifier_bytes: bytes) -> None:
        self.ready = False
        self.failed = False  # the process could not even be started (e.g. out of file descriptors)
        self.started = time.monotonic()
        self.item: int | None = None
        self.deadline = 0.0
        self.sent_at = 0.0
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        env = dict(os.environ, RLVR_POOL_SYS_PATH=json.dumps([p for p in sys.path if p]))
        try:
            ours, theirs = socket.socketpair()
            try:
                self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(theirs.fileno())],
                                             pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                             env=env, start_new_session=True)
            finally:
                theirs.close()
            self.conn = Connection(ours.detach())
        except OSError:
            self.failed = True
            return
        try:
            self.conn.send_bytes(verifier_bytes)
        except OSError:  # it died at once; the closed connection is noticed by the pool
            pass

    def kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.proc.kill()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.conn is not None:
            self.conn.close()

    def stop(self) -> None:
        if self.conn is not None and self.proc is not None:
            try:
                self.conn.send(None)
                self.proc.wait(2)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self.kill()


class VerifierPool:
    """N persistent worker processes judging items with a hard per-item timeout (see module doc)."""

    def __init__(self, verifier: Verifier, workers: int = 2, spares: int | None = None) -> None:
        if workers < 1:
            raise ValueError("a VerifierPool needs workers >= 1 (use workers=0 in verify_batch to run inline)")
        try:
            self.verifier_bytes = pickle.dumps(verifier)
        except Exception as e:
            raise TypeError(f"verifier {getattr(verifier, 'name', verifier)!r} cannot be pickled for the "
                            f"worker processes: {e}") from e
        self.verifier = verifier
        self.workers = workers
        self.spares = max(workers, MIN_SPARES) if spares is None else spares  # warm spares, kept between batches
        self.stats = PoolStats()
        self._slots = [_Slot(self.verifier_bytes) for _ in range(workers + self.spares)]
        self._start_failures = 0
        self._stall = STALL_MAX_S

    def map(self, tasks: Sequence[Task], completions: Sequence[str], timeout_s: float = 30.0,
            progress: Any = None) -> list[Verdict]:
        """Judge every ``(task, completion)``; results in input order. ``progress(n_done)`` is called."""
        if len(tasks) != len(completions):
            raise ValueError(f"{len(tasks)} tasks but {len(completions)} completions")
        results: list[Verdict | None] = [None] * len(tasks)
        pending = deque(range(len(tasks)))
        done = 0
        self._stall = min(STALL_MAX_S, STALL_FRAC * timeout_s)
        while done < len(tasks):
            done_now = self._dispatch(pending, tasks, completions, results, timeout_s)
            done_now += self._collect(results)
            if done_now:
                done += done_now
                if progress is not None:
                    progress(done)
            if self._start_failures >= MAX_START_FAILURES * self.workers:
                done += self._fail_pending(pending, results, "worker processes could not be started")
        self._trim()
        for v in results:
            assert v is not None
            self.stats.outcomes[v.outcome] += 1
        self.stats.items += len(results)
        return results  # type: ignore[return-value]

    def _dispatch(self, pending: deque, tasks: Sequence[Task], completions: Sequence[str],
                  results: list, timeout_s: float) -> int:
        """Give idle workers an item each, at most ``workers`` running that are not stuck; start spares for
        the stuck ones (see the module doc); returns how many items were settled here (unsendable)."""
        settled = 0
        now = time.monotonic()
        active = sum(1 for s in self._slots if s.item is not None and now - s.sent_at < self._stall)
        for slot in list(self._slots):
            if not pending or active >= self.workers:
                break
            if not slot.ready or slot.item is not None or slot.conn is None:
                continue
            idx = pending.popleft()
            try:
                slot.conn.send((idx, tasks[idx], completions[idx]))
            except (pickle.PicklingError, TypeError, AttributeError) as e:
                results[idx] = Verdict.infra(f"item could not be sent to a worker: {e}")
                settled += 1
                continue
            except (OSError, ValueError):  # the worker is gone: not this item's fault
                pending.appendleft(idx)
                self._replace(slot)
                continue
            slot.item, slot.sent_at, slot.deadline = idx, time.monotonic(), time.monotonic() + timeout_s
            active += 1
        free = sum(1 for s in self._slots if s.item is None)  # idle or starting
        stuck = any(s.item is not None and now - s.sent_at >= self._stall for s in self._slots)
        need = min(len(pending), self.workers + (self.spares if stuck else 0)) - free  # keep a warm reserve
        room = self.workers + self.spares + MAX_EXTRA - len(self._slots)
        for _ in range(max(0, min(need, room))):
            self._slots.append(_Slot(self.verifier_bytes))
        return settled

    def _collect(self, results: list) -> int:
        """Wait for replies or deadlines; returns how many items got their verdict."""
        for slot in [s for s in self._slots if s.failed]:
            self._start_failures += 1
            time.sleep(0.05)
            self._replace(slot)
        now = time.monotonic()
        busy = [s for s in self._slots if s.item is not None]
        waits = [s.deadline for s in busy] + [s.started + STARTUP_TIMEOUT_S for s in self._slots if not s.ready]
        waits += [s.sent_at + self._stall for s in busy if now < s.sent_at + self._stall]  # wake to start a spare
        timeout = max(0.0, min(waits, default=now + 1.0) - now)
        conns = [s.conn for s in self._slots if s.conn is not None]
        ready = wait(conns, timeout=min(timeout, 1.0)) if conns else []
        finished = 0
        for slot in list(self._slots):
            if slot.conn in ready:
                finished += self._receive(slot, results)
        now = time.monotonic()
        for slot in list(self._slots):
            if slot.item is not None and now > slot.deadline:
                results[slot.item] = Verdict(0.0, False, "timeout",
                                             {"reason": "pool hard timeout (worker killed)"}, now - slot.sent_at)
                self.stats.timeouts += 1
                finished += 1
                slot.item = None
                self._retire_or_replace(slot)
            elif not slot.ready and now > slot.started + STARTUP_TIMEOUT_S:
                self._start_failures += 1
                self._replace(slot)
        return finished

    def _receive(self, slot: _Slot, results: list) -> int:
        try:
            msg = slot.conn.recv()
        except (EOFError, OSError):
            try:
                code = slot.proc.wait(0.5) if slot.proc is not None else None
            except subprocess.TimeoutExpired:
                code = None
            lost = slot.item
            slot.item = None
            if not slot.ready:
                self._start_failures += 1
            self._replace(slot)
            if lost is None:
                return 0
            self.stats.crashes += 1
            results[lost] = Verdict.infra(f"verifier process died (exit code {code})")
            return 1
        if msg[0] == "ready":
            slot.ready = True
            self._start_failures = 0
            return 0
        idx, verdict = msg
        if idx != slot.item:  # pragma: no cover - protocol invariant
            return 0
        results[idx] = verdict
        slot.item = None
        return 1

    def _replace(self, slot: _Slot) -> None:
        slot.kill()
        i = self._slots.index(slot)
        self._slots[i] = _Slot(self.verifier_bytes)
        self.stats.restarts += 1

    def _retire_or_replace(self, slot: _Slot) -> None:
        """A killed worker: replaced, unless the pool holds more than its workers + warm spares (a storm)."""
        if len(self._slots) > self.workers + self.spares:
            slot.kill()
            self._slots.remove(slot)
            self.stats.restarts += 1  # its capacity is back through the spares
        else:
            self._replace(slot)

    def _trim(self) -> None:
        """After a batch: stop the idle workers started on demand beyond the workers + warm spares."""
        for slot in [s for s in self._slots if s.item is None][: max(0, len(self._slots) - self.workers - self.spares)]:
            slot.stop()
            self._slots.remove(slot)

    def _fail_pending(self, pending: deque, results: list, why: str) -> int:
        n = 0
        while pending:
            results[pending.popleft()] = Verdict.infra(why)
            n += 1
        return n

    def close(self) -> None:
        for slot in self._slots:
            slot.stop()
        self._slots = []

    def __enter__(self) -> VerifierPool:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_POOLS: dict[tuple[int, int], VerifierPool] = {}


@atexit.register
def close_pools() -> None:
    """Stop every cached pool's workers."""
    for pool in list(_POOLS.values()):
        pool.close()
    _POOLS.clear()


def get_pool(verifier: Verifier, workers: int) -> VerifierPool:
    """The cached pool for this verifier object (a new one when the verifier changed since)."""
    key = (id(verifier), workers)
    pool = _POOLS.get(key)
    if pool is not None and (pool.verifier is not verifier or pool.verifier_bytes != pickle.dumps(verifier)):
        pool.close()
        pool = None
    if pool is None:
        pool = _POOLS[key] = VerifierPool(verifier, workers)
    return pool


def verify_batch(verifier: Verifier, tasks: Sequence[Task], completions: Sequence[str], workers: int = 2,
                 timeout_s: float = 30.0, progress: bool = False, persistent: bool = True) -> list[Verdict]:
    """One Verdict per ``(task, completion)``, in input order (see the module docstring).

    workers: processes (0 = inline); timeout_s: hard limit per item; progress: show a rich bar;
    persistent: keep the pool for the next call with this verifier (False: stop it afterwards).
    """
    if len(tasks) != len(completions):
        raise ValueError(f"{len(tasks)} tasks but {len(completions)} completions")
    if not tasks:
        return []
    with _progress_bar(len(tasks), progress) as advance:
        if workers <= 0:
            out = []
            for i, (t, c) in enumerate(zip(tasks, completions)):
                out.append(_safe_verify(verifier, t, c))
                advance(i + 1)
            return out
        if not persistent:
            with VerifierPool(verifier, workers) as pool:
                return pool.map(tasks, completions, timeout_s, progress=advance)
        return get_pool(verifier, workers).map(tasks, completions, timeout_s, progress=advance)


class _progress_bar:
    """Context manager yielding ``advance(n_done)``; a rich bar when enabled, else a no-op."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self._p = total, enabled, None

    def __enter__(self):
        if not self.enabled:
            return lambda n: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        self._p = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                           TimeRemainingColumn(), transient=True)
        self._p.start()
        tid = self._p.add_task("verifying", total=self.total)
        return lambda n: self._p.update(tid, completed=n)

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.stop()
