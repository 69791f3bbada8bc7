"""GRPO step time and peak memory: rlvr's ``train_rl`` vs TRL's ``GRPOTrainer``, same model, data and settings, on CPU.

    PYTHONPATH=src python bench/grpo_vs_trl.py                       # 1m model, ~2-3 min on 2 busy cores
    PYTHONPATH=src python bench/grpo_vs_trl.py --size 5m --steps 12 --out bench/results/grpo_vs_trl_5m.json
    PYTHONPATH=src python bench/grpo_vs_trl.py --reward correct      # the zero-variance skip case (β = 0 only)

``bench/run.py`` calls :func:`bench` for each model size; this CLI runs one.

Both sides load the same HF folder (``build_tiny`` written once), draw from the same task list
(``generate(["mul21"], n, split="train")``; the prompt token ids are checked equal), sample ``group``
completions for each of ``prompts`` prompts per step (same temperature, top_p = 1, top_k off, same
stop ids <eos> and <|end|>, same ``max_new``), and take one optimizer step per rollout batch (μ = 1,
clip ε = 0.2, per-group std scaling, seq-mean-token-mean loss, AdamW lr 1e-7 (see LR) betas (0.9, 0.95),
grad-clip 1.0, micro-batch = the whole batch: rlvr ``micro_batch_size`` = TRL
``per_device_train_batch_size`` = prompts × group, no gradient accumulation). float32 by default;
``--rlvr-bf16`` runs rlvr's training forwards under bf16 autocast (``model.autocast_bf16: train``), and then
TRL runs in both precisions (``GRPOConfig(bf16=...)``, two TRL processes interleaved with rlvr's) and the
comparison is against its faster one (``--trl-precision``; the output says which and both times).
Defaults: 8 prompts × G = 8, 32 new tokens, β = 0.04 with the k3 estimator on both sides (TRL 1.16
multiplies its KL term by the importance ratio by default, ``use_bias_correction_kl=True``, DeepSeek-V3.2's
unbiased KL gradient: a different gradient from GRPO's k3, about 4% on the KL part in the loss check
below; it is set False here so both sides compute the same formula), so each
measured step includes the frozen reference model's forward over every row (rlvr: ``reference_logprobs``
before the update; TRL: ``ref_per_token_logps`` in ``_generate_and_score_completions``).

Reward (default ``correct+spread``): ``correct`` (rlvr: its math verifier; TRL: a plain function that
compares the last ``\\boxed{}`` with the gold answer) plus ``spread`` = crc32(completion text) / 2**32 on
both sides (``bench/_rewards.py``; rlvr runs it as a ``name: python`` reward term). The random model
never answers correctly and with 32 new tokens most samples are cut at the limit, so ``correct`` and
``length`` alone leave whole groups with zero variance; ``spread`` differs between any two different
texts, so every group carries variance and both sides forward and backward every row. The rows each
side trained are counted from its own internals (rlvr: ``train/sequences`` of its metrics; TRL: the
rows of the batch its ``_compute_loss`` received, and those with a non-zero advantage) and reported.
``--reward correct+length`` and ``--reward correct`` are the older settings.

Loss check: before timing, both sides' losses are computed on one fixed batch (prompt ids of equal
length, fixed random completion ids of several lengths, fixed advantages, reference logprobs = the
policy's own plus fixed noise so the KL term is not 0) with rlvr's ``update_minibatch`` and TRL's
``_compute_loss``; they are printed side by side and must agree (same clipped surrogate, same k3 KL,
same seq-mean-token-mean aggregation), and so must the gradients both backward passes leave.

TRL in its fastest setting for this work on CPU: generation by ``model.generate`` (the default cache;
``--trl-cache`` tries another ``cache_implementation``), no vLLM (GPU only), no ``old_per_token_logps``
pass (μ = 1 and ``steps_per_generation`` = gradient accumulation = 1, so TRL skips it),
``log_completions`` off, logging off. The reference model is a second copy on both sides
(TRL: ``ref_model``; rlvr: ``frozen_reference``).

Measurement: the two trainers run in two processes (torch threads = 2, the same OpenMP wait policy: _common.WAIT) that
take turns step by step (a semaphore baton), so load from other users of the machine hits both
alike. A step is timed from its start (rlvr: the rollout; TRL: the batch fetch) to its end (rlvr: its
metrics line is written; TRL: on_step_end, after the optimizer step). The first ``skip`` steps of each
side are warm-up and dropped, and so is one extra last step (it overlaps the other side's teardown);
the table gives medians, the ratio uses medians, and "paired" is the median of per-step ratios of
back-to-back steps. Peak RSS: each side's own process (``ru_maxrss`` / ``VmHWM``) at its end.
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
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
LR = 1e-7
"""Tiny on purpose: the compute per step does not depend on it, and a policy that barely moves keeps
completion lengths (so step costs) stationary over the run on both sides."""
REWARDS = ("correct+spread", "correct+length", "correct")


def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="1m", help="tiny model size (rlvr.models.tiny.SIZES)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts (groups) per step")
    ap.add_argument("--group", type=int, default=8, help="G: completions per prompt")
    ap.add_argument("--max-new", type=int, default=32, help="max_new_tokens / max_completion_length")
    ap.add_argument("--beta", type=float, default=0.04, help="KL coefficient (k3 estimator on both sides)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=24, help="measured steps per side (+1 run and dropped at the end)")
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps dropped")
    ap.add_argument("--reward", choices=REWARDS, default="correct+spread")
    ap.add_argument("--rlvr-micro-tokens", default="auto",
                    help="rlvr's model.micro_tokens: auto (the CPU token budget), N tokens, or none")
    ap.add_argument("--rlvr-micro", type=int, default=None,
                    help="rlvr micro_batch_size (default prompts x group, TRL's per_device_train_batch_size); "
                         "smaller cuts rlvr's activation memory, the gradient is the same")
    ap.add_argument("--rlvr-decode-threads", type=int, default=None,
                    help="rlvr sampling.decode_threads: intra-op threads while generating (default: rlvr's, auto)")
    ap.add_argument("--rlvr-bf16", nargs="?", const="train", default=False, choices=("train", "auto"),
                    help="rlvr's training forwards under bf16 autocast (model.autocast_bf16: train; generation "
                         "stays float32); `--rlvr-bf16 auto`: model.autocast_bf16: auto (bf16 where it pays: a CPU with "
                         "bf16 units, AMX or avx512_bf16: training forwards from 0.8M parameters, generation too from "
                         "3M; else float32)")
    ap.add_argument("--rlvr-bf16-decode", action="store_true",
                    help="with --rlvr-bf16: rlvr's generation in bf16 too (model.autocast_bf16: true; FastDecoder's "
                         "projections in bf16)")
    ap.add_argument("--trl-precision", choices=("fp32", "bf16", "fastest"), default=None,
                    help="TRL's precision (GRPOConfig bf16); fastest: run both as two TRL sides and compare "
                         "against the faster (default: fastest with --rlvr-bf16, else fp32)")
    ap.add_argument("--trl-cache", default=None, help="TRL GRPOConfig.cache_implementation (default: dynamic)")
    ap.add_argument("--no-loss-check", action="store_true", help="skip the fixed-batch loss comparison")
    ap.add_argument("--out", default=str(RESULTS / "grpo_vs_trl.json"))
    add_model_args(ap)
    add_trl_setting_args(ap, precision=False)
    a = ap.parse_args(argv)
    if a.skip >= a.steps:
        ap.error(f"--skip {a.skip} must be smaller than --steps {a.steps}")
    if (a.prompts * a.group) % (a.trl_micro or 1):
        ap.error(f"--trl-micro {a.trl_micro} must divide the {a.prompts * a.group} rows of a step")
    if a.trl_probe and a.trl_precision == "fastest":
        ap.error("--trl-probe runs one TRL setting: --trl-precision fp32 or bf16")
    if a.trl_precision is None:
        a.trl_precision = "fastest" if a.rlvr_bf16 else "fp32"
    return a


# ---------------------------------------------------------------- rlvr side

def rlvr_stage(a, n_tasks: int):
    """The RLStage both the timed run and the loss check use."""
    from rlvr.config.data import BuiltinArithmetic
    from rlvr.config.rl import RewardTerm

    rewards = [RewardTerm(name="correct")]
    if "length" in a.reward:
        rewards.append(RewardTerm(name="length"))
    if "spread" in a.reward:
        rewards.append(RewardTerm(name="python", function="_rewards:spread"))
    return matched_rl_stage(a, BuiltinArithmetic(families=["mul21"], n=n_tasks, split="train", seed=0), rewards,
                            lr=LR, max_steps=a.steps + 1, micro_batch_size=a.rlvr_micro or a.prompts * a.group,
                            decode_threads=getattr(a, "rlvr_decode_threads", None) or "auto")


def matched_rl_stage(a, data, rewards, lr: float, max_steps: int, micro_batch_size: int,
                     decode_threads="auto", **fields):
    """rlvr's RLStage with the settings TRL's side matches (:func:`matched_grpo_config`): ``a.prompts`` groups of
    ``a.group`` samples a step at ``a.temperature`` (top_p 1, top_k off), ``a.max_new`` new tokens, GRPO loss
    (clip 0.2, per-group std, seq-mean-token-mean), k3 KL at ``a.beta``, AdamW ``lr`` betas (0.9, 0.95) at a
    constant rate, no warmup, grad-clip 1.0, μ = 1; ``fields`` sets the rest of the stage (name, saving, ...)."""
    from rlvr.config.optim import OptimConfig
    from rlvr.config.rl import GRPOLoss, KLConfig, RLStage, SamplingConfig

    base = {"name": "rlvr", "save_every": 0, "eval_every": 0, "verifier_workers": 0}
    return RLStage(
        data=data, loss=GRPOLoss(eps=0.2, scale="group", aggregation="seq-mean-token-mean"),
        kl=KLConfig(beta=a.beta, estimator="k3"),
        sampling=SamplingConfig(group_size=a.group, temperature=a.temperature, top_p=1.0, max_new_tokens=a.max_new,
                                decode_threads=decode_threads),
        rewards=rewards, optim=OptimConfig(lr=lr, warmup_steps=0, schedule="constant", max_grad_norm=1.0),
        max_steps=max_steps, tasks_per_step=a.prompts, micro_batch_size=micro_batch_size, **{**base, **fields})


def rlvr_precision(a):
    """``model.autocast_bf16`` for rlvr's side: false, ``train`` (--rlvr-bf16) or true (and --rlvr-bf16-decode)."""
    if not a.rlvr_bf16:
        return False
    return True if a.rlvr_bf16 == "train" and getattr(a, "rlvr_bf16_decode", False) else a.rlvr_bf16


