"""CPU time of the reference pass + GRPO update with the packed forward's fused saves on and off
(``rlvr.models.packed_forward.FUSED``), interleaved in one process; and the saved bytes of each.

    PYTHONPATH=src:bench python bench/memory/fused_ab.py [--size 1m] [--rows 256] [--rounds 12]

Rows: groups of 8 sharing an 12-token prompt, 20-48 completion tokens, β 0.1. Prints the min and median
update CPU seconds of each arm over the rounds (the first dropped) and the bytes ``saved_tensors_hooks``
sees packed during the update (docs/packed_forward.md, "Fewer saved tensors").
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _common  # noqa: F401,E402

import torch  # noqa: E402


def batch_rows(rows: int, group: int = 8):
    g = torch.Generator().manual_seed(2)
    seqs, masks, adv = [], [], []
    for _ in range(rows // group):
        prompt = [4] + torch.randint(3, 100, (11,), generator=g).tolist()
        for _ in range(group):
            n = int(torch.randint(20, 48, (1,), generator=g))
            seqs.append(prompt + torch.randint(3, 100, (n,), generator=g).tolist())
            masks.append([0] * len(prompt) + [1] * n)
            adv.append(float(torch.randn(1, generator=g)))
    return seqs, masks, adv


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", default="1m")
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--rounds", type=int, default=12)
    a = p.parse_args()
    import rlvr.models.packed_forward as pf
    import rlvr.trainers.rl as rl
    from rlvr.config.rl import GRPOLoss, KLConfig, RLStage, SamplingConfig
    from rlvr.data.collate import TrainBatch
    from rlvr.models.tiny import build_tiny

    model = build_tiny(size=a.size, seed=0)[0]
    ref = build_tiny(size=a.size, seed=1)[0].eval()
    seqs, masks, adv = batch_rows(a.rows)
    cfg = RLStage(loss=GRPOLoss(), sampling=SamplingConfig(max_new_tokens=48), micro_batch_size=a.rows,
                  kl=KLConfig(beta=0.1))
    times: dict[bool, list[float]] = {True: [], False: []}
    saved: dict[bool, int] = {}
    for r in range(a.rounds):
        for fused in (True, False):
            pf.FUSED = fused
            batch = TrainBatch(seqs, masks, [[0.0] * len(s) for s in seqs], None, adv)
            batch.ref_logprobs = rl.reference_logprobs(ref, model, batch, 0, 1.0, a.rows)
            total = [0]

            def pack(t):
                if not (t.is_leaf and t.requires_grad):
                    total[0] += t.numel() * t.element_size()
                return t

            c = time.process_time()
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                rl.update_minibatch(model, batch, cfg, 0, on_policy=True)
            times[fused].append(time.process_time() - c)
            saved[fused] = total[0]
            model.zero_grad(set_to_none=True)
    for fused, v in times.items():
        v = sorted(v[1:])
        print(f"{'fused' if fused else 'plain'}: update CPU s min {v[0]:.3f} median {v[len(v) // 2]:.3f}; "
              f"saved {saved[fused] / 2**20:.1f} MB (all micro-batches)")


if __name__ == "__main__":
    main()
