"""A/B of two decode settings inside one process: ``HFEngine.generate`` calls alternate between setting A
and setting B with the same seeds (the bench's shapes: 8 mul21 prompts × G = 8, 32 new tokens,
temperature 1, the 1m or 5m tiny model), so load from other users hits both alike; CPU time is the
figure to read on a busy machine, wall time on an idle one. Samples must come out the same (checked
on every pair; thread counts may move logits by ~1e-7, so a rare token can differ there).

    PYTHONPATH=src python bench/generate_ab.py --size 1m --threads 1 2          # 1 vs 2 decode threads
    PYTHONPATH=src python bench/generate_ab.py --size 5m --compact 0.25 0.1     # row-dropping fraction
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import _common  # noqa: F401  (the OpenMP wait policy before torch loads)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="1m")
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--threads", type=int, nargs=2, default=[1, 1], metavar=("A", "B"))
    ap.add_argument("--compact", type=float, nargs=2, default=None, metavar=("A", "B"),
                    help="hf_engine.COMPACT_FRACTION for A and B (default: the module's)")
    a = ap.parse_args()

    import torch
    from transformers import AutoTokenizer

    from rlvr.data.arithmetic import generate as gen_tasks
    from rlvr.data.chat import encode_prompt, stop_token_ids
    from rlvr.models.tiny import build_tiny
    from rlvr.rollout import hf_engine
    from rlvr.rollout.engine import SamplingParams

    d = tempfile.mkdtemp(prefix="generate_ab_")
    model, _ = build_tiny(d, size=a.size, seed=0)
    tok = AutoTokenizer.from_pretrained(d)
    tasks = gen_tasks(["mul21"], 8 * (a.pairs + 2), split="train", seed=0)
    eng = hf_engine.HFEngine(model, tok)
    default_cf = hf_engine.COMPACT_FRACTION

    def setting(i: int) -> None:
        torch.set_num_threads(a.threads[i])
        hf_engine.COMPACT_FRACTION = a.compact[i] if a.compact else default_cf

    def run(k: int):
        prompts = [list(encode_prompt(tok, t)) for t in tasks[8 * k:8 * k + 8]]
        return eng.generate(prompts, SamplingParams(n=8, temperature=1.0, max_new_tokens=32,
                                                    stop_token_ids=stop_token_ids(tok), seed=k))

    cpu, wall, differ = ([], []), ([], []), 0
    for k in range(a.pairs + 2):
        outs = [None, None]
        for i in ((0, 1) if k % 2 else (1, 0)):
            setting(i)
            c0, w0 = time.process_time(), time.perf_counter()
            outs[i] = run(k)
            if k >= 2:  # the first two pairs warm up
                cpu[i].append(time.process_time() - c0)
                wall[i].append(time.perf_counter() - w0)
        differ += outs[0].completion_ids != outs[1].completion_ids
    med = statistics.median
    print(f"{a.size}: A threads={a.threads[0]} compact={a.compact[0] if a.compact else default_cf} | "
          f"B threads={a.threads[1]} compact={a.compact[1] if a.compact else default_cf} | {a.pairs} pairs")
    print(f"CPU s  A {med(cpu[0]):.3f}  B {med(cpu[1]):.3f}  B/A {med(cpu[1]) / med(cpu[0]):.3f} "
          f"(per-pair median {med([y / x for x, y in zip(*cpu)]):.3f})")
    print(f"wall s A {med(wall[0]):.3f}  B {med(wall[1]):.3f}  B/A {med(wall[1]) / med(wall[0]):.3f} "
          f"(per-pair median {med([y / x for x, y in zip(*wall)]):.3f}); samples differed in {differ} pairs")


if __name__ == "__main__":
    main()
