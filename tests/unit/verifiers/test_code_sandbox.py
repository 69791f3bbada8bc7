"""The sandbox's properties, one test each: limits, uid, environment, filesystem, tree kill, wire format."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from rlvr.verifiers.sandbox import (
    LEVELS,
    SandboxLimits,
    detect_isolation,
    isolation_report,
    run_function,
    run_program,
)
from rlvr.verifiers.sandbox import isolation as iso_mod
from rlvr.verifiers.sandbox.uids import UID_COUNT, acquire_uid, kill_uid
from rlvr.verifiers.sandbox.wire import WireError, from_wire, recv_msg, send_msg, to_wire

ISO = detect_isolation()
BWRAP_ONLY = pytest.mark.skipif(not ISO.uses_bwrap, reason="needs bubblewrap")
UID_ONLY = pytest.mark.skipif(not ISO.uid_switch, reason="needs root (uid switch)")

PROBE_ENV = r"""
import json, os, resource
names = ["RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_NPROC"]
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print(json.dumps({"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
                  "env": dict(os.environ), "cwd": os.getcwd(), "files": sorted(os.listdir(".")),
                  "limits": {n: resource.getrlimit(getattr(resource, n)) for n in names},
                  "nnp": status["NoNewPrivs"].strip()}))
"""


def _env_report(isolation="auto", **limits):
    res = run_program(PROBE_ENV, "", SandboxLimits(**limits), isolation)
    assert res.outcome == "ok", res
    return json.loads(res.stdout)


# --- wire format -----------------------------------------------------------------------------------


def _same(a, b):
    if type(a) is not type(b):
        return False
    if type(a) is float and math.isnan(a):
        return math.isnan(b)
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(10**40),
        1.5,
        float("nan"),
        float("inf"),
        -0.0,
        "",
        "héllo\x00\ud800",
        [1, [2, (3, 4)]],
        (1,),
        (),
        {1, 2},
        frozenset({"a"}),
        {"k": [1]},
        {(1, 2): {3: None}},
        [True, 1, 1.0],
    ],
)
def test_wire_roundtrip_keeps_exact_types(value):
    back = from_wire(json.loads(json.dumps(to_wire(value))))
    assert _same(back, value)


class RiggedInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize(
    "value",
    [
        RiggedInt(3),
        type("S", (str,), {})("x"),
        [1, RiggedInt(2)],
        {"a": type("L", (list,), {})()},
        object(),
        (x for x in []),
        b"bytes",
        1 + 2j,
        lambda: 0,
    ],
)
def test_wire_rejects_anything_not_exactly_plain(value):
    with pytest.raises(WireError):
        to_wire(value)


@pytest.mark.parametrize(
    "wire",
    [
        {"t": "evil", "v": []},
        {"t": "set", "v": [[1]]},
        {"t": "tuple"},
        {"t": "tuple", "v": [], "x": 1},
        {"t": "dict", "v": [[1, 2, 3]]},
        {"t": "dict", "v": [[[1], 2]]},
        {"a": 1},
    ],
)
def test_wire_rejects_malformed_values(wire):
    with pytest.raises(WireError):
        from_wire(wire)


def test_wire_rejects_deep_nesting_and_oversized_messages():
    deep = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(WireError):
        to_wire(deep)
    r, w = os.pipe()
    try:
        send_msg(w, {"value": "x" * 5000})
        with pytest.raises(WireError):
            recv_msg(r, limit=1000)
    finally:
        os.close(r)
        os.close(w)


# --- isolation -------------------------------------------------------------------------------------


def test_isolation_report_names_the_level():
    rep = isolation_report()
    assert rep["level"] in LEVELS and rep["level"] == ISO.level
    assert {"python", "namespaces", "network", "tree_kill", "uid_switch", "notes"} <= set(rep)
    if shutil.which("bwrap") and os.geteuid() == 0:  # this project's machines: bubblewrap is installed
        assert rep["level"] == "bwrap+uid" and "pid" in rep["namespaces"] and "net" in rep["namespaces"]


def test_fallback_isolation_warns_loudly(caplog):
    iso_mod._cache.pop((os.getpid(), "rlimits"), None)
    with caplog.at_level(logging.WARNING, logger="rlvr.verifiers.sandbox"):
        iso = detect_isolation("rlimits")
    assert iso.level in ("rlimits+uid", "rlimits") and not iso.uses_bwrap
    assert any("WEAKER" in r.getMessage() for r in caplog.records)


@UID_ONLY
@pytest.mark.parametrize("isolation", ["auto", "rlimits"])
def test_candidate_runs_unprivileged_with_hard_limits_and_scrubbed_env(isolation, monkeypatch):
    monkeypatch.setenv("RLVR_HOST_SECRET", "do-not-leak")
    rep = _env_report(isolation, timeout_s=5, memory_mb=300, max_procs=7, file_size_mb=3, open_files=99)
    iso = detect_isolation(isolation)
    assert rep["uid"] == rep["euid"] == rep["gid"] and iso.uid_base <= rep["uid"] < iso.uid_base + UID_COUNT
    assert rep["groups"] in ([], [rep["gid"]])
    assert rep["nnp"] == "1"
    lim = rep["limits"]
    assert lim["RLIMIT_AS"] == [300 << 20] * 2 and lim["RLIMIT_CPU"] == [6, 6]
    assert lim["RLIMIT_FSIZE"] == [3 << 20] * 2 and lim["RLIMIT_NOFILE"] == [99, 99]
    assert lim["RLIMIT_CORE"] == [0, 0] and lim["RLIMIT_NPROC"] == [7, 7]
    assert "RLVR_HOST_SECRET" not in rep["env"] and set(rep["env"]) <= {
        "PATH",
        "LANG",
        "LC_ALL",
        "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
        "TMPDIR",
        "HOME",
        "PWD",
        "OPENBLAS_NUM_THREADS",  # numpy under the address-space and process caps: one BLAS thread
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    }
    # a fresh working directory: empty but for the interpreter's own read-only directories, bound back
    # where the interpreter (e.g. a virtual environment) itself lives under /tmp
    assert rep["files"] == iso_mod.interpreter_names_under_tmp()


@BWRAP_ONLY
def test_bwrap_root_is_read_only_and_tmp_private(tmp_path):
    marker = "/tmp/rlvr-test-host-marker"
    with open(marker, "w") as f:
        f.write("host")
    try:
        src = (
            f"import os\nprint(os.path.exists({marker!r}), os.path.exists('/work'),"
            f" os.path.exists({str(tmp_path)!r}))\n"
            "try:\n    open('/usr/rlvr-x', 'w')\nexcept OSError as e:\n    print(e.errno)\n"
        )
        res = run_program(src, "")
        assert res.outcome == "ok", res
        assert res.stdout.split() == ["False", "False", "False", "30"]  # EROFS
    finally:
        os.unlink(marker)


@UID_ONLY
def test_process_cap_is_enforced():
    src = (
        "import threading, time\nn = 0\ntry:\n    for _ in range(50):\n"
        "        threading.Thread(target=time.sleep, args=(2,), daemon=True).start()\n        n += 1\n"
        "except RuntimeError:\n    pass\nprint(n)\n"
    )
    res = run_program(src, "", SandboxLimits(timeout_s=5, max_procs=6))
    assert res.outcome == "ok", res
    assert int(res.stdout) <= 5  # the main thread is the sixth task


def test_cpu_limit_kills_a_busy_candidate():
    res = run_program("while True:\n    pass\n", "", SandboxLimits(timeout_s=8, cpu_s=1))
    assert res.outcome == "timeout" and res.details.get("limit") == "cpu", res
    assert res.seconds < 7


def test_wall_timeout_and_output_cap():
    t0 = time.monotonic()
    assert run_program("import time\ntime.sleep(30)", "", SandboxLimits(timeout_s=0.8)).outcome == "timeout"
    assert time.monotonic() - t0 < 3
    res = run_program("print('x' * 5000)", "", SandboxLimits(output_limit_bytes=1000))
    assert res.outcome == "violation" and res.details["limit"] == "output"


SESSION_ESCAPE = r"""
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "%s"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("started")
"""


def _alive_with(mark):
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if mark.encode() in f.read():
                    out.append(pid)
        except OSError:
            pass
    return out


@pytest.mark.parametrize("isolation", ["auto", "rlimits"])
def test_setsid_grandchild_does_not_outlive_the_run(isolation):
    if not detect_isolation(isolation).uid_switch and not detect_isolation(isolation).uses_bwrap:
        pytest.xfail("documented: without a PID namespace or uid switch setsid children escape")
    mark = f"rlvr-test-escape-{isolation}"
    res = run_program(SESSION_ESCAPE % mark, "", SandboxLimits(timeout_s=5), isolation)
    assert res.outcome == "ok" and "started" in res.stdout, res
    for _ in range(20):
        if not _alive_with(mark):
            break
        time.sleep(0.05)
    assert _alive_with(mark) == []


def _live_procs_of(uid):
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                st = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if int(st["Uid"].split()[0]) == uid and not st["State"].strip().startswith("Z"):
            out.append(int(pid))
    return out


@UID_ONLY
def test_uid_leases_are_exclusive_and_kill_uid_kills_everything():
    a, b = acquire_uid(ISO.uid_base), acquire_uid(ISO.uid_base)
    try:
        assert a.uid != b.uid
        p = subprocess.Popen(
            ["/bin/sh", "-c", "setsid sleep 60 & sleep 60"], user=a.uid, group=a.uid, extra_groups=[], cwd="/"
        )
        time.sleep(0.1)
        assert kill_uid(a.uid) >= 1
        assert p.wait(timeout=5) == -9
        for _ in range(40):  # nothing left alive, the setsid sleeper included (zombies wait for init)
            if not _live_procs_of(a.uid):
                break
            time.sleep(0.05)
        assert _live_procs_of(a.uid) == []
    finally:
        a.release()
        b.release()


def test_concurrent_runs_do_not_interfere():
    tests = [{"name": "tests", "source": "def check(candidate):\n    assert candidate(20) == 210\n"}]
    results = [None] * 4

    def one(i):
        results[i] = run_function("def tri(n):\n    return n * (n + 1) // 2\n", "tri", tests)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.outcome for r in results] == ["pass"] * 4


def test_verifiers_do_not_import_torch():
    code = (
        "import sys, rlvr.verifiers.code, rlvr.verifiers.sandbox, rlvr.data.humaneval, "
        "rlvr.verifiers.probes.code\nassert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
