"""The warm sandbox (a fork server per worker process inside bubblewrap): one candidate cannot affect the
next one served by the same template, a loop is killed at its limit without killing the template, a dead
template is replaced (the job in flight retried), verdicts equal the cold path's, and where the warm path
cannot run the cold one does, visibly."""

import os
import signal
import threading
import time

import pytest

from rlvr.data.types import Task
from rlvr.verifiers.code import CodeVerifier
from rlvr.verifiers.sandbox import SandboxLimits, detect_isolation, run_function, warm
from rlvr.verifiers.sandbox.isolation import interpreter_names_under_tmp as under_tmp

pytestmark = pytest.mark.skipif(
    detect_isolation("auto").level != "bwrap+uid", reason="the warm sandbox needs bubblewrap and root"
)

CHECK_EMPTY = [{"name": "tests", "source": "def check(candidate):\n    r = candidate(0)\n    assert r == [], r\n"}]
LIMITS = SandboxLimits(timeout_s=10.0, memory_mb=256, file_size_mb=48)

# Everything a candidate could try to leave behind for the next one.
POLLUTER = r'''
import builtins, ctypes, math, os, random, resource, signal, socket, sys, threading, time, typing

def f(x):
    open("/tmp/leak.txt", "w").write("left behind")
    open("leak_cwd.txt", "w").write("left behind")
    with open("/tmp/fill.bin", "wb") as fh:            # 40 MiB of the private /tmp
        fh.write(b"x" * (40 << 20))
    with open("/dev/shm/fill.bin", "wb") as fh:        # and 20 MiB of /dev/shm
        fh.write(b"x" * (20 << 20))
    builtins.abs = lambda o: 42  # (not len: the runner's own reply needs it)
    builtins.LEAKED = True
    math.sqrt = lambda v: -1.0
    typing.LEAKED = True
    sys.modules["leaked_module"] = sys
    os.environ["LEAKED_VAR"] = "1"
    os.umask(0)
    sys.setrecursionlimit(50)
    random.seed(0)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmget(0x5EED, 4096, 0o1666)                  # a SysV segment outlives its creator
    threading.Thread(target=time.sleep, args=(600,)).start()
    r, w = os.pipe()
    if os.fork() == 0:                                  # a daemon in its own session, deaf to SIGTERM,
        os.setsid()                                     # with a listening socket and 100 MiB
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        s = socket.socket()
        s.bind(("127.0.0.1", 47011))
        s.listen()
        hold = bytearray(100 << 20)
        hold[:: 4096] = b"z" * len(range(0, len(hold), 4096))
        os.write(w, b"up")
        while True:
            time.sleep(1)
    os.read(r, 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))
    resource.setrlimit(resource.RLIMIT_AS, (200 << 20, 200 << 20))
    return []
'''

DETECTOR = r'''
import builtins, ctypes, math, os, random, resource, socket, sys, threading, typing
INTERPRETER_UNDER_TMP = %r

def f(x):
    leaks = []
    for path in ("/tmp/leak.txt", "/tmp/fill.bin", "/dev/shm/fill.bin", "leak_cwd.txt"):
        if os.path.exists(path):
            leaks.append("file " + path)
    if sorted(os.listdir("/tmp")) != INTERPRETER_UNDER_TMP or os.listdir("/dev/shm") or os.getcwd() != "/tmp":
        leaks.append("tmp not fresh")
    if abs(-1) != 1 or hasattr(builtins, "LEAKED"):
        leaks.append("builtins")
    if math.sqrt(4) != 2.0 or hasattr(typing, "LEAKED") or "leaked_module" in sys.modules:
        leaks.append("modules")
    if "LEAKED_VAR" in os.environ:
        leaks.append("environment")
    old = os.umask(0o077)
    if old != 0o077:
        leaks.append("umask")
    if sys.getrecursionlimit() != 1000:
        leaks.append("recursion limit")
    if random.random() == random.Random(0).random():
        leaks.append("random state")
    if resource.getrlimit(resource.RLIMIT_NOFILE) != (256, 256):
        leaks.append("rlimit NOFILE")
    if resource.getrlimit(resource.RLIMIT_AS) != (256 << 20, 256 << 20):
        leaks.append("rlimit AS")
    if ctypes.CDLL(None).shmget(0x5EED, 0, 0) != -1:
        leaks.append("SysV shared memory")
    if threading.active_count() != 1:
        leaks.append("thread")
    others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
    if others:
        leaks.append("processes " + ",".join(others))
    try:
        socket.create_connection(("127.0.0.1", 47011), timeout=1).close()
        leaks.append("listening socket")
    except OSError:
        pass
    try:                                                # with the polluter's 160 MiB this would go OOM
        block = bytearray(150 << 20)
        block[:: 4096] = b"y" * len(range(0, len(block), 4096))
    except MemoryError:
        leaks.append("memory")
    return leaks
''' % (under_tmp(),)