def rlvr_worker(baton, a, model_dir: str, n_tasks: int, work: str) -> dict:
    """train_rl with a hook at each step's start (rollout_step) and end (the metrics line)."""
    import rlvr.trainers.rl as rl_mod
    from rlvr.config.model import ModelConfig
    from rlvr.trainers import sources

    inner_rollout = sources.rollout_step

    def rollout_step(*args, **kw):
        baton.begin()
        return inner_rollout(*args, **kw)

    end_rlvr_steps_at_metrics_line(baton)

    sources.rollout_step = rollout_step
    stage = rlvr_stage(a, n_tasks)
    pin_threads()
    model_cfg = ModelConfig(path=model_dir, autocast_bf16=rlvr_precision(a),
                            micro_tokens=micro_tokens_arg(getattr(a, "rlvr_micro_tokens", "auto")), lora=rlvr_lora(a))
    rl_mod.train_rl(stage, model_cfg, Path(work), seed=0)  # judge: the stage's reward_judge
    recs = [json.loads(x) for x in (Path(work) / stage.name / "metrics.jsonl").read_text().splitlines()]
    recs = [r for r in recs if "time/step" in r][:-1]  # the last step overlaps the others' teardown
    n_rows = a.prompts * a.group
    return {"step": baton.steps()[:-1], "own_step": [r["time/step"] - w for r, w in zip(recs, baton.waits)],
            "generate": [r["time/generate"] for r in recs], "train": [r["time/train"] for r in recs],
            "rows_trained": [int(r.get("train/sequences", 0)) for r in recs],
            "rows_with_variance": [round(n_rows * (1 - r.get("rollout/zero_var_frac", 0.0))) for r in recs],
            "loss": [r.get("train/loss") for r in recs],
            "completion_len": [r["rollout/length_mean"] for r in recs], "interleaved": baton.interleaved,
            "rss": peak_rss_mb(), "modules": heavy_modules(), "train_bf16": model_cfg.train_bf16,
            "decode_bf16": model_cfg.decode_bf16}


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


