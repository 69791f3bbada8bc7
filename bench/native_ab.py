"""In-process A/B of rlvr's C kernels (``rlvr/native/``): ``RLVR_NATIVE`` alternates step by step inside one run
of the GRPO bench's stage (``grpo_vs_trl.rlvr_stage``: 8 prompts x G = 8, 32 new tokens, β = 0.04), so a drift of
the host's speed hits both settings alike; prints the median of each phase per setting (after 2 warm-up steps
each) and their ratio.

    PYTHONPATH=src python bench/native_ab.py --size 1m --steps 24
    PYTHONPATH=src python bench/native_ab.py --size 5m --steps 20

The two settings compute the same function up to float rounding, so their trajectories drift apart by that
much; the phases' shapes (rows, tokens) stay those of the bench.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("GOMP_SPINCOUNT", "100000")
sys.path.insert(0, str(Path(__file__).resolve().parent))

PHASES = ("rollout_step", "reference_logprobs", "policy_update")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1m")
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args(argv)
    import torch

    import rlvr.trainers.rl as rl
    from grpo_vs_trl import parse_args as bench_args, rlvr_stage
    from rlvr.config.model import ModelConfig

    torch.set_num_threads(2)
    work = tempfile.mkdtemp()
    model_dir = os.path.join(work, "model")
    subprocess.run([sys.executable, "-c", "import sys; from rlvr.models.tiny import build_tiny; "
                    "build_tiny(sys.argv[1], size=sys.argv[2])", model_dir, a.size], check=True)
    times: dict[tuple[str, str], list[float]] = {}
    step = [0]

    def wrap(name):
        inner = getattr(rl, name)

        def timed(*args, **kw):
            if name == "rollout_step":  # a step starts: switch the setting
                step[0] += 1
                os.environ["RLVR_NATIVE"] = str(step[0] % 2)
            t0 = time.perf_counter()
            out = inner(*args, **kw)
            times.setdefault((name, os.environ["RLVR_NATIVE"]), []).append(time.perf_counter() - t0)
            return out
        setattr(rl, name, timed)

    for name in PHASES:
        wrap(name)
    stage = rlvr_stage(bench_args(["--size", a.size, "--steps", str(a.steps)]), 400)
    rl.train_rl(stage, ModelConfig(path=model_dir, autocast_bf16="auto"), work, seed=0)
    res = {}
    for name in PHASES:
        off, on = (statistics.median(times[(name, k)][2:]) for k in ("0", "1"))
        res[name] = {"pytorch_s": off, "native_s": on, "ratio": on / off}
        print(f"{a.size} {name:20s} PyTorch {off:.4f} s  native {on:.4f} s  ratio {on / off:.3f}")
    return res


if __name__ == "__main__":
    main()
