"""SFT throughput: rlvr's SFT step in tokens/s and achieved FLOP/s, against this machine's bf16 GEMM peak.

    PYTHONPATH=src OMP_WAIT_POLICY=PASSIVE python bench/sft_throughput.py                 # 5m and 20m, bf16
    PYTHONPATH=src python bench/sft_throughput.py --sizes 1m 5m --fp32 --steps 4 --json out.json
    PYTHONPATH=src python bench/sft_throughput.py --packing-compare --sizes 1m [--cpu-time]   # packed vs bucketed

``measure(sizes, steps, bf16)`` (imported by ``bench/run.py``) returns, per tiny-model size,
``{"params", "tokens_per_s", "gflops", "bf16_peak_gflops", "fraction_of_peak"}`` plus a few diagnostics.

What is timed: ``rlvr.trainers.common.sft_step`` (packing on; on this data no two examples fit a row, so it is the bucketed step) followed by
``optimizer_step`` (clip + AdamW), i.e. one whole optimizer step of the SFT stage, on 64 demonstrations of
the quickstart's SFT data (built-in add2/add3/mul31 worked solutions, 37-53 tokens), torch threads = 2.
The first step is warm-up; the figure is the median of ``steps`` timed steps. The model is the tiny one
written to a folder and loaded the way an SFT stage loads a checkpoint (``load_model_and_tokenizer`` with
``model.path``: rlvr's own Llama-family module, ``rlvr.accel.llama``), with the C heap set as a stage sets
it (``rlvr.accel.heap.keep_freed_heap``); ``--impl hf`` times transformers' class instead (what the
quickstart's first stage trains, built in memory from ``model.tiny``).

- ``tokens_per_s``: real tokens (prompt + completion, no padding) forwarded per second;
- ``gflops``: achieved GFLOP/s = (6 · params · tokens + attention) / step time, where ``params`` counts every
  parameter once (the embedding is tied to the output head: its matmul is the ``V · d`` part of ``6 N``),
  and the attention term is the causal score and value matmuls of each example alone, forward + backward:
  ``6 · layers · hidden · n (n + 1)`` for an example of n tokens (``2 · hidden · t`` FLOPs for q·Kᵀ and as much for
  the weighted sum of V at query t, summed over t = 1..n, times 3 for the backward). Padding computed is not counted;
- ``bf16_peak_gflops``: the machine's bf16 GEMM rate measured here, the best of a few 2048³ bf16 matmuls on
  the same 2 threads (``2 · n³`` FLOPs each);
- ``fraction_of_peak`` = gflops / bf16_peak_gflops; ``bf16_loss_rel_diff``: the step's loss under bf16
  autocast vs float32 on the same batch and weights (the numerics check);
- ``profile`` (what bounds the step): one more step under ``torch.profiler``, its ops' self time summed by kind
  (:data:`KINDS`: the GEMMs, elementwise arithmetic, copies and casts, concatenation and indexing, the
  optimizer, the rest) as fractions of the profiled step, and ``gemm_gflops``: the model FLOPs of the step
  (``gflops``' numerator) over the GEMMs' time alone, i.e. the rate the matmuls themselves run at.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

import torch

from rlvr import accel
from rlvr.accel.heap import keep_freed_heap
from rlvr.config.data import BuiltinArithmetic
from rlvr.config.model import ModelConfig
from rlvr.data.order import data_order
from rlvr.data.sources import load_task_source
from rlvr.models.load import load_model_and_tokenizer
from rlvr.models.tiny import build_tiny, num_params
from rlvr.trainers.common import optimizer_step, sft_step
from rlvr.trainers.sft import tokenize_demos

accel.enable()  # rlvr's CPU accelerations, as `rlvr run` has them (RLVR_ACCEL=0: the plain PyTorch path)

THREADS = 2
BATCH = 64
KINDS = {
    "gemm": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul"),
    "elementwise": ("aten::mul", "aten::mul_", "aten::add", "aten::add_", "aten::sub", "aten::div", "aten::pow",
                    "aten::silu", "aten::silu_backward", "aten::rsqrt", "aten::neg", "aten::mean", "aten::sum",
                    "aten::_softmax", "aten::_softmax_backward_data", "aten::_log_softmax",
                    "aten::_log_softmax_backward_data", "aten::exp", "aten::where", "aten::fill_", "aten::zero_"),
    "copy_cast": ("aten::copy_", "aten::_to_copy", "aten::clone", "aten::contiguous"),
    "cat_index": ("aten::cat", "aten::index_select", "aten::index_copy_", "aten::index_add_", "aten::gather",
                  "aten::scatter_add_", "aten::index", "aten::embedding_dense_backward", "aten::embedding"),
    "optimizer": ("aten::lerp_", "aten::addcdiv_", "aten::addcmul_", "aten::sqrt", "aten::linalg_vector_norm",
                  "aten::_foreach_mul_", "aten::_foreach_add_", "aten::_foreach_norm"),
}
"""The op kinds a profiled step's self time is summed by (anything else: ``other``)."""


