"""GRPO step time: rlvr's ``train_rl`` vs TRL's ``GRPOTrainer``, same model, data and settings, on CPU.

    PYTHONPATH=src python bench/grpo_vs_trl.py                       # ~1-2 min on 2 busy cores
    PYTHONPATH=src python bench/grpo_vs_trl.py --reward correct --out bench/results/grpo_vs_trl_correct.json

Both sides load the same HF folder (``build_tiny`` written once), draw from the same task list
(``generate(["mul21"], n, split="train")``; the prompt token ids are checked equal), sample ``group``
completions for each of ``prompts`` prompts per step (same temperature, top_p = 1, top_k off, same
stop ids <eos> and <|end|>, same ``max_new``), and take one optimizer step per rollout batch (μ = 1,
β = 0 so no reference model, clip ε = 0.2, per-group std scaling, seq-mean-token-mean loss, AdamW
lr 1e-7 (see LR) betas (0.9, 0.95), grad-clip 1.0, micro-batch = the whole batch: rlvr ``micro_batch_size`` =
TRL ``per_device_train_batch_size`` = prompts × group, no gradient accumulation). float32, no bf16.

Reward: ``correct`` (rlvr: its math verifier via ``default_judge(0)``; TRL: a plain function that
compares the last ``\\boxed{}`` with the gold answer) plus, by default, ``length`` = -len/max_new on
both sides. The random-init tiny model never answers correctly, so with ``correct`` alone every group
has zero reward variance and rlvr skips the backward pass entirely (TRL still runs it on zero
advantages): the length term gives every group variance so both sides do the full forward/backward.
``--reward correct`` measures the skip case.

Measurement: the two trainers run in two processes (torch threads = 2, OMP_WAIT_POLICY=PASSIVE) that
take turns step by step (a semaphore baton), so load from other users of the machine hits both
alike. A step is timed from its start (rlvr: the rollout; TRL: the batch fetch) to its end (rlvr: its
metrics line is written; TRL: on_step_end, after the optimizer step). The first ``skip`` steps of each
side are warm-up and dropped, and so is one extra last step (it overlaps the other side's teardown);
the table gives medians, the ratio uses medians, and "paired" is the median of per-step ratios of
back-to-back steps.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (sets threads + OMP_WAIT_POLICY before torch loads)
from _common import (
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
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
LR = 1e-7
"""Tiny on purpose: the compute per step does not depend on it, and a policy that barely moves keeps
completion lengths (so step costs) stationary over the run on both sides."""


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="1m", help="tiny model size (rlvr.models.tiny.SIZES)")
    ap.add_argument("--prompts", type=int, default=4, help="prompts (groups) per step")
    ap.add_argument("--group", type=int, default=8, help="G: completions per prompt")
    ap.add_argument("--max-new", type=int, default=64, help="max_new_tokens / max_completion_length")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=24, help="measured steps per side (+1 run and dropped at the end)")
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps dropped")
    ap.add_argument("--reward", choices=["correct+length", "correct"], default="correct+length")
    ap.add_argument("--out", default=str(RESULTS / "grpo_vs_trl.json"))
    return ap.parse_args()


# ---------------------------------------------------------------- rlvr side

def rlvr_worker(baton, a, model_dir: str, n_tasks: int, work: str) -> dict:
    """train_rl with a hook at each step's start (rollout_step) and end (the metrics line)."""
    import rlvr.trainers.rl as rl_mod
    from rlvr.config.data import BuiltinArithmetic
    from rlvr.config.model import ModelConfig
    from rlvr.config.optim import OptimConfig
    from rlvr.config.rl import GRPOLoss, KLConfig, RewardTerm, RLStage, SamplingConfig
    from rlvr.monitoring.evaluate import default_judge

    inner_rollout = rl_mod.rollout_step

    def rollout_step(*args, **kw):
        baton.begin()
        return inner_rollout(*args, **kw)

    class Writer(rl_mod.MetricsWriter):
        def log(self, step, metrics):
            super().log(step, metrics)
            if "time/step" in metrics:
                baton.end()

    rl_mod.rollout_step, rl_mod.MetricsWriter = rollout_step, Writer
    rewards = [RewardTerm(name="correct")] + ([RewardTerm(name="length")] if "length" in a.reward else [])
    stage = RLStage(
        name="rlvr", data=BuiltinArithmetic(families=["mul21"], n=n_tasks, split="train", seed=0),
        loss=GRPOLoss(eps=0.2, scale="group", aggregation="seq-mean-token-mean"), kl=KLConfig(beta=0.0),
        sampling=SamplingConfig(group_size=a.group, temperature=a.temperature, top_p=1.0, max_new_tokens=a.max_new),
        rewards=rewards, optim=OptimConfig(lr=LR, warmup_steps=0, schedule="constant", max_grad_norm=1.0),
        max_steps=a.steps + 1, tasks_per_step=a.prompts, micro_batch_size=a.prompts * a.group, save_every=0,
        eval_every=0)
    pin_threads()
    rl_mod.train_rl(stage, ModelConfig(path=model_dir), Path(work), seed=0, judge=default_judge(0))
    recs = [json.loads(x) for x in (Path(work) / stage.name / "metrics.jsonl").read_text().splitlines()]
    recs = [r for r in recs if "time/step" in r][:-1]  # the last step overlaps the others' teardown
    return {"step": baton.steps()[:-1], "own_step": [r["time/step"] - w for r, w in zip(recs, baton.waits)],
            "generate": [r["time/generate"] for r in recs], "train": [r["time/train"] for r in recs],
            "trained_seqs": [r.get("train/sequences", 0) for r in recs],
            "completion_len": [r["rollout/length_mean"] for r in recs], "interleaved": baton.interleaved}


