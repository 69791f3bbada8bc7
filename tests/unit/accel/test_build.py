"""rlvr.accel.kernels.build: compiles a kernel once per source/compiler/CPU into the cache (atomically), loads it, and
falls back (None, one warning naming the reason) when native kernels are off or the compiler fails."""

import logging
import os
import shutil
import subprocess

import pytest

from rlvr.accel.kernels import build

HAS_CC = shutil.which("cc") is not None or shutil.which("gcc") is not None


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "_loaded", {})
    monkeypatch.setenv("RLVR_KERNELS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RLVR_KERNELS", "1")
    return tmp_path / "cache"


@pytest.mark.skipif(not HAS_CC, reason="no C compiler")
def test_compiled_once_then_loaded_from_the_cache(fresh, monkeypatch):
    lib = build.load("decode_step")
    assert lib is not None and hasattr(lib, "rlvr_decode_step")
    (so,) = fresh.glob("decode_step-*.so")
    assert not [p for p in os.listdir(fresh) if p.startswith(".")]  # no temporary file left
    compiles = []
    run = subprocess.run
    monkeypatch.setattr(build.subprocess, "run",
                        lambda cmd, **kw: (compiles.append(cmd) if "-o" in cmd else None, run(cmd, **kw))[1])
    monkeypatch.setattr(build, "_loaded", {})
    assert build.load("decode_step") is not None
    assert compiles == [] and list(fresh.glob("decode_step-*.so")) == [so]


@pytest.mark.skipif(not HAS_CC, reason="no C compiler")
def test_openmp_kernels_share_torchs_runtime(fresh):
    """packed_attention.c links libgomp by name: in a process that imported torch it is torch's copy, so its
    threads are torch's pool (one OpenMP runtime in the process, not two)."""
    import torch  # noqa: F401

    assert build.load("packed_attention") is not None
    with open("/proc/self/maps") as f:
        gomps = {line.split()[-1] for line in f if "libgomp" in line}
    assert len(gomps) == 1, gomps


def test_a_failing_compiler_falls_back_with_one_warning(fresh, monkeypatch, tmp_path, caplog):
    cc = tmp_path / "badcc"
    cc.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo badcc 1.0; exit 0; }\necho 'badcc: no such luck' >&2\nexit 1\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    with caplog.at_level(logging.WARNING, logger="rlvr.accel.kernels.build"):
        assert build.load("decode_step") is None
        assert build.load("decode_step") is None  # remembered: not retried, not logged again
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1 and "decode_step unavailable" in msgs[0] and "badcc: no such luck" in msgs[0]
    assert not list(fresh.glob("*.so")) and not [p for p in os.listdir(fresh) if p.startswith(".")]


def test_native_off_builds_nothing(fresh, monkeypatch):
    monkeypatch.setenv("RLVR_KERNELS", "0")
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert build.load("decode_step") is None and not fresh.exists()
    monkeypatch.setenv("RLVR_KERNELS", "off")
    assert not build.enabled()
