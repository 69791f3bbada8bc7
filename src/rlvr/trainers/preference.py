"""Offline preference optimisation: DPO, IPO, SimPO, KTO, ORPO, CPO (+ Uni-DPO / RGPO pair weights).

Reads top to bottom: setup -> pairs (built by sampling the policy and judging with the verifier, or
read from a file) -> tokenise -> reference log-probabilities computed ONCE and cached on disk ->
steps (seeded data order; chosen and rejected in one concatenated forward; exact accumulation) ->
log (rewards/*, pathologies, held-out pair accuracy) -> checkpoint.

The reference: the policy *before the first step* is the reference, so its log-probabilities are
computed with the policy itself before training starts (no second model copy); under LoRA they are
computed with the adapters disabled (the base). Reference-free losses (simpo, orpo, cpo) load no
reference either: the same one pass gives the "start" logps that the likelihood-displacement monitor
compares against. A resumed run reads the cache back (``reference_logps.pt``), so resume is exact.

Pathologies (seed 004): ``pathology/likelihood_displacement`` is 1 when the chosen *and* the rejected
log-probabilities of the step's pairs both fell below their start by more than ``displacement_tol``;
``pathology/length_bias`` is 1 when (policy sample length / chosen length) on a fixed probe set rose
by more than ``length_bias_tol`` since the start.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.preference import PreferenceStage
from rlvr.data.chat import encode_completion, encode_prompt, stop_token_ids
from rlvr.data.pair_builder import stage_pairs
from rlvr.data.preference import as_pairs, as_unpaired, encode_pair, encode_unpaired, fit_length
from rlvr.errors import ConfigError
from rlvr.models.checkpoint import (
    latest_checkpoint,
    load_training_state,
    save_pretrained_atomic,
)
from rlvr.models.load import is_peft, load_model_and_tokenizer
from rlvr.monitoring.evaluate import default_judge
from rlvr.monitoring.metrics import MetricsWriter, truncate_metrics_after
from rlvr.monitoring.progress import make_progress
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.trainers.common import build_optimizer, end_of_step, optimizer_step, start_policy_stage
from rlvr.trainers.eval_hook import EvalHook
from rlvr.trainers.preference_step import (
    PairData,
    UnpairedData,
    cache_logps,
    kto_step,
    needs_reference,
    pair_eval,
    paired_step,
    rgpo_tables,
)
from rlvr.trainers.sft import StageResult, data_order

CACHE_FILE = "reference_logps.pt"


# --------------------------------------------------------------------------------------------- data

def encode_pairs(tok, pairs, max_length: int, weighting: str):
    """Tokenised pairs + per-pair tables (RGPO may swap a pair whose votes contradict its label)."""
    n = len(pairs)
    weight, smoothing = torch.ones(n), torch.zeros(n)
    if weighting == "rgpo" and n:
        rg = rgpo_tables([p.votes for p in pairs])
        weight, smoothing = rg.weights.float(), rg.label_smoothing.float()
        pairs = [replace(p, chosen=p.rejected, rejected=p.chosen) if bool(rg.swap[i]) else p
                 for i, p in enumerate(pairs)]
    encs = [encode_pair(tok, p, max_length) for p in pairs]
    return PairData([(e.chosen_ids, e.chosen_mask) for e in encs], [(e.rejected_ids, e.rejected_mask) for e in encs],
                    torch.zeros(n, 2), torch.tensor([p.margin for p in pairs], dtype=torch.float32),
                    torch.tensor([1.0 if p.chosen_score is None else p.chosen_score for p in pairs]),
                    weight, smoothing)


def encode_kto(tok, records, max_length: int, seed: int) -> UnpairedData:
    """KTO rows; example i's KL row is its prompt with the completion of the next example in a seeded cycle."""
    exs = as_unpaired(records)
    rows = [encode_unpaired(tok, e, max_length) for e in exs]
    perm = np.random.default_rng([seed, 5]).permutation(len(exs)).tolist()
    partner = {perm[k]: perm[(k + 1) % len(perm)] for k in range(len(perm))}
    kl_rows = []
    for i, e in enumerate(exs):
        p, (c,) = fit_length(encode_prompt(tok, e.task()), [encode_completion(tok, exs[partner[i]].completion)],
                             max_length)
        kl_rows.append((p + c, [0] * len(p) + [1] * len(c)))
    n = len(exs)
    return UnpairedData(rows, kl_rows, torch.tensor([e.desirable for e in exs]), torch.zeros(n), torch.zeros(n))


def fingerprint(*row_lists) -> str:
    h = hashlib.blake2b(digest_size=16)
    for rows in row_lists:
        for ids, _ in rows:
            h.update(np.asarray(ids, dtype=np.int64).tobytes())
            h.update(b"|")
    return h.hexdigest()


