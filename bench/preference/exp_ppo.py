"""PPO acceptance: SFT ckpt policy on FAMILY train prompts (JSON key "family", default mul21); reward = verifier or a trained RM."""
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
from rlvr.config.rlhf import PPOStage
from rlvr.trainers.ppo import train_ppo

SFT = os.environ["INIT"]  # the SFT checkpoint to start from
run = sys.argv[1]; kw = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
FAMILY = kw.pop("family", "mul21")
st = PPOStage(data=BuiltinArithmetic(families=FAMILY.split(","), n=5000, split="train", seed=2),
              optim=OptimConfig(**kw.pop("optim", {"lr": 1e-4, "warmup_steps": 5, "schedule": "constant"})),
              critic_optim=OptimConfig(**kw.pop("critic_optim")) if "critic_optim" in kw else None, **kw)
t0 = time.time()
res = train_ppo(st, ModelConfig(path=SFT), run, seed=0, init_path=SFT)
recs = [json.loads(l) for l in open(res.metrics_path)][1:]
nan = [r["step"] for r in recs if any(isinstance(v, str) and v in ("nan", "inf") for v in r.values())]
def mean(key, rs): return sum(r[key] for r in rs) / len(rs)
k = 10
if os.environ.get("EVAL"):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); from evalhelp import heldout_eval
    print("eval SFT", heldout_eval(SFT)); print("eval PPO", heldout_eval(res.checkpoint))
print("PPO", st.reward, "steps", res.steps, "nan_steps", nan, "seconds", round(time.time() - t0, 1))
for key in ["reward/mean", "rollout/pass_rate", "kl/ref", "kl/coef", "value/explained_variance", "value/loss", "clip/low_frac", "clip/high_frac", "rollout/length_mean"]:
    print(f"  {key}: first{k} {mean(key, recs[:k]):.4f} last{k} {mean(key, recs[-k:]):.4f}")
