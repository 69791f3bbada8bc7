"""One GRPO step of the quickstart, traced through rlvr's files (``scripts/trace_grpo_step.py``): no module
appears twice on one call stack with another between (A -> B -> A), losses/ and advantages/ aside."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rlvr

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "trace_grpo_step.py"


@pytest.mark.slow
def test_a_grpo_step_never_reenters_a_module_on_one_call_stack(tmp_path):
    out = tmp_path / "trace.json"
    env = {**os.environ, "PYTHONPATH": str(Path(rlvr.__file__).resolve().parents[1]), "OMP_WAIT_POLICY": "PASSIVE"}
    res = subprocess.run([sys.executable, str(SCRIPT), "--json", str(out)], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=600)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["recursions"] == {}
    files = report["step_files_in_order"]
    assert files[0] == "data/order.py" and files[-1] == "trainers/optimizer.py"
    assert {"trainers/rl.py", "trainers/sources.py", "rollout/collector.py"} <= set(files)
