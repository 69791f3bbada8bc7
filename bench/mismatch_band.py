"""The sampler/trainer logprob gap at the precisions rlvr runs in, and what the mismatch correction's sequence
band does with it.

Part 1 (``gap``): sample a batch of arithmetic prompts with the in-process engine (float32 or bf16 decode) and
recompute the trainer's logprobs (float32 or bf16 autocast) on the same tokens; per precision pair, the mean
|Δ logprob| a token, quantiles of the per-sequence |mean log ρ| (the geometric-mean ratio's log, which the
band tests) and the share of sequences each candidate band masks.

Part 2 (``paths``): a bf16 sampler and a float32 trainer, one batch, updates at lr 0: ``mini_batches: 1``
(on-policy) against ``mini_batches: 2`` and ``ppo_epochs: 2`` (π_old recomputed): the ``mismatch/*`` metrics and
the sequences each masks, under a band given with ``--band`` (default: the configured one), listing any row
masked on one path only and its distance to the band's edge.

    PYTHONPATH=src python bench/mismatch_band.py --model runs/quickstart/sft/final --tasks 64 --group 8
    PYTHONPATH=src python bench/mismatch_band.py --tiny 1m --band 0.999 1.001
"""

from __future__ import annotations

import argparse
import copy
import math

import torch

from rlvr import accel
from rlvr.config.optim import OptimConfig
from rlvr.config.rl import RLStage, SamplingConfig
from rlvr.data.arithmetic import generate
from rlvr.models.load import load_pretrained
from rlvr.models.tiny import build_tiny
from rlvr.models.truncation import Truncation
from rlvr.rollout.collector import collect
from rlvr.rollout.hf_engine import HFEngine
from rlvr.trainers import rl
from rlvr.trainers.common import build_optimizer
from rlvr.trainers.variants import rl_variant
from rlvr.verifiers.base import Verdict

accel.enable()  # rlvr's CPU accelerations, as `rlvr run` has them (RLVR_ACCEL=0: the plain PyTorch path)

BANDS = [(0.999, 1.001), (0.995, 1.005), (0.99, 1.01), (0.98, 1.02), (0.97, 1.03)]


def parity(tasks, comps):
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong") for c in comps]


def sampled(model, tok, st, decode_bf16: bool, seed: int):
    ro = collect(HFEngine(model, tok, bf16=decode_bf16), tok, generate(["add2", "mul31"], st.tasks_per_step,
                                                                       seed=seed),
                 parity, st.sampling, st.rewards, seed=seed)
    adv = rl_variant(st.loss).advantages(st.loss, ro.rewards, ro.valid)
    return rl.build_train_batch(ro, adv, True, False)


def row_log_rho(trainer, sampler, masks) -> list[float]:
    out = []
    for t, s, m in zip(trainer, sampler, masks):
        d = [a - b for a, b, k in zip(t, s, m) if k]
        if d:
            out.append(sum(d) / len(d))
    return out


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def gap(model, tok, st, seeds):
    print(f"{'decode':>7} {'train':>6} {'rows':>5} {'|Δ| tok':>9} {'|mlr| p50':>10} {'p95':>9} {'p99':>9} {'max':>9}  "
          + "  ".join(f"[{lo},{hi}]" for lo, hi in BANDS))
    for dec in (False, True):
        for trn in (False, True):
            lr, toks = [], []
            for seed in seeds:
                b = sampled(model, tok, st, dec, seed)
                lps = rl.forward_logprobs(model, b, st.sampling.temperature, st.micro_batch_size, trn, None,
                                          Truncation.of(st.sampling))
                lr += row_log_rho(lps, b.old_logprobs, b.loss_mask)
                toks += [abs(a - c) for t, s, m in zip(lps, b.old_logprobs, b.loss_mask)
                         for a, c, k in zip(t, s, m) if k]
            ab = [abs(x) for x in lr]
            masked = ["%5.1f%%" % (100 * sum(not (math.log(lo) <= x <= math.log(hi)) for x in lr) / len(lr))
                      for lo, hi in BANDS]
            print(f"{'bf16' if dec else 'fp32':>7} {'bf16' if trn else 'fp32':>6} {len(lr):5d} "
                  f"{sum(toks) / len(toks):9.2e} {quantile(ab, .5):10.2e} {quantile(ab, .95):9.2e} "
                  f"{quantile(ab, .99):9.2e} {max(ab):9.2e}  " + "  ".join(f"{m:>13}" for m in masked))


