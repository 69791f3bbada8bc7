"""Peak memory of one logprob step (forward + backward) at a real vocabulary: rlvr's chunked head against the
full ``[tokens, V]`` logits.

    PYTHONPATH=src python bench/logprob_memory.py --shape qwen2.5-0.5b --set num_hidden_layers=2 --rows 8 --tokens 256

Each variant runs in its own fresh process (``VmHWM`` reset after the model is built: ``/proc/self/clear_refs``),
on the same random-init model (``rlvr.models.shapes``): ``chunked`` is ``token_logprobs`` with the automatic chunk
(or ``--chunk``), ``full`` the plain computation (the model's logits, log-softmax, gather); ``--frozen-head``: the
tied embedding takes no gradient (as under LoRA), so only activations and logits count. Prints one JSON line per
variant: the step's peak RSS above the built model (MiB) and its time. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def vmhwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker(a) -> dict:
    import torch

    torch.set_num_threads(1)
    from rlvr.models.lm_head import set_logit_chunk
    from rlvr.models.logprobs import position_ids_from_mask, token_logprobs
    from rlvr.models.shapes import build_shape, parse_overrides

    model, _ = build_shape(None, a.shape, seed=0, overrides=parse_overrides(a.set))
    if a.frozen_head:  # as under LoRA: the (tied) embedding / head takes no gradient
        model.get_output_embeddings().weight.requires_grad_(False)
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (a.rows, a.tokens), generator=g)
    att = torch.ones_like(ids)
    lm = torch.ones(ids.shape)
    lm[:, : a.tokens // 4] = 0  # a prompt quarter
    set_logit_chunk(a.chunk)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS
    base = vmhwm_mb()
    t0 = time.perf_counter()
    if a.variant == "full":
        logits = model(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att)).logits[:, :-1]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        loss = (lp * lm[:, 1:]).sum()
    else:
        lp, _ = token_logprobs(model, ids, att, wanted=lm)
        loss = (lp * lm).sum()
    loss.backward()
    return {"variant": a.variant, "chunk": a.chunk, "frozen_head": a.frozen_head, "rows": a.rows, "tokens": a.tokens, "vocab": V,
            "logits_mb_full": round(a.rows * a.tokens * V * 4 / 2**20, 1),
            "step_peak_mb": round(vmhwm_mb() - base, 1), "seconds": round(time.perf_counter() - t0, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="qwen2.5-0.5b")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE config override (repeatable)")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=None, help="model.logit_chunk (default: automatic)")
    ap.add_argument("--frozen-head", action="store_true", help="the tied embedding / head frozen (as under LoRA)")
    ap.add_argument("--variant", choices=("chunked", "full"), default=None, help="(internal: one worker)")
    a = ap.parse_args()
    if a.variant:
        print(json.dumps(worker(a)), flush=True)
        return
    for variant in ("chunked", "full"):
        cmd = [sys.executable, __file__, *sys.argv[1:], "--variant", variant]
        subprocess.run(cmd, check=False)


if __name__ == "__main__":
    main()