def fill_reference(model, data, held: PairData | None, out: Path, micro: int, pad_id: int, bf16: bool,
                   fresh_reference=None) -> str:
    """Compute the reference (= start) logps once, or read them back from ``out/CACHE_FILE``.

    ``fresh_reference`` is given on resume only (a fresh run never trusts an old cache): it loads the
    stage's initial model. Returns where the logps came from: ``cache`` (resumed, cache matches the
    data), ``policy`` (the policy before its first step), ``base`` (LoRA: adapters disabled) or
    ``reload`` (resumed without a usable cache: the initial model loaded afresh).
    """
    groups = ([data.chosen, data.rejected] if isinstance(data, PairData) else [data.rows, data.kl_rows])
    groups += [held.chosen, held.rejected] if held is not None else []
    fp = fingerprint(*groups)
    path = out / CACHE_FILE
    if fresh_reference is not None and path.exists():
        saved = torch.load(path, weights_only=False)
        if saved.get("fingerprint") == fp:
            _assign(data, held, saved["logps"])
            return "cache"
    source, ref = "policy", model
    if fresh_reference is not None:
        source, ref = "reload", fresh_reference()
    was = ref.training
    ref.eval()
    try:
        if is_peft(ref):
            source = "base"
            with ref.disable_adapter():
                logps = [cache_logps(ref, g, pad_id, micro, bf16) for g in groups]
        else:
            logps = [cache_logps(ref, g, pad_id, micro, bf16) for g in groups]
    finally:
        ref.train(was)
    _assign(data, held, logps)
    torch.save({"fingerprint": fp, "logps": logps}, path)
    return source


def _assign(data, held, logps) -> None:
    if isinstance(data, PairData):
        data.start = torch.stack([logps[0], logps[1]], dim=1)
    else:
        data.start, data.kl_start = logps[0], logps[1]
    if held is not None:
        held.start = torch.stack([logps[2], logps[3]], dim=1)


# ------------------------------------------------------------------------------------------ monitors

class LengthProbe:
    """Samples the policy on a fixed set of prompts and compares its length with the chosen responses'."""

    def __init__(self, tok, records, n_prompts: int, max_new_tokens: int, seed: int):
        good: dict[str, list[int]] = {}
        tasks = {}
        for r in records:
            comp = getattr(r, "chosen", None)
            if comp is None:
                comp = r.completion if r.desirable else None
            if comp is None:
                continue
            key = r.prompt if r.messages is None else repr(r.messages)
            if key not in good and len(good) >= n_prompts:
                continue
            tasks.setdefault(key, r.task())
            good.setdefault(key, []).append(len(encode_completion(tok, comp)))
        self.tok = tok
        self.prompts = [encode_prompt(tok, t) for t in tasks.values()]
        self.chosen_len = float(np.mean([x for v in good.values() for x in v])) if good else 0.0
        self.params = SamplingParams(n=2, temperature=1.0, max_new_tokens=max_new_tokens,
                                     stop_token_ids=stop_token_ids(tok), seed=seed * 7919 + 3)
        self.start_ratio: float | None = None

    def run(self, model, tol: float) -> dict:
        if not self.prompts or self.chosen_len <= 0:
            return {}
        gen = HFEngine(model, self.tok).generate(self.prompts, self.params)
        length = float(np.mean([len(c) for c in gen.completion_ids]))
        ratio = length / self.chosen_len
        if self.start_ratio is None:
            self.start_ratio = ratio
        return {"length/policy_mean": length, "length/chosen_mean": self.chosen_len, "length/ratio": ratio,
                "length/ratio_start": self.start_ratio,
                "pathology/length_bias": int(ratio - self.start_ratio > tol)}


def displacement_flag(rec: dict, tol: float) -> None:
    """Add ``pathology/likelihood_displacement``: chosen and rejected logps both fell by more than tol."""
    dc, dr = rec.get("pathology/chosen_logp_delta"), rec.get("pathology/rejected_logp_delta")
    if dc is not None and dr is not None:
        rec["pathology/likelihood_displacement"] = int(dc < -tol and dr < -tol)


# ------------------------------------------------------------------------------------------- trainer

def check_stage(stage: PreferenceStage) -> None:
    if stage.batch_size < 1 or stage.micro_batch_size < 1:
        raise ConfigError(f"stage {stage.name!r}: batch_size and micro_batch_size must be >= 1")
    if stage.loss.type == "kto" and stage.weighting.type != "none":
        raise ConfigError(f"stage {stage.name!r}: weighting {stage.weighting.type!r} weights pairs, but loss "
                          "kto trains on unpaired examples; use weighting: {type: none}")


def prepare_data(stage, model, tok, judge, out: Path, seed: int, resumed: bool):
    """Records -> tokenised training data and held-out pairs, plus the probe and pair stats."""
    train_recs, held_recs, stats = stage_pairs(stage.pairs, model, tok, judge, out, seed, reuse=resumed)
    if stage.loss.type == "kto":
        data = encode_kto(tok, train_recs, stage.max_length, seed)
    else:
        data = encode_pairs(tok, as_pairs(train_recs, f"loss {stage.loss.type}"), stage.max_length,
                            stage.weighting.type)
    held_pairs = [r for r in held_recs if hasattr(r, "chosen")]
    held = encode_pairs(tok, held_pairs, stage.max_length, "none") if held_pairs else None
    max_new = getattr(stage.pairs, "max_new_tokens", 64)
    probe = LengthProbe(tok, train_recs, stage.probe_prompts, max_new, seed)
    return data, held, probe, stats


