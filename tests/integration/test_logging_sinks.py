"""Logging a user can watch: plain lines when stdout is a file, TensorBoard and W&B (offline) from the
recipe, sample completions with verdicts during RL."""

import glob
import json
import os
import subprocess
import sys

from rlvr.monitoring.progress import PlainProgress

RECIPE = """\
name: logs
run_dir: {run_dir}
eval_base: false
threads: 1
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 4, split: heldout}}, max_new_tokens: 6}}
logging: {{every: 2, tensorboard: true, wandb: {{project: t, mode: offline}}, samples_every: 1, samples: 2}}
stages:
  - {{type: sft, max_steps: 4, batch_size: 4, micro_batch_size: 4, save_every: 0, log_every: 1,
     data: {{families: [add2], n: 16}}}}
  - {{type: grpo, max_steps: 2, tasks_per_step: 2, save_every: 0, sampling: {{group_size: 2, max_new_tokens: 6}},
     data: {{families: [add2], n: 8}}}}
"""


def test_plain_lines_tensorboard_wandb_and_samples(tiny_dir, tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    with open(tmp_path / "out.log", "w") as out:  # stdout is a file, not a terminal
        r = subprocess.run([sys.executable, "-m", "rlvr.cli", "run", str(p)], stdout=out, stderr=subprocess.PIPE,
                           text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    log = (tmp_path / "out.log").read_text()
    assert "sft:sft starting: 4 steps" in log and "sft:sft step 2/4 loss" in log and "step 4/4" in log
    assert "rl:grpo starting: 2 steps" in log and "rl:grpo step 2/2 pass" in log
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(tmp_path / "run" / "sft" / "tensorboard"))
    ea.Reload()
    assert [e.step for e in ea.Scalars("train/loss")] == [1, 2, 3, 4]
    ea = EventAccumulator(str(tmp_path / "run" / "grpo" / "tensorboard"), size_guidance={"tensors": 0})
    ea.Reload()
    assert "rollout/pass_rate" in ea.Tags()["scalars"] and "samples/text_summary" in ea.Tags()["tensors"]
    runs = glob.glob(str(tmp_path / "run" / "*" / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(runs) == 2, runs  # one offline W&B run per stage, written locally
    samples = [json.loads(x) for x in (tmp_path / "run" / "grpo" / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [1, 1, 2, 2]
    assert {"task_id", "prompt", "completion", "reward", "outcome"} <= set(samples[0])


def test_plain_progress_says_when_it_resumes(capsys):
    with PlainProgress(every=5) as prog:
        t = prog.add_task("sft:x", total=20, completed=10, info="")
        for _ in range(10):
            prog.update(t, advance=1, info="loss 1.0")
    out = capsys.readouterr().out
    assert "sft:x resuming from step 10 of 20" in out and "step 15/20 loss 1.0" in out and "finished at step 20/20" in out
