"""One rank of the 1-process == 2-process test (launched by test_data_parallel.py with torchrun's
environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Trains the cases of ``cases()`` from the same
starting weights and, on rank 0, saves the parameters after each to ``OUT``.

    python ddp_worker.py MODEL_DIR OUT [naive]
"""

import sys

import torch

from rlvr.config.rl import GRPOLoss, MismatchCorrection, RLStage, SamplingConfig
from rlvr.distributed.torch_dist import TorchDist
from rlvr.models.load import load_pretrained
from rlvr.trainers.common import build_optimizer
from rlvr.data.collate import TokenBatch
from rlvr.trainers.rl import policy_update

LENGTHS = [2, 9, 3, 12, 5, 1, 7]          # completion lengths: very uneven token counts per rank
ADVANTAGES = [1.0, -0.5, 0.3, -1.2, 0.8, 0.0, 0.6]


def batch(rows: int) -> TokenBatch:
    prompt = [4, 20, 21]
    ids, lm, old = [], [], []
    for i, n in enumerate(LENGTHS[:rows]):
        comp = [30 + (i * 7 + j * 3) % 40 for j in range(n)]
        ids.append(prompt + comp)
        lm.append([0] * len(prompt) + [1] * n)
        old.append([0.0] * (len(prompt) + n))
    return TokenBatch.from_rows(ids, lm, old_logprobs=old, advantages=ADVANTAGES[:rows])


def cases():
    """(name, stage, rows): two optimizer steps (mini_batches=2) in micro-batches of 2 rows."""
    out = []
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        st = RLStage(loss=GRPOLoss(aggregation=agg), sampling=SamplingConfig(max_new_tokens=12), mini_batches=2,
                     micro_batch_size=2, correction=MismatchCorrection(enabled=False))
        out.append((agg, st, len(LENGTHS)))
    one = RLStage(loss=GRPOLoss(aggregation="token-mean"), micro_batch_size=2, correction=MismatchCorrection(enabled=False))
    out.append(("one-row", one, 1))  # rank 1 holds no row at all
    return out


def train(model_dir: str, st: RLStage, rows: int, dist) -> dict:
    model, tok = load_pretrained(model_dir)
    model.eval()
    st.optim.lr = 1e-3
    st.optim.warmup_steps = 0
    opt, sched = build_optimizer(model, st.optim, 10)
    if dist is not None:
        dist.publish(model, 0)
        met = policy_update(model, opt, sched, st, batch(rows), False, dist=dist)
    else:
        met = policy_update(model, opt, sched, st, batch(rows), False)
    return {"params": {k: v.detach().clone() for k, v in model.named_parameters()}, "loss": met.get("train/loss")}


class NaiveDDP(TorchDist):
    """The bug this test guards against: each rank divides by its own counts and gradients are averaged."""

    def all_reduce(self, values, op="sum"):
        return list(values)

    def reduce_grads(self, model):
        super().reduce_grads(model)
        for p in model.parameters():
            if p.grad is not None:
                p.grad /= self.world_size


if __name__ == "__main__":
    torch.set_num_threads(1)
    model_dir, out = sys.argv[1], sys.argv[2]
    dist = NaiveDDP() if sys.argv[3:] == ["naive"] else TorchDist()
    results = {name: train(model_dir, st, rows, dist) for name, st, rows in cases()}
    if dist.is_main:
        torch.save(results, out)
    dist.close()