def gemm_peak_gflops(n: int = 2048, reps: int = 5, dtype=torch.bfloat16) -> float:
    """Best GFLOP/s of ``reps`` ``[n, n] @ [n, n]`` matmuls in ``dtype`` on the current torch threads."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best / 1e9


def step_flops(model, rows: list[list[int]]) -> float:
    """Training FLOPs of one step over ``rows`` (token lists): 6·N·tokens + causal attention (module doc)."""
    cfg = model.config
    tokens = sum(len(r) for r in rows)
    attention = sum(6 * cfg.num_hidden_layers * cfg.hidden_size * len(r) * (len(r) + 1) for r in rows)
    return 6 * num_params(model) * tokens + attention


def sft_examples(tok, n: int = 4096):
    tasks = load_task_source(BuiltinArithmetic(families=["add2", "add3", "mul31"], n=n, split="train", seed=0))
    return tokenize_demos(tasks, tok, 256)


def ragged_examples(n: int = 512, lo: int = 16, hi: int = 256, seed: int = 0):
    """Synthetic (ids, loss_mask) rows with lengths uniform in [lo, hi] (the packing comparison's data)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        m = int(torch.randint(lo, hi + 1, (1,), generator=g))
        ids = torch.randint(10, 100, (m,), generator=g).tolist()
        out.append((ids, [0] * (m // 4) + [1] * (m - m // 4)))
    return out


def time_steps(model, examples, steps: int, bf16: bool, packing: bool = True, micro: int = BATCH,
               clock=time.perf_counter):
    """Median seconds (of ``clock``) of a whole SFT optimizer step, and the (token rows) of the last step."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    times = []
    for s in range(steps + 1):
        idx = data_order(len(examples), 0, s, BATCH)
        t = clock()
        rec = sft_step(model, examples, idx, micro, True, 0, bf16, packing=packing)
        optimizer_step(model, opt, None, 1.0, rec["train/loss"])
        if s:  # the first step is warm-up
            times.append(clock() - t)
    return statistics.median(times), [examples[i][0] for i in idx]


def bf16_rel_diff(model, examples) -> float:
    """|loss_bf16 - loss_fp32| / loss_fp32 of one SFT forward/backward on the same batch and weights."""
    idx = data_order(len(examples), 0, 0, BATCH)
    losses = []
    for bf16 in (False, True):
        model.zero_grad(set_to_none=True)
        losses.append(sft_step(model, examples, idx, BATCH, True, 0, bf16)["train/loss"])
    model.zero_grad(set_to_none=True)
    return abs(losses[1] - losses[0]) / abs(losses[0])


def stage_model(size: str, impl: str = "native"):
    """The tiny model of ``size`` as an SFT stage trains it: written to a folder and loaded from ``model.path``
    (``impl`` native: rlvr's module; hf: transformers' class), train mode, dropout off."""
    with tempfile.TemporaryDirectory(prefix="bench_sft_") as tmp:
        build_tiny(tmp, size=size, seed=0)
        model, tok = load_model_and_tokenizer(ModelConfig(path=tmp, implementation=impl))
    model.train()
    return model, tok


def step_profile(model, examples, bf16: bool, flops: float) -> dict:
    """One more whole step under ``torch.profiler``: self time by op kind (:data:`KINDS`) as fractions of the
    summed self time, and the rate of the GEMMs alone (``flops`` of the step over their time)."""
    with torch.profiler.profile() as prof:
        time_steps(model, examples, 1, bf16)  # a warm-up step and the step it times, both profiled
    by = {k: 0.0 for k in (*KINDS, "other")}
    for ev in prof.key_averages():
        if ev.key.startswith("aten::") or ev.key.startswith("Optimizer"):
            kind = next((k for k, names in KINDS.items() if ev.key in names), "other")
            by[kind] += ev.self_cpu_time_total
    total = sum(by.values()) or 1.0
    return {"fractions": {k: v / total for k, v in by.items()},
            "gemm_gflops": 2 * flops / (by["gemm"] / 1e6) / 1e9 if by["gemm"] else None}


def measure(sizes=("5m", "20m"), steps: int = 3, bf16: bool = True, impl: str = "native",
            profile: bool = True) -> dict:
    """``{size: {"params", "tokens_per_s", "gflops", "bf16_peak_gflops", "fraction_of_peak", ...}}``."""
    torch.set_num_threads(THREADS)
    keep_freed_heap("cpu")  # as open_stage does for a CPU stage
    peak = gemm_peak_gflops()
    out = {}
    for size in sizes:
        model, tok = stage_model(size, impl)
        examples = sft_examples(tok)
        sec, rows = time_steps(model, examples, steps, bf16)
        flops = step_flops(model, rows)
        tokens = sum(len(r) for r in rows)
        gflops = flops / sec / 1e9
        out[size] = {"params": num_params(model), "tokens_per_s": tokens / sec, "gflops": gflops,
                     "bf16_peak_gflops": peak, "fraction_of_peak": gflops / peak, "step_s": sec,
                     "tokens_per_step": tokens, "bf16": bf16, "implementation": type(model).__name__,
                     "bf16_loss_rel_diff": bf16_rel_diff(model, examples) if bf16 else None}
        if profile:
            out[size]["profile"] = step_profile(model, examples, bf16, flops)
    out_peak = gemm_peak_gflops()  # again after: the machine is shared, report the better
    for r in out.values():
        r["bf16_peak_gflops"] = max(peak, out_peak)
        r["fraction_of_peak"] = r["gflops"] / r["bf16_peak_gflops"]
        if "profile" in r:
            r["profile"]["summary"] = profile_line(r["profile"], r["bf16_peak_gflops"])
    return out


def profile_line(prof: dict, peak: float) -> str:
    """``GEMMs 26% (at 1570 GFLOP/s, 60% of peak), elementwise 31%, ...`` for a ``step_profile`` record."""
    fr = prof["fractions"]
    g = prof.get("gemm_gflops")
    rate = f" (at {g:.0f} GFLOP/s, {g / peak:.0%} of the peak)" if g else ""
    rest = ", ".join(f"{k.replace('_', '/')} {v:.0%}" for k, v in fr.items() if k != "gemm")
    return f"profiled step: GEMMs {fr['gemm']:.0%}{rate}, {rest}"


def packing_compare(size: str = "5m", steps: int = 3, bf16: bool = False, micro: int = 16,
                    cpu_time: bool = False) -> dict:
    """Packed vs bucketed SFT steps on ragged lengths (16-256 tokens), alternating step by step; wall
    seconds on 2 threads, or (``cpu_time``) CPU seconds on 1 thread (steadier on a shared machine)."""
    torch.set_num_threads(1 if cpu_time else THREADS)
    clock = time.process_time if cpu_time else time.perf_counter
    model, _ = build_tiny(size=size, seed=0)
    ex = ragged_examples()
    res = {"packed": [], "bucketed": []}
    for _ in range(steps):
        for name, packing in (("bucketed", False), ("packed", True)):
            res[name].append(time_steps(model, ex, 1, bf16, packing=packing, micro=micro, clock=clock)[0])
    med = {k: statistics.median(v) for k, v in res.items()}
    return {"size": size, "micro_batch_size": micro, "clock": "cpu, 1 thread" if cpu_time else "wall",
            "packed_s": med["packed"], "bucketed_s": med["bucketed"], "ratio": med["packed"] / med["bucketed"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["5m", "20m"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    ap.add_argument("--impl", choices=("native", "hf"), default="native",
                    help="the module trained: rlvr's own (what a stage loads from a checkpoint) or transformers'")
    ap.add_argument("--packing-compare", action="store_true")
    ap.add_argument("--cpu-time", action="store_true", help="packing compare: CPU seconds on 1 thread")
    ap.add_argument("--json", default=None, help="also write the result here")
    a = ap.parse_args(argv)
    if a.packing_compare:
        res = {s: packing_compare(s, a.steps, cpu_time=a.cpu_time) for s in a.sizes}
        for s, r in res.items():
            print(f"{s}: packed {r['packed_s']:.3f}s  bucketed {r['bucketed_s']:.3f}s  ratio {r['ratio']:.2f}")
    else:
        res = measure(tuple(a.sizes), a.steps, not a.fp32, a.impl)
        print(f"{'size':>5} {'params':>11} {'tokens/s':>9} {'GFLOP/s':>8} {'bf16 peak':>9} {'of peak':>7} {'step s':>7}")
        for s, r in res.items():
            print(f"{s:>5} {r['params']:>11,} {r['tokens_per_s']:>9.0f} {r['gflops']:>8.1f} "
                  f"{r['bf16_peak_gflops']:>9.1f} {r['fraction_of_peak']:>7.1%} {r['step_s']:>7.3f}")
            print(f"      {r['profile']['summary']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
