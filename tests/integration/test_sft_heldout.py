"""SFT held-out loss, keep-best and early stopping: the shipped checkpoint is the best one on held-out
demonstrations, not the last (a run that peaked and then overfit ships its peak)."""

import json

import rlvr
from rlvr.config.data import BuiltinArithmetic
from rlvr.data.sources import load_task_source
from rlvr.models.load import load_pretrained
from rlvr.monitoring.heldout import heldout_loss, tokenize_heldout

RECIPE = """\
name: ho
run_dir: {run_dir}
eval_base: false
threads: 1
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 4, split: heldout}}, max_new_tokens: 6}}
stages:
  - type: sft
    max_steps: 30
    batch_size: 4
    micro_batch_size: 4
    save_every: 0
    log_every: 1
    heldout_every: 5
    keep_best: true
    optim: {{lr: 0.03, warmup_steps: 0, schedule: constant}}
    data: {{families: [add2], n: 4, seed: 3}}
    heldout: {{families: [add3], n: 6, split: heldout, seed: 4}}
"""


def records(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_keep_best_ships_the_checkpoint_with_the_lowest_heldout_loss(tiny_dir, tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir))
    rlvr.run(str(p))
    recs = [r for r in records(tmp_path / "run" / "sft" / "metrics.jsonl") if "heldout/loss" in r]
    assert [r["step"] for r in recs] == [0, 5, 10, 15, 20, 25, 30]
    best = min(recs, key=lambda r: r["heldout/loss"])
    # the final model's held-out loss, measured afresh, is the best logged one (not the last step's)
    model, tok = load_pretrained(tmp_path / "run" / "sft" / "final")
    tasks = load_task_source(BuiltinArithmetic(families=["add3"], n=6, split="heldout", seed=4))
    loss = heldout_loss(model, tokenize_heldout(tasks, tok, 256), tok.pad_token_id, 4)
    assert abs(loss - best["heldout/loss"]) < 1e-4, (loss, best, recs[-1])
    assert recs[-1]["heldout/loss"] > best["heldout/loss"], "the run never got worse: the test proves nothing"


def test_patience_stops_early(tiny_dir, tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir))
    rlvr.run(str(p), stages__sft__patience=1, stages__sft__max_steps=40, stages__sft__optim__lr=0.5)
    recs = records(tmp_path / "run" / "sft" / "metrics.jsonl")
    stop = [r for r in recs if r.get("event") == "early_stop"]
    assert stop and stop[0]["step"] < 40 and max(r["step"] for r in recs) == stop[0]["step"]


def test_patience_on_heldout_pass_at_1_stops_early(tiny_dir, tmp_path):
    # best_metric eval/pass_at_1 reads the held-out evaluation of the same step (every eval_every steps)
    p = tmp_path / "r.yaml"
    p.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir))
    rlvr.run(str(p), stages__sft__patience=1, stages__sft__max_steps=40, stages__sft__eval_every=5,
             stages__sft__best_metric="eval/pass_at_1", stages__sft__keep_best=False, stages__sft__optim__lr=0.5)
    recs = records(tmp_path / "run" / "sft" / "metrics.jsonl")
    stop = [r for r in recs if r.get("event") == "early_stop"]
    evals = [r["step"] for r in recs if "eval/pass_at_1" in r]
    assert stop and stop[0]["step"] in evals and stop[0]["step"] < 40, (stop, evals)
