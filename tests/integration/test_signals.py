"""SIGTERM to a real `rlvr sft` process: a checkpoint at the next step boundary, exit 130, the resume command
printed; running that command (in-process) finishes the stage with every step logged once."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time

RECIPE = """\
name: sig
run_dir: {run_dir}
eval_base: false
threads: 1
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 2, split: heldout}}, max_new_tokens: 4}}
stages:
  - {{type: sft, max_steps: 40, batch_size: 4, micro_batch_size: 4, save_every: 0, log_every: 1,
     data: {{families: [add2], n: 32}}}}
"""


def test_sigterm_checkpoints_exits_130_and_prints_the_resume_command(tiny_dir, tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "sft", str(p)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "run" / "sft" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and sum('"train/loss"' in x for x in metrics.read_text().splitlines()) >= 1:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]  # interrupted, not finished: a script must not go on
    err = " ".join(err.split())
    assert "received SIGTERM" in err and "stopped: stage sft at step" in err
    hint = err.split("resume with: ")[1].strip()
    assert hint == f"rlvr sft {p} --resume"
    stopped = [json.loads(x) for x in metrics.read_text().splitlines() if '"interrupted"' in x][0]
    assert (tmp_path / "run" / "sft" / "checkpoints" / f"step-{stopped['step']:06d}" / "manifest.json").exists()
    assert not (tmp_path / "run" / "sft" / "final").exists()
    from rlvr.cli import main  # the printed command, run in-process (one Python start less)

    old, sys.argv = sys.argv, shlex.split(hint)
    try:
        main()
    except SystemExit as e:
        assert e.code == 0
    finally:
        sys.argv = old
    steps = [json.loads(x)["step"] for x in metrics.read_text().splitlines() if '"train/loss"' in x]
    assert sorted(set(steps)) == list(range(1, 41)) and (tmp_path / "run" / "sft" / "final").exists()
