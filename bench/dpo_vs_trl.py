"""DPO step time: rlvr's ``train_preference`` vs TRL's ``DPOTrainer``, same model, pairs and settings, on CPU.

    PYTHONPATH=src python bench/dpo_vs_trl.py                  # ~1-2 min on 2 busy cores
    PYTHONPATH=src python bench/dpo_vs_trl.py --trl trl,trl_pre  # also TRL's reference forward in every step

``bench/run.py`` calls :func:`bench` for each model size; this CLI runs one.

Both sides load the same HF folder (``build_tiny`` written once) and train on the same pairs: for
``generate(["mul21"], n, split="train")`` tasks, chosen = the task's worked solution, rejected = the
same text with a wrong boxed answer (and a wrong last partial product). rlvr reads them from a JSONL
file (``PairsFile``: ``{"prompt", "chosen", "rejected"}``); TRL gets the conversational form
(user prompt, assistant chosen/rejected). Both chat-template the prompt and end each response with
``<|end|>``; the token ids of both sides are checked equal. Sigmoid DPO loss, β = 0.1, ``batch``
pairs per optimizer step (TRL ``per_device_train_batch_size`` = rlvr ``batch_size`` =
``micro_batch_size``, chosen and rejected in one concatenated forward on both sides), no gradient
accumulation, AdamW lr 1e-7 betas (0.9, 0.95), grad-clip 1.0, float32, max_length 256 (nothing is cut).

The reference: rlvr computes the reference log-probabilities once before the first step (cached);
TRL by default runs a reference model forward in every step (side ``trl``). TRL can precompute them
too (``precompute_ref_log_probs=True``, side ``trl_pre``, its fastest setting for this work and the
default here; the target is stated against it). The precompute pass happens before TRL's first step
(as rlvr's does before its first), so neither is in the step times.

Rows trained: each side counts the pairs its loss received per step (rlvr: the pairs handed to its
step function; TRL: half the rows of the batch its ``compute_loss`` received). Peak RSS: each side's
own process at its end (the token-id check runs in a process of its own, so the TRL worker imports no rlvr).
Loss check: both losses on the same ``check`` pairs (the first ones), with the
same reference log-probabilities (the policy's own plus fixed offsets, so the loss is not exactly
log 2): rlvr's ``paired_step`` and TRL's ``compute_loss`` on its collated rows, printed side by side,
and the gradients their backward passes leave (relative L2 difference).
The step-0 loss each side logged while training (log 2 on both: the reference is the policy) is in
the JSON too.

Measurement: the trainers run in separate processes (torch threads = 2, the same OpenMP wait policy: _common.WAIT) that
take turns step by step (a semaphore baton), so machine load hits all alike. A step is timed from its
start (rlvr: the step function, which pads its pairs; TRL: the batch fetch, whose collator pads) to
its end (rlvr: its metrics line; TRL: on_step_end, after the optimizer step). rlvr's held-out/length
monitors are off (``monitor_every=0``) except at the very last step, and the last step overlaps the
others' teardown, so every side runs ``steps + 1`` steps and the last one is dropped along with the
first ``skip`` warm-up steps.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
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
    fmt_row,
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


def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="1m", help="tiny model size (rlvr.models.tiny.SIZES)")
    ap.add_argument("--batch", type=int, default=32, help="pairs per optimizer step")
    ap.add_argument("--steps", type=int, default=24, help="measured steps per side (+1 dropped at the end)")
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps dropped")
    ap.add_argument("--trl", default="trl_pre",
                    help="TRL variants, comma-separated: trl_pre (precomputed reference, the fastest), "
                         "trl (reference forward each step), trl_pre_bf16 (trl_pre with DPOConfig bf16=True); "
                         "the target is against the faster of trl_pre and trl_pre_bf16")
    ap.add_argument("--rlvr-bf16", nargs="?", const="train", default=False, choices=("train", "auto"),
                    help="rlvr's training forwards (step and reference cache) under bf16 autocast "
                         "(model.autocast_bf16: train); `--rlvr-bf16 auto`: model.autocast_bf16: auto (bf16 where "
                         "it pays: a CPU with bf16 units, AMX or avx512_bf16, and >= 0.8M parameters, else float32)")
    ap.add_argument("--rlvr-micro-tokens", default="auto",
                    help="rlvr's model.micro_tokens: auto (the CPU token budget), N tokens, or none")
    ap.add_argument("--rlvr-micro", type=int, default=None,
                    help="rlvr micro_batch_size (default --batch, TRL's per_device_train_batch_size); smaller cuts "
                         "rlvr's activation memory, the gradient is the same")
    ap.add_argument("--check", type=int, default=8, help="pairs in the fixed-batch loss check (0: none)")
    ap.add_argument("--out", default=str(RESULTS / "dpo_vs_trl.json"))
    add_model_args(ap)
    add_trl_setting_args(ap, precision=False)  # the precision is the --trl side (trl_pre or trl_pre_bf16)
    a = ap.parse_args(argv)
    if a.skip >= a.steps:
        ap.error(f"--skip {a.skip} must be smaller than --steps {a.steps}")
    if a.batch % (a.trl_micro or a.batch):
        ap.error(f"--trl-micro {a.trl_micro} must divide --batch {a.batch}")
    return a


def make_pairs(n: int) -> list[dict]:
    """Chosen = the worked solution; rejected = the same with the last partial product and answer wrong."""
    from rlvr.data.arithmetic import generate

    pairs = []
    for t in generate(["mul21"], n, split="train", seed=0):
        ans = t.gold["answer"]
        wrong = str(int(ans) + 10)
        head, _, _ = t.solution.rpartition("\\boxed{")
        rejected = head.replace(ans[:-1], wrong[:-1]) + "\\boxed{" + wrong + "}"
        pairs.append({"prompt": t.prompt, "chosen": t.solution, "rejected": rejected})
    return pairs


# ---------------------------------------------------------------- rlvr side

def rlvr_stage(a, pairs_path: str):
    from rlvr.config.optim import OptimConfig
    from rlvr.config.preference import DPOLoss, PairsFile, PreferenceStage

    return PreferenceStage(
        name="rlvr", loss=DPOLoss(beta=0.1), pairs=PairsFile(path=pairs_path),
        optim=OptimConfig(lr=LR, warmup_steps=0, schedule="constant", max_grad_norm=1.0),
        max_steps=a.steps + 1, batch_size=a.batch, micro_batch_size=a.rlvr_micro or a.batch, max_length=MAX_LENGTH, save_every=0,
        eval_every=0, monitor_every=0)


def rlvr_worker(baton, a, model_dir: str, pairs_path: str, work: str) -> dict:
    """train_preference with the baton taken when the step function starts and passed on at its metrics line."""
    import rlvr.trainers.preference as pref
    from rlvr.config.model import ModelConfig

    inner_step = pref.paired_step
    rows: list[int] = []

    def paired_step(model, data, idx, *args, **kw):
        baton.begin()
        rows.append(len(idx))  # the pairs this step forwards and backwards
        return inner_step(model, data, idx, *args, **kw)

    end_rlvr_steps_at_metrics_line(baton)
    pref.paired_step = paired_step
    stage = rlvr_stage(a, pairs_path)
    pin_threads()
    model_cfg = ModelConfig(path=model_dir, autocast_bf16=a.rlvr_bf16 or False,
                            micro_tokens=micro_tokens_arg(getattr(a, "rlvr_micro_tokens", "auto")), lora=rlvr_lora(a))
    pref.train_preference(stage, model_cfg, Path(work), seed=0)
    recs = [json.loads(x) for x in (Path(work) / stage.name / "metrics.jsonl").read_text().splitlines()]
    recs = [r for r in recs if "time/step" in r]
    own = [r["time/step"] - w for r, w in zip(recs, baton.waits)]  # its clock runs while it waits its turn
    return {"step": baton.steps()[:-1], "own_step": own[:-1], "rows_trained": rows[:-1],
            "loss": [r.get("train/loss") for r in recs][:-1], "interleaved": baton.interleaved,
            "rss": peak_rss_mb(), "modules": heavy_modules(), "train_bf16": model_cfg.train_bf16}


# ---------------------------------------------------------------- TRL side

def trl_trainer(a, model_dir: str, pairs: list[dict], work: str, precompute: bool, callbacks=(),
                bf16: bool = False):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": p["prompt"]}],
                             "chosen": [{"role": "assistant", "content": p["chosen"]}],
                             "rejected": [{"role": "assistant", "content": p["rejected"]}]} for p in pairs])
    tok = AutoTokenizer.from_pretrained(model_dir)
    cfg = DPOConfig(
        output_dir=str(Path(work) / "trl"), use_cpu=True, bf16=bf16, fp16=False, report_to="none",
        save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=0, max_steps=a.steps + 1,
        per_device_train_batch_size=trl_micro(a), gradient_accumulation_steps=a.batch // trl_micro(a), beta=0.1,
        loss_type=["sigmoid"],
        max_length=MAX_LENGTH, precompute_ref_log_probs=precompute, learning_rate=LR, lr_scheduler_type="constant",
        warmup_steps=0, max_grad_norm=1.0, optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.95,
        weight_decay=0.0, dataloader_num_workers=0)
    return DPOTrainer(model=model_dir, args=cfg, train_dataset=ds, processing_class=tok, callbacks=list(callbacks),
                      peft_config=trl_peft(a))


def trl_micro(a) -> int:
    """TRL's pairs a forward (``--trl-micro``; default the whole step)."""
    return getattr(a, "trl_micro", None) or a.batch


