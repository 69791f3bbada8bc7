"""DPO step time: rlvr's ``train_preference`` vs TRL's ``DPOTrainer``, same model, pairs and settings, on CPU.

    PYTHONPATH=src python bench/dpo_vs_trl.py                  # ~1-2 min on 2 busy cores

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
too (``precompute_ref_log_probs=True``, side ``trl_pre``): both are measured; the target is stated
against TRL's default.

Measurement: the trainers run in separate processes (torch threads = 2, OMP_WAIT_POLICY=PASSIVE) that
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

import _common  # noqa: F401  (sets threads + OMP_WAIT_POLICY before torch loads)
from _common import (
    end_rlvr_steps_at_metrics_line,
    fmt_row,
    hold_baton_from_batch_fetch,
    interleave,
    machine,
    paired_ratios,
    pin_threads,
    step_end_callback,
    summarize,
)

RESULTS = Path(__file__).parent / "results"
LR = 1e-7
"""The compute per step does not depend on it; kept tiny so both sides see a stationary policy."""


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="1m", help="tiny model size (rlvr.models.tiny.SIZES)")
    ap.add_argument("--batch", type=int, default=32, help="pairs per optimizer step")
    ap.add_argument("--steps", type=int, default=24, help="measured steps per side (+1 dropped at the end)")
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps dropped")
    ap.add_argument("--trl", default="trl,trl_pre",
                    help="TRL variants: trl (reference forward each step), trl_pre (precomputed reference)")
    ap.add_argument("--out", default=str(RESULTS / "dpo_vs_trl.json"))
    return ap.parse_args()


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

def rlvr_worker(baton, a, model_dir: str, pairs_path: str, work: str) -> dict:
    """train_preference with the baton taken when the step function starts and passed on at its metrics line."""
    import rlvr.trainers.preference as pref
    from rlvr.config.model import ModelConfig
    from rlvr.config.optim import OptimConfig
    from rlvr.config.preference import DPOLoss, PairsFile, PreferenceStage

    inner_step = pref.paired_step

    def paired_step(*args, **kw):
        baton.begin()
        return inner_step(*args, **kw)

    end_rlvr_steps_at_metrics_line(baton)

    pref.paired_step = paired_step
    stage = PreferenceStage(
        name="rlvr", loss=DPOLoss(beta=0.1), pairs=PairsFile(path=pairs_path),
        optim=OptimConfig(lr=LR, warmup_steps=0, schedule="constant", max_grad_norm=1.0),
        max_steps=a.steps + 1, batch_size=a.batch, micro_batch_size=a.batch, max_length=256, save_every=0,
        eval_every=0, monitor_every=0)
    pin_threads()
    pref.train_preference(stage, ModelConfig(path=model_dir), Path(work), seed=0)
    recs = [json.loads(x) for x in (Path(work) / stage.name / "metrics.jsonl").read_text().splitlines()]
    recs = [r for r in recs if "time/step" in r]
    own = [r["time/step"] - w for r, w in zip(recs, baton.waits)]  # its clock runs while it waits its turn
    return {"step": baton.steps()[:-1], "own_step": own[:-1],
            "interleaved": baton.interleaved}


# ---------------------------------------------------------------- TRL side

def trl_worker(baton, a, model_dir: str, pairs: list[dict], work: str, precompute: bool) -> dict:
    """DPOTrainer.train; a step runs from its batch fetch to on_step_end."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": p["prompt"]}],
                             "chosen": [{"role": "assistant", "content": p["chosen"]}],
                             "rejected": [{"role": "assistant", "content": p["rejected"]}]} for p in pairs])
    tok = AutoTokenizer.from_pretrained(model_dir)
    cfg = DPOConfig(
        output_dir=str(Path(work) / "trl"), use_cpu=True, bf16=False, fp16=False, report_to="none",
        save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=0, max_steps=a.steps + 1,
        per_device_train_batch_size=a.batch, gradient_accumulation_steps=1, beta=0.1, loss_type=["sigmoid"],
        max_length=256, precompute_ref_log_probs=precompute, learning_rate=LR, lr_scheduler_type="constant",
        warmup_steps=0, max_grad_norm=1.0, optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.95,
        weight_decay=0.0, dataloader_num_workers=0)
    trainer = DPOTrainer(model=model_dir, args=cfg, train_dataset=ds, processing_class=tok,
                         callbacks=[step_end_callback(baton)])
    check_same_tokens(model_dir, pairs, trainer.train_dataset)
    hold_baton_from_batch_fetch(trainer, baton)
    pin_threads()
    trainer.train()
    step = baton.steps()[:-1]
    return {"step": step, "own_step": step, "interleaved": baton.interleaved}


