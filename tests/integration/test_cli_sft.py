"""End to end through the `rlvr` console script: SFT, kill -9 + resume, eval, and one-paragraph errors."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

RECIPE = """\
name: t
run_dir: {run_dir}
eval_base: false
threads: 1
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 16, split: heldout}}, max_new_tokens: 24}}
stages:
  - {{type: sft, max_steps: {steps}, batch_size: 8, micro_batch_size: 4, save_every: {save}, keep_last: 3,
     data: {{families: [add2], n: 64}}, optim: {{lr: 0.003, warmup_steps: 2}}}}
"""


def rlvr(*args, cwd=None, check=True):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "rlvr.cli", *args], capture_output=True, text=True, cwd=cwd,
                       env=env, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"rlvr {args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def write_recipe(tmp_path, name, model, steps=40, save=10):
    p = tmp_path / f"{name}.yaml"
    p.write_text(RECIPE.format(run_dir=tmp_path / name, model=model, steps=steps, save=save))
    return p


def test_kill_minus_9_then_resume_matches_uninterrupted(tiny_dir, tmp_path):
    full = write_recipe(tmp_path, "full", tiny_dir)
    rlvr("sft", str(full))
    killed = write_recipe(tmp_path, "killed", tiny_dir)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "sft", str(killed)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckdir = tmp_path / "killed" / "sft" / "checkpoints"
    deadline = time.time() + 120
    while time.time() < deadline and not (ckdir / "step-000020").exists() and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "killed" / "sft" / "final").exists(), "run finished before it could be killed"
    rlvr("sft", str(killed), "--resume")
    a = load_file(str(tmp_path / "full" / "sft" / "final" / "model.safetensors"))
    b = load_file(str(tmp_path / "killed" / "sft" / "final" / "model.safetensors"))
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6, rtol=0), k
    la = [json.loads(x) for x in open(tmp_path / "full" / "sft" / "metrics.jsonl")]
    lb = [json.loads(x) for x in open(tmp_path / "killed" / "sft" / "metrics.jsonl") if "event" not in x]
    assert abs(la[-1]["train/loss"] - lb[-1]["train/loss"]) < 1e-6


def test_eval_writes_pass_at_k(tiny_dir, tmp_path):
    out = tmp_path / "e.json"
    rlvr("eval", "--model", tiny_dir, "--tasks", "builtin:add2,mul21:8", "--n", "4", "--out", str(out),
         "--max-new-tokens", "8")
    res = json.loads(out.read_text())
    assert res["n_tasks"] == 8 and set(res["by_family"]) == {"add2", "mul21"}
    assert {"pass_at_1", "pass_at_1_sampled", "pass_at_2_sampled", "pass_at_4_sampled"} <= set(res)


def test_eval_on_environment_tasks_prints_its_table_and_honours_max_turns(tiny_dir, tmp_path):
    """The closed loop through the CLI: the table is printed, and --max-turns reaches the loop (a bug once
    passed it into the ``quiet`` slot: nothing printed, the limit ignored)."""
    out = tmp_path / "e.json"
    p = rlvr("eval", "--model", tiny_dir, "--tasks", "builtin_env:calculator:4", "--max-turns", "1",
             "--max-new-tokens", "8", "--out", str(out))
    res = json.loads(out.read_text())
    assert "greedy pass@1" in p.stdout and "calculator" in p.stdout
    assert res["n_tasks"] == 4 and res["turns_mean"] <= 1.0


def test_errors_are_one_paragraph_without_traceback(tiny_dir, tmp_path):
    bad_model = rlvr("eval", "--model", str(tmp_path / "nope"), "--tasks", "builtin:add2", check=False)
    assert bad_model.returncode == 2 and "does not exist" in bad_model.stderr
    assert "Traceback" not in bad_model.stderr
    r = write_recipe(tmp_path, "r", tiny_dir)
    bad_key = rlvr("validate", str(r), "--set", "stages.sft.max_stepz=3", check=False)
    assert bad_key.returncode == 2 and "did you mean 'max_steps'" in bad_key.stderr
    assert "Traceback" not in bad_key.stderr
    jl = tmp_path / "t.jsonl"
    jl.write_text('{"id": "a", "prompt": "1+1=?", "solution": "\\\\boxed{2}"}\n{"id": "b"\n')
    bad_line = rlvr("sft", str(r), "--set", f"stages.sft.data={{type: jsonl, path: {jl}}}", check=False)
    assert bad_line.returncode == 2 and f"{jl}:2" in bad_line.stderr and "Traceback" not in bad_line.stderr
    debug = rlvr("--debug", "eval", "--model", str(tmp_path / "nope"), "--tasks", "builtin:add2", check=False)
    assert "Traceback" in debug.stderr