def trl_reward_funcs(a) -> list:
    from _rewards import trl_spread

    return ([boxed_reward] + ([make_length_reward(a.max_new)] if "length" in a.reward else [])
            + ([trl_spread] if "spread" in a.reward else []))


def trl_trainer(a, model_dir: str, tasks: list[dict], work: str, callbacks=(), bf16: bool = False):
    """GRPOTrainer with the settings of the module docstring (fastest for this work on CPU)."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": t["prompt"]}], "answer": t["answer"]}
                            for t in tasks])
    tok = AutoTokenizer.from_pretrained(model_dir)
    cfg = matched_grpo_config(a, str(Path(work) / "trl"), lr=LR, max_steps=a.steps + 1, bf16=bf16,
                              micro=getattr(a, "trl_micro", None))
    return GRPOTrainer(model=model_dir, reward_funcs=trl_reward_funcs(a), args=cfg, train_dataset=ds,
                       processing_class=tok, callbacks=list(callbacks), peft_config=trl_peft(a))


def matched_grpo_config(a, output_dir: str, lr: float, max_steps: int, bf16: bool = False, micro: int | None = None,
                        seed: int = 0):
    """TRL's GRPOConfig with :func:`matched_rl_stage`'s settings: ``a.prompts`` x ``a.group`` rows an optimizer
    step cut in micro-batches of ``micro`` rows (default the whole batch; one generation per step either way,
    so no old-logprob pass), loss_type ``grpo`` with per-group scaling, k3 KL without TRL's bias correction,
    constant lr, AdamW betas (0.9, 0.95), grad-clip 1.0; precision ``bf16`` (accelerate's autocast) or float32;
    saving, logging and completion logging off."""
    from trl import GRPOConfig

    rows = a.prompts * a.group
    micro = micro or rows
    if rows % micro:
        raise ValueError(f"micro-batch {micro} does not divide the {rows} rows of a step")
    return GRPOConfig(
        output_dir=output_dir, use_cpu=True, bf16=bf16, fp16=False, report_to="none",
        save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=seed, max_steps=max_steps,
        per_device_train_batch_size=micro, gradient_accumulation_steps=rows // micro,
        num_generations=a.group, max_completion_length=a.max_new, temperature=a.temperature, top_p=1.0,
        beta=a.beta, use_bias_correction_kl=False, num_iterations=1, epsilon=0.2, loss_type="grpo",
        scale_rewards="group",
        learning_rate=lr, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0,
        optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.95, weight_decay=0.0,
        dataloader_num_workers=0, log_completions=False, cache_implementation=getattr(a, "trl_cache", None))


def trl_worker(baton, a, model_dir: str, tasks: list[dict], work: str, bf16: bool = False) -> dict:
    """GRPOTrainer.train; a step runs from its batch fetch to on_step_end (see _common.StepEnd)."""
    gen_times: list[float] = []
    lens: list[float] = []
    rows: list[int] = []
    rows_var: list[int] = []
    losses: list[float] = []

    trainer = trl_trainer(a, model_dir, tasks, work, [step_end_callback(baton)], bf16)
    hold_baton_from_batch_fetch(trainer, baton)
    inner = trainer._generate_single_turn

    def timed_generate(*args, **kw):
        t0 = time.perf_counter()
        res = inner(*args, **kw)
        gen_times.append(time.perf_counter() - t0)
        lens.append(sum(len(c) for c in res[0]) / max(1, len(res[0])))
        return res

    trainer._generate_single_turn = timed_generate
    count_trl_rows(trainer, rows, rows_var, losses)
    pin_threads()
    trainer.train()
    step = baton.steps()[:-1]  # the last step overlaps the others' teardown
    calls = a.prompts * a.group // (getattr(a, "trl_micro", None) or a.prompts * a.group)  # loss calls a step
    return {"step": step, "own_step": step, "generate": gen_times[:-1],
            "train": [s_ - g for s_, g in zip(step, gen_times)], "completion_len": lens[:-1],
            "rows_trained": per_step(rows, calls)[:-1], "rows_with_variance": per_step(rows_var, calls)[:-1],
            "loss": per_step(losses, calls)[:-1],
            "interleaved": baton.interleaved, "rss": peak_rss_mb(), "modules": heavy_modules()}


def count_trl_rows(trainer, rows: list, rows_var: list, losses: list) -> None:
    """Wrap TRL's ``_compute_loss``: each call (one micro-batch) appends the rows it forwards and backwards,
    those whose advantage is not 0, and its loss."""
    inner_loss = trainer._compute_loss

    def counted_loss(model, inputs):
        rows.append(int((inputs["completion_mask"].sum(-1) > 0).sum()))
        rows_var.append(int((inputs["advantages"] != 0).sum()))
        loss = inner_loss(model, inputs)
        losses.append(float(loss.detach()))
        return loss
    trainer._compute_loss = counted_loss


def trl_bf16_worker(baton, a, model_dir: str, tasks: list[dict], work: str) -> dict:
    """:func:`trl_worker` with ``GRPOConfig(bf16=True)`` (accelerate's bf16 autocast, fp32 weights)."""
    return trl_worker(baton, a, model_dir, tasks, work, bf16=True)


TRL_SIDES = {"fp32": ("trl", trl_worker), "bf16": ("trl_bf16", trl_bf16_worker)}
"""TRL's precisions: the side name and its worker."""


def trl_sides(precision: str) -> dict:
    """``{side: worker}`` for ``--trl-precision`` (fastest: both precisions, each its own process)."""
    keys = ("fp32", "bf16") if precision == "fastest" else (precision,)
    return dict(TRL_SIDES[k] for k in keys)


def pick_fastest(res: dict, sides: list[str], skip: int) -> tuple[str, dict]:
    """The TRL side with the smallest median step, and every TRL side's median step (s)."""
    med = {s: statistics.median(res[s]["step"][skip:]) for s in sides}
    return min(med, key=med.get), med


# ---------------------------------------------------------------- loss check

def loss_parity(a, model_dir: str, tasks, plain: list[dict], work: str, rows_per_prompt: int = 4) -> dict:
    """rlvr's and TRL's GRPO loss on one fixed batch (same ids, advantages, reference logprobs), in float32 and
    bf16 (``_common.loss_checks``)."""
    import torch

    from rlvr.data.chat import encode_prompt
    from rlvr.data.collate import TokenBatch
    from rlvr.trainers.rl import update_minibatch

    trainer = trl_trainer(a, model_dir, plain, work)
    model, tok = trainer.model, trainer.processing_class
    model.train()
    prompts = [list(encode_prompt(tok, t)) for t in tasks]
    same = [p for p in prompts if len(p) == len(prompts[0])][:2]  # equal lengths: no left padding on TRL's side
    g = torch.Generator().manual_seed(0)
    lengths = [a.max_new, a.max_new // 2, 5, a.max_new - 3][:rows_per_prompt]
    rows = [(p, torch.randint(10, tok.vocab_size, (n,), generator=g).tolist()) for p in same for n in lengths]
    adv = torch.linspace(-0.5, 1.0, len(rows)).tolist()  # not symmetric: the surrogate term counts
    with torch.no_grad():
        lp = []
        for p, c in rows:
            logits = model(torch.tensor([p + c])).logits[0, :-1].float()
            lp.append(torch.log_softmax(logits, -1).gather(-1, torch.tensor(p + c)[1:, None])[:, 0][len(p) - 1:])
    ref = [x + 0.05 * torch.randn(x.shape, generator=g) for x in lp]
    # rlvr: its update on the whole batch (on-policy, so old = the forward itself), loss before any step
    stage = rlvr_stage(a, len(tasks))
    # the sampler's logprobs = the policy's own (it sampled them): rlvr's sampler/trainer mismatch correction
    # (on by default) then weighs every row 1, as TRL's loss does
    batch = TokenBatch.from_rows([p + c for p, c in rows], [[0] * len(p) + [1] * len(c) for p, c in rows],
                                 tok.pad_token_id,
                                 old_logprobs=[[0.0] * len(p) + x.tolist() for (p, _), x in zip(rows, lp)],
                                 ref_logprobs=[[0.0] * len(p) + r.tolist() for (p, _), r in zip(rows, ref)],
                                 advantages=adv)
    ours = lambda bf16: update_minibatch(model, batch, stage, on_policy=True, bf16=bf16)["train/loss"]
    # TRL: _compute_loss on the same rows, completions right-padded
    C = max(len(c) for _, c in rows)
    pad = lambda xs, v: [x + [v] * (C - len(x)) for x in xs]
    inputs = {"prompt_ids": torch.tensor([p for p, _ in rows]), "prompt_mask": torch.ones(len(rows), len(same[0]),
                                                                                          dtype=torch.long),
              "completion_ids": torch.tensor(pad([c for _, c in rows], tok.pad_token_id)),
              "completion_mask": torch.tensor(pad([[1] * len(c) for _, c in rows], 0)),
              "advantages": torch.tensor(adv), "old_per_token_logps": None,
              "ref_per_token_logps": torch.tensor(pad([r.tolist() for r in ref], 0.0)),
              "num_items_in_batch": torch.tensor(float(sum(len(c) for _, c in rows)))}
    trainer.current_gradient_accumulation_steps = 1
    return {"rows": len(rows), "completion_lengths": lengths, "beta": a.beta,
            **loss_checks(model, ours, lambda: trainer._compute_loss(model, inputs))}


# ---------------------------------------------------------------- driver

def check_same_prompts(model_dir: str, tasks) -> None:
    """rlvr's encode_prompt and TRL's chat-template tokenisation of the task's messages (a system message
    included) must give the same prompt ids."""
    from transformers import AutoTokenizer

    from rlvr.data.chat import encode_prompt

    tok = AutoTokenizer.from_pretrained(model_dir)
    for t in tasks[:8]:
        ours = encode_prompt(tok, t)
        theirs = tok.apply_chat_template(t.policy_messages(), add_generation_prompt=True,
                                         tokenize=True, return_dict=True)["input_ids"]
        assert list(ours) == list(theirs), (t.prompt, ours, theirs)


def bench(a, progress=None) -> dict:
    """One comparison (the module docstring); returns the JSON record. ``progress(msg)`` reports phases."""
    driver_imports_transformers()  # before build_tiny: the loss check builds a TRL trainer here
    from rlvr.data.arithmetic import generate

    say = progress or (lambda msg: print(msg, flush=True))
    work = Path(tempfile.mkdtemp(prefix="bench_grpo_"))
    model_dir, n_params = bench_model(a, work)
    n_tasks = a.prompts * a.steps * 2
    tasks = generate(["mul21"], n_tasks, split="train", seed=0)
    check_same_prompts(model_dir, tasks)
    plain = [{"prompt": t.prompt, "answer": t.gold["answer"]} for t in tasks]
    info = machine()
    t_start = time.time()
    try:
        if a.trl_probe:  # one setting of the search: TRL alone
            side, worker = next(iter(trl_sides(a.trl_precision).items()))
            res = interleave({side: worker}, (a, model_dir, plain, str(work / side)), timeout=a.timeout)
            return probe_record(res[side], a.skip)
        parity = None
        if not a.no_loss_check:
            say(f"GRPO {a.size}: loss check on a fixed batch")
            parity = in_child(loss_parity, a, model_dir, tasks, plain, str(work / "parity"))
        if a.loss_check_only:
            return {"loss_check": parity, "model_params": n_params}
        say(f"GRPO {a.size}: {a.steps + 1} steps per side, interleaved")
        trl = trl_sides(a.trl_precision)
        res = interleave({"rlvr": rlvr_worker, **trl}, (a, model_dir, n_tasks, str(work / "rlvr")), timeout=a.timeout,
                         sequential=a.sequential,
                         alt_args={s: (a, model_dir, plain, str(work / s)) for s in trl})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    fastest, trl_medians = pick_fastest(res, list(trl), a.skip)  # the comparison is against TRL's faster one
    res = {"rlvr": res["rlvr"], "trl": res[fastest]}
    keys = ("step", "own_step", "generate", "train")
    summary = {s: {k: summarize(res[s][k][a.skip:]) for k in keys} for s in res}
    paired = paired_ratios(res["rlvr"]["step"][a.skip:], res["trl"]["step"][a.skip:])
    ratio = {k: summary["rlvr"][k]["median"] / summary["trl"][k]["median"] for k in keys}
    ratio["paired_median"] = statistics.median(paired)
    rows = {s: {"trained": sum(res[s]["rows_trained"][a.skip:]), "with_variance": sum(res[s]["rows_with_variance"][a.skip:]),
                "of": a.prompts * a.group * len(res[s]["rows_trained"][a.skip:])} for s in res}
    rss = {s: res[s]["rss"] for s in res}
    return {"benchmark": "grpo_vs_trl", "command": " ".join(sys.argv), "args": vars(a),
            "model_params": n_params, "machine": info, "load_avg_end": os.getloadavg(),
            "seconds_total": round(time.time() - t_start, 1), "summary": summary, "ratio_rlvr_over_trl": ratio,
            "rows": rows, "rss_mb": rss, "rss_ratio": rss["rlvr"]["peak_mb"] / rss["trl"]["peak_mb"],
            "modules": {s: res[s]["modules"] for s in res}, "loss_check": parity,
            "precision": {"rlvr": precision_name(rlvr_precision(a), res["rlvr"]["train_bf16"],
                                                         res["rlvr"]["decode_bf16"]),
                          "trl": "bf16" if fastest == "trl_bf16" else "fp32",
                          "trl_micro": a.trl_micro or a.prompts * a.group,
                          "trl_median_step_s": {("bf16" if s == "trl_bf16" else "fp32"): v
                                                for s, v in trl_medians.items()}},
            "target": 0.4, "met": ratio["step"] <= 0.4, "per_step": res}


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
    print(f"\nGRPO step time (s): {a.prompts} prompts x G={a.group}, max_new={a.max_new}, beta={a.beta}, "
          f"reward={a.reward}, model {a.size} ({out['model_params'] / 1e6:.2f}M); median of {n} steady-state "
          f"steps (first {a.skip} dropped), steps interleaved")
    w = [6, 9, 9, 9, 9, 9, 9, 12, 10]
    print(fmt_row(["side", "step", "min", "max", "generate", "train", "len", "rows trained", "peak MB"], w))
    for s in ("rlvr", "trl"):
        m, r = summary[s], out["rows"][s]
        ln = statistics.fmean(res[s]["completion_len"][a.skip:])
        print(fmt_row([s, f"{m['step']['median']:.3f}", f"{m['step']['min']:.3f}", f"{m['step']['max']:.3f}",
                       f"{m['generate']['median']:.3f}", f"{m['train']['median']:.3f}", f"{ln:.1f}",
                       f"{r['trained']}/{r['of']}", f"{out['rss_mb'][s]['peak_mb']:.0f}"], w))
    print(f"ratio rlvr/TRL: step {ratio['step']:.3f} (paired per-step median {ratio['paired_median']:.3f}), "
          f"generate {ratio['generate']:.3f}, train {ratio['train']:.3f}; target <= 0.4: "
          f"{'MET' if ratio['step'] <= 0.4 else 'MISSED'}; peak RSS ratio {out['rss_ratio']:.2f} (target <= 0.7)")
    prec = out.get("precision")
    if prec:
        tried = ", ".join(f"{k} {v:.3f} s" for k, v in prec["trl_median_step_s"].items())
        print(f"precision: rlvr {prec['rlvr']}; TRL {prec['trl']} (its faster of: {tried})")
    lc = out.get("loss_check")
    if lc:
        print(f"loss on one fixed batch ({lc['rows']} rows, beta={lc['beta']}): rlvr {lc['rlvr_loss']:.7g}  "
              f"TRL {lc['trl_loss']:.7g}  |diff| {lc['abs_diff']:.2e}; gradients |g_rlvr - g_TRL| / |g_TRL| "
              f"{lc['grad_rel_diff']:.2e}  {'agree' if lc['agree'] else 'DISAGREE'}")
        print_bf16_check(lc)


if __name__ == "__main__":
    main()