# ---------------------------------------------------------------- TRL side

def boxed_reward(completions, answer, **_):
    """1.0 when the last \\boxed{...} of the completion equals the gold answer string, else 0.0."""
    out = []
    for c, gold in zip(completions, answer):
        text = c[-1]["content"] if isinstance(c, list) else c
        m = BOXED.findall(text)
        out.append(1.0 if m and m[-1].strip() == str(gold).strip() else 0.0)
    return out


def make_length_reward(max_new: int):
    def length_reward(completion_ids, **_):
        """-len / max_new_tokens: the same term as rlvr's RewardTerm(name="length")."""
        return [-len(c) / max_new for c in completion_ids]
    return length_reward


def trl_worker(baton, a, model_dir: str, tasks: list[dict], work: str) -> dict:
    """GRPOTrainer.train; a step runs from its batch fetch to on_step_end (see _common.StepEnd)."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": t["prompt"]}], "answer": t["answer"]}
                            for t in tasks])
    tok = AutoTokenizer.from_pretrained(model_dir)
    funcs = [boxed_reward] + ([make_length_reward(a.max_new)] if "length" in a.reward else [])
    cfg = GRPOConfig(
        output_dir=str(Path(work) / "trl"), use_cpu=True, bf16=False, fp16=False, report_to="none",
        save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=0, max_steps=a.steps + 1,
        per_device_train_batch_size=a.prompts * a.group, gradient_accumulation_steps=1,
        num_generations=a.group, max_completion_length=a.max_new, temperature=a.temperature, top_p=1.0,
        beta=0.0, num_iterations=1, epsilon=0.2, loss_type="grpo", scale_rewards="group",
        learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0,
        optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.95, weight_decay=0.0,
        dataloader_num_workers=0, log_completions=False)
    gen_times: list[float] = []
    lens: list[float] = []

    trainer = GRPOTrainer(model=model_dir, reward_funcs=funcs, args=cfg, train_dataset=ds,
                          processing_class=tok, callbacks=[step_end_callback(baton)])
    hold_baton_from_batch_fetch(trainer, baton)
    inner = trainer._generate_single_turn

    def timed_generate(*args, **kw):
        t0 = time.perf_counter()
        res = inner(*args, **kw)
        gen_times.append(time.perf_counter() - t0)
        lens.append(sum(len(c) for c in res[0]) / max(1, len(res[0])))
        return res
    trainer._generate_single_turn = timed_generate
    pin_threads()
    trainer.train()
    step = baton.steps()[:-1]  # the last step overlaps the others' teardown
    return {"step": step, "own_step": step, "generate": gen_times[:-1],
            "train": [s_ - g for s_, g in zip(step, gen_times)], "completion_len": lens[:-1],
            "interleaved": baton.interleaved}


# ---------------------------------------------------------------- driver

def check_same_prompts(model_dir: str, tasks) -> None:
    """rlvr's encode_prompt and TRL's chat-template tokenisation must give the same prompt ids."""
    from transformers import AutoTokenizer

    from rlvr.data.chat import encode_prompt

    tok = AutoTokenizer.from_pretrained(model_dir)
    for t in tasks[:8]:
        ours = encode_prompt(tok, t)
        theirs = tok.apply_chat_template([{"role": "user", "content": t.prompt}], add_generation_prompt=True,
                                         tokenize=True, return_dict=True)["input_ids"]
        assert list(ours) == list(theirs), (t.prompt, ours, theirs)


def main() -> None:
    a = parse_args()
    from rlvr.data.arithmetic import generate
    from rlvr.models.tiny import build_tiny, num_params

    work = Path(tempfile.mkdtemp(prefix="bench_grpo_"))
    model_dir = str(work / "model")
    model, _ = build_tiny(model_dir, size=a.size, seed=0)
    n_tasks = a.prompts * a.steps * 2
    tasks = generate(["mul21"], n_tasks, split="train", seed=0)
    check_same_prompts(model_dir, tasks)
    plain = [{"prompt": t.prompt, "answer": t.gold["answer"]} for t in tasks]
    info = machine()
    t_start = time.time()
    try:
        res = interleave({"rlvr": rlvr_worker, "trl": trl_worker},
                         (a, model_dir, n_tasks, str(work / "rlvr")), alt_args={"trl": (a, model_dir, plain,
                                                                                       str(work / "trl"))})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    keys = ("step", "own_step", "generate", "train")
    summary = {s: {k: summarize(res[s][k][a.skip:]) for k in keys} for s in res}
    paired = paired_ratios(res["rlvr"]["step"][a.skip:], res["trl"]["step"][a.skip:])
    ratio = {k: summary["rlvr"][k]["median"] / summary["trl"][k]["median"] for k in keys}
    ratio["paired_median"] = statistics.median(paired)
    report(a, summary, ratio, res)
    out = {"benchmark": "grpo_vs_trl", "command": " ".join(sys.argv), "args": vars(a),
           "model_params": num_params(model), "machine": info, "load_avg_end": os.getloadavg(),
           "seconds_total": round(time.time() - t_start, 1), "summary": summary, "ratio_rlvr_over_trl": ratio,
           "target": 0.5, "met": ratio["step"] <= 0.5, "per_step": res}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {a.out}")


def report(a, summary: dict, ratio: dict, res: dict) -> None:
    n = len(res["rlvr"]["step"][a.skip:])
    print(f"\nGRPO step time (s): {a.prompts} prompts x G={a.group}, max_new={a.max_new}, reward={a.reward}, "
          f"model {a.size}; median of {n} steady-state steps (first {a.skip} dropped), steps interleaved")
    w = [6, 9, 9, 9, 9, 9, 12]
    print(fmt_row(["side", "step", "min", "max", "generate", "train", "mean len"], w))
    for s in ("rlvr", "trl"):
        m = summary[s]
        ln = statistics.fmean(res[s]["completion_len"][a.skip:])
        print(fmt_row([s, f"{m['step']['median']:.3f}", f"{m['step']['min']:.3f}", f"{m['step']['max']:.3f}",
                       f"{m['generate']['median']:.3f}", f"{m['train']['median']:.3f}", f"{ln:.1f}"], w))
    print(f"ratio rlvr/TRL: step {ratio['step']:.3f} (paired per-step median {ratio['paired_median']:.3f}), "
          f"generate {ratio['generate']:.3f}, train {ratio['train']:.3f}; target <= 0.5: "
          f"{'MET' if ratio['step'] <= 0.5 else 'MISSED'}")


if __name__ == "__main__":
    main()
