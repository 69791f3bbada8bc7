"""Ablation of the 2026 methods (docs/methods.md): RL on mul31 from the quickstart's SFT checkpoint.

Every row is ``rlvr grpo recipes/grpo_mul31.yaml`` from the same SFT checkpoint with the same wall-time
budget (``--minutes`` of training; the step cap is out of reach), one thread, and its method's overrides;
afterwards the pipeline evaluates greedy pass@1 on the WHOLE mul31 held-out set (854 problems). Per row and
seed one JSON line is appended to ``OUT/results.jsonl`` (pass@1, steps done, zero-variance fraction and
policy entropy averaged over the last 5 steps); rows already there are skipped (resumable).

    PYTHONPATH=src OMP_NUM_THREADS=1 python bench/ablation_methods.py --sft runs/qs_sft/sft/final \\
        --out runs/ablation --seeds 0 1 --minutes 2
    python bench/ablation_methods.py --out runs/ablation --table     # the markdown table

Rows that need a teacher (residual advantage, on-policy distillation) use the ``grpo`` row's final policy of
the same seed (stronger than the SFT student on mul31), so they run after it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "grpo_mul31.yaml"
S = "stages.grpo."

ROWS: dict[str, list[str]] = {
    "grpo": [],
    "dapo": [f"{S}loss.type=dapo"],
    "sign_balance": [f"{S}loss.type=sign_balance"],
    "asym_grpo": [f"{S}loss.type=asym_grpo"],
    "steer": [f"{S}loss.type=steer"],
    "cispo": [f"{S}loss.type=cispo"],
    "sapo": [f"{S}loss.type=sapo"],
    "dar": [f"{S}loss.type=dar"],
    "eden": [f"{S}eden.enabled=true"],
    "eden+steer": [f"{S}eden.enabled=true", f"{S}loss.type=steer"],
    "eden+asym": [f"{S}eden.enabled=true", f"{S}loss.type=asym_grpo"],
    "oc_grpo": [f"{S}off_context.enabled=true"],
    "double_rollout": [f"{S}double_rollout.enabled=true"],
    "guidance": [f"{S}guidance.enabled=true"],
    "tcr": [f"{S}rewards=[{{name: correct}}, {{name: checklist, weight: 0.5}}]"],
    "residual": [f"{S}residual={{enabled: true, teacher: '{{teacher}}'}}"],
    "onpolicy_distill": [],
}
NEEDS_TEACHER = {"residual", "onpolicy_distill"}
STAGE_ROWS = {"onpolicy_distill"}  # not an RL stage: a one-stage recipe written next to the run


def distill_recipe(out: Path, seed: int, teacher: Path, sft: str) -> Path:
    """The ``onpolicy_distill`` row: grpo_mul31's data, sampling, optimiser and eval with the stage swapped."""
    import yaml

    r = yaml.safe_load(RECIPE.read_text())
    g = r["stages"][0]
    r["model"] = {"path": sft}
    r["stages"] = [{"type": "onpolicy_distill", "name": "grpo", "teacher": str(teacher), "data": g["data"],
                    "sampling": g["sampling"], "optim": g["optim"], "tasks_per_step": g["tasks_per_step"],
                    "max_steps": 600, "save_every": 0}]
    path = out / f"onpolicy_distill-s{seed}.yaml"
    path.write_text(yaml.safe_dump(r, sort_keys=False))
    return path


def done(results: Path) -> set[tuple[str, int]]:
    if not results.exists():
        return set()
    return {(r["row"], r["seed"]) for r in map(json.loads, results.read_text().splitlines()) if r.get("pass_at_1") is not None}


def tail_mean(metrics: Path, key: str, n: int = 5) -> float | None:
    vals = [r[key] for r in map(json.loads, metrics.read_text().splitlines()) if key in r]
    return statistics.fmean(vals[-n:]) if vals else None


