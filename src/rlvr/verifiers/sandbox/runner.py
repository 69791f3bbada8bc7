"""The candidate-side runner: the first code that runs in the sandboxed process.

Sent into the sandbox as ``python -c <wire.py source + this file's source>`` with a JSON config as
argv[1]. It sets its own rlimits (soft = hard), optionally unshares network and mounts (fallback
isolation, as root), drops to the leased unprivileged uid with ``setresuid``, sets no_new_privs,
and only then reads the candidate's source from the request pipe and runs it.

Function mode: it loads the candidate module, reports ``ready`` and then serves calls from the
trusted harness: each request carries plain-data args, each reply a plain-data value (or the
exception's type name and message). It never receives the tests or any expected value.
Program mode: it runs the source as ``__main__`` with the real stdin/stdout.
"""

import json
import os
import sys

try:  # inside the sandbox the wire and values modules' sources are prepended to this file's
    send_msg  # noqa: B018
except NameError:  # imported normally (tests, linters)
    from rlvr.verifiers.sandbox.forkserver import serve_forever
    from rlvr.verifiers.sandbox.values import Context, decode_value, describe, encode_value, module_namespace
    from rlvr.verifiers.sandbox.wire import recv_msg, send_msg

_CLONE_NEWNS, _CLONE_NEWNET, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x40000000, 0x04000000, 0x08000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 16384, 1 << 18
_PR_SET_NO_NEW_PRIVS = 38


_MS_RDONLY, _MS_REMOUNT, _MS_BIND = 1, 32, 4096


def _unshare(tmpfs_mb, keep=()):
    """As root without bubblewrap: private network (loopback down), private SysV / POSIX IPC (shared memory,
    semaphores and message queues outlive their creator: an earlier candidate's would reach the next) and
    private /tmp, /var/tmp, /dev/shm; the directories in ``keep`` (the interpreter's, when it lives under them)
    stay visible, read-only."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    done = {"net": libc.unshare(_CLONE_NEWNET) == 0, "ipc": libc.unshare(_CLONE_NEWIPC) == 0, "tmp": False}
    if libc.unshare(_CLONE_NEWNS) == 0 and libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) == 0:
        held = _hold(keep)
        opts = b"size=%dm,mode=1777" % tmpfs_mb
        flags = _MS_NOSUID | _MS_NODEV
        done["tmp"] = libc.mount(b"tmpfs", b"/tmp", b"tmpfs", flags, opts) == 0
        for d in (b"/var/tmp", b"/dev/shm"):
            if os.path.isdir(d):
                libc.mount(b"tmpfs", d, b"tmpfs", flags, opts)
        _rebind(libc, held)
    return done


def _hold(keep):
    """O_PATH descriptors of the directories to bind back after fresh mounts hide them."""
    return {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in keep if os.path.isdir(p)}


def _rebind(libc, held):
    for path, fd in held.items():
        os.makedirs(path, 0o755, exist_ok=True)
        src, dst = b"/proc/self/fd/%d" % fd, os.fsencode(path)
        if libc.mount(src, dst, None, _MS_BIND | _MS_REC, None) == 0:
            libc.mount(None, dst, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)
        os.close(fd)


def _no_new_privs():
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    except Exception:  # noqa: BLE001, S110 - best effort; bubblewrap sets it already
        pass


def drop_privileges(cfg):
    """Limits first, then namespaces, then the uid switch; returns the working directory."""
    import resource

    for name, value in cfg["rlimits"]:
        resource.setrlimit(getattr(resource, name), (value, value))
    private = _unshare(cfg["tmpfs_mb"], cfg.get("keep") or ()) if cfg.get("unshare") else {}
    uid = cfg.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if cfg.get("no_new_privs", True):
        _no_new_privs()
    cwd = "/tmp" if private.get("tmp") else cfg["cwd"]
    os.chdir(cwd)
    os.environ["HOME"] = cwd
    os.umask(0o077)
    return cwd


def serve(source, entry_point, fd_in, fd_out, limit):
    """Load the candidate, then answer call requests until the harness closes the pipe."""
    g = module_namespace("candidate")
    try:
        exec(compile(source, "solution.py", "exec", dont_inherit=True), g)  # noqa: S102 - sandboxed, unprivileged
        fn = g[entry_point]
        if not callable(fn):
            raise TypeError(f"{entry_point} is not callable")
    except KeyError:
        send_msg(fd_out, {"load_error": {"type": "NameError", "message": f"{entry_point} is not defined"}})
        return
    except Exception as e:  # noqa: BLE001 - reported to the harness as a crash
        send_msg(fd_out, {"load_error": describe(e)})
        return
    send_msg(fd_out, {"ready": True})
    ctx = Context(g, "candidate")  # the tests' objects arrive as instances of the candidate's own classes
    while True:
        try:
            msg = recv_msg(fd_in, limit)
        except EOFError:
            return
        args, kwargs = decode_value(msg["args"], ctx), decode_value(msg["kwargs"], ctx)
        try:
            result = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the harness re-raises it inside the tests
            send_msg(fd_out, {"raised": describe(e)})
            continue
        try:
            reply = {"value": encode_value(result)}
        except Exception as e:  # noqa: BLE001 - WireError, RecursionError, a hostile conversion
            reply = {"bad_value": str(e)[:300]}
        reply.update(mutated(msg, args, kwargs))
        send_msg(fd_out, reply)


def mutated(msg, args, kwargs):
    """The arguments as the call left them, when it changed them (the harness mirrors it in place)."""
    try:
        after = {"args": encode_value(args), "kwargs": encode_value(kwargs)}
    except Exception:  # noqa: BLE001 - an argument the call turned into something that cannot cross
        return {}
    return {"mutated": after} if after != {"args": msg["args"], "kwargs": msg["kwargs"]} else {}


def run_program(source):
    """Run the source as a script with the real stdin/stdout (stdin/stdout tasks)."""
    sys.argv = ["main.py"]
    exec(compile(source, "main.py", "exec", dont_inherit=True), module_namespace("__main__"))  # noqa: S102


def _fresh_namespaces(tmpfs_mb, keep):
    """In the warm worker (still root): its own mount, IPC and UTS namespaces -- a private mount tree with a
    fresh empty /tmp and /dev/shm (the interpreter's directories that lie under /tmp bound back, read-only);
    SysV/POSIX IPC objects (which outlive their creator) die with the job. The network namespace is the
    server's own (bubblewrap's: loopback only, no route out), used by one job at a time: a job's sockets
    die with its processes, and changing anything else in it needs privileges the candidate never has."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWUTS) != 0:
        raise OSError(ctypes.get_errno(), "unshare of the job's namespaces failed")

    def mount(src, dst, fstype, flags, data=None):
        if libc.mount(src, dst, fstype, flags, data) != 0:
            raise OSError(ctypes.get_errno(), f"mount {dst!r} failed")

    mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE)
    held = _hold(keep)
    opts = b"size=%dm,mode=1777" % tmpfs_mb
    mount(b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, opts)
    if os.path.isdir("/dev/shm"):
        mount(b"tmpfs", b"/dev/shm", b"tmpfs", _MS_NOSUID | _MS_NODEV, opts)
    _rebind(libc, held)


