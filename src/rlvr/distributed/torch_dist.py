"""Data-parallel RL training across torchrun ranks (gloo on CPU, NCCL on GPU).

``torchrun --nproc_per_node N -m rlvr.cli run recipe.yaml`` starts N processes; each builds a
:class:`TorchDist` from torchrun's environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``)
and runs the same RL stage:

* **rollouts**: the step's prompts are cut into N contiguous shards; each rank samples its shard with
  the per-row seeds of the whole batch (``rollout.seeds``) and the shards are all-gathered, so every
  rank holds the same full batch that one process would have sampled (advantages, metrics and the
  health monitor then agree on every rank);
* **verification**: the same, the judge runs on each rank's shard of completions;
* **training**: each rank forwards and back-propagates its share of the rows (longest-first to the
  least-loaded rank), divides by the denominators of the whole batch
  (:func:`~rlvr.trainers.parallel.global_denominators`), and the gradients are **summed** over ranks in
  one flat all-reduce before clipping — the same gradient as one process on the whole batch. (This is
  DDP's gradient all-reduce done once per mini-batch rather than by DDP's bucket hooks: with length-
  balanced shards the ranks run different numbers of micro-batches, which DDP's per-backward hooks
  cannot match, and a rank may hold no row at all.)
* only rank 0 writes metrics, checkpoints and the final model; every rank restores the same
  checkpoint on resume (same world size).
"""

from __future__ import annotations

import os
from dataclasses import replace

import torch
import torch.distributed as td

from rlvr.rollout.engine import Generation, SamplingParams
from rlvr.rollout.seeds import row_seeds
from rlvr.trainers.parallel import DistContext


def launched_by_torchrun() -> bool:
    """True inside a torchrun worker of a job with more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def chunks(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``[start, end)`` ranges covering ``range(n)``, sizes differing by at most one."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for k in range(parts):
        end = start + base + (1 if k < extra else 0)
        out.append((start, end))
        start = end
    return out


def balanced_shard(lengths: list[int], world: int, rank: int) -> list[int]:
    """Rows of ``rank``: longest first, each to the rank with the fewest tokens so far (ties: lower rank)."""
    load = [0] * world
    mine = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        r = min(range(world), key=lambda k: (load[k], k))
        load[r] += lengths[i]
        if r == rank:
            mine.append(i)
    return sorted(mine)


def with_row_seeds(params: SamplingParams, n_rows: int) -> SamplingParams:
    """``params`` with one seed per row (derived from ``params.seed`` when it has none), so any split of
    the rows samples what the whole batch would."""
    if params.row_seeds is not None:
        return params
    seed = params.seed if params.seed is not None else int(torch.randint(0, 2**31 - 1, ()).item())
    return replace(params, row_seeds=row_seeds(seed, n_rows))


def merge_generations(parts: list[tuple[int, Generation]]) -> Generation:
    """Concatenate ``(prompt offset, generation of prompts[offset:...])`` pieces in order."""
    out = Generation([], [], [], [], [], [], [])
    for offset, g in parts:
        out.prompt_ids += g.prompt_ids
        out.completion_ids += g.completion_ids
        out.old_logprobs += g.old_logprobs
        out.finish_reason += g.finish_reason
        out.texts += g.texts
        out.prompt_index += [offset + i for i in g.prompt_index]
        out.policy_version += g.policy_version
    return out


class ShardedEngine:
    """Each rank samples its contiguous shard of the prompts; the shards are all-gathered (RolloutEngine)."""

    def __init__(self, engine, dist: TorchDist):
        self.engine, self.dist = engine, dist

    def sync_weights(self, model) -> None:
        self.engine.sync_weights(model)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Generation:
        if params.row_seeds is None and params.seed is None:  # every rank must draw from the same seeds
            params = replace(params, seed=self.dist.gather(int(torch.randint(0, 2**31 - 1, ()).item()))[0])
        params = with_row_seeds(params, len(prompts) * params.n)
        a, b = chunks(len(prompts), self.dist.world_size)[self.dist.rank]
        mine = (a, Generation([], [], [], [], [], []))
        if b > a:
            mine = (a, self.engine.generate(prompts[a:b], replace(params, row_seeds=params.row_seeds[a * params.n:
                                                                                                    b * params.n])))
        return merge_generations(self.dist.gather(mine))


class ShardedJudge:
    """Each rank verifies its contiguous shard of the completions; the verdicts are all-gathered."""

    def __init__(self, judge, dist: TorchDist):
        self.judge, self.dist = judge, dist

    def __call__(self, tasks, completions):
        a, b = chunks(len(tasks), self.dist.world_size)[self.dist.rank]
        mine = self.judge(list(tasks[a:b]), list(completions[a:b])) if b > a else []
        return [v for part in self.dist.gather(mine) for v in part]


class TorchDist(DistContext):
    """The context of one torchrun rank (see the module doc). Initialises the default process group from
    torchrun's environment unless one exists: NCCL when CUDA is available, else gloo."""

    def __init__(self, backend: str | None = None):
        if not td.is_initialized():
            backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
            if backend == "nccl":
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            td.init_process_group(backend)
        self.rank, self.world_size = td.get_rank(), td.get_world_size()
        self.device = torch.device("cuda", torch.cuda.current_device()) if td.get_backend() == "nccl" \
            else torch.device("cpu")
        self._synced = False

    def engine(self, model, tokenizer, bf16: bool = False):
        return ShardedEngine(super().engine(model, tokenizer, bf16), self)

    def wrap_judge(self, judge):
        return ShardedJudge(judge, self)

    def publish(self, model, version: int) -> None:
        """The first call (stage start, after any resume) broadcasts rank 0's parameters; afterwards the
        ranks stay identical by construction (same summed gradient, same optimizer step)."""
        if not self._synced:
            for p in model.parameters():
                data = p.data.to(self.device)
                td.broadcast(data, src=0)
                p.data.copy_(data)
            self._synced = True

    def shard(self, lengths: list[int]) -> list[int]:
        return balanced_shard(lengths, self.world_size, self.rank)

    def all_reduce(self, values: list[float], op: str = "sum") -> list[float]:
        ops = {"sum": td.ReduceOp.SUM, "max": td.ReduceOp.MAX, "min": td.ReduceOp.MIN}
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        td.all_reduce(t, op=ops[op])
        return t.tolist()

    def gather(self, obj) -> list:
        out: list = [None] * self.world_size
        td.all_gather_object(out, obj)
        return out

    def reduce_grads(self, model) -> None:
        """One flat all-reduce (sum) of every trainable parameter's gradient, plus a has-gradient flag per
        parameter so a parameter no rank touched keeps ``grad = None`` (as in one process)."""
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            return
        dev = self.device
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).to(dev,
                                                                                                       torch.float32)
                          for p in params] + [torch.tensor([float(p.grad is not None) for p in params], device=dev)])
        td.all_reduce(flat)
        off = 0
        for k, p in enumerate(params):
            n = p.numel()
            if float(flat[-len(params) + k]) > 0:
                g = flat[off:off + n].view_as(p).to(p.device, p.dtype)
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.copy_(g)
            off += n

    def agree(self, obj):
        box = [obj]
        td.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        td.barrier()

    def close(self) -> None:
        if td.is_initialized():
            td.destroy_process_group()
