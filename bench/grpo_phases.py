"""rlvr's side of ``grpo_vs_trl.py`` alone, timed per phase (and optionally profiled or RSS-tracked).

    PYTHONPATH=src python bench/grpo_phases.py --size 1m --steps 12 --bf16 auto
    PYTHONPATH=src python bench/grpo_phases.py --size 5m --rss             # VmRSS / VmHWM after every phase
    PYTHONPATH=src python bench/grpo_phases.py --profile-step 5 --phases policy_update --shapes

Runs ``train_rl`` on the bench's stage (``grpo_vs_trl.rlvr_stage``: 8 prompts x G = 8, 32 new tokens, β = 0.04)
with no TRL process beside it, and prints the median (after ``--skip`` warm-up steps) of the step, the generation,
and of each phase: ``rollout_step`` (generation and rewards), ``reference_logprobs`` (the frozen reference's pass),
``policy_update`` (forward, backward, optimizer). ``--profile-step N`` prints torch.profiler's table of the
listed phases at their N-th call. Used for the per-phase figures of docs/benchmarks.md (session 17).
"""

from __future__ import annotations

import argparse
import json
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


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1m", help="tiny model size")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps left out of the medians")
    ap.add_argument("--bf16", choices=("off", "train", "auto", "true"), default="auto", help="model.autocast_bf16")
    ap.add_argument("--micro-tokens", default="auto", help="model.micro_tokens: auto, N or none")
    ap.add_argument("--rss", action="store_true", help="print VmRSS / VmHWM (kB) after every phase")
    ap.add_argument("--profile-step", type=int, default=-1, help="profile this call of each --phases phase")
    ap.add_argument("--phases", default=",".join(PHASES), help="phases to profile (comma-separated)")
    ap.add_argument("--shapes", action="store_true", help="profile table grouped by input shapes")
    ap.add_argument("--rows", type=int, default=25, help="profile table rows")
    return ap.parse_args(argv)


def vm_status() -> str:
    st = dict(line.split(":", 1) for line in open("/proc/self/status") if line.startswith(("VmRSS", "VmHWM")))
    return f"{st['VmRSS'].strip()} {st['VmHWM'].strip()}"


def main(argv=None) -> dict:
    a = parse_args(argv)
    import torch

    import rlvr.trainers.rl as rl
    from grpo_vs_trl import parse_args as bench_args, rlvr_stage
    from rlvr.config.model import ModelConfig

    torch.set_num_threads(2)
    work = tempfile.mkdtemp()
    model_dir = os.path.join(work, "model")
    # in a child process: building imports transformers' LlamaForCausalLM (~150 MB resident), which the bench's
    # rlvr worker never holds, so --rss reads what the bench's rlvr side would
    subprocess.run([sys.executable, "-c", "import sys; from rlvr.models.tiny import build_tiny; "
                    "build_tiny(sys.argv[1], size=sys.argv[2])", model_dir, a.size], check=True)
    times: dict[str, list[float]] = {}
    tables: dict[str, str] = {}
    profiled = set(a.phases.split(","))

    def wrap(name):
        inner = getattr(rl, name)

        def timed(*args, **kw):
            n = len(times.get(name, []))
            prof = None
            if n == a.profile_step and name in profiled:
                prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=a.shapes)
                prof.__enter__()
            t0 = time.perf_counter()
            out = inner(*args, **kw)
            times.setdefault(name, []).append(time.perf_counter() - t0)
            if prof is not None:
                prof.__exit__(None, None, None)
                tables[name] = prof.key_averages(group_by_input_shape=a.shapes).table(
                    sort_by="self_cpu_time_total", row_limit=a.rows, max_name_column_width=30,
                    max_shapes_column_width=60)
            if a.rss:
                print(f"RSS {name} {n} {vm_status()}", flush=True)
            return out
        setattr(rl, name, timed)

    for name in PHASES:
        wrap(name)
    stage = rlvr_stage(bench_args(["--size", a.size, "--steps", str(a.steps)]), 400)
    bf16 = {"off": False, "train": "train", "auto": "auto", "true": True}[a.bf16]
    mt = int(a.micro_tokens) if a.micro_tokens.isdigit() else None if a.micro_tokens == "none" else a.micro_tokens
    cfg = ModelConfig(path=model_dir, autocast_bf16=bf16, micro_tokens=mt)
    rl.train_rl(stage, cfg, work, seed=0)
    recs = [json.loads(x) for x in open(os.path.join(work, "rlvr", "metrics.jsonl")) if "time/step" in x][a.skip:]
    res = {"size": a.size, "bf16": {"train": cfg.train_bf16, "decode": cfg.decode_bf16},
           "step": statistics.median(r["time/step"] for r in recs),
           "generate": statistics.median(r["time/generate"] for r in recs),
           **{k: statistics.median(v[a.skip:]) for k, v in times.items() if v[a.skip:]}, "peak_rss": vm_status()}
    print(json.dumps(res, indent=1))
    for name, table in tables.items():
        print(f"===== {name}\n{table}")
    return res


if __name__ == "__main__":
    main()
