"""One sandboxed run: a function checked by trusted tests, or a stdin/stdout program."""

from __future__ import annotations

import atexit
import glob
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from rlvr.verifiers.sandbox import warm
from rlvr.verifiers.sandbox.cgroups import lease_tree_cgroup, open_tree_cgroup, return_tree_cgroup
from rlvr.verifiers.sandbox.harness import limit_hit
from rlvr.verifiers.sandbox.isolation import Isolation, detect_isolation
from rlvr.verifiers.sandbox.launch import (
    feed,
    harness_can_drop_root,
    kill_tree,
    spawn_candidate,
    spawn_harness,
)
from rlvr.verifiers.sandbox.limits import SandboxLimits
from rlvr.verifiers.sandbox.supervise import Stream, pump
from rlvr.verifiers.sandbox.uids import acquire_uid, keep_uid, kill_uid, remove_uid_files, reuse_uid

HARNESS_OUTCOMES = ("pass", "wrong", "crash", "violation", "infra")


@dataclass
class SandboxResult:
    """What a run ended with. Function runs: a verdict outcome. Program runs: ``ok`` (exit 0) or
    timeout/violation/crash/infra, with the captured stdout/stderr."""

    outcome: str
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    stdout: str = ""
    stderr: str = ""


class _Session:
    """Leased uid, working dirs and guaranteed cleanup (process trees, uid, files) for one run."""

    def __init__(self, iso: Isolation, limits: SandboxLimits, warm: bool = False):
        self.iso, self.limits, self.procs = iso, limits, []
        self.warm = warm  # warm runs: the candidate's cwd is its fresh /tmp; cgroups are reused
        self.lease = self.harness_lease = self.cgroup = None
        self.root = ""
        self.tree_dead = False  # warm runs: the job's monitor reported its whole PID namespace gone

    def __enter__(self) -> _Session:
        if self.iso.uid_switch:
            self.lease = reuse_uid(self.iso.uid_base) if self.warm else acquire_uid(self.iso.uid_base)
            if not self.iso.uses_bwrap:  # leftovers of a verifier killed mid-run (bubblewrap: died with it)
                kill_uid(self.lease.uid)
            if harness_can_drop_root():  # the harness drops root too, where it can still import its modules
                self.harness_lease = acquire_uid(self.iso.uid_base)
                kill_uid(self.harness_lease.uid)
        if self.limits.tree_limits:
            lease = lease_tree_cgroup if self.warm else open_tree_cgroup
            self.cgroup = lease(self.limits.tree_memory, self.limits.max_procs)
        if self.warm and self.harness_lease is None:  # the harness runs as us: one private dir per process
            self.root = _shared_root()
            return self
        self.root = tempfile.mkdtemp(prefix="rlvr-sbx-")
        os.chmod(self.root, 0o711)  # the candidate may traverse to its own dir, not list ours
        os.mkdir(self.harness_dir, 0o700)
        if not self.warm:
            os.mkdir(self.candidate_dir, 0o700)
        if self.lease is not None and not self.warm:
            os.chown(self.candidate_dir, self.lease.uid, self.lease.gid)
        if self.harness_lease is not None:
            os.chown(self.harness_dir, self.harness_lease.uid, self.harness_lease.gid)
        return self

    def tree_outcome(self, result: SandboxResult) -> SandboxResult:
        """A run whose whole tree hit its cgroup limit (a process OOM-killed, a fork refused) is a violation."""
        ev = self.cgroup.events() if self.cgroup is not None else {}
        if result.outcome in ("pass", "ok"):
            return result
        if ev.get("oom_kill"):
            result.outcome = "violation"
            result.details.update(limit="memory (whole process tree)", tree_memory_mb=self.limits.tree_memory)
        elif ev.get("pids_max") and result.outcome != "wrong":
            result.outcome = "violation"
            result.details.update(limit="processes (whole process tree)", max_procs=self.limits.max_procs)
        return result

    @property
    def harness_dir(self) -> str:
        return os.path.join(self.root, "h")

    @property
    def candidate_dir(self) -> str:
        return os.path.join(self.root, "c")

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            kill_tree(p)
        if self.cgroup is not None:
            return_tree_cgroup(self.cgroup) if self.warm else self.cgroup.close()
        if self.harness_lease is not None:
            kill_uid(self.harness_lease.uid)
            self.harness_lease.release()
        if self.lease is not None:
            if self.tree_dead:  # warm: the server reported the job's whole tree gone
                keep_uid(self.lease)
            else:
                kill_uid(self.lease.uid, rounds=1 if self.iso.uses_bwrap else 2)
                if not self.iso.uses_bwrap and not self.iso.unshare.get("tmp"):
                    remove_uid_files(self.lease.uid)
                self.lease.release()
        if self.root != _SHARED_ROOT.get(os.getpid()):
            shutil.rmtree(self.root, ignore_errors=True)


