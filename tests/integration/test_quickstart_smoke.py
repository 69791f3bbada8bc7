"""`rlvr quickstart` end to end with the packaged recipe, shrunk by --set to seconds: every stage runs,
the per-stage table prints, summary.json and report.html are written."""

import json
import os
import subprocess
import sys

from rlvr import omp_wait
from rlvr.data.arithmetic import generate

SHRINK = [
    "model.tiny.size=test", "threads=1", "eval.tasks.n=8", "eval.max_new_tokens=8",
    "stages.sft.max_steps=3", "stages.sft.eval_every=0", "stages.sft.save_every=0", "stages.sft.data.n=64",
    "stages.grpo.max_steps=2", "stages.grpo.tasks_per_step=2", "stages.grpo.sampling.group_size=4",
    "stages.grpo.sampling.max_new_tokens=8", "stages.grpo.eval_every=0", "stages.grpo.save_every=0",
]


def test_quickstart_runs_every_stage(tmp_path):
    # A 3-step model solves nothing, so the verifier pair builder would (rightly) refuse to build pairs:
    # the smoke run reads pairs from a file instead (the builder has its own tests).
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": t.prompt, "chosen": t.solution, "rejected": "\\boxed{1}"}) + "\n"
                             for t in generate(["mul31"], 8)))
    args = [sys.executable, "-m", "rlvr.cli", "quickstart", "--out", str(tmp_path / "qs"),
            "--set", f"stages.dpo.pairs={{path: {pairs}}}", "--set", "stages.dpo.epochs=1"]
    for s in SHRINK:
        args += ["--set", s]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}  # rlvr chooses
    p = subprocess.run(args, capture_output=True, text=True, timeout=400, env={**env, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    summary = json.loads((tmp_path / "qs" / "summary.json").read_text())
    # the equal-time SFT control's rows follow the stages (SFT continued for DPO's, then DPO+GRPO's seconds)
    assert [s["stage"] for s in summary["stages"]] == ["base", "sft", "dpo", "grpo", "sft-control@dpo",
                                                       "sft-control@grpo"]
    assert set(summary["stages"][1]["by_family"]) == {"add2", "mul31"}
    # rlvr chose and recorded the policy: spin on an idle machine, passive where other work holds a core at the
    # start (which one this machine gets depends on its load: omp_wait.choose's own tests pin both cases)
    assert summary["omp_wait"] in (f"spin (GOMP_SPINCOUNT={omp_wait.SPIN_COUNT})", "passive")
    html = (tmp_path / "qs" / "report.html").read_text()
    assert "<table>" in html and "grpo" in html
    assert "held-out evaluation by stage" in p.stdout and "grpo vs sft-control@grpo" in p.stdout