def trl_worker(baton, a, model_dir: str, pairs: list[dict], work: str, precompute: bool,
               bf16: bool = False) -> dict:
    """DPOTrainer.train; a step runs from its batch fetch to on_step_end."""
    trainer = trl_trainer(a, model_dir, pairs, work, precompute, [step_end_callback(baton)], bf16)
    hold_baton_from_batch_fetch(trainer, baton)
    inner = trainer.compute_loss
    rows: list[int] = []
    losses: list[float] = []

    def counted_loss(model, inputs, *args, **kw):
        rows.append(int(inputs["input_ids"].shape[0]) // 2)  # the batch is [chosen; rejected]
        out = inner(model, inputs, *args, **kw)
        losses.append(float((out[0] if isinstance(out, tuple) else out).detach()))
        return out
    trainer.compute_loss = counted_loss
    pin_threads()
    trainer.train()
    step = baton.steps()[:-1]
    calls = a.batch // trl_micro(a)  # compute_loss calls an optimizer step
    return {"step": step, "own_step": step, "rows_trained": per_step(rows, calls)[:-1],
            "loss": [x / calls for x in per_step(losses, calls)][:-1],  # each micro-batch's loss is its mean
            "interleaved": baton.interleaved, "rss": peak_rss_mb(), "modules": heavy_modules()}


def trl_default(baton, a, model_dir, pairs, work):
    return trl_worker(baton, a, model_dir, pairs, work, precompute=False)


def trl_precomputed(baton, a, model_dir, pairs, work):
    return trl_worker(baton, a, model_dir, pairs, work, precompute=True)


def trl_precomputed_bf16(baton, a, model_dir, pairs, work):
    return trl_worker(baton, a, model_dir, pairs, work, precompute=True, bf16=True)


VARIANTS = {"trl": trl_default, "trl_pre": trl_precomputed, "trl_pre_bf16": trl_precomputed_bf16}
FASTEST = ("trl_pre", "trl_pre_bf16")
"""TRL's fastest settings for this work (precomputed reference, either precision): the target is against
the faster of those run."""


def check_same_tokens(model_dir: str, pairs: list[dict], trl_ds) -> None:
    """TRL's prompt/chosen/rejected ids must be rlvr's encode_pair split into prompt and response."""
    from transformers import AutoTokenizer

    from rlvr.data.preference import PreferencePair, encode_pair

    tok = AutoTokenizer.from_pretrained(model_dir)
    for p, row in zip(pairs[:8], trl_ds):
        enc = encode_pair(tok, PreferencePair(prompt=p["prompt"], chosen=p["chosen"], rejected=p["rejected"]),
                          MAX_LENGTH)
        n = len(row["prompt_ids"])
        assert enc.chosen_ids == row["prompt_ids"] + row["chosen_ids"], (enc.chosen_ids, row)
        assert enc.rejected_ids == row["prompt_ids"] + row["rejected_ids"], (enc.rejected_ids, row)
        assert sum(enc.chosen_mask) == len(enc.chosen_ids) - n


# ---------------------------------------------------------------- loss check

def loss_parity(a, model_dir: str, pairs: list[dict], pairs_path: str, work: str) -> dict | None:
    """TRL's token ids of the first pairs == rlvr's (checked here, in a process of its own, so that the TRL
    worker's memory holds no rlvr import); then, unless ``--check 0``, rlvr's and TRL's DPO loss on the same pairs
    with the same reference log-probabilities, in float32 and bf16 (``_common.loss_checks``)."""
    import torch

    from rlvr.data.preference import PreferencePair
    from rlvr.trainers.preference import encode_pairs, pair_logprobs, paired_step

    n = min(max(a.check, 8), len(pairs))
    trainer = trl_trainer(a, model_dir, pairs[:n], work, precompute=True)
    check_same_tokens(model_dir, pairs[:n], trainer.train_dataset)
    if not a.check:
        return None
    n = min(a.check, len(pairs))
    model, tok = trainer.model, trainer.processing_class
    model.train()
    data = encode_pairs(tok, [PreferencePair(prompt=p["prompt"], chosen=p["chosen"], rejected=p["rejected"])
                              for p in pairs[:n]], MAX_LENGTH)
    with torch.no_grad():
        pc, pr, _, _ = pair_logprobs(model, data.chosen, data.rejected, tok.pad_token_id)
    g = torch.Generator().manual_seed(0)
    data.ref_logprobs = torch.stack([pc, pr], 1) + torch.randn(n, 2, generator=g)  # reference != policy
    stage = rlvr_stage(a, pairs_path)
    ours = lambda bf16: paired_step(model, data, list(range(n)), stage, tok.pad_token_id, bf16)["train/loss"]
    rows = [dict(trainer.train_dataset[i], ref_chosen_logps=float(data.ref_logprobs[i, 0]),
                 ref_rejected_logps=float(data.ref_logprobs[i, 1])) for i in range(n)]
    theirs = lambda: trainer.compute_loss(model, trainer.data_collator(rows))
    return {"pairs": n, "beta": 0.1, **loss_checks(model, ours, theirs)}


# ---------------------------------------------------------------- driver

def bench(a, progress=None) -> dict:
    """One comparison (the module docstring); returns the JSON record. ``progress(msg)`` reports phases."""
    driver_imports_transformers()  # before build_tiny: the loss check builds a TRL trainer here
    from rlvr.data.jsonl import write_jsonl_atomic

    say = progress or (lambda msg: print(msg, flush=True))
    work = Path(tempfile.mkdtemp(prefix="bench_dpo_"))
    model_dir, n_params = bench_model(a, work)
    pairs = make_pairs(a.batch * (a.steps + 1))
    pairs_path = str(work / "pairs.jsonl")
    write_jsonl_atomic(pairs_path, pairs)
    trl_sides = [s.strip() for s in a.trl.split(",") if s.strip()]
    unknown = [s for s in trl_sides if s not in VARIANTS]
    if unknown or not trl_sides:
        raise SystemExit(f"--trl {a.trl!r}: expected a comma-separated subset of {sorted(VARIANTS)}")
    workers = {"rlvr": rlvr_worker, **{s: VARIANTS[s] for s in trl_sides}}
    side_args = {s: (a, model_dir, pairs, str(work / s)) for s in trl_sides}
    info = machine()
    t_start = time.time()
    try:
        if a.trl_probe:  # one setting of the search: TRL alone (the first --trl side)
            res = interleave({trl_sides[0]: workers[trl_sides[0]]}, side_args[trl_sides[0]], timeout=a.timeout)
            return probe_record(res[trl_sides[0]], a.skip)
        say(f"DPO {a.size}: token ids checked equal" + (f", loss check on {a.check} fixed pairs" if a.check else ""))
        parity = in_child(loss_parity, a, model_dir, pairs, pairs_path, str(work / "parity"))
        if a.loss_check_only:
            return {"loss_check": parity}
        say(f"DPO {a.size}: {a.steps + 1} steps per side, interleaved")
        res = interleave(workers, (a, model_dir, pairs_path, str(work / "rlvr")), alt_args=side_args, sequential=a.sequential,
                         timeout=a.timeout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {s: {k: summarize(res[s][k][a.skip:]) for k in ("step", "own_step")} for s in res}
    ratio, rss_ratio = {}, {}
    for s in trl_sides:
        ratio[s] = {"step": summary["rlvr"]["step"]["median"] / summary[s]["step"]["median"],
                    "paired_median": statistics.median(paired_ratios(res["rlvr"]["step"][a.skip:],
                                                                     res[s]["step"][a.skip:]))}
        rss_ratio[s] = res["rlvr"]["rss"]["peak_mb"] / res[s]["rss"]["peak_mb"]
    fastest = [s for s in trl_sides if s in FASTEST] or trl_sides[:1]  # the target: against TRL's fastest setting
    head = min(fastest, key=lambda s: summary[s]["step"]["median"])
    return {"benchmark": "dpo_vs_trl", "command": " ".join(sys.argv), "args": vars(a),
            "model_params": n_params, "machine": info, "load_avg_end": os.getloadavg(),
            "seconds_total": round(time.time() - t_start, 1), "summary": summary, "ratio_rlvr_over_trl": ratio,
            "headline": head, "rows": {s: {"trained": sum(res[s]["rows_trained"][a.skip:]),
                                           "of": a.batch * len(res[s]["rows_trained"][a.skip:])} for s in res},
            "step0_loss": {s: (res[s]["loss"] or [None])[0] for s in res},
            "rss_mb": {s: res[s]["rss"] for s in res}, "rss_ratio": rss_ratio,
            "modules": {s: res[s]["modules"] for s in res}, "loss_check": parity,
            "precision": {"rlvr": precision_name(a.rlvr_bf16 or False, res["rlvr"]["train_bf16"]),
                          "trl_micro": trl_micro(a)},
            "target": 0.5, "met": ratio[head]["step"] <= 0.5, "per_step": res}


def main() -> None:
    a = parse_args()
    out = bench(a)
    report(a, out)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {a.out}")


def report(a, out: dict) -> None:
    summary, ratio, res = out["summary"], out["ratio_rlvr_over_trl"], out["per_step"]
    n = len(res["rlvr"]["step"][a.skip:])
    print(f"\nDPO step time (s): {a.batch} pairs/step, model {a.size} ({out['model_params'] / 1e6:.2f}M); median of "
          f"{n} steady-state steps (first {a.skip} and the last dropped), steps interleaved")
    w = [8, 9, 9, 9, 12, 10, 10]
    print(fmt_row(["side", "step", "min", "max", "rows trained", "loss @0", "peak MB"], w))
    for s, m in summary.items():
        l0 = out["step0_loss"][s]
        print(fmt_row([s, f"{m['step']['median']:.4f}", f"{m['step']['min']:.4f}", f"{m['step']['max']:.4f}",
                       f"{out['rows'][s]['trained']}/{out['rows'][s]['of']}", "-" if l0 is None else f"{l0:.5f}",
                       f"{out['rss_mb'][s]['peak_mb']:.0f}"], w))
    for s, r in ratio.items():
        tgt = f"; target <= 0.5: {'MET' if r['step'] <= 0.5 else 'MISSED'}" if s == out["headline"] else ""
        print(f"ratio rlvr/{s}: {r['step']:.3f} (paired per-step median {r['paired_median']:.3f}){tgt}; "
              f"peak RSS ratio {out['rss_ratio'][s]:.2f} (target <= 0.7)")
    print(f"precision: rlvr {out['precision']['rlvr']}")
    lc = out.get("loss_check")
    if lc:
        print(f"loss on {lc['pairs']} fixed pairs (reference != policy): rlvr {lc['rlvr_loss']:.7g}  "
              f"TRL {lc['trl_loss']:.7g}  |diff| {lc['abs_diff']:.2e}; gradients |g_rlvr - g_TRL| / |g_TRL| "
              f"{lc['grad_rel_diff']:.2e}  {'agree' if lc['agree'] else 'DISAGREE'}")
        print_bf16_check(lc)


if __name__ == "__main__":
    main()
