"""End to end through the `rlvr` console script: `rlvr dpo`, `rlvr rm`, `rlvr ppo`, and located errors."""

import json
import pytest
import os
import subprocess
import sys

from rlvr.data.preference import PreferencePair, write_pairs_jsonl

RECIPE = """\
name: t
run_dir: {run_dir}
eval_base: false
threads: 1
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 8, split: heldout}}, max_new_tokens: 8}}
stages:
  - {{type: preference, name: dpo, loss: {{type: {loss}, beta: 0.1}}, max_steps: 4, batch_size: 4,
     micro_batch_size: 2, save_every: 2, monitor_every: 2, probe_prompts: 2,
     pairs: {{path: {pairs}, heldout_path: {heldout}}}, optim: {{lr: 0.001, warmup_steps: 0}}}}
  - {{type: reward_model, name: reward_model, max_steps: 3, batch_size: 4,
     pairs: {{path: {pairs}, heldout_path: {heldout}}}}}
  - {{type: ppo, name: ppo, reward: verifier, max_steps: 2, tasks_per_step: 4, sampling: {{group_size: 1, max_new_tokens: 6}},
     data: {{families: [add2], n: 16}}}}
"""


def rlvr(*args, check=True):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "rlvr.cli", *args], capture_output=True, text=True, env=env,
                       timeout=300, check=False)
    if check and p.returncode != 0:
        raise AssertionError(f"rlvr {args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def read(path):
    with open(path) as f:
        return [json.loads(x) for x in f]


def setup(tmp_path, tiny_dir, loss="dpo", pairs=None):
    d = tmp_path / "pairs"
    d.mkdir(exist_ok=True)
    mk = lambda n, o: [PreferencePair(f"{i + o}+1=?", f"\\boxed{{{i + o + 1}}}", f"\\boxed{{{i + o + 2}}}")
                       for i in range(n)]
    write_pairs_jsonl(d / "train.jsonl", mk(8, 10))
    write_pairs_jsonl(d / "heldout.jsonl", mk(4, 60))
    recipe = tmp_path / f"{loss}.yaml"
    text = RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir, loss=loss, pairs=pairs or d / "train.jsonl",
                         heldout=d / "heldout.jsonl")
    recipe.write_text(text)
    return recipe


@pytest.mark.slow  # three CLI stage commands end to end (~33 s); the trainers have unit tests
def test_dpo_rm_ppo_commands_run_and_write_their_outputs(tiny_dir, tmp_path):
    recipe = setup(tmp_path, tiny_dir)
    rlvr("dpo", str(recipe))
    run = tmp_path / "run"
    recs = read(run / "dpo" / "metrics.jsonl")
    assert (run / "dpo" / "final" / "model.safetensors").exists()
    assert any("rewards/accuracy" in r for r in recs) and any("heldout/accuracy" in r for r in recs)
    assert (run / "dpo" / "checkpoints").exists() and (run / "dpo" / "reference_logprobs.pt").exists()
    rlvr("rm", str(recipe))
    from transformers import AutoModelForSequenceClassification

    assert AutoModelForSequenceClassification.from_pretrained(run / "reward_model" / "final").config.num_labels == 1
    rlvr("ppo", str(recipe))
    last = read(run / "ppo" / "metrics.jsonl")[-1]
    assert "value/explained_variance" in last and "kl/coef" in last


def test_a_bad_pairs_file_is_a_located_one_paragraph_error(tiny_dir, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x", "chosen": "a"}\n')
    p = rlvr("dpo", str(setup(tmp_path, tiny_dir, loss="dpo", pairs=bad)), check=False)
    assert p.returncode == 2 and "bad.jsonl:1: missing required field 'rejected'" in p.stderr
    assert "Traceback" not in p.stderr