_SHARED_ROOT: dict[int, str] = {}


def _shared_root() -> str:
    """This process's private directory for warm harness runs that keep the caller's uid (removed at exit;
    one left by a process that was killed is removed by the next process that makes its own)."""
    root = _SHARED_ROOT.get(os.getpid())
    if root is None or not os.path.isdir(root):
        for stale in glob.glob(os.path.join(tempfile.gettempdir(), "rlvr-sbx-w*-*")):
            try:
                os.kill(int(os.path.basename(stale).split("-")[2][1:]), 0)
            except ProcessLookupError:
                shutil.rmtree(stale, ignore_errors=True)
            except (ValueError, IndexError, PermissionError):
                pass
        root = _SHARED_ROOT[os.getpid()] = tempfile.mkdtemp(prefix=f"rlvr-sbx-w{os.getpid()}-")
        os.chmod(root, 0o700)
        os.mkdir(os.path.join(root, "h"), 0o700)
        atexit.register(shutil.rmtree, root, True)
    return root


def _exit_signal(rc: int | None, bwrap: bool) -> int | None:
    """The signal that ended the candidate (bubblewrap reports a signalled child as 128 + signal)."""
    if rc is None:
        return None
    if rc < 0:
        return -rc
    return rc - 128 if bwrap and 128 < rc < 128 + 65 else None


def _death(proc: subprocess.Popen, iso: Isolation) -> dict[str, Any]:
    try:
        rc = proc.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        rc = None
    sig = _exit_signal(rc, iso.uses_bwrap)
    out: dict[str, Any] = {"exit_code": rc}
    if sig:
        out["signal"] = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig
    return out


def _signal_outcome(details: dict[str, Any]) -> str:
    """A candidate killed by the kernel for a limit: CPU (SIGKILL at the hard limit) or file size."""
    sig = details.get("signal")
    if sig == "SIGXFSZ":
        details["limit"] = "file size"
        return "violation"
    if sig in ("SIGKILL", "SIGXCPU"):
        details["limit"] = "cpu"
        return "timeout"
    return "crash"


def _pipes(n: int) -> list[tuple[int, int]]:
    return [os.pipe() for _ in range(n)]