def paths(model, tok, st, seed, band):
    """Update the same batch (bf16 sampler) on-policy and off-policy at lr 0 with a float32 trainer; record each
    path's per-row geometric-mean log-ratios (keyed by the row's sampler logprobs) and metrics."""
    base = sampled(model, tok, st, True, seed)
    lo, hi = band
    seen: dict = {}
    orig = rl.mismatch_sums

    def spy(trainer, sampler, mask, *a):
        lr = torch.where(mask.bool(), trainer - sampler, torch.zeros_like(trainer)).sum(1) / mask.sum(1).clamp(min=1)
        for s, m, x in zip(sampler.tolist(), mask.tolist(), lr.tolist()):
            seen[tuple(round(v, 7) for v, k in zip(s, m) if k)] = x
        return orig(trainer, sampler, mask, *a)

    rl.mismatch_sums = spy
    out = {}
    try:
        for name, kw in (("mini_batches 1", {}), ("mini_batches 2", {"mini_batches": 2}),
                         ("ppo_epochs 2", {"ppo_epochs": 2})):
            s = st.model_copy(update={**kw, "optim": OptimConfig(lr=0.0, warmup_steps=0),
                                      "correction": st.correction.model_copy(update={"seq_low": lo, "seq_high": hi})})
            batch = copy.deepcopy(base)
            seen.clear()
            opt, sched = build_optimizer(model, s.optim, 10)
            met = rl.policy_update(model, opt, sched, s, batch, False, seed=seed, step=0)
            out[name] = (met, dict(seen))
    finally:
        rl.mismatch_sums = orig
    ref_rows = out["mini_batches 1"][1]
    masked = lambda x: not (math.log(lo) <= x <= math.log(hi))  # noqa: E731
    print(f"band [{lo}, {hi}], {len(ref_rows)} distinct rows with tokens (identical samples counted once), "
          "bf16 sampler, float32 trainer, lr 0")
    keys = ["mismatch/logprob_diff_mean", "mismatch/logprob_diff_max", "mismatch/tis_weight_mean",
            "mismatch/seq_masked_frac"]
    for name, (met, rows) in out.items():
        diff = [k for k in ref_rows if masked(ref_rows[k]) != masked(rows[k])]
        edge = max((abs(rows[k] - ref_rows[k]) for k in ref_rows), default=0.0)
        print(f"  {name:15s} " + "  ".join(f"{k.split('/')[1]} {met[k]:.4g}" for k in keys)
              + f"  masked rows {sum(masked(x) for x in rows.values())}, differing from mini_batches 1: {len(diff)}"
              + f" (max |Δ mean log ρ| {edge:.2e})")
        for k in diff:
            d = min(abs(ref_rows[k] - math.log(lo)), abs(ref_rows[k] - math.log(hi)))
            print(f"    row masked on one path only: mean log ρ {ref_rows[k]:.3e} vs {rows[k]:.3e}, "
                  f"{d:.2e} from the band's edge")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="an HF checkpoint folder (default: a from-scratch tiny model)")
    ap.add_argument("--tiny", default="1m", help="tiny model size when --model is not given")
    ap.add_argument("--tasks", type=int, default=32)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--band", type=float, nargs=2, default=None)
    ap.add_argument("--only", choices=["gap", "paths"], default=None)
    a = ap.parse_args()
    model, tok = load_pretrained(a.model) if a.model else build_tiny(size=a.tiny, seed=0)
    model.eval()
    st = RLStage(sampling=SamplingConfig(group_size=a.group, max_new_tokens=a.max_new_tokens, top_p=a.top_p),
                 tasks_per_step=a.tasks, micro_batch_size=64)
    if a.only in (None, "gap"):
        gap(model, tok, st, a.seeds)
    if a.only in (None, "paths"):
        band = tuple(a.band) if a.band else (st.correction.seq_low, st.correction.seq_high)
        for seed in a.seeds:
            paths(model, tok, st, seed, band)


if __name__ == "__main__":
    main()
