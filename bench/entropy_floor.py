"""Entropy floor / temperature action vs none on a collapsing GRPO run, scored by held-out greedy pass@1.

The collapsing configuration is ``bench/entropy_floor.yaml``: GRPO from a from-scratch 'test'-size tiny
model on ``mod10`` ("4817%10=?" -> "7": ten answers, one answer token; the reward is exact match on the
last number + 0.2 for answering with a number at all), temperature 0.5, lr 3e-3, beta = 0, 150 steps of
16 tasks x G = 8. The held-out numbers are disjoint from the training ones (a hash of the number decides
its split), so held-out pass@1 measures the learned rule, not memorised prompts.

Each arm runs the same recipe over the same seeds; only ``stages.0.health.actions`` differs:

  off          alert only (the default)
  floor        entropy_collapse and entropy_trending_down -> entropy_floor
  temperature  entropy_collapse and entropy_trending_down -> raise_temperature

Per run it reports the held-out greedy pass@1 (the recipe's eval: 300 held-out problems), the distinct
greedy answers over them (1 = the policy says the same digit to every problem), the final entropy
(mean sampled entropy of the last 10 steps, nats/token), the first steps flagged entropy trending down
and ENTROPY COLLAPSE, and the health actions fired. Then mean +- sample standard deviation per arm.

    PYTHONPATH=src python bench/entropy_floor.py --seeds 0 1 2 3 4 --jobs 2 --out /tmp/ef \\
        --json bench/results/entropy_floor.json
    PYTHONPATH=src python bench/entropy_floor.py --from bench/results/entropy_floor.json   # the table again
    python bench/entropy_floor.py --write-data      # regenerate bench/data/entropy_floor/*.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "bench" / "entropy_floor.yaml"
DATA = ROOT / "bench" / "data" / "entropy_floor"
N_TRAIN, N_HELDOUT = 2000, 300
ARMS = {"off": None, "floor": "entropy_floor", "temperature": "raise_temperature"}
STATUSES = ("entropy_trending_down", "entropy_collapse")


# ------------------------------------------------------------------------------------------- data

def split_of(n: int) -> str:
    """A number's split, a pure function of the number (10% held out): train and held-out are disjoint."""
    h = hashlib.blake2b(f"mod10:{n}".encode(), digest_size=8).digest()
    return "heldout" if int.from_bytes(h, "big") % 100 < 10 else "train"


def mod10_tasks(split: str, n: int, seed: int = 0) -> list[dict]:
    """``n`` distinct mod10 task lines of ``split`` (numbers 100-9999), shuffled by ``seed``."""
    nums = [k for k in range(100, 10000) if split_of(k) == split]
    random.Random(f"{seed}:{split}").shuffle(nums)
    if n > len(nums):
        raise ValueError(f"only {len(nums)} {split} mod10 problems; asked for {n}")
    return [{"id": f"mod10-{k}", "prompt": f"{k}%10=?", "kind": "math", "family": "mod10",
             "answer_format": "last_number", "gold": {"answer": str(k % 10)}, "split": split} for k in nums[:n]]


def write_data(out: Path = DATA, n_train: int = N_TRAIN, n_heldout: int = N_HELDOUT) -> dict[str, Path]:
    """Write ``train.jsonl`` and ``heldout.jsonl`` under ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, n in (("train", n_train), ("heldout", n_heldout)):
        p = paths[split] = out / f"{split}.jsonl"
        p.write_text("".join(json.dumps(t, separators=(",", ":")) + "\n" for t in mod10_tasks(split, n)))
    return paths


# ------------------------------------------------------------------------------------------- runs

def arm_overrides(action: str | None) -> list[str]:
    """``--set`` arguments that switch an arm's action on for both entropy statuses."""
    if action is None:
        return []
    return [a for s in STATUSES for a in ("--set", f"stages.0.health.actions.{s}=[{action}]")]


def run_one(arm: str, seed: int, out: Path, extra: list[str]) -> Path:
    """One ``rlvr run`` of the recipe for ``arm`` and ``seed``; returns its run directory."""
    run_dir = out / f"{arm}-s{seed}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "rlvr.cli", "run", str(RECIPE), "--run-dir", str(run_dir), "--overwrite",
           "--set", f"seed={seed}", *arm_overrides(ARMS[arm]), *extra]
    log = out / f"{arm}-s{seed}.log"
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {rc}); see {log}")
    return run_dir


