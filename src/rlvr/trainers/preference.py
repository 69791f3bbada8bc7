"""Offline preference optimisation: DPO, IPO, SimPO, KTO, ORPO, CPO (+ Uni-DPO / RGPO pair weights).

Reads top to bottom: setup -> pairs (built by sampling the policy and judging with the verifier, or
read from a file) -> tokenise -> reference log-probabilities computed ONCE and cached on disk ->
steps (seeded data order; chosen and rejected in one concatenated forward; exact accumulation) ->
log (rewards/*, pathologies, held-out pair accuracy) -> checkpoint.

The reference: the policy *before the first step* is the reference, so its log-probabilities are
computed with the policy itself before training starts (no second model copy); under LoRA they are
computed with the adapters disabled (the base). Reference-free losses (simpo, orpo, cpo) load no
reference either: the same one pass gives the "start" logprobs that the likelihood-displacement monitor
compares against. A resumed run reads the cache back (``reference_logprobs.pt``), so resume is exact.

Pathologies: ``pathology/likelihood_displacement`` is 1 when the chosen *and* the rejected
log-probabilities of the step's pairs both fell below their start by more than ``displacement_tol``;
``pathology/length_bias`` is 1 when (policy sample length / chosen length) on a fixed probe set rose
by more than ``length_bias_tol`` since the start.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from rlvr import hooks
from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.preference import PreferenceStage
from rlvr.console import phase, say
from rlvr.data.chat import encode_completion, encode_prompt, stop_token_ids
from rlvr.data.collate import micro_token_budget, plan_micro_batches, split_overhead
from rlvr.data.order import data_order
from rlvr.data.preference import as_pairs, as_unpaired, encode_pair, encode_unpaired, fit_length
from rlvr.errors import ConfigError
from rlvr.losses.preference import kto, kto_reference_point, rgpo_weights, weighted_mean
from rlvr.models.load import is_peft, load_model_and_tokenizer
from rlvr.models.logprobs import cached_sequence_logprobs, sequence_logprobs
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.pairs import stage_pairs
from rlvr.trainers.common import (
    StageResult,
    accumulate,
    build_optimizer,
    close_stage,
    find_checkpoint,
    load_policy,
    log_step,
    open_stage,
    optimizer_step,
    reference_model,
)
from rlvr.trainers.variants import check_preference_combination, preference_variant, weighting
from rlvr.verifiers.judge import default_judge

CACHE_FILE = "reference_logprobs.pt"


def pair_logprobs(model, chosen, rejected, pad_id: int, bf16: bool = False):
    """Chosen and rejected of m pairs in ONE concatenated forward -> (pc, pr, lc, lr), each [m]."""
    s, n = sequence_logprobs(model, list(chosen) + list(rejected), pad_id, bf16)
    m = len(chosen)
    return s[:m], s[m:], n[:m], n[m:]


# ------------------------------------------------------------------------------------------ updates

@dataclass
class PairData:
    """Training rows for the paired losses; every tensor is indexed by pair."""

    chosen: list[tuple[list[int], list[int]]]     # (ids, loss_mask)
    rejected: list[tuple[list[int], list[int]]]
    ref_logprobs: torch.Tensor   # [N, 2] summed logprobs (chosen, rejected) of the policy before training
    margin: torch.Tensor         # [N] quality margin for Uni-DPO
    chosen_score: torch.Tensor   # [N]
    weight: torch.Tensor         # [N] fixed per-pair weight (RGPO), 1 otherwise
    smoothing: torch.Tensor      # [N] per-pair label smoothing (RGPO), 0 otherwise

    def __len__(self) -> int:
        return len(self.chosen)


@dataclass
class UnpairedData:
    """Training rows for KTO: the examples and their mismatched KL rows (prompt i, completion of j)."""

    rows: list[tuple[list[int], list[int]]]
    kl_rows: list[tuple[list[int], list[int]]]
    desirable: torch.Tensor      # [N] bool
    ref_logprobs: torch.Tensor      # [N] reference summed logprobs
    kl_ref_logprobs: torch.Tensor   # [N] reference summed logprobs of the KL rows

    def __len__(self) -> int:
        return len(self.rows)


def rgpo_tables(votes: list[list[int] | None]):
    """RGPO weights, smoothing and swaps for a whole dataset (EM over all pairs at once)."""
    width = max((len(v) for v in votes if v), default=1)
    table = torch.tensor([(v or [1]) + [0] * (width - len(v or [1])) for v in votes], dtype=torch.float32)
    return rgpo_weights(table)


def pair_micro_batches(model, data: PairData, idx: list[int], micro: int,
                       micro_tokens: int | str | None = "auto") -> list[list[int]]:
    """``idx`` cut by :func:`plan_micro_batches` (at most ``micro`` pairs and the device's token budget):
    chosen and rejected share one forward, so a pair weighs twice its longer side in padded tokens."""
    lengths = [2 * max(len(data.chosen[i][0]), len(data.rejected[i][0])) for i in idx]
    plan = plan_micro_batches(lengths, micro, split_overhead(model, hooks.packed_forward(model)),
                              micro_token_budget(model, micro_tokens))
    return [[idx[k] for k in m] for m in plan]


def paired_step(model, data: PairData, idx: list[int], stage, pad_id: int, bf16: bool,
                micro_tokens: int | str | None = "auto") -> dict:
    """Forward/backward one optimizer step's pairs in micro-batches (each divided by the step's pair count;
    ``micro_tokens``: ``model.micro_tokens``); returns step-mean metrics."""
    micros = pair_micro_batches(model, data, idx, stage.micro_batch_size, micro_tokens)
    total = len(idx)
    variant, wt = preference_variant(stage.loss), weighting(stage.weighting)

    def forward(mb):
        pc, pr, lc, lr = pair_logprobs(model, [data.chosen[i] for i in mb], [data.rejected[i] for i in mb],
                                       pad_id, bf16)
        dev = pc.device
        rc, rr = data.ref_logprobs[mb, 0].to(dev), data.ref_logprobs[mb, 1].to(dev)
        per_pair, met = variant.pair_loss(stage.loss, pc, pr, rc, rr, lc, lr, data.smoothing[mb].to(dev))
        w = wt.weights(stage.weighting, pc, pr, lc, lr, data.margin[mb].to(dev), data.weight[mb].to(dev))
        loss = weighted_mean(per_pair, w, denominator=total)
        extra = wt.extra_loss(stage.weighting, pc, rc, data.chosen_score[mb].to(dev)) if wt.extra_loss else None
        if extra is not None:
            loss = loss + extra.sum() / total
        with torch.no_grad():
            met = {**met, "weights/mean": float(w.mean()), "pathology/chosen_logp_delta": float((pc - rc).mean()),
                   "pathology/rejected_logp_delta": float((pr - rr).mean()),
                   "length/chosen_tokens": float(lc.float().mean()), "length/rejected_tokens": float(lr.float().mean())}
        return loss, met
    return accumulate(micros, forward, total)


def kto_step(model, data: UnpairedData, idx: list[int], stage, pad_id: int, bf16: bool,
             micro_tokens: int | str | None = "auto") -> dict:
    """KTO over one step's examples: z0 from the step's mismatched rows (no grad), then micro-batches of
    ``micro_batch_size`` examples (``micro_tokens`` is not read: the same signature as :func:`paired_step`)."""
    micro = stage.micro_batch_size
    with torch.no_grad():
        kl_pol = torch.cat([sequence_logprobs(model, [data.kl_rows[i] for i in idx[s:s + micro]], pad_id, bf16)[0]
                            for s in range(0, len(idx), micro)])
    z0 = kto_reference_point(kl_pol, data.kl_ref_logprobs[idx].to(kl_pol.device))
    cfg = stage.loss
    order = sorted(idx, key=lambda i: len(data.rows[i][0]))

    def forward(mb):
        lp, _ = sequence_logprobs(model, [data.rows[i] for i in mb], pad_id, bf16)
        ref, d = data.ref_logprobs[mb].to(lp.device), data.desirable[mb].to(lp.device)
        per, met = kto(lp, ref, d, z0, cfg.beta, cfg.lambda_d, cfg.lambda_u)
        met = dict(met)
        delta = lp.detach() - ref
        if bool(d.any()):
            met["pathology/chosen_logp_delta"] = float(delta[d].mean())
        if bool((~d).any()):
            met["pathology/rejected_logp_delta"] = float(delta[~d].mean())
        return per.sum() / len(idx), met
    return accumulate([order[s:s + micro] for s in range(0, len(order), micro)], forward, len(idx))


@torch.no_grad()
def pair_eval(model, loss_cfg, chosen, rejected, ref_logprobs: torch.Tensor, pad_id: int, micro: int,
              bf16: bool = False) -> dict:
    """Held-out pair metrics: the loss's implicit-reward accuracy and margin, raw logp accuracy, drift."""
    if not chosen:
        return {}
    pcs, prs, lcs, lrs = [], [], [], []
    for s in range(0, len(chosen), micro):
        pc, pr, lc, lr = pair_logprobs(model, chosen[s:s + micro], rejected[s:s + micro], pad_id, bf16)
        pcs.append(pc), prs.append(pr), lcs.append(lc), lrs.append(lr)
    pc, pr, lc, lr = (torch.cat(x) for x in (pcs, prs, lcs, lrs))
    rc, rr = ref_logprobs[:, 0].to(pc.device), ref_logprobs[:, 1].to(pc.device)
    per, met = preference_variant(loss_cfg).pair_loss(loss_cfg, pc, pr, rc, rr, lc, lr, torch.zeros_like(pc))
    return {"heldout/accuracy": met["rewards/accuracy"], "heldout/margin": met["rewards/margin"],
            "heldout/loss": float(per.mean()), "heldout/logp_accuracy": float((pc > pr).float().mean()),
            "heldout/chosen_logp_delta": float((pc - rc).mean()),
            "heldout/rejected_logp_delta": float((pr - rr).mean()), "heldout/pairs": len(chosen)}


