"""SFT step time and peak memory: rlvr's ``train_sft`` vs TRL's ``SFTTrainer``, same model, rows and loss, on CPU.

    PYTHONPATH=src python bench/sft_vs_trl.py                          # 1m model, ~1-2 min on 2 busy cores
    PYTHONPATH=src python bench/sft_vs_trl.py --model-dir models/qwen05b --lora 16 --steps 4 --skip 1

``bench/run.py --shape`` calls :func:`bench` for its ``sft_lora`` mode; this CLI runs one.

Both sides load the same HF folder and train on the same demonstrations: ``generate(["mul21"], n, split="train")``
tasks, prompt = the task's prompt (chat-templated), completion = its worked solution. rlvr reads them as its
``BuiltinArithmetic`` source; TRL gets the conversational prompt-completion rows (completion-only loss); the
token ids and loss masks of both sides are checked equal. The loss on both sides is the mean token NLL over the
completion tokens of the whole optimizer step (rlvr ``nll``; TRL ``loss_type="nll"``, the step's token count as
its denominator). ``batch`` rows an optimizer step (rlvr ``batch_size``; TRL ``per_device_train_batch_size`` x
gradient accumulation, ``--trl-micro`` rows a forward, default the whole step), AdamW lr 1e-7 betas (0.9, 0.95),
no weight decay, grad-clip 1.0, constant lr, max_length 256 (nothing is cut), no packing; LoRA (``--lora R``)
on the same modules on both sides. Each side draws its own order of the same rows; the rows each trained are
counted from its own internals.

Loss check: before timing, both losses on the first ``--check`` rows (one batch), rlvr's ``sft_step`` and
TRL's ``compute_loss`` on its collated rows, and the gradients both backward passes leave; they must agree to
1e-5 relative in float32.

Measurement as in ``dpo_vs_trl.py``: separate processes taking turns step by step, the first ``skip`` and the
last step dropped, each side's own peak RSS. ``--trl-probe``: TRL alone for the steps given (the setting search
of ``_trl_search``), no loss check.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 - threads and the OpenMP wait policy before torch
from _common import (
    add_model_args,
    add_trl_setting_args,
    bench_model,
    driver_imports_transformers,
    end_rlvr_steps_at_metrics_line,
    heavy_modules,
    hold_baton_from_batch_fetch,
    in_child,
    interleave,
    loss_checks,
    machine,
    micro_tokens_arg,
    paired_ratios,
    peak_rss_mb,
    per_step,
    pin_threads,
    precision_name,
    print_bf16_check,
    probe_record,
    rlvr_lora,
    step_end_callback,
    summarize,
    trl_peft,
)

RESULTS = Path(__file__).parent / "results"
LR = 1e-7
"""The compute per step does not depend on it; kept tiny so both sides see a stationary policy."""
MAX_LENGTH = 256
FAMILIES = ["mul21"]


def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="1m", help="tiny model size (rlvr.models.tiny.SIZES)")
    ap.add_argument("--batch", type=int, default=32, help="rows per optimizer step")
    ap.add_argument("--steps", type=int, default=12, help="measured steps per side (+1 run and dropped at the end)")
    ap.add_argument("--skip", type=int, default=2, help="warm-up steps dropped")
    ap.add_argument("--rlvr-bf16", nargs="?", const="train", default=False, choices=("train", "auto"),
                    help="rlvr's model.autocast_bf16 (train: bf16 autocast of the training forwards)")
    ap.add_argument("--rlvr-micro-tokens", default="auto",
                    help="rlvr's model.micro_tokens: auto (the CPU token budget), N tokens, or none")
    ap.add_argument("--rlvr-micro", type=int, default=None,
                    help="rlvr micro_batch_size (default: rlvr's own, the step cut by model.micro_tokens)")
    ap.add_argument("--check", type=int, default=8, help="rows in the fixed-batch loss check (0: none)")
    ap.add_argument("--out", default=str(RESULTS / "sft_vs_trl.json"))
    add_model_args(ap)
    add_trl_setting_args(ap)
    a = ap.parse_args(argv)
    if a.skip >= a.steps:
        ap.error(f"--skip {a.skip} must be smaller than --steps {a.steps}")
    if a.batch % (a.trl_micro or a.batch):
        ap.error(f"--trl-micro {a.trl_micro} must divide --batch {a.batch}")
    return a


def make_tasks(n: int):
    from rlvr.data.arithmetic import generate

    return generate(FAMILIES, n, split="train", seed=0)


# ---------------------------------------------------------------- rlvr side

def rlvr_stage(a, n_rows: int):
    from rlvr.config.data import BuiltinArithmetic
    from rlvr.config.optim import OptimConfig
    from rlvr.config.sft import SFTStage

    return SFTStage(name="rlvr", data=BuiltinArithmetic(families=FAMILIES, n=n_rows, split="train", seed=0),
                    optim=OptimConfig(lr=LR, warmup_steps=0, schedule="constant", max_grad_norm=1.0),
                    max_steps=a.steps + 1, batch_size=a.batch, micro_batch_size=a.rlvr_micro,
                    max_length=MAX_LENGTH, save_every=0, eval_every=0, log_every=1)


def rlvr_worker(baton, a, model_dir: str, n_rows: int, work: str) -> dict:
    """train_sft with the baton taken when the step function starts and passed on at its metrics line."""
    from rlvr.config.model import ModelConfig
    from rlvr.trainers import sft

    inner_step = sft.sft_step
    rows: list[int] = []

    def sft_step(model, examples, idx, *args, **kw):
        baton.begin()
        rows.append(len(idx))
        return inner_step(model, examples, idx, *args, **kw)

    end_rlvr_steps_at_metrics_line(baton)
    sft.sft_step = sft_step
    stage = rlvr_stage(a, n_rows)
    pin_threads()
    model_cfg = ModelConfig(path=model_dir, autocast_bf16=a.rlvr_bf16 or False,
                            micro_tokens=micro_tokens_arg(a.rlvr_micro_tokens), lora=rlvr_lora(a))
    sft.train_sft(stage, model_cfg, Path(work), seed=0)
    recs = [json.loads(x) for x in (Path(work) / stage.name / "metrics.jsonl").read_text().splitlines()]
    recs = [r for r in recs if "time/step" in r]
    return {"step": baton.steps()[:-1], "own_step": [r["time/step"] - w for r, w in zip(recs, baton.waits)][:-1],
            "rows_trained": rows[:-1], "loss": [r.get("train/loss") for r in recs][:-1],
            "interleaved": baton.interleaved, "rss": peak_rss_mb(), "modules": heavy_modules(),
            "train_bf16": model_cfg.train_bf16}


# ---------------------------------------------------------------- TRL side

def trl_rows(tasks) -> list[dict]:
    return [{"prompt": [{"role": "user", "content": t.prompt}],
             "completion": [{"role": "assistant", "content": t.solution}]} for t in tasks]


def trl_trainer(a, model_dir: str, tasks, work: str, callbacks=(), bf16: bool = False, micro: int | None = None):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    micro = micro or a.batch
    tok = AutoTokenizer.from_pretrained(model_dir)
    cfg = SFTConfig(
        output_dir=str(Path(work) / "trl"), use_cpu=True, bf16=bf16, fp16=False, report_to="none",
        save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=0, max_steps=a.steps + 1,
        per_device_train_batch_size=micro, gradient_accumulation_steps=a.batch // micro, loss_type="nll",
        completion_only_loss=True, max_length=MAX_LENGTH, packing=False, learning_rate=LR,
        lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0, optim="adamw_torch", adam_beta1=0.9,
        adam_beta2=0.95, weight_decay=0.0, dataloader_num_workers=0)
    return SFTTrainer(model=model_dir, args=cfg, train_dataset=Dataset.from_list(trl_rows(tasks)),
                      processing_class=tok, callbacks=list(callbacks), peft_config=trl_peft(a))


def trl_worker(baton, a, model_dir: str, n_rows: int, work: str) -> dict:
    """SFTTrainer.train; a step runs from its batch fetch to on_step_end."""
    trainer = trl_trainer(a, model_dir, make_tasks(n_rows), work, [step_end_callback(baton)],
                          bf16=a.trl_precision == "bf16", micro=a.trl_micro)
    hold_baton_from_batch_fetch(trainer, baton)
    inner = trainer.compute_loss
    rows: list[int] = []
    losses: list[float] = []

    def counted_loss(model, inputs, *args, **kw):
        rows.append(int(inputs["input_ids"].shape[0]))
        out = inner(model, inputs, *args, **kw)
        losses.append(float((out[0] if isinstance(out, tuple) else out).detach()))
        return out
    trainer.compute_loss = counted_loss
    pin_threads()
    trainer.train()
    calls = a.batch // (a.trl_micro or a.batch)  # compute_loss calls an optimizer step
    step = baton.steps()[:-1]
    return {"step": step, "own_step": step, "rows_trained": per_step(rows, calls)[:-1],
            "loss": per_step(losses, calls)[:-1],
            "interleaved": baton.interleaved, "rss": peak_rss_mb(), "modules": heavy_modules()}


# ---------------------------------------------------------------- loss check

def loss_parity(a, model_dir: str, tasks, work: str) -> dict | None:
    """TRL's token ids and completion masks of the first rows == rlvr's (checked here, in a process of its own);
    then, unless ``--check 0``, both losses and gradients on the first ``check`` rows, in float32 and bf16
    (``_common.loss_checks``)."""
    from rlvr.trainers.common import sft_step
    from rlvr.trainers.sft import tokenize_demos

    n = min(max(a.check, 8), len(tasks))
    trainer = trl_trainer(a, model_dir, tasks[:n], work)
    model, tok = trainer.model, trainer.processing_class
    examples = tokenize_demos(tasks[:n], tok, MAX_LENGTH)
    for (ids, mask), row in zip(examples, trainer.train_dataset):
        trained = [int(lab != -100) for lab in row["labels"]]  # TRL folds its completion mask into the labels
        assert list(ids) == list(row["input_ids"]) and list(mask) == trained, (ids, mask, row)
    if not a.check:
        return None
    n = min(a.check, len(tasks))
    model.train()
    ours = lambda bf16: sft_step(model, examples, list(range(n)), n, False, tok.pad_token_id, bf16)["train/loss"]
    theirs = lambda: trainer.compute_loss(model, trainer.data_collator([trainer.train_dataset[i] for i in range(n)]))
    return {"rows": n, "loss": "mean token NLL over completion tokens", **loss_checks(model, ours, theirs)}


# ---------------------------------------------------------------- driver

def bench(a, progress=None) -> dict:
    """One comparison (the module docstring); returns the JSON record. ``progress(msg)`` reports phases."""
    driver_imports_transformers()
    say = progress or (lambda msg: print(msg, flush=True))
    work = Path(tempfile.mkdtemp(prefix="bench_sft_"))
    model_dir, n_params = bench_model(a, work)
    n_rows = a.batch * (a.steps + 1)
    info = machine()
    t_start = time.time()
    try:
        if a.trl_probe:
            res = interleave({"trl": trl_worker}, (a, model_dir, n_rows, str(work / "trl")), timeout=a.timeout)
            return probe_record(res["trl"], a.skip)
        say(f"SFT {a.size}: token ids checked equal" + (f", loss check on {a.check} fixed rows" if a.check else ""))
        parity = in_child(loss_parity, a, model_dir, make_tasks(max(a.check, 8)), str(work / "parity"))
        if a.loss_check_only:
            return {"loss_check": parity}
        say(f"SFT {a.size}: {a.steps + 1} steps per side, interleaved")
        res = interleave({"rlvr": rlvr_worker, "trl": trl_worker}, (a, model_dir, n_rows, str(work / "rlvr")),
                         alt_args={"trl": (a, model_dir, n_rows, str(work / "trl"))}, timeout=a.timeout,
                         sequential=a.sequential)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    import statistics

    summary = {s: {k: summarize(res[s][k][a.skip:]) for k in ("step", "own_step")} for s in res}
    ratio = {"step": summary["rlvr"]["step"]["median"] / summary["trl"]["step"]["median"],
             "paired_median": statistics.median(paired_ratios(res["rlvr"]["step"][a.skip:], res["trl"]["step"][a.skip:]))}
    rss = {s: res[s]["rss"] for s in res}
    return {"benchmark": "sft_vs_trl", "command": " ".join(sys.argv), "args": vars(a), "model_params": n_params,
            "machine": info, "load_avg_end": os.getloadavg(), "seconds_total": round(time.time() - t_start, 1),
            "summary": summary, "ratio_rlvr_over_trl": ratio,
            "rows": {s: {"trained": sum(res[s]["rows_trained"][a.skip:]),
                         "of": a.batch * len(res[s]["rows_trained"][a.skip:])} for s in res},
            "step0_loss": {s: (res[s]["loss"] or [None])[0] for s in res},
            "rss_mb": rss, "rss_ratio": rss["rlvr"]["peak_mb"] / rss["trl"]["peak_mb"],
            "modules": {s: res[s]["modules"] for s in res}, "loss_check": parity,
            "precision": {"rlvr": precision_name(a.rlvr_bf16 or False, res["rlvr"]["train_bf16"]),
                          "trl": a.trl_precision, "trl_micro": a.trl_micro or a.batch},
            "per_step": res}


def main() -> None:
    a = parse_args()
    out = bench(a)
    if a.trl_probe:
        print(json.dumps(out))
        return
    s, r = out["summary"], out["ratio_rlvr_over_trl"]
    print(f"\nSFT step (s), {a.batch} rows/step, {out['model_params'] / 1e6:.2f}M params: rlvr "
          f"{s['rlvr']['step']['median']:.4f}, TRL {s['trl']['step']['median']:.4f}; ratio {r['step']:.3f} (paired "
          f"{r['paired_median']:.3f}); peak MB rlvr {out['rss_mb']['rlvr']['peak_mb']:.0f}, TRL "
          f"{out['rss_mb']['trl']['peak_mb']:.0f}; rows {out['rows']}")
    lc = out.get("loss_check")
    if lc:
        print(f"loss on {lc['rows']} fixed rows: rlvr {lc['rlvr_loss']:.7g}  TRL {lc['trl_loss']:.7g}  rel diff "
              f"{lc['rel_diff']:.1e}; gradients rel diff {lc['grad_rel_diff']:.1e}  {'agree' if lc['agree'] else 'DISAGREE'}")
        print_bf16_check(lc)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