def warm_job(job, fds):
    """The warm worker: join the job's cgroup, fresh namespaces and mounts, limits, uid drop -- then it is the
    candidate process of a cold run (reports ``ready`` on its own pipe first, so a setup failure is never the
    candidate's)."""
    out = fds.pop("out")
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for name in [n for n in fds if n.startswith("cgroup")]:  # before anything else starts: the whole tree
        os.write(fds[name], b"0")
        os.close(fds.pop(name))
    _fresh_namespaces(job["tmpfs_mb"], job.get("keep") or ())
    drop_privileges({"rlimits": job["rlimits"], "uid": job["uid"], "cwd": "/tmp"})
    if "random" in sys.modules:  # imported by the template: reseed, or every candidate shares one stream
        sys.modules["random"].seed()
    os.write(fds["ready"], b"R")
    os.close(fds["ready"])
    try:
        init = recv_msg(fds["req"], job["message_limit"])
        serve(init["source"], init["entry_point"], fds["req"], fds["resp"], job["message_limit"])
    finally:
        try:
            sys.stdout.flush()
        except Exception:  # noqa: BLE001, S110 - the candidate may have closed or replaced it
            pass
    return 0


# modules the template imports once, so a candidate's ``from typing import List`` costs nothing
WARM_PRELOAD = ("typing", "collections", "math", "re", "itertools", "functools", "heapq", "bisect",
                "string", "ctypes", "resource")


def warm_server(cfg):
    """The template inside bubblewrap (PID 1 of its namespace): imports, then forks one fresh worker per job
    (forkserver.py)."""
    import gc
    import importlib

    for name in WARM_PRELOAD:
        importlib.import_module(name)
    gc.freeze()  # the template's objects are never collected: a worker's collections do not touch them
    serve_forever(cfg["ctl_fd"], warm_job, pid1=True)


def main():
    cfg = json.loads(sys.argv[1])
    if cfg["mode"] != "server":
        drop_privileges(cfg)
    sys.path.extend(cfg.get("sys_path") or [])  # installed packages, without site's .pth processing
    if hasattr(sys, "set_int_max_str_digits"):  # big-int answers cross as JSON digits (parse cost bounded)
        sys.set_int_max_str_digits(100_000)
    if cfg["mode"] == "server":
        warm_server(cfg)
        return
    fd_in, fd_out = cfg["fd_in"], cfg.get("fd_out")
    init = recv_msg(fd_in, cfg["message_limit"])
    if cfg["mode"] == "program":
        os.close(fd_in)
        run_program(init["source"])
    else:
        serve(init["source"], init["entry_point"], fd_in, fd_out, cfg["message_limit"])