def total_steps(stage: PreferenceStage, n: int) -> int:
    per_epoch = math.ceil(n / stage.batch_size)
    return stage.max_steps if stage.max_steps is not None else max(1, stage.epochs * per_epoch)


def monitor(model, stage, held, probe, tok, bf16: bool) -> dict:
    rec = pair_eval(model, stage.loss, held.chosen, held.rejected, held.start, tok.pad_token_id,
                    stage.micro_batch_size, bf16) if held is not None else {}
    rec.update(probe.run(model, stage.length_bias_tol))
    return rec


def train_preference(stage: PreferenceStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
                     init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
                     judge=None, crash_at_step: int | None = None) -> StageResult:
    """Run a preference stage; returns where its final checkpoint is."""
    check_stage(stage)
    out, model, tok = start_policy_stage(run_dir, stage.name, model_cfg, init_path, seed)
    bf16 = model_cfg.autocast_bf16
    judge = judge or default_judge(0)
    ckpt = latest_checkpoint(out / "checkpoints") if resume else None
    data, held, probe, pair_stats = prepare_data(stage, model, tok, judge, out, seed, resumed=ckpt is not None)
    fresh = (lambda: load_model_and_tokenizer(model_cfg, init_path)[0]) if ckpt is not None else None
    ref_source = fill_reference(model, data, held, out, stage.micro_batch_size, tok.pad_token_id, bf16, fresh)
    n_steps = total_steps(stage, len(data))
    opt, sched = build_optimizer(model, stage.optim, n_steps)
    step, train_s = 0, 0.0
    if ckpt is not None:
        st = load_training_state(ckpt, model, opt, sched)
        step, train_s, probe.start_ratio = st["step"], st.get("train_seconds", 0.0), st.get("probe_start")
        truncate_metrics_after(out / "metrics.jsonl", step)
    writer = MetricsWriter(out / "metrics.jsonl")
    if ckpt is not None:
        writer.log(step, {"event": "resume", "checkpoint": str(ckpt), "reference": ref_source})
    else:
        writer.log(0, {"event": "start", "reference": ref_source,
                       "reference_model": needs_reference(stage.loss.type), "train_rows": len(data),
                       **{f"pairs/{k}": v for k, v in pair_stats.items() if isinstance(v, (int, float, str))},
                       **monitor(model, stage, held, probe, tok, bf16)})
    evaler = EvalHook(eval_cfg, tok, judge, stage.eval_every) if eval_cfg is not None and stage.eval_every else None
    if evaler is not None and step == 0:
        writer.log(0, evaler.run(model, 0))
    step_fn = kto_step if stage.loss.type == "kto" else paired_step
    last: dict = {}
    with make_progress() as prog:
        bar = prog.add_task(f"{stage.loss.type}:{stage.name}", total=n_steps, completed=step, info="")
        while step < n_steps:
            t0 = time.perf_counter()
            idx = data_order(len(data), seed, step, min(stage.batch_size, len(data)))
            rec = step_fn(model, data, idx, stage, tok.pad_token_id, bf16)
            rec["train/grad_norm"] = optimizer_step(model, opt, sched, stage.optim.max_grad_norm)
            step += 1
            dt = time.perf_counter() - t0
            train_s += dt
            rec.update({"train/lr": sched.get_last_lr()[0], "perf/train_minutes": train_s / 60,
                        "time/step": dt, "train/epoch": step * stage.batch_size / len(data)})
            displacement_flag(rec, stage.displacement_tol)
            if (stage.monitor_every and step % stage.monitor_every == 0) or step == n_steps:
                rec.update(monitor(model, stage, held, probe, tok, bf16))
            if evaler is not None and evaler.due(step, n_steps):
                rec.update(evaler.run(model, step))
            writer.log(step, rec)
            last.update(rec)
            prog.update(bar, advance=1, info=f"loss {rec.get('train/loss', float('nan')):.3f} "
                                              f"acc {rec.get('rewards/accuracy', float('nan')):.2f}")
            end_of_step(out, stage, step, n_steps, model, tok, opt, sched,
                        {"train_seconds": train_s, "probe_start": probe.start_ratio}, crash_at_step)
    writer.close()
    final = save_pretrained_atomic(model, tok, out / "final")
    extra = {"pairs": pair_stats, "reference": ref_source,
             **{k: v for k, v in last.items() if k.startswith(("heldout/", "pathology/", "length/"))}}
    return StageResult(stage.name, str(final), str(out / "metrics.jsonl"), step, train_s, extra)
