"""The CLI's surface: usage errors are one paragraph (no traceback), --version, honest --help."""

import os
import subprocess
import sys

import pytest

import rlvr


def rlvr_cli(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "rlvr.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.parametrize("args, needle", [
    (["frobnicate"], "No such command 'frobnicate'"),
    (["run"], "RECIPE"),
    (["run", "x.yaml", "--resum"], "--resum"),
    (["eval", "--model", "m", "--tasks", "t", "--n", "abc"], "--n"),
])
def test_usage_errors_are_one_paragraph_without_traceback(args, needle):
    p = rlvr_cli(*args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    assert needle in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) <= 3, p.stderr  # the error, and where to get help
    assert "--help" in p.stderr


def test_debug_shows_the_traceback_of_a_usage_error():
    p = rlvr_cli("--debug", "frobnicate")
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_version():
    p = rlvr_cli("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"rlvr {rlvr.__version__}"


@pytest.mark.parametrize("cmd, flag", [("run", "--resume"), ("verify", "--details"), ("probe", "--flaky")])
def test_flags_show_no_value_placeholder_in_help(cmd, flag):
    p = rlvr_cli(cmd, "--help")
    assert p.returncode == 0
    line = next(ln for ln in p.stdout.splitlines() if flag in ln)
    assert "<bool>" not in line and "BOOLEAN" not in line, line


def test_dependencies_pinned_to_tested_versions():
    """typer vendors its own click: the error handling is written for this version, so it is pinned."""
    from importlib.metadata import version
    from pathlib import Path

    text = Path(__file__).resolve().parents[2].joinpath("pyproject.toml").read_text()
    assert f'"typer=={version("typer")}"' in text