def _close(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


SANDBOX_MODES = ("auto", "warm", "cold")


def run_function(
    source: str,
    entry_point: str,
    checks: list[dict[str, str]],
    prelude: str | None = None,
    limits: SandboxLimits | None = None,
    isolation: str = "auto",
    sandbox: str = "auto",
) -> SandboxResult:
    """Load ``source`` in the sandbox and run each check block's ``check(candidate)`` in the harness.

    ``checks``: [{"name": "tests", "source": "<defines check(candidate)>"}, ...], all must pass.
    ``sandbox``: ``warm`` (fork servers, :mod:`warm`; ``infra`` where they cannot run), ``cold`` (two fresh
    interpreters per run) or ``auto`` (warm where it can run, else cold). ``details["sandbox"]`` says which.
    """
    if sandbox not in SANDBOX_MODES:
        raise ValueError(f"sandbox must be one of {SANDBOX_MODES}, got {sandbox!r}")
    limits = limits or SandboxLimits()
    iso = detect_isolation(isolation)
    reason = warm.warm_unavailable(iso) if sandbox != "cold" else "sandbox='cold'"
    if reason is None:
        result = _run_function_warm(source, entry_point, checks, prelude, limits, iso)
        if result is not None:
            return result
        reason = "the fork server could not be started"
    if sandbox == "warm":
        return SandboxResult("infra", {"error": f"warm sandbox unavailable: {reason}", "sandbox": "warm",
                                       "isolation": iso.level})
    result = _run_function_cold(source, entry_point, checks, prelude, limits, iso)
    result.details.update(sandbox="cold", **({"warm_unavailable": reason} if sandbox == "auto" else {}))
    return result


def _run_function_cold(
    source: str, entry_point: str, checks: list[dict[str, str]], prelude: str | None, limits: SandboxLimits,
    iso: Isolation,
) -> SandboxResult:
    t0 = time.monotonic()
    job = json.dumps({"source": source, "entry_point": entry_point, "prelude": prelude, "checks": checks})
    with _Session(iso, limits) as sess:
        (req_r, req_w), (resp_r, resp_w), (res_r, res_w), (out_r, out_w), (hout_r, hout_w) = _pipes(5)
        try:
            cand = spawn_candidate(
                iso,
                limits,
                sess.lease,
                "function",
                sess.candidate_dir,
                req_r,
                resp_w,
                subprocess.DEVNULL,
                out_w,
                subprocess.STDOUT,
                sess.cgroup,
            )
            sess.procs.append(cand)
            harness = spawn_harness(limits, sess.harness_dir, req_w, resp_r, res_w, hout_w, sess.harness_lease)
            sess.procs.insert(0, harness)
        except OSError as e:
            _close(out_r, res_r, hout_r)
            return SandboxResult(
                "infra", {"error": f"could not start the sandbox: {e}"}, time.monotonic() - t0
            )
        finally:
            _close(req_r, req_w, resp_r, resp_w, res_w, out_w, hout_w)
        feed(harness.stdin, job.encode("utf-8"))
        out, hout, res = (  # the candidate's prints never decide a function test: drained, not capped
            Stream(out_r, 4096, counted=False),
            Stream(hout_r, 4096, counted=False),
            Stream(res_r, 1 << 20, False),
        )
        try:
            stop = pump(
                [out, hout, res],
                lambda: res.eof and hout.eof and harness.poll() is not None,
                t0 + limits.timeout_s,
                limits.output_limit_bytes,
            )
        finally:
            _close(out_r, hout_r, res_r)
        result = _function_result(stop, res, hout, out, limits)
        if result.details.pop("candidate_ended", False):
            result.details.update(_death(cand, iso))
            if result.outcome == "crash":
                result.outcome = _signal_outcome(result.details)
        result = sess.tree_outcome(result)
    result.seconds = time.monotonic() - t0
    result.details["isolation"] = iso.level
    return result


def _run_function_warm(
    source: str, entry_point: str, checks: list[dict[str, str]], prelude: str | None, limits: SandboxLimits,
    iso: Isolation,
) -> SandboxResult | None:
    """The warm path (:mod:`warm`); a fork server that died mid-job is restarted and the job retried once,
    then ``infra``. None when the servers cannot be started at all (the caller falls back to cold)."""
    for attempt in range(2):
        t0 = time.monotonic()
        try:
            pair = warm.acquire(iso, limits)
        except warm.ServerDied:
            return None
        reusable = False
        try:
            result = _warm_attempt(source, entry_point, checks, prelude, limits, iso, *pair)
            reusable = True
        except warm.ServerDied as e:
            if attempt == 0:
                warm.STATS["retried"] += 1
                continue
            result = SandboxResult("infra", {"error": f"warm sandbox failed twice: {e}"})
        finally:
            warm.release(pair, reusable)
        result.seconds = time.monotonic() - t0
        result.details.update(isolation=iso.level, sandbox="warm", template_pid=pair[0].proc.pid)
        return result
    return None  # not reached


def _warm_attempt(
    source: str, entry_point: str, checks: list[dict[str, str]], prelude: str | None, limits: SandboxLimits,
    iso: Isolation, cand_srv: warm.WarmServer, harness_srv: warm.WarmServer,
) -> SandboxResult:
    t0 = time.monotonic()
    job = json.dumps({"source": source, "entry_point": entry_point, "prelude": prelude, "checks": checks})
    warm.STATS["jobs"] += 1
    with _Session(iso, limits, warm=True) as sess:
        (req_r, req_w), (resp_r, resp_w), (res_r, res_w), (out_r, out_w), (hout_r, hout_w) = _pipes(5)
        (job_r, job_w), (ready_r, ready_w), (ck_r, ck_w), (cs_r, cs_w), (hk_r, hk_w), (hs_r, hs_w) = _pipes(6)
        cg_fds = [os.open(f, os.O_WRONLY | os.O_CLOEXEC) for f in sess.cgroup.procs_files] if sess.cgroup else []
        mine = [out_r, hout_r, res_r, job_w, ready_r, ck_w, cs_r, hk_w, hs_r]
        try:
            cand_fds = {"req": req_r, "resp": resp_w, "out": out_w, "ready": ready_w, "kill": ck_r, "status": cs_w}
            cand_fds.update({f"cgroup{i}": fd for i, fd in enumerate(cg_fds)})
            cand_srv.submit(warm.candidate_job(iso, limits, sess.lease.uid), cand_fds)
            harness_cfg = {"uid": sess.harness_lease.uid if sess.harness_lease else None,
                           "rlimits": limits.harness_rlimits(), "message_limit": limits.message_limit_bytes}
            harness_srv.submit({"cfg": harness_cfg, "cwd": sess.harness_dir},
                               {"job": job_r, "to": req_w, "from": resp_r, "result": res_w, "out": hout_w,
                                "kill": hk_r, "status": hs_w})
        except warm.ServerDied:
            _close(*mine)
            raise
        finally:
            _close(req_r, req_w, resp_r, resp_w, res_w, out_w, hout_w, job_r, ready_w, ck_r, cs_w, hk_r, hs_w, *cg_fds)
        _send(job_w, job.encode("utf-8"))
        out, hout, res = Stream(out_r, 4096, counted=False), Stream(hout_r, 4096, counted=False), Stream(res_r, 1 << 20, False)
        status, ended, ready = None, False, False
        try:
            stop = pump([out, hout, res], lambda: res.eof and hout.eof, t0 + limits.timeout_s, limits.output_limit_bytes)
            result = _function_result(stop, res, hout, out, limits)
            ended = result.details.pop("candidate_ended", False)
            status = warm.read_status(cs_r, 0.5) if ended else None
            ready = bool(select.select([ready_r], [], [], 0)[0]) and os.read(ready_r, 1) == b"R"
        finally:
            _close(ck_w, hk_w)  # the servers SIGKILL what is left: the candidate's whole tree, the harness
            if status is None:
                status = warm.read_status(cs_r, 5.0)
            sess.tree_dead = status is not None  # sent once nothing of the job is left
            _close(out_r, hout_r, res_r, ready_r, cs_r, hs_r)
        if not ready:
            if not cand_srv.alive():
                raise warm.ServerDied("the candidate fork server died during the job")
            return SandboxResult("infra", {"error": "the warm sandbox could not set up the candidate process",
                                           "candidate_output": out.text()[-1000:]})
        if status is not None:
            result.details["candidate_cpu_s"] = round(status[1], 4)
        if ended:
            result.details.update(warm.exit_details(status[0] if status else None))
            if result.outcome == "crash":
                result.outcome = _signal_outcome(result.details)
        if not cand_srv.alive() and result.outcome != "pass":
            raise warm.ServerDied("the candidate fork server died during the job")
        return sess.tree_outcome(result)


def _send(fd: int, data: bytes) -> None:
    """Write ``data`` and close: at once when the pipe takes it whole (the usual job), else on a thread."""
    os.set_blocking(fd, False)
    try:
        n = os.write(fd, data)
    except BlockingIOError:
        n = 0
    except OSError:
        _close(fd)
        return
    if n == len(data):
        _close(fd)
    else:
        os.set_blocking(fd, True)
        feed(fd, data[n:])


def _function_result(
    stop: str | None, res: Stream, hout: Stream, out: Stream, limits: SandboxLimits
) -> SandboxResult:
    if stop == "timeout":
        return SandboxResult("timeout", {"limit_s": limits.timeout_s})
    if stop == "output":
        return SandboxResult(
            "violation", {"limit": "output", "output_limit_bytes": limits.output_limit_bytes}
        )
    raw = bytes(res.data)
    try:
        (n,) = struct.unpack(">I", raw[:4])
        msg = json.loads(raw[4 : 4 + n].decode("utf-8"))
        outcome, details = msg["outcome"], dict(msg.get("details") or {})
        if outcome not in HARNESS_OUTCOMES:
            raise ValueError(outcome)
    except (struct.error, ValueError, KeyError, TypeError, AttributeError):
        return SandboxResult(
            "infra", {"error": "the harness ended without a result", "harness_output": hout.text()[-2000:]}
        )
    if outcome != "pass" and out.data:
        details["candidate_output"] = out.text()[-1000:]
    return SandboxResult(outcome, details)


def run_program(
    source: str, stdin: str, limits: SandboxLimits | None = None, isolation: str = "auto"
) -> SandboxResult:
    """Run ``source`` as a script in the sandbox with ``stdin``; outcome ``ok`` when it exits 0."""
    limits = limits or SandboxLimits()
    iso = detect_isolation(isolation)
    t0 = time.monotonic()
    with _Session(iso, limits) as sess:
        req_r, req_w = os.pipe()
        try:
            cand = spawn_candidate(
                iso,
                limits,
                sess.lease,
                "program",
                sess.candidate_dir,
                req_r,
                None,
                subprocess.PIPE,
                subprocess.PIPE,
                subprocess.PIPE,
                sess.cgroup,
            )
            sess.procs.append(cand)
        except OSError as e:
            _close(req_w)
            return SandboxResult(
                "infra", {"error": f"could not start the sandbox: {e}"}, time.monotonic() - t0
            )
        finally:
            _close(req_r)
        init = json.dumps({"source": source}).encode("utf-8")
        feed(req_w, struct.pack(">I", len(init)) + init)
        feed(cand.stdin, stdin.encode("utf-8"))
        out = Stream(cand.stdout.fileno(), limits.output_limit_bytes)
        err = Stream(cand.stderr.fileno(), 8192)
        exited_at: list[float] = []

        def done() -> bool:
            if cand.poll() is None:
                return False
            exited_at.append(time.monotonic()) if not exited_at else None
            return (out.eof and err.eof) or time.monotonic() - exited_at[0] > 0.1  # a child may hold the pipe

        stop = pump([out, err], done, t0 + limits.timeout_s, limits.output_limit_bytes)
        result = sess.tree_outcome(_program_result(stop, cand, iso, out, err, limits))
        cand.stdout.close()
        cand.stderr.close()
    result.seconds = time.monotonic() - t0
    result.details.update(isolation=iso.level, sandbox="cold")  # programs always run cold
    return result


def _program_result(
    stop: str | None, cand: subprocess.Popen, iso: Isolation, out: Stream, err: Stream, limits: SandboxLimits
) -> SandboxResult:
    if stop == "timeout":
        return SandboxResult("timeout", {"limit_s": limits.timeout_s})
    if stop == "output":
        return SandboxResult(
            "violation", {"limit": "output", "output_limit_bytes": limits.output_limit_bytes}
        )
    death = _death(cand, iso)
    tail = err.text()[-1000:]
    outcome = _signal_outcome(death)
    if outcome != "crash":
        return SandboxResult(outcome, {**death, "stderr": tail}, stdout=out.text(), stderr=tail)
    if death["exit_code"] != 0:
        last = tail.strip().splitlines()[-1] if tail.strip() else ""
        name, _, message = last.partition(": ")
        limit = limit_hit(name.rsplit(".", 1)[-1], message)
        details = {**death, "stderr": tail, **({"limit": limit} if limit else {})}
        return SandboxResult("violation" if limit else "crash", details, stdout=out.text(), stderr=tail)
    return SandboxResult("ok", {}, stdout=out.text(), stderr=tail)
