"""Importing rlvr's trainers and CLI loads none of the heavy optional packages.

Peak memory is an acceptance line against TRL (bench/run.py measures each trainer's own process): a
module-level import of sympy (~33 MB resident), scipy (~35 MB), datasets/pandas/pyarrow (~80 MB) or
transformers' model code (~170 MB with what it pulls in) would be paid by every rlvr process, including
the CLI's ``--help`` and the verifier workers. They are imported where they are used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"
HEAVY = ("sympy", "scipy", "math_verify", "latex2sympy2_extended", "datasets", "pandas", "pyarrow", "trl", "accelerate",
         "transformers", "torch._dynamo")


def test_trainer_and_cli_imports_load_no_heavy_package():
    code = ("import json, sys\n"
            "import rlvr.cli, rlvr.trainers.rl, rlvr.trainers.preference, rlvr.trainers.sft, rlvr.verifiers.judge\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n")
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"importing rlvr's trainers/CLI loaded {loaded}: import them where they are used"
