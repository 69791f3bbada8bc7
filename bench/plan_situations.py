"""`rlvr plan`'s decisions in four situations fixed before running, each next to what every option then gave.

    python bench/plan_situations.py --seeds 0,1,2 --parallel 2 --out runs/plan_situations

The situations (all on the built-in arithmetic, the quickstart's stages; GRPO stages at ``--rl-steps``):
- base_no_sft: RL straight from the model built from scratch (no SFT). Options: GRPO as written; the quickstart's
  SFT stage in its place; SFT then GRPO.
- quickstart_sft: the quickstart's SFT checkpoint (held-out patience) before its DPO and GRPO stages. Options:
  stop; DPO only; DPO then GRPO; GRPO only (DPO skipped); more SFT for DPO's and GRPO's seconds (the pipeline's
  equal-time control).
- at_target: SFT on perfect add2/add3 demonstrations before a GRPO stage, the plan's target 0.9. Options: stop;
  GRPO; more SFT for GRPO's seconds.
- small_student: a 0.5m student (the quickstart's SFT on the imperfect teacher) with a 5m teacher trained on
  perfect demonstrations (10.9x the parameters). Options: stop; GRPO; distillation from the teacher for GRPO's
  training seconds.

For each situation and seed: the SFT stage it starts from (in PLAN_DIR), ``rlvr plan RECIPE --run-dir PLAN_DIR``,
then every option as its own ``rlvr run`` (one thread each, ``--parallel`` at once; finished runs are kept, so a
rerun resumes the bench). The recommended option of each seed is the one its decisions map to; the table gives
each option's held-out pass@1 and training seconds, and the paired difference (recommended − option) over seeds
with its 95% t-interval. Written to OUT/situations.json and OUT/situations.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runs import finished, pool, rlvr_run, stage_row, stage_rows

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "recipes" / "quickstart.yaml"


def base(seed: int, rl_steps: int, sft_max_steps: int | None = None) -> tuple[dict, dict]:
    """The quickstart recipe (seed ``seed``, GRPO ``rl_steps`` steps, no mid-stage evaluations) and its stages by
    name (``sft_max_steps``: a lower ceiling for SFT, for a quick check of the bench itself)."""
    r = yaml.safe_load(QUICKSTART.read_text())
    r.update(seed=seed, eval_base=True)
    r["eval"] = {**r["eval"], "control": "none"}
    st = {s["name"]: s for s in copy.deepcopy(r["stages"])}
    st["grpo"].update(max_steps=rl_steps, eval_every=0)
    if sft_max_steps:
        st["sft"].update(max_steps=sft_max_steps, eval_every=min(st["sft"]["eval_every"], sft_max_steps))
    return r, st


def recipe(r: dict, stages: list[dict], **over) -> dict:
    out = copy.deepcopy(r)
    out["stages"] = copy.deepcopy(stages)
    for k, v in over.items():
        out[k] = {**out.get(k, {}), **v} if isinstance(v, dict) else v
    return out


def easy(r: dict, st: dict) -> tuple[dict, list[dict]]:
    """at_target: perfect add2/add3 demonstrations, held-out add2/add3, target 0.9."""
    sft = copy.deepcopy(st["sft"])
    sft["data"] = {k: v for k, v in sft["data"].items() if k != "teacher"} | {"families": ["add2", "add3"]}
    grpo = copy.deepcopy(st["grpo"])
    grpo["data"] = {**grpo["data"], "families": ["add2", "add3"], "weights": [0.5, 0.5]}
    r = recipe(r, [], eval={"tasks": {**r["eval"]["tasks"], "families": ["add2", "add3"]}}, plan={"target": 0.9})
    return r, [sft, grpo]


def teacher_recipe(r: dict, st: dict, out: Path) -> dict:
    """small_student's teacher: the 5m tiny model, the quickstart's SFT stage on perfect demonstrations."""
    sft = copy.deepcopy(st["sft"])
    sft["data"] = {k: v for k, v in sft["data"].items() if k != "teacher"}
    return recipe(r, [sft], seed=0, model={"tiny": {"size": "5m", "seed": 0}}, run_dir=str(out))


def distill_stage(st: dict, teacher: str, minutes: float) -> dict:
    g = st["grpo"]
    return {"type": "distill", "name": "distill", "teacher": teacher, "data": g["data"],
            "sampling": {"group_size": 8, "temperature": 1.0, "max_new_tokens": g["sampling"]["max_new_tokens"]},
            "keep": "all", "max_per_task": 2, "rounds": 1000, "tasks_per_round": 32, "steps_per_round": 2,
            "batch_size": 32, "micro_batch_size": 32, "max_minutes": round(minutes, 3),
            "optim": {"lr": 3.0e-4, "warmup_steps": 5, "schedule": "constant"}}


def situations(seed: int, rl_steps: int, teacher: Path, sft_max_steps: int | None = None) -> dict:
    """Per situation: the recipe the plan is asked about, the stages run before it (in the plan's run dir), and
    the option runs: ``{option: (run name, recipe, stage read)}``."""
    r, st = base(seed, rl_steps, sft_max_steps)
    ctl = {"control": "sft"}
    er, (esft, egrpo) = easy(r, st)
    small = {"tiny": {"size": "0.5m", "seed": seed}, "micro_tokens": r["model"]["micro_tokens"]}
    sr = recipe(r, [], model=small)  # the plan's teacher only where the plan is asked (it trains meanwhile)
    return {
        "base_no_sft": {
            "plan": recipe(r, [st["grpo"]]), "start": [],
            "options": {"grpo (as written)": ("grpo", recipe(r, [st["grpo"]]), "grpo"),
                        "sft instead": ("sft", recipe(r, [st["sft"]]), "sft"),
                        "sft then grpo": ("sft_grpo", recipe(r, [st["sft"], st["grpo"]]), "grpo")}},
        "quickstart_sft": {
            "plan": recipe(r, [st["sft"], st["dpo"], st["grpo"]]), "start": [st["sft"]],
            "options": {"stop": ("full", None, "sft"),
                        "dpo only": ("full", None, "dpo"),
                        "dpo then grpo": ("full", recipe(r, [st["sft"], st["dpo"], st["grpo"]], eval=ctl), "grpo"),
                        "grpo only": ("grpo_only", recipe(r, [st["sft"], st["grpo"]]), "grpo"),
                        "more sft": ("full", None, "sft-control@grpo")}},
        "at_target": {
            "plan": recipe(er, [esft, egrpo]), "start": [esft],
            "options": {"stop": ("full", None, "sft"),
                        "grpo": ("full", recipe(er, [esft, egrpo], eval=ctl), "grpo"),
                        "more sft": ("full", None, "sft-control@grpo")}},
        "small_student": {
            "plan": recipe(sr, [st["sft"], st["grpo"]], plan={"teacher": str(teacher)}), "start": [st["sft"]],
            "options": {"stop": ("grpo", None, "sft"),
                        "grpo": ("grpo", recipe(sr, [st["sft"], st["grpo"]]), "grpo"),
                        "distill": ("distill", "after:grpo", "distill")}},
    }


def recommended(name: str, decisions: list[dict]) -> str:
    """The option a seed's decisions map to."""
    d = {x["stage"]: x for x in decisions}

    def kept(s: str) -> bool:
        return d[s]["decision"] in ("run", "done")

    def instead(s: str) -> str:
        return (d[s].get("instead") or "").split(" ")[0]

    if name == "base_no_sft":  # sft_before_rl: SFT first, then the RL stage
        return "grpo (as written)" if kept("grpo") else (
            "sft then grpo" if instead("grpo") == "sft" and "then this stage" in d["grpo"]["instead"] else "sft instead")
    if name == "quickstart_sft":
        if "sft" in (instead("dpo"), instead("grpo")) and not kept("dpo"):
            return "more sft"
        return {(True, True): "dpo then grpo", (False, True): "grpo only", (True, False): "dpo only",
                (False, False): "stop" if "sft" not in instead("grpo") else "more sft"}[(kept("dpo"), kept("grpo"))]
    if name == "at_target":
        return "grpo" if kept("grpo") else ("more sft" if instead("grpo") == "sft" else "stop")
    return "grpo" if kept("grpo") else ("distill" if instead("grpo") == "distill" else "stop")


def train_seconds(run_dir: Path, upto: str, with_sft: bool = False) -> float:
    """Training seconds to reach ``upto`` from the situation's start: a control's own budget, else the stages up to
    and including ``upto``, SFT counted only when the situation starts before it (``with_sft``)."""
    rows = stage_rows(run_dir)
    if upto.startswith("sft-control@"):
        return next(r["train_s"] for r in rows if r["stage"] == upto)
    if upto == "sft" and not with_sft:
        return 0.0
    total = 0.0
    for row in rows:
        if row["stage"] == "base" or "control_for" in row or (row["stage"] == "sft" and not with_sft):
            continue
        total += row.get("train_s") or 0.0
        if row["stage"] == upto:
            break
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--rl-steps", type=int, default=60)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--only", default=None, help="comma-separated situations (default: all four)")
    ap.add_argument("--sft-max-steps", type=int, default=None, help="a lower SFT ceiling (checking the bench)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out, seeds, t0 = Path(a.out), [int(s) for s in a.seeds.split(",")], time.time()
    teacher_dir = out / "teacher"
    teacher = (teacher_dir / "sft" / "final").resolve()
    sits = {s: situations(s, a.rl_steps, teacher, a.sft_max_steps) for s in seeds}
    names = [n for n in sits[seeds[0]] if a.only is None or n in a.only.split(",")]
    jobs = []
    if "small_student" in names and not finished(teacher_dir):
        jobs.append(rlvr_run(teacher_recipe(*base(0, a.rl_steps, a.sft_max_steps), teacher_dir), teacher_dir))
    for s in seeds:  # seed by seed: an interrupted bench has every situation at its first seeds
        for n in names:
            sit, d = sits[s][n], out / n / f"seed{s}"
            if sit["start"] and not finished(d / "plan_run"):
                jobs.append(rlvr_run(recipe(sit["plan"], sit["start"]), d / "plan_run"))
            for run, rec, _ in sit["options"].values():
                if isinstance(rec, dict) and not finished(d / run):
                    jobs.append(rlvr_run(rec, d / run))
    pool(jobs, a.parallel)
    jobs = []
    for n in names:
        for s in seeds:
            sit, d = sits[s][n], out / n / f"seed{s}"
            pd = d / "plan_run"
            pd.mkdir(parents=True, exist_ok=True)
            if not (d / "plan.json").exists():
                (d / "plan.yaml").write_text(yaml.safe_dump(sit["plan"], sort_keys=False))
                jobs.append(([sys.executable, "-m", "rlvr.cli", "plan", str(d / "plan.yaml"), "--run-dir", str(pd),
                              "--out", str(d / "plan.json")], d / "plan.log"))
            for run, rec, _ in sit["options"].values():
                if rec == "after:grpo" and not finished(d / run):
                    minutes = stage_row(d / "grpo", "grpo")["train_s"] / 60.0
                    st = base(s, a.rl_steps, a.sft_max_steps)[1]
                    small = sit["options"]["grpo"][1]
                    jobs.append(rlvr_run(recipe(small, [st["sft"], distill_stage(st, str(teacher), minutes)]),
                                         d / run))
    pool(jobs, a.parallel)
    report = {"meta": {"command": "python bench/plan_situations.py " + " ".join(sys.argv[1:]), "seeds": seeds,
                       "rl_steps": a.rl_steps, "bench_wall_s": round(time.time() - t0, 1)}, "situations": {}}
    for n in names:
        report["situations"][n] = collect(n, sits, seeds, out)
    (out / "situations.json").write_text(json.dumps(report, indent=1))
    write_md(out, report)
    print((out / "situations.md").read_text())


def collect(name: str, sits: dict, seeds: list[int], out: Path) -> dict:
    from rlvr.monitoring.intervals import paired_interval

    options = list(sits[seeds[0]][name]["options"])
    per_seed = []
    for s in seeds:
        d = out / name / f"seed{s}"
        plan = json.loads((d / "plan.json").read_text())
        decs = [{k: x.get(k) for k in ("stage", "decision", "rule", "reason", "instead")} for x in plan["decisions"]]
        fig = {}
        sit = sits[s][name]
        for opt, (run, _, stage) in sit["options"].items():
            row = stage_row(d / run, stage)
            n = row.get("n_tasks") or json.loads((d / run / stage / "eval.json").read_text()).get("n_tasks")
            fig[opt] = {"pass_at_1": row["pass_at_1"], "n_tasks": n,
                        "train_s": train_seconds(d / run, stage, with_sft=not sit["start"])}
        p = {"seed": s, "decisions": decs, "recommended": recommended(name, plan["decisions"]), "options": fig}
        target = sit["plan"].get("plan", {}).get("target")
        if target is not None:
            p["target"] = target_check(fig, p["recommended"], target)
        per_seed.append(p)
    means = {o: sum(p["options"][o]["pass_at_1"] for p in per_seed) / len(per_seed) for o in options}
    diffs = {o: paired_interval([p["options"][p["recommended"]]["pass_at_1"] - p["options"][o]["pass_at_1"]
                                 for p in per_seed]) for o in options}
    best = max(means, key=means.get)
    d = diffs[best]
    ok = all(p["recommended"] == best for p in per_seed) or (d["high"] is not None and d["high"] >= 0)
    out = {"per_seed": per_seed, "mean": means, "recommended_minus": diffs, "best": best, "recommended_ok": ok}
    if all("target" in p for p in per_seed):
        out["target_ok"] = all(p["target"]["ok"] for p in per_seed)
    return out


def target_check(fig: dict, rec: str, target: float, slack_s: float = 5.0) -> dict:
    """With a target, the best option is the cheapest that meets it (its 95% lower bound at least the target):
    ``{"meets": [options], "cheapest": option, "ok": the recommended meets it within slack_s of the cheapest}``."""
    from rlvr.monitoring.intervals import wilson_lower

    meets = [o for o, f in fig.items() if f["n_tasks"] and wilson_lower(f["pass_at_1"], f["n_tasks"]) >= target]
    cheapest = min(meets, key=lambda o: fig[o]["train_s"]) if meets else None
    ok = rec in meets and fig[rec]["train_s"] <= fig[cheapest]["train_s"] + slack_s
    return {"meets": meets, "cheapest": cheapest, "ok": ok}


def write_md(out: Path, report: dict) -> None:
    lines = ["# rlvr plan's recommendations against what each option gave", "", f"`{report['meta']['command']}`", ""]
    for name, sit in report["situations"].items():
        opts = list(sit["mean"])
        lines += [f"## {name}", "", "| seed | decisions | recommended | " + " | ".join(opts) + " |",
                  "|---|---|---|" + "---:|" * len(opts)]
        for p in sit["per_seed"]:
            decs = "; ".join(f"{x['stage']}: {x['decision']}" + (f" ({x['rule']})" if x["rule"] else "")
                             for x in p["decisions"] if x["decision"] != "done")
            cells = [f"{100 * p['options'][o]['pass_at_1']:.1f}% ({p['options'][o]['train_s']:.0f} s)" for o in opts]
            lines.append(f"| {p['seed']} | {decs} | {p['recommended']} | " + " | ".join(cells) + " |")
        lines.append("| mean | | | " + " | ".join(f"{100 * sit['mean'][o]:.1f}%" for o in opts) + " |")
        iv = []
        for o in opts:
            d = sit["recommended_minus"][o]
            iv.append("—" if d["low"] is None else f"{100 * d['mean']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]")
        if "target_ok" in sit:
            for p in sit["per_seed"]:
                t = p["target"]
                lines.append(f"| seed {p['seed']}: meet the target (95% lower bound) | | | " + " | ".join(
                    "yes" if o in t["meets"] else "no" for o in opts) + " |")
        lines += ["| recommended − option | | | " + " | ".join(iv) + " |", "",
                  (f"Best on the mean: {sit['best']}; the recommendation is "
                  f"{'the best or within its interval' if sit['recommended_ok'] else 'NOT within the best option’s interval'}."),
                  *([(f"Against the target (the cheapest option whose 95% lower bound meets it): the recommendation "
                     f"{'is' if sit['target_ok'] else 'is NOT'} that option on every seed.")] if "target_ok" in sit else []),
                  ""]
    (out / "situations.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
