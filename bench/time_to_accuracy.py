"""Held-out accuracy per second of wall time: rlvr's GRPO vs TRL's ``GRPOTrainer`` on one reasoning-gym task.

    PYTHONPATH=src python bench/time_to_accuracy.py --model runs/rg/chain_sum/sft/final --dataset chain_sum \\
        --config '{"min_terms": 4, "max_terms": 5, "min_digits": 1, "max_digits": 2}' \\
        --seconds 1200 --every 120 --seeds 0 1 --json bench/results/time_to_accuracy.json

From one SFT checkpoint (``--model``, an HF folder), both sides train on the same reasoning-gym items and
are scored on the same held-out items; what differs is only the library.

- **Items**: drawn through rlvr's reasoning-gym task source with a recipe's split rules
  (``rlvr.data.reasoning_gym``): ``--train-n`` training items from ``--data-seed``; ``--heldout-n`` (>= 500
  for a measurement) held-out items from the distant held-out seed, minus every training question (checked
  again here by question text), written once as task files both sides read (``Task.to_line``). The prompts
  are the checkpoint's prompt format (its system prompt, the tokenizer's chat template); rlvr's and TRL's
  prompt token ids are checked equal.
- **Reward**: the dataset's ``score_answer`` through rlvr's reasoning-gym verifier on both sides: 1.0 for a
  score of exactly 1.0, else the clipped partial credit (a score below 1 is kept only when the answer does
  not contain the oracle; ``rlvr.verifiers.reasoning_gym``). rlvr runs its ``correct`` reward term; TRL a
  reward function that calls rlvr's RL judge on the same texts (:func:`make_trl_reward`); an ``infra``
  verdict is None for TRL (left out of its rewards) as rlvr keeps it out of the advantages.
- **Settings** (``bench/grpo_vs_trl.py``'s ``matched_rl_stage`` / ``matched_grpo_config``): ``--prompts``
  groups of ``--group`` samples a step, ``--temperature``, ``--max-new`` tokens, GRPO loss (clip 0.2,
  per-group std, seq-mean-token-mean = TRL ``loss_type="grpo"``), k3 KL at ``--beta`` (TRL without its KL
  bias correction), AdamW ``--lr`` at a constant rate (no warmup), betas (0.9, 0.95), grad-clip 1.0, μ = 1.
  rlvr runs as ``rlvr grpo`` does (``rlvr.run`` with a generated recipe, stage type ``rl``: its defaults,
  ``model.autocast_bf16: auto``, micro-batches of its own planner). TRL runs in its fastest setting for this
  work, searched first: each precision of ``--trl-precisions`` (float32; bf16 = accelerate's autocast) x each
  micro-batch of ``--trl-micro`` (rows a forward; gradient accumulation to the same step), ``--search-steps``
  steps each in its own process from the same checkpoint, the smallest median step wins (every setting
  tried is listed). ``--trl-setting bf16:64`` skips the search.
- **Clock and checkpoints**: each run is its own process; its clock is the process's age
  (``rlvr.trainers.wall_clock.process_age_s``: imports, loading and saving count). Both save a checkpoint at
  the first step end after each multiple of ``--every`` seconds (rlvr: the RL stage's ``save_every_s``; TRL:
  a TrainerCallback on the same clock) and stop after ``--seconds`` (TRL at the last mark; rlvr by its
  ``max_minutes`` on training time, which ends a little later -- what runs after the last mark is not scored).
- **Order**: per seed both sides, alternating which goes first (seed 0: rlvr then TRL, seed 1: TRL then
  rlvr: A B B A), one process at a time; the load average is sampled every 5 s during each run.
- **Evaluation**: afterwards, one evaluator -- rlvr's ``rlvr eval`` code path (``rlvr.commands.evaluate.
  eval_command``: greedy, ``--max-new`` tokens, each task's verifier, i.e. the dataset's scorer; solved = a
  score of exactly 1.0) -- scores the SFT checkpoint (the point at 0 s of both curves) and every saved
  checkpoint on the same held-out items, each folder with the SFT checkpoint's ``prompt_format.json``.

The curves are compared at the marks ``0, every, ..., seconds`` (``bench/_accuracy_curves.py``: at each mark a
run's score is that of its last checkpoint saved for a mark at or before it).

``--json OUT``: ``seeds`` -> {seed: {"rlvr": [[seconds, solved_fraction], ...], "trl": [...], "marks": {side:
the curve at the marks}, "runs": {side: checkpoints, peak RSS, load average, settings, ``window``: steps,
rows trained and rows sampled up to the window's last checkpoint}}}, ``mean`` (the seeds' mean at the marks),
``settings`` (shared and each side's), ``trl_search`` (every TRL setting tried and its median step),
``acceptance``.
``--plot PNG`` (default: OUT with .png) draws solved fraction against seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import _common  # threads, OpenMP wait policy, rlvr's accelerations (before torch loads)
from _accuracy_curves import assemble, in_window
from _common import fmt_row, heavy_modules, machine, peak_rss_mb, pin_threads
from _rewards import make_trl_reward
from _trl_search import search, settings_grid, step_median
from grpo_vs_trl import check_same_prompts, count_trl_rows, matched_grpo_config, matched_rl_stage

LOAD_SAMPLE_S = 5.0
"""How often the driver samples the load average while a run trains."""


# ---------------------------------------------------------------- arguments

def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="the SFT checkpoint both sides start from (an HF model folder)")
    ap.add_argument("--dataset", help="reasoning-gym dataset name")
    ap.add_argument("--config", default="{}", help="the dataset's generator config, JSON (the target configuration)")
    ap.add_argument("--train-n", type=int, default=4000, help="training items")
    ap.add_argument("--heldout-n", type=int, default=500, help="held-out items (>= 500 for a measurement)")
    ap.add_argument("--data-seed", type=int, default=100, help="seed of the training draw (held-out: derived)")
    ap.add_argument("--seconds", type=float, default=1200.0, help="wall time of each run, from process start")
    ap.add_argument("--every", type=float, default=120.0, help="a checkpoint every this many seconds")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--prompts", type=int, default=16, help="prompts (groups) per step")
    ap.add_argument("--group", type=int, default=8, help="G: samples per prompt")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--beta", type=float, default=0.0, help="KL coefficient (k3 on both sides)")
    ap.add_argument("--max-new", type=int, default=72, help="max new tokens (training and evaluation)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--rlvr-bf16", default="auto", choices=["auto", "train", "false", "true"],
                    help="rlvr's model.autocast_bf16 (auto: bf16 where it pays on this CPU, as `rlvr run` decides)")
    ap.add_argument("--trl-precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--trl-micro", type=int, nargs="+", default=None,
                    help="TRL micro-batch sizes to try (default: the step's rows, a half and a quarter)")
    ap.add_argument("--search-steps", type=int, default=4, help="TRL steps per setting tried (the first dropped)")
    ap.add_argument("--trl-setting", default=None, help="PRECISION:MICRO, e.g. bf16:64: skip the search")
    ap.add_argument("--eval-batch-size", type=int, default=None, help="evaluation batch (default: rlvr eval's)")
    ap.add_argument("--work", default=None, help="folder for the runs and checkpoints (default: a temp dir, removed)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--plot", default=None, help="PNG of the curves (default: --json with .png)")
    ap.add_argument("--worker", choices=["rlvr", "trl"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--spec", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return a
    check_args(ap, a)
    return a


def check_args(ap, a) -> None:
    """One-line errors for bad input, before any work."""
    if not a.model or not a.dataset:
        ap.error("--model and --dataset are required")
    if not (Path(a.model) / "config.json").exists():
        ap.error(f"--model {a.model!r}: no config.json there (an HF model folder is expected)")
    try:
        a.config = json.loads(a.config)
    except json.JSONDecodeError as e:
        ap.error(f"--config is not JSON: {e}")
    if not isinstance(a.config, dict):
        ap.error(f"--config must be a JSON object, got {a.config!r}")
    for name in ("train_n", "heldout_n", "prompts", "group", "max_new", "search_steps"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.seconds <= 0 or a.every <= 0 or a.every > a.seconds:
        ap.error(f"need 0 < --every ({a.every}) <= --seconds ({a.seconds})")
    if a.temperature <= 0:
        ap.error("--temperature must be > 0 (GRPO samples)")
    rows = a.prompts * a.group
    a.trl_micro = a.trl_micro or sorted({rows, max(1, rows // 2), max(1, rows // 4)}, reverse=True)
    bad = [m for m in a.trl_micro if m < 1 or rows % m]
    if bad:
        ap.error(f"--trl-micro {bad}: each must divide the {rows} rows of a step (--prompts x --group)")
    if a.trl_setting is not None:
        prec, _, micro = a.trl_setting.partition(":")
        if prec not in ("fp32", "bf16") or not micro.isdigit() or int(micro) < 1 or rows % int(micro):
            ap.error(f"--trl-setting {a.trl_setting!r}: expected fp32|bf16:MICRO with MICRO dividing {rows}")
    if a.json and a.plot is None:
        a.plot = str(Path(a.json).with_suffix(".png"))
    import importlib.util

    need = {"trl": "bench", "datasets": "bench", "reasoning_gym": "gym", **({"matplotlib": "report"} if a.plot else {})}
    missing = [f"{m} (pip install -e '.[{extra}]')" for m, extra in need.items() if importlib.util.find_spec(m) is None]
    if missing:
        ap.error(f"missing packages: {', '.join(missing)}")


# ---------------------------------------------------------------- items, reward

def draw_items(name: str, config: dict, train_n: int, heldout_n: int, seed: int, system_prompt: str | None):
    """(train, heldout) task lists through rlvr's reasoning-gym source, the recipe's split rules; the held-out
    questions are checked disjoint from the training ones. Each carries ``system_prompt`` (the checkpoint's)."""
    from rlvr.data.reasoning_gym import load_reasoning_gym
    from rlvr.data.sources import with_system

    train = load_reasoning_gym(source(name, config, train_n, "train", seed))
    heldout = load_reasoning_gym(source(name, config, heldout_n, "heldout", seed, train_n))
    shared = {t.prompt for t in train} & {t.prompt for t in heldout}
    if shared:
        raise SystemExit(f"held-out items share {len(shared)} questions with training, e.g. {min(shared)!r}")
    return with_system(train, system_prompt), with_system(heldout, system_prompt)


def source(name: str, config: dict, n: int, split: str, seed: int, train_n: int | None = None):
    """The recipe section of these items (``data:`` / ``eval.tasks:``)."""
    from rlvr.config.data import ReasoningGymTasks

    return ReasoningGymTasks(name=name, config=config, n=n, split=split, seed=seed, train_n=train_n)


# ---------------------------------------------------------------- workers (one process per run)

def rlvr_recipe(spec: dict):
    """The recipe ``rlvr grpo`` runs: one RL stage with the matched settings on the training items' task file,
    a timed save every ``every`` s, a stop after ``seconds`` of training time; its after-stage evaluation on 8
    of the held-out items (the recipe's overlap check refuses a held-out question among the training ones)."""
    from rlvr.config.data import JsonlTasks
    from rlvr.config.eval import EvalConfig
    from rlvr.config.model import ModelConfig
    from rlvr.config.recipe import Recipe
    from rlvr.config.rl import RewardTerm, RLStage

    a = argparse.Namespace(**spec["args"])
    stage = matched_rl_stage(
        a, JsonlTasks(path=spec["train_file"]), [RewardTerm(name="correct")], lr=a.lr, max_steps=1_000_000,
        micro_batch_size=RLStage.model_fields["micro_batch_size"].default, name="grpo", save_every_s=a.every,
        keep_last=0, max_minutes=a.seconds / 60)
    ev = EvalConfig(tasks=JsonlTasks(path=spec["heldout_file"], limit=8), max_new_tokens=a.max_new)
    return Recipe(name="time_to_accuracy", seed=spec["seed"], run_dir=spec["out"], threads=_common.THREADS,
                  omp_wait=_common.WAIT, model=ModelConfig(path=spec["model"], autocast_bf16=spec["rlvr_bf16"]),
                  system_prompt=spec["system_prompt"], eval=ev, eval_base=False, stages=[stage])


def rlvr_worker(spec: dict) -> dict:
    """``rlvr grpo`` (``rlvr.run(recipe, stage_type="rl")``); the timed checkpoints from its metrics."""
    import rlvr

    recipe = rlvr_recipe(spec)
    rlvr.run(recipe, stage_type="rl", model=spec["model"], run_dir=spec["out"])
    recs = [json.loads(x) for x in (Path(spec["out"]) / "grpo" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in recs if "time/step" in r]
    done, total = {}, 0  # step -> rows trained up to it
    for r in steps:
        total += int(r.get("train/sequences", 0))
        done[r["step"]] = total
    ckpts = [[r["process_s"], r["checkpoint"], r["step"], done.get(r["step"], 0)]
             for r in recs if r.get("event") == "timed_checkpoint"]
    from rlvr.commands.header import precision_text

    cfg, st = recipe.model, recipe.stages[0]
    return {"checkpoints": ckpts, "steps": len(steps), "rows_trained": total,
            "rows_sampled": len(steps) * st.tasks_per_step * st.sampling.group_size,
            "settings": {"precision": precision_text(cfg, checkpoint_params(spec["model"]), "cpu"),
                         "micro_batch_size": st.micro_batch_size, "micro_tokens": cfg.micro_tokens,
                         "decode_threads": st.sampling.decode_threads, "threads": _common.THREADS}}


def checkpoint_params(model_dir: str) -> int:
    """Parameters stored in a checkpoint's safetensors files (read from their headers, nothing loaded)."""
    import math

    from safetensors import safe_open

    n = 0
    for f in Path(model_dir).glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            n += sum(math.prod(st.get_slice(k).get_shape()) for k in st.keys())  # noqa: SIM118 - not a dict
    return n


def trl_worker(spec: dict) -> dict:
    """GRPOTrainer with the matched settings; saves at the wall-clock marks and stops after the last one
    (``spec["search"]``: ``search_steps`` steps, no saves, the step times)."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from rlvr.data.jsonl import load_tasks
    from rlvr.trainers.wall_clock import WallClockMarks

    a = argparse.Namespace(**spec["args"])
    tasks = load_tasks(spec["train_file"])
    ds = Dataset.from_list([{"prompt": t.policy_messages(), "task_index": i} for i, t in enumerate(tasks)])
    search = spec.get("search", False)
    cfg = matched_grpo_config(a, str(Path(spec["out"]) / "trl"), lr=a.lr,
                              max_steps=a.search_steps if search else 1_000_000, bf16=spec["precision"] == "bf16",
                              micro=spec["micro"], seed=spec["seed"])
    ckpts: list = []
    ends: list[float] = []
    rows: list[int] = []  # rows each micro-batch forwarded and backwarded (count_trl_rows)

    class Marks(TrainerCallback):
        """Save at the first step end after each mark; stop at the last one."""

        def __init__(self):
            self.marks = WallClockMarks(a.every)

        def on_step_end(self, args, state, control, model=None, processing_class=None, **kw):
            ends.append(time.perf_counter())
            if search:
                return
            age = self.marks.due()
            if age is not None:
                path = Path(spec["out"]) / f"step-{state.global_step:06d}"
                model.save_pretrained(path)
                processing_class.save_pretrained(path)
                ckpts.append([round(age, 3), str(path), state.global_step, sum(rows)])
                if age >= a.seconds:
                    control.should_training_stop = True

    trainer = GRPOTrainer(model=spec["model"], reward_funcs=make_trl_reward(tasks), args=cfg, train_dataset=ds,
                          processing_class=AutoTokenizer.from_pretrained(spec["model"]), callbacks=[Marks()])
    count_trl_rows(trainer, rows, [], [])
    pin_threads()
    t0 = time.perf_counter()
    trainer.train()
    steps = [e - b for b, e in zip([t0, *ends], ends)]
    return {"checkpoints": ckpts, "steps": trainer.state.global_step, "rows_trained": sum(rows),
            "rows_sampled": trainer.state.global_step * a.prompts * a.group, "step_s": steps,
            "settings": {"precision": spec["precision"], "micro_batch": spec["micro"],
                         "gradient_accumulation": a.prompts * a.group // spec["micro"], "threads": _common.THREADS}}


def worker_main(a) -> None:
    spec = json.loads(Path(a.spec).read_text())
    res = (rlvr_worker if a.worker == "rlvr" else trl_worker)(spec)
    from rlvr.omp_wait import in_effect
    from rlvr.trainers.wall_clock import process_age_s

    res["settings"]["omp_wait"] = in_effect()
    res.update({"process_s": round(process_age_s(), 2), "rss": peak_rss_mb(), "modules": heavy_modules()})
    Path(spec["result"]).write_text(json.dumps(res))


# ---------------------------------------------------------------- driver

def run_side(side: str, spec: dict, work: Path, limit_s: float) -> dict:
    """One run in its own process (``--worker``); its result with the load average sampled while it ran."""
    spec = {**spec, "result": str(work / f"{spec['tag']}.result.json"), "out": str(work / spec["tag"])}
    spec_path = work / f"{spec['tag']}.spec.json"
    spec_path.write_text(json.dumps(spec))
    loads = [os.getloadavg()[0]]
    log = work / f"{spec['tag']}.log"
    t0 = time.time()
    with log.open("w") as f:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", side, "--spec",
                                 str(spec_path)], stdout=f, stderr=subprocess.STDOUT)
        done = threading.Event()

        def sample():
            while not done.wait(LOAD_SAMPLE_S):
                loads.append(os.getloadavg()[0])
        threading.Thread(target=sample, daemon=True).start()
        try:
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = f"killed after {limit_s:.0f} s"
        done.set()
    if rc != 0 or not Path(spec["result"]).exists():
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise SystemExit(f"{spec['tag']}: the {side} run failed ({rc}); the end of {log}:\n{tail}")
    res = json.loads(Path(spec["result"]).read_text())
    res["load_avg"] = {"start": round(loads[0], 2), "max": round(max(loads), 2),
                       "mean": round(statistics.fmean(loads), 2), "samples": len(loads)}
    res["wall_s"] = round(time.time() - t0, 1)
    return res


def search_trl(a, base: dict, work: Path) -> tuple[dict, list[dict]]:
    """Every (precision, micro-batch) tried for ``search_steps`` steps (``_trl_search.search``: an out-of-memory
    is reported, never chosen); the fastest median step (first dropped)."""
    if a.trl_setting:
        prec, _, micro = a.trl_setting.partition(":")
        return {"precision": prec, "micro": int(micro)}, [{"precision": prec, "micro": int(micro),
                                                            "median_step_s": None, "given": True}]

    def probe(s: dict) -> dict:
        res = run_side("trl", {**base, "tag": f"search_{s['precision']}_{s['micro']}", "precision": s["precision"],
                               "micro": s["micro"], "seed": 0, "search": True}, work,
                       limit_s=600 + 120 * a.search_steps)
        return {"median_step_s": round(step_median(res["step_s"]), 3),
                "steps_s": [round(x, 3) for x in res["step_s"]], "peak_mb": res["rss"]["peak_mb"]}
    best, tried = search(settings_grid(a.prompts * a.group, a.trl_precisions, a.trl_micro), probe, say=say)
    if best is None:
        raise SystemExit("no TRL setting ran: " + "; ".join(f"{t['precision']}/{t['micro']} {t['status']}"
                                                           for t in tried))
    return best, tried


def evaluate_checkpoint(path: str, heldout_file: str, a, fmt_file: Path | None, system_prompt) -> float:
    """Greedy solved fraction (score 1.0) of one checkpoint through ``rlvr eval``'s code path."""
    from rlvr.commands.evaluate import eval_command

    if fmt_file is not None and Path(path).resolve() != fmt_file.parent.resolve():
        shutil.copyfile(fmt_file, Path(path) / fmt_file.name)  # one prompt format (dtype, template) for all
    res = eval_command(path, heldout_file, n=1, temperature=0.0, max_new_tokens=a.max_new, out=None, workers=0,
                       quiet=True, batch_size=a.eval_batch_size, system_prompt=system_prompt or False,
                       verifier=True, fail_unjudged=False)
    return float(res["pass_at_1"])


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def bench(a) -> dict:
    from rlvr.commands.checkpoint_format import resolve_format
    from rlvr.data.jsonl import write_jsonl_atomic
    from rlvr.models.prompt_format import FILE

    work = Path(a.work or tempfile.mkdtemp(prefix="tta_"))
    work.mkdir(parents=True, exist_ok=True)
    fmt = resolve_format(a.model)
    system_prompt = fmt["system_prompt"]
    say(f"drawing {a.train_n} training and {a.heldout_n} held-out items of {a.dataset} {a.config}")
    train, heldout = draw_items(a.dataset, a.config, a.train_n, a.heldout_n, a.data_seed, system_prompt)
    check_same_prompts(a.model, train)
    write_jsonl_atomic(work / "train.jsonl", [t.to_line() for t in train])
    write_jsonl_atomic(work / "heldout.jsonl", [t.to_line() for t in heldout])
    args = {k: getattr(a, k) for k in ("every", "seconds", "prompts", "group", "lr", "beta", "max_new",
                                       "temperature", "search_steps")}
    rlvr_bf16 = {"false": False, "true": True}.get(a.rlvr_bf16, a.rlvr_bf16)
    base = {"args": args, "model": str(Path(a.model).resolve()), "system_prompt": system_prompt, "rlvr_bf16": rlvr_bf16,
            "train_file": str(work / "train.jsonl"), "heldout_file": str(work / "heldout.jsonl")}
    info = machine()
    trl_best, tried = search_trl(a, base, work)
    say(f"TRL setting: {trl_best['precision']}, micro-batch {trl_best['micro']}")
    runs: dict = {}
    limit = a.seconds * 3 + 900
    for i, seed in enumerate(a.seeds):
        order = ("rlvr", "trl") if i % 2 == 0 else ("trl", "rlvr")  # A B B A
        for side in order:
            say(f"seed {seed}: {side} for {a.seconds:.0f} s (checkpoints every {a.every:.0f} s)")
            runs.setdefault(str(seed), {})[side] = run_side(side, {**base, **trl_best, "tag": f"{side}_s{seed}",
                                                                    "seed": seed}, work, limit)
    fmt_file = Path(a.model) / FILE if (Path(a.model) / FILE).exists() else None
    todo = [c[1] for sides in runs.values() for r in sides.values() for c in in_window(r["checkpoints"], a.seconds)]
    say(f"evaluating the SFT checkpoint and {len(todo)} checkpoints on {a.heldout_n} held-out items")
    heldout_file = str(work / "heldout.jsonl")
    sft = evaluate_checkpoint(a.model, heldout_file, a, fmt_file, system_prompt)
    scores = {p: evaluate_checkpoint(p, heldout_file, a, fmt_file, system_prompt) for p in todo}
    res = assemble(runs, scores, sft, a.every, a.seconds, a.prompts * a.group)
    out = {"benchmark": "time_to_accuracy", "command": " ".join(sys.argv), "machine": info,
           "load_avg_end": os.getloadavg(), "dataset": a.dataset, "config": a.config, "model": a.model,
           "items": {"train": a.train_n, "heldout": a.heldout_n, "data_seed": a.data_seed},
           "sft_solved": sft, "seeds": res["seeds"], "mean": res["mean"],
           "settings": {"shared": {**args, "loss": "grpo (clip 0.2, group std, seq-mean-token-mean)",
                                   "kl": "k3", "optimizer": "AdamW (0.9, 0.95), constant lr, grad-clip 1.0",
                                   "system_prompt": system_prompt},
                        "rlvr": runs[str(a.seeds[0])]["rlvr"]["settings"],
                        "trl": runs[str(a.seeds[0])]["trl"]["settings"]},
           "trl_search": tried, "acceptance": res["acceptance"]}
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return out


def report(out: dict) -> None:
    """The settings, steps, rows trained and peak memory of each run, and the curves."""
    s = out["settings"]
    print(f"\ntime to accuracy: {out['dataset']} {json.dumps(out['config'])}, from {out['model']} "
          f"(held-out solved {out['sft_solved']:.1%} on {out['items']['heldout']} items)")
    print(f"shared: {json.dumps(s['shared'])}")
    print(f"rlvr: {json.dumps(s['rlvr'])}")
    print(f"TRL:  {json.dumps(s['trl'])}; tried: " + ", ".join(
        f"{t['precision']}/{t['micro']} " + (f"{t['median_step_s']} s" if t.get("status", "ok") == "ok" else t["status"])
        for t in out["trl_search"]))
    print("steps, rows trained and rows sampled up to the window's last checkpoint (at 'until' s); peak RSS and "
          "load average (1 min; start / max) of the whole run")
    w = [8, 8, 7, 8, 9, 8, 12, 7, 36]
    print(fmt_row(["run", "until", "steps", "rows", "sampled", "peak MB", "load", "solved", "curve (s:solved)"], w))
    for seed, sides in out["seeds"].items():
        for side in ("rlvr", "trl"):
            r, win = sides["runs"][side], sides["runs"][side]["window"]
            pts = " ".join(f"{x:.0f}:{y:.3f}" for x, y in sides[side])
            print(fmt_row([f"{side} s{seed}", win["seconds"], win["steps"], win["rows_trained"], win["rows_sampled"],
                           f"{r['rss']['peak_mb']:.0f}", f"{r['load_avg']['start']}/{r['load_avg']['max']}",
                           f"{sides[side][-1][1]:.1%}", pts], w))
    acc = out["acceptance"]
    print(f"mean of seeds at the marks: rlvr {out['mean']['rlvr']}")
    print(f"                            TRL  {out['mean']['trl']}")
    print(f"acceptance (mean of seeds at the marks): rlvr >= TRL at every mark after 0: "
          f"{acc['rlvr_at_least_trl_every_mark']}; "
          f"rlvr reaches TRL's final score at {acc['rlvr_reaches_trl_final_s']} s of TRL's {acc['trl_final_s']} s "
          f"(ratio {acc['reach_ratio']}, line <= 0.5); TRL gain over SFT {acc['trl_gain_over_sft']:+.1%} (line >= 5 "
          f"points): {'MET' if acc['met'] else 'NOT MET'}")


def plot(out: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = {"rlvr": "tab:blue", "trl": "tab:orange"}
    for side in ("rlvr", "trl"):
        for sides in out["seeds"].values():
            xs, ys = zip(*sides[side])
            ax.plot(xs, ys, color=colors[side], alpha=0.35, lw=1, marker=".")
        xs, ys = zip(*out["mean"][side])
        n = len(out["seeds"])
        seeds = f"mean of {n} seeds" if n > 1 else "one seed"
        ax.plot(xs, ys, color=colors[side], lw=2.2, marker="o", label=f"{side} ({seeds}, at the marks)")
    ax.set_xlabel("seconds from process start")
    ax.set_ylabel("held-out solved fraction (greedy, score 1.0)")
    ax.set_title(f"{out['dataset']}: rlvr GRPO vs TRL GRPOTrainer, {out['items']['heldout']} held-out items")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    a = parse_args()
    if a.worker:
        worker_main(a)
        return
    from rlvr.errors import RlvrError

    try:
        out = bench(a)
    except RlvrError as e:  # a dataset name or config reasoning-gym refuses, text the tokenizer cannot encode, ...
        raise SystemExit(f"error: {e}") from None
    report(out)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(out, indent=1))
        print(f"wrote {a.json}")
    if a.plot:
        plot(out, a.plot)
        print(f"wrote {a.plot}")


if __name__ == "__main__":
    main()
