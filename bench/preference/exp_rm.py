"""RM acceptance: SFT ckpt backbone -> Bradley-Terry on verifier-built FAMILY pairs (default mul21) -> held-out pair accuracy."""
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
from rlvr.config.preference import PairBuilder, PairsFile
from rlvr.config.rlhf import RewardModelStage
from rlvr.trainers.reward_model import train_reward_model

SFT = os.environ["INIT"]  # the SFT checkpoint to start from
run = sys.argv[1]; kw = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
pf = kw.pop("pairs_file", None)
FAMILY = kw.pop("family", "mul21")
pairs = PairsFile(path=pf + "/train.jsonl", heldout_path=pf + "/heldout.jsonl") if pf else \
    PairBuilder(tasks=BuiltinArithmetic(families=FAMILY.split(","), n=kw.pop("n_tasks", 3000), split="train", seed=0),
                samples_per_task=kw.pop("samples", 16), pairs_per_task=kw.pop("ppt", 4), heldout_frac=0.1)
st = RewardModelStage(pairs=pairs, optim=OptimConfig(**kw.pop("optim", {"lr": 1e-4, "warmup_steps": 5})), **kw)
t0 = time.time()
res = train_reward_model(st, ModelConfig(path=SFT), run, seed=0, init_path=SFT)
print("RM", json.dumps(res.extra), "steps", res.steps, "seconds", round(time.time() - t0, 1), flush=True)
