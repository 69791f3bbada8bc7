"""How rlvr's GRPO step cost grows with the work: step time and peak memory, one factor at a time from a base.

    PYTHONPATH=src python bench/scaling.py --json bench/results/scaling.json --png docs/img/scaling.png   # full
    PYTHONPATH=src python bench/scaling.py --quick --json /tmp/scaling.json --png /tmp/scaling.png       # smoke

The base (:data:`BASE`): the Qwen2.5-0.5B shape (random init, ``rlvr build-model``), LoRA r 16 (alpha 32) on the
attention and MLP projections, 1 prompt x G 8, 128 new tokens, beta 0.04 (k3: the frozen reference's pass is in
every step), float32, the reward of ``grpo_vs_trl.py`` (correct + spread: every group carries variance). From
it one factor grows at a time (:data:`FACTORS`): the group size G (4 -> 64), the completion length (64 -> 1,024
new tokens), the vocabulary (1k -> 152k ids, on the base shape cut to 4 layers: a 24-layer body would hide the
head) and the model size (1M -> the 0.5B shape, :data:`MODEL_POINTS`). ``--quick``: the same curves at shrunk
shapes (hidden 64, 2 layers) and short completions, a smoke test of the whole path in a few minutes.

Each point is a fresh process (``--point``, its own ``build-model`` folder built in another process before it):
``--steps`` GRPO steps of ``train_rl`` (the first a warm-up, unless ``--steps 1``), its step time and the phases of a step
(``time/generate``, ``time/ref``, ``time/train``; medians of the measured steps) from its metrics, and its own
peak RSS (``VmHWM``: imports, model, reference, optimizer state, rollout, activations). A point over
``--point-timeout`` seconds or out of memory is recorded as such and the curve goes on.

The JSON: ``base``, ``quick``, ``machine``, ``command`` and per factor ``{"values", "points": [{value, params,
step_s, generate_s, ref_s, train_s, peak_mb, ...} | {value, error}], "fit": {...}}``, the fit being the log-log
slope of the step time and of the peak memory above the curve's first point (1: linear; 2: quadratic) and the
linear slope of the peak memory (MiB per unit of the factor). ``--png``: one column per factor, time (with its
phases) above, memory below.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

BASE = {"shape": "qwen2.5-0.5b", "set": {}, "lora": 16, "prompts": 1, "group": 8, "max_new": 128, "beta": 0.04}
"""The point every curve starts from: one prompt's group a step, so that the far end of each curve (G 64, 1,024 new
tokens: eight times the base's rows or tokens) is one step of minutes on 2 cores, not an hour."""

MODEL_POINTS = {
    "1m": {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 512, "vocab_size": 4096},
    "8m": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 1024, "vocab_size": 16384},
    "47m": {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2,
            "intermediate_size": 2048, "vocab_size": 32768},
    "150m": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 2,
             "intermediate_size": 3072, "vocab_size": 65536},
    "0.5b": {},
}
"""The model-size curve: Qwen2.5-shaped (grouped-query attention, tied embeddings) from about 1M parameters to the
0.5B shape itself (no override)."""

FACTORS = {
    "group": {"key": "group", "values": [4, 8, 16, 32, 64], "label": "group size G"},
    "max_new": {"key": "max_new", "values": [64, 128, 256, 512, 1024], "label": "new tokens"},
    "vocab": {"key": "vocab_size", "values": [1024, 8192, 32768, 65536, 151936], "label": "vocabulary",
              "set": {"num_hidden_layers": 4}},
    "model": {"key": "model", "values": list(MODEL_POINTS), "label": "model"},
    "training": {"key": "lora", "values": [16, 0], "label": "LoRA rank (0: full fine-tuning)"},
}
"""Each curve: the factor, its values, and (``set``) what its base changes first. ``training`` is two points, not a
curve: the base with LoRA and with full fine-tuning (every parameter trained, float32 AdamW state, the frozen
reference a second copy of the weights)."""