def _run(source, checks=CHECK_EMPTY, limits=LIMITS, prelude=None):
    return run_function(source, "f", checks, prelude, limits, sandbox="warm")


def test_one_candidate_cannot_affect_the_next_in_the_same_template():
    first = _run(POLLUTER)
    assert first.outcome == "pass" and first.details["sandbox"] == "warm", first
    second = _run(DETECTOR)
    assert second.details["template_pid"] == first.details["template_pid"]  # the same warm server
    assert (second.outcome, second.details.get("error")) == ("pass", None), second


def test_the_detector_sees_every_leak_when_there_is_one():
    """Teeth: polluter and detector in one candidate process -- every kind of leak is reported."""
    both = (POLLUTER.replace("def f(x):", "def pollute(x):") + DETECTOR.replace("def f(x):", "def detect(x):")
            + "\ndef f(x):\n    pollute(x)\n    return detect(x)\n")
    res = _run(both)
    assert res.outcome == "wrong", res
    for leak in ("file /tmp/leak.txt", "file leak_cwd.txt", "tmp not fresh", "builtins", "modules", "environment",
                 "umask", "recursion limit", "random state", "rlimit NOFILE", "rlimit AS", "SysV shared memory",
                 "thread", "processes", "listening socket", "memory"):
        assert leak in res.details["error"], leak


def test_the_template_imported_nothing_of_a_candidate_and_each_run_is_a_fresh_process():
    src = "import os, sys\nMARK = 'candidate-%d'\ndef f(x):\n    sys.modules['mark'] = sys\n    return [os.getpid(), os.getppid(), 'mark' in sys.modules]\n"
    check = "def check(candidate):\n    r = candidate(0)\n    assert False, r\n"
    pids = []
    for i in range(2):
        res = _run(src % i, [{"name": "tests", "source": check}])
        got = eval(res.details["error"].split(": ", 1)[1])
        assert got[1] == 1 and got[2] is True  # a child of the template (PID 1 of the namespace)
        pids.append(got[0])
    assert pids[0] != pids[1]


def test_a_loop_is_killed_at_its_limit_and_the_template_lives_on():
    ok = _run("def f(x):\n    return []\n")
    t0 = time.monotonic()
    res = _run("import os\ndef f(x):\n    if os.fork() == 0:\n        os.setsid()\n    while True:\n        pass\n",
               limits=SandboxLimits(timeout_s=1.0))
    assert res.outcome == "timeout" and time.monotonic() - t0 < 3.0
    after = _run(DETECTOR)
    assert after.outcome == "pass", after  # the looping tree is gone
    assert after.details["template_pid"] == ok.details["template_pid"]


def test_a_candidate_killed_by_the_cpu_limit_is_a_timeout_and_a_segfault_a_crash():
    res = _run("def f(x):\n    while True:\n        pass\n", limits=SandboxLimits(timeout_s=10.0, cpu_s=1))
    assert res.outcome == "timeout" and res.details.get("limit") == "cpu", res
    res = _run("import ctypes\ndef f(x):\n    return ctypes.string_at(0)\n")
    assert res.outcome == "crash" and res.details.get("signal") == "SIGSEGV", res


def _template(source="def f(x):\n    return []\n"):
    res = _run(source)
    assert res.outcome == "pass"
    return res.details["template_pid"]


def _wait_dead(pid):
    for _ in range(500):  # SIGKILL takes effect when the victim is next scheduled
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)