# --------------------------------------------------------------------------------------------- data

def encode_pairs(tok, pairs, max_length: int, dataset_weights: bool = False):
    """Tokenised pairs + per-pair tables (``dataset_weights``: RGPO's reliability weights from the votes of
    the whole dataset, which may swap a pair whose votes contradict its label)."""
    n = len(pairs)
    weight, smoothing = torch.ones(n), torch.zeros(n)
    if dataset_weights and n:
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
                   fresh_reference=None, micro_tokens: int | str | None = "auto") -> str:
    """Compute the reference (= start) logprobs once (``micro_tokens``: ``model.micro_tokens``), or read them
    back from ``out/CACHE_FILE``.

    ``fresh_reference`` is given on resume only (a fresh run never trusts an old cache): it loads the
    stage's initial model. Returns where the logprobs came from: ``cache`` (resumed, cache matches the
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
            _assign(data, held, saved["logprobs"])
            return "cache"
    source, policy = "policy", model
    if fresh_reference is not None:
        source, policy = "reload", fresh_reference()
    lora = is_peft(policy)
    with reference_model(policy, None if lora else policy) as ref:
        logprobs = [cached_sequence_logprobs(ref, g, pad_id, micro, bf16, micro_tokens) for g in groups]
    if lora:
        source = "base"
    _assign(data, held, logprobs)
    torch.save({"fingerprint": fp, "logprobs": logprobs}, path)
    return source


def _assign(data, held, logprobs) -> None:
    if isinstance(data, PairData):
        data.ref_logprobs = torch.stack([logprobs[0], logprobs[1]], dim=1)
    else:
        data.ref_logprobs, data.kl_ref_logprobs = logprobs[0], logprobs[1]
    if held is not None:
        held.ref_logprobs = torch.stack([logprobs[2], logprobs[3]], dim=1)


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
    """Add ``pathology/likelihood_displacement``: chosen and rejected logprobs both fell by more than tol."""
    dc, dr = rec.get("pathology/chosen_logp_delta"), rec.get("pathology/rejected_logp_delta")
    if dc is not None and dr is not None:
        rec["pathology/likelihood_displacement"] = int(dc < -tol and dr < -tol)


# ------------------------------------------------------------------------------------------- trainer

def check_stage(stage: PreferenceStage) -> None:
    if stage.batch_size < 1 or stage.micro_batch_size < 1:
        raise ConfigError(f"stage {stage.name!r}: batch_size and micro_batch_size must be >= 1")
    why = check_preference_combination(stage)
    if why:
        raise ConfigError(f"stage {stage.name!r}: {why}")


def prepare_data(stage, model, tok, judge, out: Path, seed: int, resumed: bool):
    """Records -> tokenised training data and held-out pairs, plus the probe and pair stats."""
    train_recs, held_recs, stats = stage_pairs(stage.pairs, model, tok, judge, out, seed, reuse=resumed)
    if preference_variant(stage.loss).unpaired:
        data = encode_kto(tok, train_recs, stage.max_length, seed)
    else:
        data = encode_pairs(tok, as_pairs(train_recs, f"loss {stage.loss.type}"), stage.max_length,
                            weighting(stage.weighting).dataset_level)
    held_pairs = [r for r in held_recs if hasattr(r, "chosen")]
    held = encode_pairs(tok, held_pairs, stage.max_length) if held_pairs else None
    max_new = getattr(stage.pairs, "max_new_tokens", 64)
    probe = LengthProbe(tok, train_recs, stage.probe_prompts, max_new, seed)
    return data, held, probe, stats


def pairs_line(stats: dict) -> str:
    """The console line of a stage's pairs: how many, from how many tasks, at what pass rate, in what time."""
    line = f"{stats.get('pairs_train', 0)} training pairs, {stats.get('pairs_heldout', 0)} held-out"
    if "tasks" in stats:
        line += (f", built from {stats['tasks']} tasks (sample pass rate {stats.get('pass_rate', 0.0):.1%}) "
                 f"in {stats.get('seconds', 0.0):.0f}s")
    elif "source" in stats:
        line += f", read from {stats['source']}"
    return line


