"""CPU time of rlvr's update on the packed training forward vs the HF forward, same process, alternating.

    PYTHONPATH=src python bench/packed_forward_ab.py --size 1m          # ~1 min on 1 busy core
    PYTHONPATH=src python bench/packed_forward_ab.py --size 5m --rounds 6
    PYTHONPATH=src python bench/packed_forward_ab.py --size 1m --budgets 0,256,512,1024   # token budgets

GRPO: one update of ``rl.update_minibatch`` with β = 0.04 on 8 prompts (``mul21`` train tasks) × G = 8
completions of 4-32 random tokens (seeded), preceded by the frozen reference's logprobs
(``rl.reference_logprobs``): reference forward + training forward + backward, micro-batch = 64 rows.
DPO: one ``preference.paired_step`` on 32 pairs of ``bench/dpo_vs_trl.py``'s pairs (chosen and rejected in
one forward + backward). Each round runs the HF path (``packed_forward.supports`` forced False) and the
packed path back to back; the time is ``time.process_time()`` with one torch thread (CPU time, so load
from other users of the machine perturbs it far less than wall time); the table gives the median and min
over the rounds after ``--warmup`` and the ratio of the mins.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))


def grpo_case(size: str, bf16: bool = False):
    from rlvr.config.rl import GRPOLoss, KLConfig, RLStage, SamplingConfig
    from rlvr.data.arithmetic import generate
    from rlvr.data.chat import encode_prompt
    from rlvr.data.collate import TrainBatch
    from rlvr.models.tiny import build_tiny
    from rlvr.trainers import rl

    model, tok = build_tiny(None, size=size, seed=0)
    model.train()
    ref = copy.deepcopy(model).eval()
    g = torch.Generator().manual_seed(0)
    seqs, masks, adv = [], [], []
    for t in generate(["mul21"], 8, split="train", seed=0):
        p = list(encode_prompt(tok, t))
        for _ in range(8):
            n = int(torch.randint(4, 33, (1,), generator=g))
            seqs.append(p + torch.randint(3, 100, (n,), generator=g).tolist())
            masks.append([0] * len(p) + [1] * n)
            adv.append(float(torch.randn(1, generator=g)))
    batch = TrainBatch(seqs, masks, [[0.0] * len(s) for s in seqs], None, adv)
    cfg = RLStage(loss=GRPOLoss(), sampling=SamplingConfig(max_new_tokens=32), micro_batch_size=64,
                  kl=KLConfig(beta=0.04))

    def step():
        batch.ref_logprobs = rl.reference_logprobs(ref, model, batch, 0, 1.0, 64, bf16)
        model.zero_grad(set_to_none=True)
        return rl.update_minibatch(model, batch, cfg, 0, on_policy=True, bf16=bf16)
    return step


def dpo_case(size: str, bf16: bool = False):
    from dpo_vs_trl import make_pairs

    from rlvr.config.preference import DPOLoss, PreferenceStage
    from rlvr.data.preference import as_pairs, records_from_rows
    from rlvr.models.tiny import build_tiny
    from rlvr.trainers import preference

    model, tok = build_tiny(None, size=size, seed=0)
    model.train()
    data = preference.encode_pairs(tok, as_pairs(records_from_rows(make_pairs(32), "bench"), "dpo"), 256)
    stage = PreferenceStage(loss=DPOLoss(beta=0.1), batch_size=32, micro_batch_size=32)

    def step():
        model.zero_grad(set_to_none=True)
        return preference.paired_step(model, data, list(range(32)), stage, 0, bf16)
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="1m")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--budgets", default=None,
                    help="comma-separated per-micro-batch token budgets (0 = none) to compare on the packed path "
                         "instead of HF vs packed, e.g. 0,128,256,512")
    ap.add_argument("--precision", action="store_true",
                    help="fp32 vs bf16 autocast on the packed path (instead of HF vs packed); prints the loss of each")
    a = ap.parse_args()
    torch.set_num_threads(1)
    from rlvr.models import packed_forward

    if a.budgets:
        return budget_ab(a, [int(b) for b in a.budgets.split(",")])
    if a.precision:
        return precision_ab(a)

    supported = packed_forward.supports
    for name, make in (("grpo update", grpo_case), ("dpo step", dpo_case)):
        step = make(a.size)
        times: dict[str, list[float]] = {"hf": [], "packed": []}
        for _ in range(a.rounds):
            for mode in ("hf", "packed"):
                packed_forward.supports = (lambda m: False) if mode == "hf" else supported
                t0 = time.process_time()
                step()
                times[mode].append(time.process_time() - t0)
        packed_forward.supports = supported
        kept = {m: ts[a.warmup:] for m, ts in times.items()}
        for m, ts in kept.items():
            print(f"{a.size} {name:12s} {m:7s} median {statistics.median(ts):.4f} s  min {min(ts):.4f} s")
        print(f"{a.size} {name:12s} packed/hf (min) {min(kept['packed']) / min(kept['hf']):.3f}")


def budget_ab(a, budgets: list[int]) -> None:
    """CPU time of each case under each token budget (set through ``collate.MICRO_ACTIVATION_BUDGET["cpu"]``),
    alternating."""
    from rlvr.data import collate
    from rlvr.models.tiny import SIZES

    hidden, layers = SIZES[a.size][:2]

    saved = collate.MICRO_ACTIVATION_BUDGET.get("cpu")
    for name, make in (("grpo update", grpo_case), ("dpo step", dpo_case)):
        step = make(a.size)
        times: dict[int, list[float]] = {b: [] for b in budgets}
        for _ in range(a.rounds):
            for b in budgets:
                collate.MICRO_ACTIVATION_BUDGET["cpu"] = b * hidden * layers if b else None
                t0 = time.process_time()
                step()
                times[b].append(time.process_time() - t0)
        collate.MICRO_ACTIVATION_BUDGET["cpu"] = saved
        base = min(times[budgets[0]][a.warmup:])
        for b, ts in times.items():
            ts = ts[a.warmup:]
            print(f"{a.size} {name:12s} budget {b or 'none':>5}  median {statistics.median(ts):.4f} s  "
                  f"min {min(ts):.4f} s  min/first {min(ts) / base:.3f}")


def precision_ab(a) -> None:
    """CPU time of each case in float32 and under bf16 autocast (fp32 master weights), alternating; the
    loss of each precision's first step (same weights, same batch) side by side."""
    for name, make in (("grpo update", grpo_case), ("dpo step", dpo_case)):
        steps = {"fp32": make(a.size, False), "bf16": make(a.size, True)}
        times: dict[str, list[float]] = {m: [] for m in steps}
        losses: dict[str, float] = {}
        for _ in range(a.rounds):
            for m, step in steps.items():
                t0 = time.process_time()
                met = step()
                times[m].append(time.process_time() - t0)
                losses.setdefault(m, float((met or {}).get("train/loss", float("nan"))))
        kept = {m: ts[a.warmup:] for m, ts in times.items()}
        for m, ts in kept.items():
            print(f"{a.size} {name:12s} {m:5s} median {statistics.median(ts):.4f} s  min {min(ts):.4f} s  "
                  f"first loss {losses[m]:.6f}")
        print(f"{a.size} {name:12s} bf16/fp32 (min) {min(kept['bf16']) / min(kept['fp32']):.3f}")


if __name__ == "__main__":
    main()
