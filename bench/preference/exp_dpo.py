"""DPO acceptance experiment: SFT ckpt -> verifier-built pairs on FAMILY train -> DPO -> held-out greedy pass@1.

Overrides (JSON): family (default mul21), n_eval (held-out problems, default 76 = all of mul21's),
n_tasks / samples / ppt (pair builder) or pairs_file (a folder with train.jsonl + heldout.jsonl), and any
PreferenceStage field.
"""
import json
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch

torch.set_num_threads(int(os.environ.get("THREADS", "2")))
from rlvr.config.data import BuiltinArithmetic
from rlvr.config.model import ModelConfig
from rlvr.config.optim import OptimConfig
from rlvr.config.preference import PairBuilder, PairsFile, PreferenceStage
from rlvr.data.sources import load_task_source
from rlvr.models.load import load_pretrained
from rlvr.monitoring.evaluate import default_judge, evaluate
from rlvr.rollout.hf_engine import HFEngine
from rlvr.trainers.preference import train_preference

SFT = os.environ["INIT"]  # the SFT checkpoint to start from
run = sys.argv[1]
kw = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
FAMILY, N_EVAL = kw.pop("family", "mul21"), kw.pop("n_eval", 76)

def heldout_eval(path):
    m, tok = load_pretrained(path)
    tasks = load_task_source(BuiltinArithmetic(families=[FAMILY], n=N_EVAL, split="heldout", seed=1234))
    uniq = list({t.prompt: t for t in tasks}.values())
    r = evaluate(HFEngine(m, tok), tok, uniq, default_judge(0), k=1, max_new_tokens=64)
    r2 = evaluate(HFEngine(m, tok), tok, tasks, default_judge(0), k=1, max_new_tokens=64)
    return {"unique": len(uniq), "pass_at_1_unique": r["pass_at_1"], "pass_at_1_n400": r2["pass_at_1"], "mean_length": r["mean_length"]}

t0 = time.time()
if os.environ.get("BASE"): print("SFT", heldout_eval(SFT), flush=True)
loss = kw.pop("loss", {"type": "dpo", "beta": 0.1})
st = PreferenceStage(
    loss=loss,
    pairs=(PairsFile(path=kw.pop("pairs_file") + "/train.jsonl", heldout_path=PF + "/heldout.jsonl") if "pairs_file" in kw and (PF := kw["pairs_file"]) else
           PairBuilder(tasks=BuiltinArithmetic(families=[FAMILY], n=kw.pop("n_tasks", 2000), split="train", seed=0),
                      samples_per_task=kw.pop("samples", 8), pairs_per_task=kw.pop("ppt", 4), heldout_frac=0.1)),
    optim=OptimConfig(**kw.pop("optim", {"lr": 5e-5, "warmup_steps": 5})),
    **kw)
res = train_preference(st, ModelConfig(path=SFT), run, seed=0, init_path=SFT)
after = heldout_eval(res.checkpoint)
print("DPO", after, flush=True)
print("extra", json.dumps({k: v for k, v in res.extra.items()}), flush=True)
print("seconds", time.time() - t0)
