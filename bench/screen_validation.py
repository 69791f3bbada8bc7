"""Does the RL screen pick the checkpoint RL gains most from? RL from K checkpoints of one SFT run, several seeds.

    python bench/screen_validation.py recipes/quickstart.yaml --sft-steps 900 --checkpoints 6 \
        --seeds 0,1 --rl-steps 60 --parallel 2 --out runs/screen_validation/quickstart

1. The recipe's SFT stage alone, for ``--sft-steps`` steps (held-out patience and best-keeping off), saving a
   checkpoint at each K-th of them (fixed fractions of SFT).
2. ``rlvr screen`` on each checkpoint, once per seed (that seed's sampling): greedy pass@1, the sampled pass
   rate p, the sampled tokens' entropy at the RL temperature, the expected and measured informative-group
   shares, at the RL stage's G, temperature and token budget, on the recipe's held-out tasks.
3. The recipe's RL stage alone from each checkpoint and seed, the same steps each (``--rl-steps``), its gain
   = held-out greedy pass@1 after RL − the checkpoint's own (both evaluated by the run, ``eval_base``).
4. Spearman's ρ between each screen statistic and the gain over the K × seeds runs, with a 95% bootstrap
   interval that resamples checkpoints (a checkpoint's runs share its screen); written to OUT/validation.json,
   OUT/validation.md and OUT/validation.png. Finished runs are kept: rerunning resumes the table.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import finished, pool, rlvr_run, run_env, stage_pass, stage_rows

STATISTICS = ("signal_frac_observed", "signal_frac", "entropy", "p", "adv_var", "pass_at_1")
LABELS = {"signal_frac_observed": "signal fraction (measured)", "signal_frac": "signal fraction (expected)",
          "entropy": "entropy at the RL temperature", "p": "sampled pass rate p", "adv_var": "p(1-p)(G-1)/G",
          "pass_at_1": "greedy pass@1"}


def stage_of(recipe: dict, kind: str, name: str | None) -> dict:
    for st in recipe["stages"]:
        if (name is None and st["type"] == kind) or st.get("name") == name:
            return st
    raise SystemExit(f"{recipe.get('name')}: no {'stage ' + name if name else kind + ' stage'}")


def sft_recipe(recipe: dict, sft: dict, steps: int, k: int, run_dir: Path) -> dict:
    """The SFT stage alone, ``steps`` steps, a checkpoint every steps/k, every one kept."""
    if steps % k:
        raise SystemExit(f"--sft-steps {steps} is not a multiple of --checkpoints {k}")
    st = copy.deepcopy(sft)
    for key in ("patience", "keep_best", "best_metric", "heldout", "heldout_every"):
        st.pop(key, None)
    st.update(max_steps=steps, save_every=steps // k, keep_last=0, eval_every=0)
    out = copy.deepcopy(recipe)
    out.update(stages=[st], run_dir=str(run_dir), eval_base=False)
    out["eval"] = {**out.get("eval", {}), "control": "none"}
    return out


def rl_recipe(recipe: dict, rl: dict, ckpt: Path, seed: int, steps: int | None, run_dir: Path) -> dict:
    """The RL stage alone from ``ckpt``, seeded ``seed``, its held-out figure before (eval_base) and after."""
    st = copy.deepcopy(rl)
    st.update(eval_every=0, save_every=0)
    if steps is not None:
        st["max_steps"] = steps
        st.pop("max_time_s", None)
    model = {k: v for k, v in recipe.get("model", {}).items() if k not in ("tiny", "path")}
    out = copy.deepcopy(recipe)
    out.update(stages=[st], model={**model, "path": str(ckpt)}, seed=seed, run_dir=str(run_dir), eval_base=True)
    out["eval"] = {**out.get("eval", {}), "control": "none", "k": 1}
    return out


def screen(ckpts: list[Path], rl: dict, seed: int, out: Path) -> list[dict]:
    """``rlvr screen --json`` on the checkpoints (the SFT run's held-out tasks) at the RL stage's sampling."""
    if out.exists():
        return json.loads(out.read_text())
    s = rl.get("sampling", {})
    args = [sys.executable, "-m", "rlvr.cli", "screen", *map(str, ckpts), "--json", "--seed", str(seed),
            "--group-size", str(s.get("group_size", 8)), "--temperature", str(s.get("temperature", 1.0))]
    if s.get("max_new_tokens"):
        args += ["--max-new-tokens", str(s["max_new_tokens"])]
    res = subprocess.run(args, check=False, capture_output=True, text=True, env=run_env())
    if res.returncode != 0:
        raise SystemExit(f"rlvr screen failed:\n{res.stderr[-3000:]}")
    rows = json.loads(res.stdout[res.stdout.index("["):])
    for r in rows:
        r.pop("outcomes", None)
    out.write_text(json.dumps(rows, indent=1))
    return rows


def run_wall_s(run_dir: Path) -> float:
    """The wall seconds a finished run's stages and evaluations took (its summary.json)."""
    return sum(st.get("wall_s", 0.0) for st in stage_rows(run_dir))


def table(runs: list[dict], target: str = "gain") -> dict:
    """Per statistic: Spearman's ρ with ``target`` (``gain``, or ``after``: the held-out figure after RL) over the
    runs, its checkpoint-resampled interval, and ρ over the checkpoints' means."""
    from rlvr.monitoring.rank_correlation import spearman, spearman_interval

    out = {}
    steps = sorted({r["step"] for r in runs})

    def means(key):
        return [sum(key(r) for r in runs if r["step"] == c) / sum(r["step"] == c for r in runs) for c in steps]

    for s in STATISTICS:
        x = [r["screen"][s] for r in runs]
        y = [r[target] for r in runs]
        ci = spearman_interval(x, y, clusters=[r["step"] for r in runs])
        out[s] = {**ci, "rho_checkpoint_means": spearman(means(lambda r, s=s: r["screen"][s]), means(lambda r: r[target]))}
    return out


def fmt(v, spec=".2f"):
    return "undefined" if v is None else format(v, spec)


def write_report(out: Path, meta: dict, runs: list[dict], corr: dict, corr_after: dict) -> None:
    steps = sorted({r["step"] for r in runs})
    lines = [f"# Screen validation: {meta['recipe']}", "", f"`{meta['command']}`", "",
             (f"SFT {meta['sft_steps']} steps, checkpoints at {', '.join(map(str, steps))}; RL {meta['rl_steps']} "
             f"steps from each, seeds {', '.join(map(str, meta['seeds']))}; {meta['heldout']}."), "",
             "| SFT step | seed | pass@1 before | after RL | gain | p | entropy | signal (measured) | signal (expected) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(runs, key=lambda r: (r["step"], r["seed"])):
        sc = r["screen"]
        lines.append(f"| {r['step']} | {r['seed']} | {r['before']:.1%} | {r['after']:.1%} | {100 * r['gain']:+.1f} | "
                     f"{sc['p']:.3f} | {sc['entropy']:.3f} | {sc['signal_frac_observed']:.2f} | {sc['signal_frac']:.2f} |")
    lines += ["", "| statistic | Spearman ρ with the gain (runs) | 95% interval (checkpoints resampled) | ρ of checkpoint means |",
              "|---|---:|---|---:|"]
    for s, c in corr.items():
        lines.append(f"| {LABELS[s]} | {fmt(c['rho'])} | {fmt(c['low'])} to {fmt(c['high'])} | "
                     f"{fmt(c['rho_checkpoint_means'])} |")
    lines += ["", "The same against the held-out figure after RL (where a start ends, not what RL added):", "",
              "| statistic | Spearman ρ with pass@1 after RL (runs) | 95% interval | ρ of checkpoint means |",
              "|---|---:|---|---:|"]
    for s, c in corr_after.items():
        lines.append(f"| {LABELS[s]} | {fmt(c['rho'])} | {fmt(c['low'])} to {fmt(c['high'])} | "
                     f"{fmt(c['rho_checkpoint_means'])} |")
    best = max(steps, key=lambda c: sum(r["after"] for r in runs if r["step"] == c))
    lines += ["", f"Highest held-out figure after RL: from SFT step {best}."]
    (out / "validation.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    shown = ("signal_frac_observed", "entropy", "p")
    fig, axes = plt.subplots(1, len(shown), figsize=(4 * len(shown), 3.4), sharey=True)
    for ax, s in zip(axes, shown):
        for seed in meta["seeds"]:
            pts = sorted((r for r in runs if r["seed"] == seed), key=lambda r: r["step"])
            ax.scatter([r["screen"][s] for r in pts], [100 * r["gain"] for r in pts], label=f"seed {seed}")
            for r in pts:
                ax.annotate(str(r["step"]), (r["screen"][s], 100 * r["gain"]), fontsize=7, alpha=0.7)
        c = corr[s]
        ax.set_title(f"{LABELS[s]}\nρ = {fmt(c['rho'])} [{fmt(c['low'])}, {fmt(c['high'])}]", fontsize=9)
        ax.set_xlabel(s)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("RL gain, held-out pass@1 (points)")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{meta['recipe']}: screen statistic vs RL gain (labels: SFT step)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "validation.png", dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipe")
    ap.add_argument("--sft-stage", default=None, help="the SFT stage's name (default: the first sft stage)")
    ap.add_argument("--rl-stage", default=None, help="the RL stage's name (default: the first rl stage)")
    ap.add_argument("--sft-steps", type=int, required=True)
    ap.add_argument("--checkpoints", type=int, default=6)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--rl-steps", type=int, default=None, help="default: the RL stage's own max_steps")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    recipe = yaml.safe_load(Path(a.recipe).read_text())
    sft, rl = stage_of(recipe, "sft", a.sft_stage), stage_of(recipe, "rl", a.rl_stage)
    seeds = [int(s) for s in a.seeds.split(",")]
    out = Path(a.out)
    sft_dir = out / "sft"
    if not finished(sft_dir):
        pool([rlvr_run(sft_recipe(recipe, sft, a.sft_steps, a.checkpoints, sft_dir), sft_dir)], 1)
    ckpt_root = sft_dir / sft["name"] / "checkpoints"
    # the step checkpoints, and the final model as the last fraction
    ckpts = {int(p.name.split("-")[1]): p for p in ckpt_root.glob("step-*")}
    ckpts[a.sft_steps] = sft_dir / sft["name"] / "final"
    ckpts = dict(sorted(ckpts.items()))
    if len(ckpts) != a.checkpoints:
        raise SystemExit(f"{ckpt_root}: {len(ckpts)} checkpoints with the final one, expected {a.checkpoints}")
    screens = {}
    for s in seeds:
        rows = {r["path"]: r for r in screen(list(ckpts.values()), rl, s, out / f"screen_seed{s}.json")}
        screens[s] = {step: rows[str(p)] for step, p in ckpts.items()}
    jobs = []
    for step, ck in ckpts.items():
        for s in seeds:
            d = out / "rl" / f"step-{step}__seed={s}"
            if not finished(d):
                jobs.append(rlvr_run(rl_recipe(recipe, rl, ck.resolve(), s, a.rl_steps, d), d))
    pool(jobs, a.parallel)
    runs = []
    for step in ckpts:
        for s in seeds:
            d = out / "rl" / f"step-{step}__seed={s}"
            before, after = stage_pass(d, "base"), stage_pass(d, rl["name"])
            runs.append({"step": step, "seed": s, "before": before, "after": after,
                         "gain": after - before, "screen": {k: screens[s][step][k] for k in STATISTICS}})
    corr, corr_after = table(runs), table(runs, "after")
    ev = recipe.get("eval", {}).get("tasks", {})
    meta = {"recipe": a.recipe, "command": "python bench/screen_validation.py " + " ".join(sys.argv[1:]),
            "sft_steps": a.sft_steps, "rl_steps": a.rl_steps or rl.get("max_steps"), "seeds": seeds,
            "heldout": f"held-out greedy pass@1 on the recipe's eval tasks ({ev.get('type')}, n {ev.get('n')})",
            "group_size": rl.get("sampling", {}).get("group_size", 8),
            "runs_wall_min": round(sum(run_wall_s(d) for d in [sft_dir, *(out / "rl").iterdir()] if d.is_dir()) / 60, 1)}
    (out / "validation.json").write_text(json.dumps({"meta": meta, "runs": runs, "spearman": corr,
                                                     "spearman_after": corr_after}, indent=1))
    write_report(out, meta, runs, corr, corr_after)
    print((out / "validation.md").read_text())


if __name__ == "__main__":
    main()
