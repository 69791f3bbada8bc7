"""Running derived recipes as one-thread `rlvr run` subprocesses, a few at a time, and reading their summaries
(bench/screen_validation.py, bench/plan_situations.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml


def run_env() -> dict:
    """One thread per run, idle threads asleep (several runs share the cores)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def rlvr_run(recipe: dict, run_dir: Path, *extra: str) -> tuple[list[str], Path]:
    """The command running ``recipe`` (written beside ``run_dir`` as NAME.yaml) in ``run_dir``, and its log path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir.parent / f"{run_dir.name}.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return [sys.executable, "-m", "rlvr.cli", "run", str(path), "--set", "threads=1", "--run-dir", str(run_dir),
            *extra], run_dir.parent / f"{run_dir.name}.log"


def pool(jobs: list[tuple[list[str], Path]], parallel: int) -> None:
    """Run the commands, ``parallel`` at once, each logging to its path; a failure stops the bench."""
    pending, running = list(jobs), []
    while pending or running:
        while pending and len(running) < parallel:
            args, log = pending.pop(0)
            log.parent.mkdir(parents=True, exist_ok=True)
            print(f"start: {log.with_suffix('')}", flush=True)
            running.append((subprocess.Popen(args, stdout=open(log, "a"), stderr=subprocess.STDOUT,  # noqa: SIM115
                                             env=run_env()), log))
        time.sleep(1.0)
        for proc, log in list(running):
            if proc.poll() is None:
                continue
            running.remove((proc, log))
            if proc.returncode != 0:
                for p, _ in running:
                    p.terminate()
                raise SystemExit(f"failed (exit {proc.returncode}): see {log}")
            print(f"done: {log.with_suffix('')}", flush=True)


def finished(run_dir: Path) -> bool:
    return (run_dir / "summary.json").exists()


def stage_rows(run_dir: Path) -> list[dict]:
    """A finished run's summary.json rows, one per stage and evaluation."""
    return json.loads((run_dir / "summary.json").read_text())["stages"]


def stage_row(run_dir: Path, stage: str) -> dict:
    """The summary.json row of ``stage`` (``base`` for the starting model's evaluation)."""
    for st in stage_rows(run_dir):
        if st["stage"] == stage:
            return st
    raise SystemExit(f"{run_dir}/summary.json: no stage {stage}")


def stage_pass(run_dir: Path, stage: str) -> float:
    return stage_row(run_dir, stage)["pass_at_1"]