def trl_default(baton, a, model_dir, pairs, work):
    return trl_worker(baton, a, model_dir, pairs, work, precompute=False)


def trl_precomputed(baton, a, model_dir, pairs, work):
    return trl_worker(baton, a, model_dir, pairs, work, precompute=True)


def check_same_tokens(model_dir: str, pairs: list[dict], trl_ds) -> None:
    """TRL's prompt/chosen/rejected ids must be rlvr's encode_pair split into prompt and response."""
    from transformers import AutoTokenizer

    from rlvr.data.preference import PreferencePair, encode_pair

    tok = AutoTokenizer.from_pretrained(model_dir)
    for p, row in zip(pairs[:8], trl_ds):
        enc = encode_pair(tok, PreferencePair(prompt=p["prompt"], chosen=p["chosen"], rejected=p["rejected"]), 256)
        n = len(row["prompt_ids"])
        assert enc.chosen_ids == row["prompt_ids"] + row["chosen_ids"], (enc.chosen_ids, row)
        assert enc.rejected_ids == row["prompt_ids"] + row["rejected_ids"], (enc.rejected_ids, row)
        assert sum(enc.chosen_mask) == len(enc.chosen_ids) - n


# ---------------------------------------------------------------- driver

def main() -> None:
    a = parse_args()
    from rlvr.data.jsonl import write_jsonl_atomic
    from rlvr.models.tiny import build_tiny, num_params

    work = Path(tempfile.mkdtemp(prefix="bench_dpo_"))
    model_dir = str(work / "model")
    model, _ = build_tiny(model_dir, size=a.size, seed=0)
    pairs = make_pairs(a.batch * (a.steps + 1))
    pairs_path = str(work / "pairs.jsonl")
    write_jsonl_atomic(pairs_path, pairs)
    variants = {"trl": trl_default, "trl_pre": trl_precomputed}
    trl_sides = [s.strip() for s in a.trl.split(",") if s.strip()]
    workers = {"rlvr": rlvr_worker, **{s: variants[s] for s in trl_sides}}
    side_args = {s: (a, model_dir, pairs, str(work / s)) for s in trl_sides}
    info = machine()
    t_start = time.time()
    try:
        res = interleave(workers, (a, model_dir, pairs_path, str(work / "rlvr")), alt_args=side_args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {s: {k: summarize(res[s][k][a.skip:]) for k in ("step", "own_step")} for s in res}
    ratio = {}
    for s in trl_sides:
        ratio[s] = {"step": summary["rlvr"]["step"]["median"] / summary[s]["step"]["median"],
                    "paired_median": statistics.median(paired_ratios(res["rlvr"]["step"][a.skip:],
                                                                     res[s]["step"][a.skip:]))}
    report(a, summary, ratio, res)
    head = ratio.get("trl", {}).get("step")
    out = {"benchmark": "dpo_vs_trl", "command": " ".join(sys.argv), "args": vars(a), "model_params": num_params(model),
           "machine": info, "load_avg_end": os.getloadavg(), "seconds_total": round(time.time() - t_start, 1),
           "summary": summary, "ratio_rlvr_over_trl": ratio, "target": 0.6,
           "met": None if head is None else head <= 0.6, "per_step": res}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {a.out}")


def report(a, summary: dict, ratio: dict, res: dict) -> None:
    n = len(res["rlvr"]["step"][a.skip:])
    print(f"\nDPO step time (s): {a.batch} pairs/step, model {a.size}; median of {n} steady-state steps "
          f"(first {a.skip} and the last dropped), steps interleaved")
    w = [8, 9, 9, 9]
    print(fmt_row(["side", "step", "min", "max"], w))
    for s, m in summary.items():
        print(fmt_row([s, f"{m['step']['median']:.4f}", f"{m['step']['min']:.4f}", f"{m['step']['max']:.4f}"], w))
    for s, r in ratio.items():
        tgt = f"; target <= 0.6: {'MET' if r['step'] <= 0.6 else 'MISSED'}" if s == "trl" else ""
        print(f"ratio rlvr/{s}: {r['step']:.3f} (paired per-step median {r['paired_median']:.3f}){tgt}")


if __name__ == "__main__":
    main()
