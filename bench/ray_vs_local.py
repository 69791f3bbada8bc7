"""The quickstart's GRPO stage, capped by steps, in one process and on the Ray backend (2 rollout workers +
2 verifier actors on a local cluster): per-step pass rates, final weights, step times.

    pip install 'rlvr[ray]'
    PYTHONPATH=src python bench/ray_vs_local.py --model runs/quickstart/sft/final --steps 8
    PYTHONPATH=src python bench/ray_vs_local.py --model ... --steps 8 --no-correction   # bitwise weights

Both runs sample with per-row seeds (``sampling.row_seeds: true``), so the same rows get the same
uniforms whichever worker samples them. With the mismatch correction on (the default), the token weights
use the sampler's logprobs, which a worker computes in a batch of a different shape than the single
process: the float rounding of those logprobs (~1e-7) reaches the weights at that scale. With
``--no-correction`` the sampler's logprobs do not enter the loss and the weights are bitwise equal
whenever the samples are.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from rlvr import accel
from rlvr.commands.run import QUICKSTART
from rlvr.config.distributed import DistributedConfig
from rlvr.config.load import load_recipe
from rlvr.config.model import ModelConfig
from rlvr.trainers.rl import train_rl

accel.enable()  # rlvr's CPU accelerations, as `rlvr run` has them (RLVR_ACCEL=0: the plain PyTorch path)


def stage(steps: int, correction: bool):
    st = next(s for s in load_recipe(str(QUICKSTART), []).stages if s.type == "rl")
    return st.model_copy(update={"max_steps": steps, "max_minutes": None, "eval_every": 0, "save_every": 0,
                                 "sampling": st.sampling.model_copy(update={"row_seeds": True}),
                                 "correction": st.correction.model_copy(update={"enabled": correction})})


def rows(res) -> list[dict]:
    return [r for r in map(json.loads, open(res.metrics_path)) if "rollout/pass_rate" in r]


def summary(rs: list[dict]) -> dict:
    later = rs[1:] or rs
    return {k: round(statistics.median(r[k] for r in later), 3) for k in ("time/step", "time/generate",
                                                                          "time/verify", "time/train")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="starting policy (e.g. the quickstart's sft/final)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--verifiers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the trainer process")
    ap.add_argument("--no-correction", action="store_true")
    ap.add_argument("--out", default="bench/results/ray_vs_local.json")
    ap.add_argument("--run-dir", default="runs/bench_ray")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    st, mc = stage(a.steps, not a.no_correction), ModelConfig(path=a.model)

    t0 = time.perf_counter()
    one = train_rl(st, mc, Path(a.run_dir) / "one", seed=0)
    t_one = time.perf_counter() - t0

    from rlvr.distributed.ray_backend import RayContext

    t0 = time.perf_counter()
    ctx = RayContext(DistributedConfig(backend="ray", rollout_workers=a.workers, verifier_actors=a.verifiers))
    try:
        ray_res = train_rl(st, mc, Path(a.run_dir) / "ray", seed=0, dist=ctx)
    finally:
        ctx.close()
    t_ray = time.perf_counter() - t0

    r1, r2 = rows(one), rows(ray_res)
    w1, w2 = load_file(f"{one.checkpoint}/model.safetensors"), load_file(f"{ray_res.checkpoint}/model.safetensors")
    w0 = load_file(f"{a.model}/model.safetensors")
    out = {
        "steps": a.steps, "workers": a.workers, "verifiers": a.verifiers, "correction": not a.no_correction,
        "pass_rate_single": [r["rollout/pass_rate"] for r in r1],
        "pass_rate_ray": [r["rollout/pass_rate"] for r in r2],
        "pass_rates_equal": [r["rollout/pass_rate"] for r in r1] == [r["rollout/pass_rate"] for r in r2],
        "max_abs_weight_diff": max(float((w1[k] - w2[k]).abs().max()) for k in w1),
        "max_abs_weight_change": max(float((w1[k] - w0[k]).abs().max()) for k in w1),
        "mismatch_logprob_diff_max_ray": max((r.get("mismatch/logprob_diff_max", 0.0) for r in r2), default=0.0),
        "single": {**summary(r1), "wall_s": round(t_one, 1)},
        "ray": {**summary(r2), "wall_s_incl_startup": round(t_ray, 1),
                "worker_restarts": sum(r.get("rollout/worker_restarts", 0) for r in r2)},
    }
    print(json.dumps(out, indent=1))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