QUICK_SET = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 128, "vocab_size": 4096}
QUICK_BASE = {**BASE, "set": QUICK_SET, "prompts": 2, "group": 4, "max_new": 16}
QUICK_MODEL_POINTS = {"tiny": {**QUICK_SET, "hidden_size": 32, "vocab_size": 1024}, "small": QUICK_SET}
QUICK_FACTORS = {
    "group": {"key": "group", "values": [2, 4], "label": "group size G"},
    "max_new": {"key": "max_new", "values": [8, 16], "label": "new tokens"},
    "vocab": {"key": "vocab_size", "values": [1024, 4096], "label": "vocabulary"},
    "model": {"key": "model", "values": list(QUICK_MODEL_POINTS), "label": "model"},
    "training": FACTORS["training"],
}


# ---------------------------------------------------------------- the grid (pure)

def point_spec(base: dict, factor: dict, value, model_points: dict) -> dict:
    """The base with one factor set to ``value``: ``{shape, set, lora, prompts, group, max_new, beta}``."""
    spec = {**base, "set": {**base["set"], **factor.get("set", {})}}
    key = factor["key"]
    if key == "model":
        if value not in model_points:
            raise ValueError(f"unknown model point {value!r}: expected one of {', '.join(model_points)}")
        spec["set"] = {**spec["set"], **model_points[value]}
    elif key == "vocab_size":
        spec["set"] = {**spec["set"], "vocab_size": int(value)}
    else:
        spec[key] = int(value)
    return spec


def grid(quick: bool = False, only: list[str] | None = None, base_set: dict | None = None,
         values: list[str] | None = None) -> dict:
    """``{factor: [(value, spec), ...]}`` of the curves to run (``only``: those factors, in that order; ``base_set``:
    config fields of the base's model replaced first, see :func:`base_of`; ``values``: only the points of these
    values, as written in the factor's list)."""
    base = base_of(quick, base_set)
    factors, models = (QUICK_FACTORS, QUICK_MODEL_POINTS) if quick else (FACTORS, MODEL_POINTS)
    bad = [f for f in only or [] if f not in factors]
    if bad:
        raise ValueError(f"unknown factor(s) {bad}: expected some of {', '.join(factors)}")
    out = {name: [(v, point_spec(base, factors[name], v, models)) for v in factors[name]["values"]
                  if not values or str(v) in values] for name in (only or factors)}  # in the order asked for
    empty = [name for name, pts in out.items() if not pts]
    if empty:
        raise ValueError(f"--values {','.join(values or [])}: no point of {', '.join(empty)} has one of them")
    return out


def base_of(quick: bool, base_set: dict | None = None) -> dict:
    """The base the curves start from, with ``base_set`` (``--base-set KEY=VALUE``: e.g. fewer layers, to see
    which part of a curve grows with depth) written into its model's config."""
    base = QUICK_BASE if quick else BASE
    return {**base, "set": {**base["set"], **(base_set or {})}} if base_set else base


def folder_key(spec: dict) -> str:
    """Points with the same model share one built folder."""
    return json.dumps([spec["shape"], sorted(spec["set"].items())])


def params_of(cfg: dict) -> int:
    """Parameters of a Qwen2-style decoder with tied embeddings (q/k/v biases) from its config fields."""
    h, n_layers, v = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    kv = h // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    per_layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * cfg["intermediate_size"] + 2 * h
    return v * h + n_layers * per_layer + h


def loglog_slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log y against log x (None with fewer than two usable points)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x and y and x > 0 and y > 0]
    return _slope(pts)


def _slope(pts: list[tuple[float, float]]) -> float | None:
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return None if den == 0 else sum((p[0] - mx) * (p[1] - my) for p in pts) / den


def fit(xs: list[float], points: list[dict]) -> dict:
    """The curve's slopes over its measured points: ``time_exponent`` (log-log, step time), ``memory_exponent``
    (log-log, peak memory above the first measured point), ``memory_mb_per_unit`` (linear)."""
    ok = [(x, p) for x, p in zip(xs, points) if "step_s" in p]
    if len(ok) < 2:
        return {"points": len(ok)}
    x = [float(a) for a, _ in ok]
    mem0 = ok[0][1]["peak_mb"]
    above = [(a, p["peak_mb"] - mem0) for a, p in ok[1:]]
    lin = _slope([(a, p["peak_mb"]) for a, p in zip(x, (p for _, p in ok))])
    beyond = _slope([(a, p["peak_mb"] - weights_mb(p)) for a, p in zip(x, (p for _, p in ok)) if p.get("params")])
    return {"points": len(ok), "time_exponent": _round(loglog_slope(x, [p["step_s"] for _, p in ok])),
            "memory_exponent": _round(loglog_slope([a - x[0] for a, _ in above], [m for _, m in above])
                                      if len(above) >= 2 else None),
            "memory_mb_per_unit": _round(lin, 5), "beyond_weights_mb_per_unit": _round(beyond, 5)}


