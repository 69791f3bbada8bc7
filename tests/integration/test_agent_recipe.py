"""`rlvr run recipes/agent-calculator.yaml` end to end, shrunk by --set to seconds: SFT on multi-turn
demonstrations, multi-turn GRPO in the closed loop, closed-loop held-out evaluation, summary.json in
the pipeline's format."""

import json
import os
import subprocess
import sys
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "agent-calculator.yaml"
SHRINK = [
    "model.tiny.size=test", "threads=1", "eval.tasks.n=6", "eval.agent.max_new_tokens=12",
    "stages.sft.max_steps=3", "stages.sft.eval_every=0", "stages.sft.data.n=32", "stages.sft.batch_size=8",
    "stages.grpo.max_steps=2", "stages.grpo.tasks_per_step=2", "stages.grpo.sampling.group_size=3",
    "stages.grpo.rollout.loop.max_new_tokens=12", "stages.grpo.eval_every=0",
]


def test_agent_recipe_runs_every_stage_in_the_closed_loop(tmp_path):
    args = [sys.executable, "-m", "rlvr.cli", "run", str(RECIPE), "--run-dir", str(tmp_path / "run")]
    for s in SHRINK:
        args += ["--set", s]
    p = subprocess.run(args, capture_output=True, text=True, timeout=400, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [s["stage"] for s in summary["stages"]] == ["base", "sft", "grpo", "sft-control@grpo"]
    assert set(summary["stages"][1]["by_family"]) == {"calculator/add_mul", "calculator/mul_add",
                                                      "calculator/mul_add_mul", "calculator/mul_sub"}
    for stage in ("grpo", "sft-control@grpo"):  # the control is read with the same closed-loop evaluation
        ev = json.loads((tmp_path / "run" / stage / "eval.json").read_text())
        assert ev["n_tasks"] == 6 and "turns_mean" in ev and "tool_calls_mean" in ev
    rows = [json.loads(x) for x in (tmp_path / "run" / "grpo" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "agent/turns_mean" in r]
    assert len(steps) == 2 and all("horizon/turns_p90" in r and "agent/tool_calls_mean" in r for r in steps)
