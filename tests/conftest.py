"""Shared fixtures: the smallest tiny model (hidden 64, 2 layers) saved in HF format, bench/ modules, GPU and slow
markers."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def bench_import():
    """``import_module`` for bench/'s scripts by name (``bench_import("scaling")``), bench/ on ``sys.path`` while the
    test module runs (their own imports, ``_common`` and the rest, resolve there)."""
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(BENCH))


def pytest_addoption(parser):
    parser.addoption("--accel", choices=("on", "off"), default=None,
                     help="run with rlvr's CPU accelerations (rlvr.accel) on or off (the plain PyTorch / "
                          "transformers path); default: on unless RLVR_ACCEL=0")


def pytest_configure(config):
    choice = config.getoption("--accel")
    if choice is not None:  # subprocesses (the CLI, workers) inherit it
        os.environ["RLVR_ACCEL"] = "1" if choice == "on" else "0"
    from rlvr import accel

    accel.enable()


@pytest.fixture(autouse=True)
def _accelerations():
    """Every test starts with the session's accelerations (on, or off under --accel off / RLVR_ACCEL=0): a
    test that turns them off cannot leak into the next."""
    from rlvr import accel

    accel.enable()
    yield


def pytest_collection_modifyitems(config, items):
    from rlvr import accel

    if not accel.requested():  # tests of the accelerations themselves need them on
        skip_accel = pytest.mark.skip(reason="tests the accelerations: RLVR_ACCEL=0 / --accel off")
        for item in items:
            if item.get_closest_marker("accel") is not None or item.path.parent.name == "accel":
                item.add_marker(skip_accel)
    if "slow" not in (config.getoption("-m") or "") and not os.environ.get("RLVR_SLOW"):
        # slow tests (multi-process, Ray, torchrun end to end) run with `-m slow` or RLVR_SLOW=1
        skip_slow = pytest.mark.skip(reason="slow: run with -m slow (or RLVR_SLOW=1)")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip_slow)
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A 'test'-size tiny model + tokenizer saved in HF format (built once per session)."""
    from rlvr.models.tiny import build_tiny

    d = tmp_path_factory.mktemp("tiny") / "model"
    build_tiny(d, size="test", seed=0)
    return str(d)


@pytest.fixture
def rlvr_cli(capsys):
    """Run ``rlvr ARGS`` in-process (``rlvr.cli.main`` with ``sys.argv`` set: the command's own code path
    without a Python start) -> ``(exit code, stdout, stderr)``."""
    import sys

    from rlvr.cli import main

    def run(*args):
        old, sys.argv = sys.argv, ["rlvr", *map(str, args)]
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code
        finally:
            sys.argv = old
        cap = capsys.readouterr()
        return code, cap.out, cap.err

    return run
