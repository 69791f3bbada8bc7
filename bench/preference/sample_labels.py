"""Judged samples as unpaired labels: sample a policy on a family's train split and write every sample
with the verifier's verdict as ``{"prompt", "completion", "desirable"}`` JSONL (the KTO format), split by
prompt exactly as the pair builder splits (``is_heldout``: a hash of the rendered prompt).

    python bench/preference/sample_labels.py CKPT OUT_DIR FAMILY[,FAMILY] N_DRAWS SAMPLES [HELDOUT_FRAC]

Writes OUT_DIR/train_labels.jsonl and OUT_DIR/heldout_labels.jsonl. With the pair builder's settings
(same checkpoint, draws, samples, seed 0) the samples are the ones the pairs were built from.
"""
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch

torch.set_num_threads(int(os.environ.get("THREADS", "2")))
from rlvr.config.data import BuiltinArithmetic
from rlvr.config.model import ModelConfig
from rlvr.data.chat import encode_prompt, prompt_text, stop_token_ids
from rlvr.rollout.pairs import is_heldout, judge_samples, unique_tasks
from rlvr.data.sources import load_task_source
from rlvr.models.load import load_model_and_tokenizer
from rlvr.monitoring.evaluate import default_judge
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine

ckpt, out, fams, n, k = sys.argv[1], Path(sys.argv[2]), sys.argv[3].split(","), int(sys.argv[4]), int(sys.argv[5])
frac = float(sys.argv[6]) if len(sys.argv) > 6 else 0.1
model, tok = load_model_and_tokenizer(ModelConfig(path=ckpt), ckpt)
tasks = unique_tasks(load_task_source(BuiltinArithmetic(families=fams, n=n, split="train", seed=0)), tok)
gen = HFEngine(model, tok, batch_size=256).generate(
    [encode_prompt(tok, t) for t in tasks],
    SamplingParams(n=k, temperature=1.0, max_new_tokens=64, stop_token_ids=stop_token_ids(tok), seed=17))
reps = [tasks[i] for i in gen.prompt_index]
scored = judge_samples(reps, gen.texts, default_judge(0))
out.mkdir(parents=True, exist_ok=True)
files = {True: open(out / "heldout_labels.jsonl", "w"), False: open(out / "train_labels.jsonl", "w")}
counts = {True: [0, 0], False: [0, 0]}
for task, s in zip(reps, scored):
    if not (s.good or s.bad):
        continue  # infra: no label
    side = is_heldout(prompt_text(tok, task), frac)
    files[side].write(json.dumps({"prompt": task.prompt, "completion": s.text, "desirable": s.good}) + "\n")
    counts[side][s.good] += 1
for f in files.values():
    f.close()
print(json.dumps({"tasks": len(tasks), "train (bad, good)": counts[False], "heldout (bad, good)": counts[True]}))