def weights_mb(p: dict) -> float:
    """The float32 bytes of a point's model parameters in MiB (the frozen weights, one copy: under LoRA the
    reference is the same model with its adapters off)."""
    return (p.get("params") or 0) * 4 / 2**20


def _round(v, nd: int = 3):
    return None if v is None else round(v, nd)


def assemble(base: dict, quick: bool, curves: dict, info: dict | None = None) -> dict:
    """The JSON: ``curves`` ``{factor: [(value, point result), ...]}`` with each curve's fit."""
    factors = {}
    for name, pts in curves.items():
        values = [v for v, _ in pts]
        xs = [params_of_point(p) if name == "model" else v for v, p in pts]
        factors[name] = {"values": values, "x": xs, "points": [{"value": v, **p} for v, p in pts],
                         "fit": fit(xs, [p for _, p in pts]) if name != "training"
                         else {"points": sum("step_s" in p for _, p in pts)}}
    return {"benchmark": "scaling", "quick": quick, "base": base, "factors": factors, **(info or {})}


def merge(results: list[dict]) -> dict:
    """Several scaling JSONs of the same base as one: their curves side by side (a factor in two: the later one),
    each run's command and steps kept under ``runs``."""
    bases = {json.dumps(r["base"], sort_keys=True) for r in results}
    if len(bases) > 1:
        raise SystemExit(f"--from: the JSONs have different bases: {sorted(bases)}")
    if len(results) == 1:
        return results[0]
    out = {**results[0], "factors": {}, "runs": []}
    for r in results:
        out["factors"].update(r["factors"])
        out["runs"].append({k: r.get(k) for k in ("command", "steps", "date", "seconds")} | {"factors": list(r["factors"])})
    out["seconds"] = sum(r.get("seconds") or 0 for r in results)
    return out


def params_of_point(p: dict):
    """The model-size curve's x: the point's parameter count (None when it did not run)."""
    return p.get("params")


# ---------------------------------------------------------------- one point (a child process)

def point_main(spec_path: str) -> None:
    """``--point``: GRPO steps on the spec's folder; writes the result JSON next to the spec."""
    spec = json.loads(Path(spec_path).read_text())
    sys.path.insert(0, str(HERE))
    import grpo_vs_trl
    from _common import peak_rss_mb, pin_threads, rlvr_lora

    import rlvr.trainers.rl as rl_mod
    from rlvr.config.model import ModelConfig

    a = grpo_vs_trl.parse_args(["--prompts", str(spec["prompts"]), "--group", str(spec["group"]),
                                "--max-new", str(spec["max_new"]), "--beta", str(spec["beta"]),
                                "--steps", str(spec["steps"]), "--skip", str(min(1, spec["steps"] - 1)),
                                "--lora", str(spec["lora"])])
    n_tasks = spec["prompts"] * (spec["steps"] + 1)
    stage = grpo_vs_trl.rlvr_stage(a, n_tasks)
    # the verifier-overfitting probe's twin samples (every 4th step, the first included) are a monitor's cost, not
    # the step's: off, so that a one-step point measures the step alone
    health = stage.health.model_copy(update={"code_tests": stage.health.code_tests.model_copy(update={"twin_every": 0})})
    stage = stage.model_copy(update={"max_steps": spec["steps"], "health": health})
    pin_threads()
    work = Path(spec["work"])
    rl_mod.train_rl(stage, ModelConfig(path=spec["model_dir"], lora=rlvr_lora(a)), work, seed=0)
    recs = [json.loads(x) for x in (work / stage.name / "metrics.jsonl").read_text().splitlines()]
    recs = [r for r in recs if "time/step" in r][1:] or [r for r in recs if "time/step" in r]  # warm-up dropped
    med = lambda k: _median([r[k] for r in recs if k in r])
    out = {"step_s": med("time/step"), "generate_s": med("time/generate"), "ref_s": med("time/ref"),
           "train_s": med("time/train"), "completion_len": med("rollout/length_mean"), "steps": len(recs),
           "peak_mb": peak_rss_mb()["peak_mb"]}
    Path(spec["result"]).write_text(json.dumps(out))