def first_step(rows: list[dict], label: str) -> int | None:
    return next((r["step"] for r in rows if label in r.get("health/status", "")), None)


def summarise(run_dir: Path, arm: str, seed: int) -> dict:
    """The figures of one finished run (its ``grpo/metrics.jsonl`` and ``grpo/eval.json``)."""
    rows = [r for r in map(json.loads, open(run_dir / "grpo" / "metrics.jsonl")) if "event" not in r]
    ev = json.loads((run_dir / "grpo" / "eval.json").read_text())
    acted = [r["health/action"] for r in rows if "health/action" in r]
    last = rows[-10:]
    return {
        "arm": arm, "seed": seed, "steps": len(rows),
        "heldout_pass_at_1": ev["pass_at_1"],
        "distinct_greedy_answers": len({s["completion"] for s in ev["samples"]}),
        "train_pass_rate_last10": statistics.fmean(r["rollout/pass_rate"] for r in last),
        "entropy_start": rows[0]["rollout/entropy"],
        "entropy_last10": statistics.fmean(r["rollout/entropy"] for r in last),
        "first_trending_down": first_step(rows, "entropy trending down"),
        "first_collapse": first_step(rows, "ENTROPY COLLAPSE"),
        "statuses": sorted({s.strip() for r in rows for s in r["health/status"].split("+")}),
        "actions_fired": len(acted),
        "first_action": acted[0] if acted else None,
        "entropy_coef_end": rows[-1].get("health/entropy_coef"),
        "temperature_end": rows[-1].get("health/temperature"),
    }


def mean_sd(xs: list[float]) -> str:
    return f"{statistics.fmean(xs):.3f} ± {statistics.stdev(xs):.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"


def table(results: list[dict]) -> str:
    lines = ["| arm | seed | held-out pass@1 | distinct greedy answers | train pass (last 10) | entropy (last 10) "
             "| first trending down | first COLLAPSE | actions fired | coef / T at end |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        knob = r["entropy_coef_end"] if r["entropy_coef_end"] is not None else r["temperature_end"]
        lines.append(f"| {r['arm']} | {r['seed']} | {r['heldout_pass_at_1']:.3f} | {r['distinct_greedy_answers']} "
                     f"| {r['train_pass_rate_last10']:.2f} | {r['entropy_last10']:.2f} | {r['first_trending_down']} "
                     f"| {r['first_collapse']} | {r['actions_fired']} | {'-' if knob is None else knob} |")
    lines += ["", "| arm | runs | held-out pass@1 (mean ± sd) | entropy last 10 (mean ± sd) | runs flagged COLLAPSE |",
              "|---|---|---|---|---|"]
    for arm in dict.fromkeys(r["arm"] for r in results):
        rs = [r for r in results if r["arm"] == arm]
        lines.append(f"| {arm} | {len(rs)} | {mean_sd([r['heldout_pass_at_1'] for r in rs])} "
                     f"| {mean_sd([r['entropy_last10'] for r in rs])} "
                     f"| {sum(r['first_collapse'] is not None for r in rs)}/{len(rs)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (each uses one thread)")
    ap.add_argument("--out", default="runs/entropy_floor_bench", help="folder of the runs")
    ap.add_argument("--set", dest="extra", action="append", default=[],
                    help="extra recipe override for every run (key=value), e.g. stages.0.max_steps=60")
    ap.add_argument("--json", help="write the per-run figures here")
    ap.add_argument("--from", dest="from_json", help="print the table of an earlier --json file")
    ap.add_argument("--write-data", action="store_true", help="(re)write bench/data/entropy_floor/ and exit")
    a = ap.parse_args(argv)
    if a.write_data:
        print(write_data())
        return
    if a.from_json:
        print(table(json.loads(Path(a.from_json).read_text())["runs"]))
        return
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    extra = [x for kv in a.extra for x in ("--set", kv)]
    jobs = [(arm, seed) for seed in a.seeds for arm in a.arms]   # arms interleaved: shared-machine noise hits all
    with ThreadPoolExecutor(a.jobs) as pool:
        dirs = list(pool.map(lambda j: run_one(*j, out, extra), jobs))
    results = sorted((summarise(d, arm, seed) for d, (arm, seed) in zip(dirs, jobs)),
                     key=lambda r: (list(ARMS).index(r["arm"]), r["seed"]))
    print(table(results))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"recipe": str(RECIPE.relative_to(ROOT)), "overrides": a.extra,
                                            "seeds": a.seeds, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