def total_steps(stage: PreferenceStage, n: int) -> int:
    per_epoch = math.ceil(n / stage.batch_size)
    return stage.max_steps if stage.max_steps is not None else max(1, stage.epochs * per_epoch)


def monitor(model, stage, held, probe, tok, bf16: bool) -> dict:
    rec = pair_eval(model, stage.loss, held.chosen, held.rejected, held.ref_logprobs, tok.pad_token_id,
                    stage.micro_batch_size, bf16) if held is not None else {}
    rec.update(probe.run(model, stage.length_bias_tol))
    return rec


def train_preference(stage: PreferenceStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
                     init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
                     judge=None, crash_at_step: int | None = None) -> StageResult:
    """Run a preference stage; returns where its final checkpoint is."""
    check_stage(stage)
    out, model, tok = load_policy(run_dir, stage.name, model_cfg, init_path, seed)
    bf16 = model_cfg.train_bf16
    judge = judge or default_judge(0)
    ckpt = find_checkpoint(out, resume)
    t_prep = time.perf_counter()  # pair building and the reference pass: training work before the first step
    data, held, probe, pair_stats = prepare_data(stage, model, tok, judge, out, seed, resumed=ckpt is not None)
    say(f"{stage.name}: {pairs_line(pair_stats)}")
    fresh = (lambda: load_model_and_tokenizer(model_cfg, init_path)[0]) if ckpt is not None else None
    with phase("reference log-probabilities of the training data"):
        ref_source = fill_reference(model, data, held, out, stage.micro_batch_size, tok.pad_token_id, bf16, fresh,
                                    model_cfg.micro_tokens)
    prep_s = time.perf_counter() - t_prep
    n_steps = total_steps(stage, len(data))
    opt, sched = build_optimizer(model, stage.optim, n_steps)
    variant = preference_variant(stage.loss)
    start = {"reference": ref_source}
    if ckpt is None:
        start.update({"reference_model": variant.needs_reference, "train_rows": len(data),
                      **{f"pairs/{k}": v for k, v in pair_stats.items() if isinstance(v, (int, float, str))},
                      **monitor(model, stage, held, probe, tok, bf16)})
    run = open_stage(stage, out, model, tok, opt, sched, n_steps, checkpoint=ckpt, eval_cfg=eval_cfg, judge=judge,
                     health=stage.health, start=start, crash_at_step=crash_at_step, label=stage.loss.type)
    if ckpt is not None:
        probe.start_ratio = run.state.get("probe_start")
        prep_s = run.state.get("prep_s", prep_s)  # the first run's, not the resumed one's reload
    step_fn = kto_step if variant.unpaired else paired_step
    while not run.done():
        idx = data_order(len(data), seed, run.step, min(stage.batch_size, len(data)))
        rec = step_fn(model, data, idx, stage, tok.pad_token_id, bf16, model_cfg.micro_tokens)
        rec["train/grad_norm"] = optimizer_step(model, opt, sched, stage.optim.max_grad_norm, rec.get("train/loss"))
        rec["train/epoch"] = (run.step + 1) * stage.batch_size / len(data)
        displacement_flag(rec, stage.displacement_tol)
        if (stage.monitor_every and (run.step + 1) % stage.monitor_every == 0) or run.step + 1 == n_steps:
            rec.update(monitor(model, stage, held, probe, tok, bf16))
        log_step(run, rec, {"probe_start": probe.start_ratio, "prep_s": prep_s}, ids=[f"row {i}" for i in idx],
                 info=f"loss {rec.get('train/loss', float('nan')):.3f} acc {rec.get('rewards/accuracy', float('nan')):.2f}")
    extra = {"pairs": pair_stats, "reference": ref_source, "prep_seconds": prep_s,
             **{k: v for k, v in run.last.items() if k.startswith(("heldout/", "pathology/", "length/"))}}
    return close_stage(run, extra=extra)
