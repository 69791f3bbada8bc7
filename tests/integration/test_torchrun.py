"""``torchrun --nproc_per_node 2 -m rlvr.cli grpo`` end to end (gloo, ``slow``): the two ranks' run equals
the one-process run with per-row seeds (metrics and final weights), only rank 0 writes, and a run
interrupted after its step-2 checkpoint resumes (same world size) to the uninterrupted result."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.slow
SRC = Path(__file__).resolve().parents[2] / "src"
RECIPE = SRC / "rlvr" / "recipes" / "quickstart.yaml"
SHRINK = ["model.tiny.size=test", "threads=1", "eval_base=false", "eval.tasks.n=4", "eval.max_new_tokens=4",
          "stages.grpo.max_steps=3", "stages.grpo.tasks_per_step=4", "stages.grpo.sampling.group_size=4",
          "stages.grpo.sampling.max_new_tokens=8", "stages.grpo.eval_every=0", "stages.grpo.save_every=2",
          "stages.grpo.sampling.row_seeds=true", "stages.grpo.optim.lr=1e-3",
          "stages.grpo.rewards=[{name: correct}, {name: length, weight: 0.5}]"]


def rlvr(run_dir: Path, model: str, nproc: int, *extra: str) -> subprocess.CompletedProcess:
    sets = [x for s in [*SHRINK, f"run_dir={run_dir}"] for x in ("--set", s)]
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc)] if nproc > 1 \
        else [sys.executable]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([*launch, "-m", "rlvr.cli", "grpo", str(RECIPE), "--model", model, *sets, *extra],
                       capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def weights(run: Path) -> dict:
    return load_file(str(run / "grpo" / "final" / "model.safetensors"))


def metrics(run: Path) -> list[dict]:
    return [r for r in map(json.loads, open(run / "grpo" / "metrics.jsonl")) if "reward/mean" in r]


def test_torchrun_two_ranks_equal_one_process_and_resume(tiny_dir, tmp_path):
    one, two, res = tmp_path / "one", tmp_path / "two", tmp_path / "resumed"
    rlvr(one, tiny_dir, 1)
    p = rlvr(two, tiny_dir, 2)
    assert p.stdout.count("held-out evaluation by stage") == 1  # rank 0 alone reports
    m1, m2 = metrics(one), metrics(two)
    assert [r["step"] for r in m2] == [1, 2, 3]
    assert [r["reward/mean"] for r in m1] == [r["reward/mean"] for r in m2]
    w1, w2 = weights(one), weights(two)
    d = max(float((w1[k] - w2[k]).abs().max()) for k in w1)
    print(f"torchrun 2 ranks vs 1 process: max |dw| = {d:.2e}")
    assert d <= 1e-5
    # an interruption after the step-2 checkpoint: the stage is 'running', final/ not written yet
    shutil.copytree(two, res)
    shutil.rmtree(res / "grpo" / "final")
    state = json.loads((res / "pipeline.json").read_text())
    state["stages"]["grpo"] = {"status": "running"}
    (res / "pipeline.json").write_text(json.dumps(state))
    rlvr(res, tiny_dir, 2, "--resume")
    assert [r["step"] for r in metrics(res)] == [1, 2, 3]  # step 3 once: the rows after the checkpoint dropped
    w3 = weights(res)
    assert max(float((w2[k] - w3[k]).abs().max()) for k in w2) <= 1e-6
    assert torch.equal(torch.tensor([r["reward/mean"] for r in metrics(res)]), torch.tensor([r["reward/mean"] for r in m2]))