def _median(xs: list[float]):
    if not xs:
        return None
    s = sorted(xs)
    return round((s[len(s) // 2] + s[(len(s) - 1) // 2]) / 2, 4)


def build_folder(spec: dict, out: Path, timeout: float) -> int:
    """``rlvr build-model`` in its own process (the build's memory is not the point's); the parameter count."""
    cmd = [sys.executable, "-m", "rlvr.cli", "build-model", str(out), "--shape", spec["shape"]]
    for k, v in spec["set"].items():
        cmd += ["--set", f"{k}={v}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"build-model failed: {(proc.stderr or proc.stdout)[-800:]}")
    cfg = json.loads((out / "config.json").read_text())
    return params_of(cfg)


def run_point(spec: dict, model_dir: str, work: Path, steps: int, timeout: float) -> dict:
    """One point in a fresh process; its result, or ``{"error"}`` (timed out, out of memory, failed)."""
    tag = f"p{len(list(work.glob('*.spec.json')))}"
    full = {**spec, "model_dir": model_dir, "steps": steps, "work": str(work / tag),
            "result": str(work / f"{tag}.result.json")}
    path = work / f"{tag}.spec.json"
    path.write_text(json.dumps(full))
    t0 = time.time()
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--point", str(path)],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"over the point limit of {timeout:.0f} s"}
    if proc.returncode != 0 or not Path(full["result"]).exists():
        why = "killed (out of memory?)" if proc.returncode == -9 else f"exit {proc.returncode}"
        return {"error": f"{why}: {proc.stderr[-600:]}"}
    return {**json.loads(Path(full["result"]).read_text()), "wall_s": round(time.time() - t0, 1)}


# ---------------------------------------------------------------- driver

def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--png", help="draw the curves here (matplotlib)")
    ap.add_argument("--quick", action="store_true", help="shrunk shapes (hidden 64, 2 layers): a smoke test")
    ap.add_argument("--only", default="", help="comma-separated factors (group, max_new, vocab, model)")
    ap.add_argument("--base-set", action="append", default=[], help="KEY=VALUE: a field of the base model's config "
                    "replaced (repeatable), e.g. num_hidden_layers=4")
    ap.add_argument("--values", default="", help="comma-separated: only the points of these values (e.g. 128,1024)")
    ap.add_argument("--steps", type=int, default=2, help="GRPO steps per point, the first a warm-up (dropped); 1: the "
                    "one step is measured, its one-time costs included (for points whose step takes minutes)")
    ap.add_argument("--point-timeout", type=float, default=600.0, help="seconds a point may take (build excluded)")
    ap.add_argument("--from", dest="from_json", help="no run: read scaling JSONs (comma-separated: their curves "
                    "together; with --json: written as one; with --png: drawn)")
    ap.add_argument("--point", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.steps < 1:
        ap.error(f"--steps {a.steps}: at least 1")
    try:
        a.base_set = dict(kv.split("=", 1) for kv in a.base_set)
        a.base_set = {k: int(v) if v.isdigit() else v for k, v in a.base_set.items()}
        a.grid = grid(a.quick, [f for f in a.only.split(",") if f], a.base_set, [v for v in a.values.split(",") if v])
    except ValueError as e:
        ap.error(str(e))
    return a


def run(a) -> dict:
    import shutil

    work = Path(tempfile.mkdtemp(prefix="bench_scaling_"))
    folders: dict[str, tuple[str, int]] = {}
    curves: dict[str, list] = {}
    t0 = time.time()
    try:
        for name, pts in a.grid.items():
            curves[name] = []
            for value, spec in pts:
                key = folder_key(spec)
                print(f"[{time.time() - t0:6.0f}s] {name} = {value}", file=sys.stderr, flush=True)
                try:
                    if key not in folders:
                        out = work / f"model{len(folders)}"
                        folders[key] = (str(out), build_folder(spec, out, a.point_timeout))
                    model_dir, n = folders[key]
                    res = {"params": n, **run_point(spec, model_dir, work, a.steps, a.point_timeout)}
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    res = {"error": str(e)[-800:]}
                curves[name].append((value, res))
                print(f"  {json.dumps(res)[:300]}", file=sys.stderr, flush=True)
                if a.json:  # a long run keeps what it has
                    write(a.json, assemble(base_of(a.quick, a.base_set), a.quick, curves, info(a)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return assemble(base_of(a.quick, a.base_set), a.quick, curves, {**info(a), "seconds": round(time.time() - t0)})


def info(a) -> dict:
    import platform

    return {"command": " ".join(["python", *sys.argv]), "steps": a.steps, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                        "threads": os.environ.get("BENCH_THREADS", "2"), "accel": os.environ.get("RLVR_ACCEL", "1")}}


def write(path: str, res: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=1))
    tmp.replace(path)


def plot(res: dict, path: str) -> None:
    """One column per factor: step time and its phases (top), peak memory (bottom); log-log axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(res["factors"])
    fig, axes = plt.subplots(2, len(names), figsize=(4.2 * len(names), 7), squeeze=False)
    labels = {**{k: v["label"] for k, v in FACTORS.items()}, "model": "parameters"}
    for j, name in enumerate(names):
        f = res["factors"][name]
        categorical = name == "training"  # LoRA r 16 / full: two bars' worth of points, not a curve
        xs = list(range(len(f["x"]))) if categorical else f["x"]
        pts = [(x, p) for x, p in zip(xs, f["points"]) if "step_s" in p and (x or categorical)]
        top, bottom = axes[0][j], axes[1][j]
        for key, style in (("step_s", "o-"), ("generate_s", "s--"), ("ref_s", "^:"), ("train_s", "v-.")):
            xy = [(x, p[key]) for x, p in pts if p.get(key)]
            if xy:
                top.plot(*zip(*xy), style, label=key.removesuffix("_s"))
        if pts:
            bottom.plot([x for x, _ in pts], [p["peak_mb"] for _, p in pts], "o-", color="C3", label="peak RSS")
            bottom.plot([x for x, _ in pts], [p["peak_mb"] - weights_mb(p) for _, p in pts], "s--", color="C7",
                        label="peak - float32 weights")
            bottom.legend(fontsize=8)
        fitted = f.get("fit", {})
        top.set_title(labels.get(name, name) if categorical
                      else f"{labels.get(name, name)} (time slope {fitted.get('time_exponent')})")
        bottom.set_title("peak RSS (MiB)" if categorical
                         else f"peak RSS (MiB); slope above base {fitted.get('memory_exponent')}")
        for ax in (top, bottom):
            if categorical:
                ax.set_xticks(xs, [f"LoRA r {v}" if v else "full" for v in f["values"]])
                ax.set_xlim(-0.5, len(xs) - 0.5)
            else:
                ax.set_xscale("log")
                if name != "model":  # the values themselves as ticks (parameters: the log scale's own)
                    ax.set_xticks(f["x"], [f"{v:,}" for v in f["values"]], fontsize=8)
                    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_xlabel(labels.get(name, name))
            ax.grid(True, which="both", alpha=0.3)
        top.set_yscale("log")
        top.set_ylabel("seconds per GRPO step")
        top.legend(fontsize=8)
    base = res["base"]
    fig.suptitle(f"rlvr GRPO step cost, one factor at a time from {base['shape']}{' (shrunk)' if base['set'] else ''}, "
                 f"LoRA r "
                 f"{base['lora']}, {base['prompts']} prompt{'s' if base['prompts'] > 1 else ''} x G {base['group']}, {base['max_new']} new tokens",
                 fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    if "--point" in sys.argv:
        point_main(sys.argv[sys.argv.index("--point") + 1])
        return
    a = parse_args()
    res = merge([json.loads(Path(f).read_text()) for f in a.from_json.split(",")]) if a.from_json else run(a)
    if a.json:
        write(a.json, res)
        print(f"wrote {a.json}", file=sys.stderr)
    if a.png:
        plot(res, a.png)
        print(f"drew {a.png}", file=sys.stderr)
    for name, f in res["factors"].items():
        print(f"{name}: fit {json.dumps(f['fit'])}")


if __name__ == "__main__":
    main()
