"""The step-time cost of the watched-by-default instruments (sampled KL to the reference, held-out code/SQL
checks, math twins) on a short tiny GRPO run: the defaults against them turned off, in alternating pairs of runs.

    PYTHONPATH=src python bench/watch_cost.py OUT_DIR STEPS PAIRS      # docs/health.md, "The cost of the defaults"
"""
import json
import statistics
import sys

import torch

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.health import CodeTestSplit, HealthConfig
from rlvr.config.model import ModelConfig
from rlvr.config.optim import OptimConfig
from rlvr.config.rl import KLConfig, RLStage, SamplingConfig
from rlvr.models.tiny import build_tiny
from rlvr.trainers.rl import train_rl
from rlvr.verifiers.base import Verdict


def digits_judge(tasks, completions):  # the health tests' toy reward: the share of digit characters
    res = []
    for c in completions:
        f = sum(ch.isdigit() for ch in c) / max(1, len(c))
        res.append(Verdict(f, f == 1.0 and len(c) > 0, "pass" if f == 1.0 else "wrong"))
    return res

torch.set_num_threads(1)
out = sys.argv[1]
build_tiny(f"{out}/model", size="test", seed=0)


def stage(on):
    h = HealthConfig() if on else HealthConfig(track_kl=False, code_tests=CodeTestSplit(heldout_frac=0.0, twin_every=0))
    return RLStage(data=BuiltinArithmetic(families=["add2", "mul31"], n=512),
                   sampling=SamplingConfig(group_size=8, max_new_tokens=8, temperature=1.0),
                   optim=OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant"), max_steps=int(sys.argv[2]),
                   tasks_per_step=16, micro_batch_size=32, save_every=0, kl=KLConfig(beta=0.0), health=h)


res = {"off": [], "on": []}
for rep in range(int(sys.argv[3])):
    for arm in ("off", "on"):
        r = train_rl(stage(arm == "on"), ModelConfig(path=f"{out}/model"), f"{out}/{arm}{rep}", seed=0, judge=digits_judge)
        with open(r.metrics_path) as f:
            rows = [json.loads(line) for line in f]
        rows = [x for x in rows if "event" not in x]
        st = [x["time/step"] for x in rows[1:]]
        res[arm].append(statistics.mean(st))
        print(arm, rep, round(statistics.mean(st), 4), "kl rows:", sum("kl/ref" in x for x in rows),
              "twin rows:", sum("verifier/twin_gap" in x for x in rows), flush=True)
for arm, vals in res.items():
    print(arm, [round(v, 4) for v in vals], "mean", round(statistics.mean(vals), 4))
print("ratio on/off", round(statistics.mean(res["on"]) / statistics.mean(res["off"]), 3))
