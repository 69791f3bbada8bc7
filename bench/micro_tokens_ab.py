"""rlvr's GRPO update and reference pass at a real shape as the micro-batch token budget (``model.micro_tokens``)
grows: time and peak memory of each, one process, the same fixed batch.

    PYTHONPATH=src python bench/micro_tokens_ab.py --model-dir models/qwen05b --budgets auto,512,1200,2400

The batch: ``--rows`` rows, each ``--group`` of them sharing a ``--prompt``-token prompt (a GRPO group), and
``--completion`` sampled-looking tokens (random ids),
advantages spread over [-1, 1], the reference logprobs taken from the policy (on-policy: ratio 1). For each budget
(``auto``: ``rlvr.data.collate.micro_token_budget``'s scaling; N: N padded tokens), ``--reps`` times in turn: the
reference pass (``update.reference_logprobs``, no gradient; under LoRA the policy with its adapters off) and the
update's forward and backward (``rl.update_minibatch``; gradients zeroed after it, no optimizer step, so every
repetition sees the same weights), after one untimed warm-up of both in the first budget; beside them the
reference pass as the trainers cut it (``update.reference_micros``: the no-grad budget, ``ref_wide_s``). Reports
the micro-batches each budget cuts, the median seconds of each phase, and how far each budget's first repetition
raised the process's peak RSS (budgets run in the order given, smallest first: the peak only grows).
``--share-prompts on,off`` repeats every budget with a group's prompt forwarded once per pass
(``rlvr.models.prefix_share``, the default) and with whole rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import LORA_TARGETS, peak_rss_mb, pin_threads


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", required=True, help="an HF folder (rlvr build-model DIR --shape qwen2.5-0.5b)")
    ap.add_argument("--lora", type=int, default=16, help="LoRA rank (0: full fine-tuning)")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=24)
    ap.add_argument("--group", type=int, default=8, help="rows that share one prompt")
    ap.add_argument("--share-prompts", default="on", help="on, off or on,off (rlvr.models.prefix_share)")
    ap.add_argument("--completion", type=int, default=128)
    ap.add_argument("--budgets", default="auto,512,1200,2400", help="comma-separated: auto or tokens")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", help="write the results here")
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    a = parse_args(argv)
    pin_threads()
    import torch

    from rlvr.config.model import LoraConfig, ModelConfig
    from rlvr.config.rl import RLStage
    from rlvr.data.collate import TokenBatch, micro_token_budget
    from rlvr.models import prefix_share
    from rlvr.models.load import load_model_and_tokenizer
    from rlvr.trainers.rl import update_minibatch
    from rlvr.trainers.update import reference_logprobs, reference_micros, update_micro_batches

    lora = LoraConfig(r=a.lora, alpha=2 * a.lora, target_modules=LORA_TARGETS) if a.lora else None
    model, tok = load_model_and_tokenizer(ModelConfig(path=a.model_dir, lora=lora))
    model.train()
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, tok.vocab_size, (a.prompt,), generator=g).tolist()
               for _ in range(-(-a.rows // a.group))]
    rows = [prompts[i // a.group] + torch.randint(10, tok.vocab_size, (a.completion,), generator=g).tolist()
            for i in range(a.rows)]
    mask = [[0] * a.prompt + [1] * a.completion for _ in rows]
    zeros = [[0.0] * len(r) for r in rows]
    batch = TokenBatch.from_rows(rows, mask, tok.pad_token_id, old_logprobs=zeros, ref_logprobs=zeros,
                                 advantages=torch.linspace(-1.0, 1.0, a.rows).tolist())
    stage = RLStage(name="ab", max_steps=1, tasks_per_step=1, micro_batch_size=a.rows,
                    sampling={"group_size": a.rows, "max_new_tokens": a.completion}, kl={"beta": 0.04})
    first = a.budgets.split(",")[0]
    with torch.no_grad():  # a warm-up (first calls, allocator growth) in the first budget, untimed
        batch.ref_logprobs = reference_logprobs(None, model, batch, 1.0, a.rows)
    update_minibatch(model, batch, stage, on_policy=True, micro_tokens=first if first == "auto" else int(first))
    model.zero_grad(set_to_none=True)
    out = {"model_dir": Path(a.model_dir).name, "lora": a.lora, "rows": a.rows, "tokens_per_row": len(rows[0]),
           "prompt": a.prompt, "group": a.group, "budgets": {}}
    for b, share in [(b, sh) for b in a.budgets.split(",") for sh in a.share_prompts.split(",")]:
        prefix_share.ENABLED = share == "on"
        budget = b if b == "auto" else int(b)
        micros = update_micro_batches(model, batch, list(range(a.rows)), a.rows, budget)
        wide = reference_micros(model, batch, [list(range(a.rows))], a.rows, budget)
        before = peak_rss_mb()["peak_mb"]
        ref_s, wide_s, upd_s, growth = [], [], [], None
        for _ in range(a.reps):
            t0 = time.perf_counter()
            with torch.no_grad():
                batch.ref_logprobs = reference_logprobs(None, model, batch, 1.0, a.rows, micros=micros)
            t1 = time.perf_counter()
            with torch.no_grad():
                wide_lp = reference_logprobs(None, model, batch, 1.0, a.rows, micros=wide)
            wide_s.append(time.perf_counter() - t1)
            gap = float((wide_lp - batch.ref_logprobs).abs().max())
            t1 = time.perf_counter()
            update_minibatch(model, batch, stage, on_policy=True, micro_tokens=budget)
            t2 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            ref_s.append(t1 - t0)
            upd_s.append(t2 - t1)
            growth = peak_rss_mb()["peak_mb"] - before if growth is None else growth
        rec = {"tokens": micro_token_budget(model, budget), "micro_batches": len(micros),
               "ref_s": round(statistics.median(ref_s), 2), "ref_wide_micro_batches": len(wide),
               "ref_wide_s": round(statistics.median(wide_s), 2), "ref_wide_max_abs_gap": gap,
               "update_s": round(statistics.median(upd_s), 2),
               "peak_growth_mb": round(growth, 1)}
        name = b if a.share_prompts == "on" else f"{b} share_prompts={share}"
        out["budgets"][name] = rec
        print(f"budget {name}: {json.dumps(rec)}", flush=True)
    out["peak_mb"] = peak_rss_mb()["peak_mb"]
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