def test_a_dead_template_is_replaced_between_jobs():
    pid = _template()
    os.kill(pid, signal.SIGKILL)
    _wait_dead(pid)
    before = dict(warm.STATS)
    assert _template() != pid
    assert warm.STATS["respawned"] == before["respawned"] + 1


def test_a_template_that_dies_mid_job_is_replaced_and_the_job_retried():
    pid = _template()
    killer = threading.Timer(0.5, os.kill, (pid, signal.SIGKILL))
    before = dict(warm.STATS)
    killer.start()
    res = _run("import time\ndef f(x):\n    time.sleep(1.5)\n    return []\n")
    killer.join()
    assert res.outcome == "pass", res  # retried on a fresh template, not blamed on the candidate
    assert res.details["template_pid"] != pid
    assert warm.STATS["retried"] == before["retried"] + 1


def test_warm_and_cold_give_the_same_verdicts():
    from rlvr.data.humaneval import load_humaneval, return_none_completion

    tasks = load_humaneval()[:6]
    hostile = ["import sys\nsys.exit(0)\n", "def f(:\n", "def f(x):\n    raise ValueError('no')\n",
               "def f(x):\n    return 1 / 0\n"]
    cases = [(t, t.solution[len(t.prompt):]) for t in tasks] + [(t, return_none_completion(t)) for t in tasks[:3]]
    gold = {"tests": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "f"}
    cases += [(Task(id="h", kind="code", gold=gold), f"```python\n{h}```") for h in hostile]
    for task, completion in cases:
        w = CodeVerifier(timeout_s=10.0, sandbox="warm").verify(task, completion)
        c = CodeVerifier(timeout_s=10.0, sandbox="cold").verify(task, completion)
        assert (w.outcome, w.details["sandbox"], c.details["sandbox"]) == (c.outcome, "warm", "cold"), task.id


def test_the_cold_path_runs_where_the_warm_one_cannot_and_says_so():
    gold = {"tests": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "f"}
    task, good = Task(id="f", kind="code", gold=gold), "```python\ndef f(x):\n    return x + 1\n```"
    res = CodeVerifier(timeout_s=10.0, isolation="rlimits").verify(task, good)
    assert res.outcome == "pass" and res.details["sandbox"] == "cold"
    assert "bwrap+uid" in res.details["warm_unavailable"]
    res = CodeVerifier(timeout_s=10.0, isolation="rlimits", sandbox="warm").verify(task, good)
    assert res.outcome == "infra" and "warm sandbox unavailable" in res.details["error"]
    assert CodeVerifier(timeout_s=10.0, sandbox="cold").verify(task, good).details["sandbox"] == "cold"
    with pytest.raises(ValueError, match="sandbox must be one of"):
        run_function("def f(x):\n    return x\n", "f", CHECK_EMPTY, sandbox="lukewarm")


def test_a_worker_whose_setup_fails_is_infra_not_a_crash_of_the_candidate(monkeypatch):
    """The worker proves it reached the candidate's code (one byte on its own pipe, written after setup):
    without it the verdict is ``infra``, kept out of the advantages, whatever the harness saw."""
    bad = dict(warm.candidate_job(detect_isolation("auto"), LIMITS, 1_500_000_001), uid="no such uid")
    monkeypatch.setattr(warm, "candidate_job", lambda *a: bad)
    res = _run("def f(x):\n    return []\n")
    assert res.outcome == "infra" and "could not set up" in res.details["error"], res
    monkeypatch.undo()
    assert _run("def f(x):\n    return []\n").outcome == "pass"  # the template itself is fine


def test_concurrent_runs_in_one_process_each_get_their_own_template():
    from concurrent.futures import ThreadPoolExecutor

    checks = [{"name": "tests", "source": "def check(candidate):\n    assert candidate(2) == 4\n"}]
    srcs = ["def f(x):\n    return x * 2\n", "def f(x):\n    return x + 1\n", "def f(x):\n    while True:\n        pass\n"]
    with ThreadPoolExecutor(2) as ex:
        res = list(ex.map(lambda s: _run(s, checks, SandboxLimits(timeout_s=1.5)), srcs[::-1] + srcs[:1]))
    assert [r.outcome for r in res] == ["timeout", "wrong", "pass", "pass"]
    assert all(r.details["sandbox"] == "warm" for r in res)