def run_row(row: str, seed: int, sft: str, out: Path, minutes: float, eval_n: int = 854) -> dict:
    run_dir = out / f"{row}-s{seed}"
    teacher = out / f"grpo-s{seed}" / "grpo" / "final"
    sets = [s.replace("{teacher}", str(teacher)) for s in ROWS[row]]
    sets += ["threads=1", f"seed={seed}", f"{S}max_minutes={minutes}", f"{S}max_steps=100000", f"{S}eval_every=0",
             f"{S}save_every=0", f"eval.tasks.n={eval_n}"]
    cmd = [sys.executable, "-m", "rlvr.cli", "grpo", str(RECIPE), "--model", sft, "--run-dir", str(run_dir)]
    if row in STAGE_ROWS:
        cmd = [sys.executable, "-m", "rlvr.cli", "run", str(distill_recipe(out, seed, teacher, sft)), "--run-dir",
               str(run_dir)]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.time()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(ROOT / "src")}
    log = (out / f"{row}-s{seed}.log").open("w")
    rc = subprocess.call(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    rec = {"row": row, "seed": seed, "rc": rc, "wall_s": round(time.time() - t0, 1), "overrides": ROWS[row],
           "pass_at_1": None}
    ev, met = run_dir / "grpo" / "eval.json", run_dir / "grpo" / "metrics.jsonl"
    if rc == 0 and ev.exists():
        e = json.loads(ev.read_text())
        steps = [json.loads(x) for x in met.read_text().splitlines()]
        rec.update(pass_at_1=e["pass_at_1"], n_tasks=e["n_tasks"], steps=max((r.get("step", 0) for r in steps), default=0),
                   zero_var_frac=tail_mean(met, "rollout/zero_var_frac"), entropy=tail_mean(met, "policy/entropy"),
                   train_pass_rate=tail_mean(met, "rollout/pass_rate"), minutes=tail_mean(met, "perf/minutes", 1))
    return rec


def table(out: Path) -> str:
    rows: dict[str, list[dict]] = {}
    for r in map(json.loads, (out / "results.jsonl").read_text().splitlines()):
        if r.get("pass_at_1") is not None:
            rows.setdefault(r["row"], []).append(r)
    lines = ["| row | seeds | held-out pass@1 (854) mean | per seed | steps per seed | zero-var frac (end) | entropy (end) |",
             "|---|---|---|---|---|---|---|"]
    f = lambda xs: statistics.fmean(xs) if xs else float("nan")  # noqa: E731
    for name in [n for n in ROWS if n in rows] + [n for n in rows if n not in ROWS]:
        rs = sorted(rows[name], key=lambda r: r["seed"])
        p = [100 * r["pass_at_1"] for r in rs]
        lines.append(f"| {name} | {len(rs)} | {f(p):.1f} | {' / '.join(f'{x:.1f}' for x in p)} | "
                     f"{' / '.join(str(r['steps']) for r in rs)} | {f([r['zero_var_frac'] or 0 for r in rs]):.2f} | "
                     f"{f([r['entropy'] or 0 for r in rs]):.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sft", default="runs/qs_sft/sft/final")
    ap.add_argument("--out", type=Path, default=Path("runs/ablation"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--rows", nargs="+", default=list(ROWS))
    ap.add_argument("--eval-n", type=int, default=854, help="held-out problems (854: all of mul31's)")
    ap.add_argument("--reverse", action="store_true", help="run the rows last to first (a second lane: every "
                    "row gets its first seed soonest)")
    ap.add_argument("--table", action="store_true")
    a = ap.parse_args()
    if a.table:
        print(table(a.out))
        return
    a.out.mkdir(parents=True, exist_ok=True)
    results = a.out / "results.jsonl"
    for row in (a.rows[::-1] if a.reverse else a.rows):
        if row in NEEDS_TEACHER and not any((a.out / f"grpo-s{s}" / "grpo" / "final").exists() for s in a.seeds):
            print(f"skip {row}: needs the grpo row's final policy as its teacher", flush=True)
            continue
        for seed in a.seeds:
            if (row, seed) in done(results):
                continue
            rec = run_row(row, seed, a.sft, a.out, a.minutes, a.eval_n)
            with results.open("a") as fh:
                fh.write(json.dumps(rec) + "\n")
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
