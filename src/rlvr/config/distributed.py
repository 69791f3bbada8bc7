"""Where a recipe's RL stages run: one process (default), a Ray cluster, or torchrun ranks."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from rlvr.config.base import Section


class VLLMConfig(Section):
    """The vLLM rollout engine (extra ``vllm``, GPU; ``rlvr.rollout.vllm_engine``)."""

    mode: Literal["colocate", "server"] = "colocate"
    """colocate: vLLM in the trainer process on its GPU, asleep while training; server: vLLM on other
    GPUs, weights broadcast over NCCL through vLLM's weight-transfer engine."""
    gpu_memory_utilization: float = 0.35
    """Fraction of the GPU vLLM may take (colocated: leave the rest to training)."""
    tensor_parallel_size: int = 1
    """vLLM tensor parallelism."""
    sleep_level: Literal[0, 1, 2] = 1
    """Colocated: sleep between generations (1: offload weights to CPU, free the KV cache; 0: never)."""
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    """vLLM's compute dtype (the mismatch correction covers the difference to the trainer's)."""
    enforce_eager: bool = True
    """No CUDA graphs (faster start; graphs pay off on long runs)."""
    batch_invariant: bool = False
    """vLLM's batch-invariant kernels (VLLM_BATCH_INVARIANT=1): a row's logits do not depend on its batch."""


class DistributedConfig(Section):
    """Scale-out of RL stages (docs/scaling.md). ``backend: local`` is the single-process path (no ray)."""

    engine: Literal["hf", "vllm"] = "hf"
    """The rollout engine of the trainer process (``backend: local``): the in-process HF engine, or vLLM."""
    vllm: VLLMConfig = VLLMConfig()
    """vLLM settings (with ``engine: vllm``)."""
    backend: Literal["local", "ray"] = "local"
    """local: generate, verify and train in this process (or in each torchrun rank); ray: rollout workers
    and a verifier pool as Ray actors, driven by the trainer."""
    address: str | None = None
    """Ray cluster address (e.g. ``ray://head:10001`` or ``auto``); None starts a local Ray on this machine."""
    rollout_workers: int = 2
    """Ray rollout worker actors, each holding a copy of the policy (weights synced after every update)."""
    verifier_actors: int = 2
    """Ray verifier actors (each judges its share of a batch)."""
    worker_cpus: float = 1.0
    """CPUs Ray reserves for each rollout worker (``num_cpus`` of the actor)."""
    worker_gpus: float = 0.0
    """GPUs Ray reserves for each rollout worker (fractions share one device)."""
    worker_threads: int = 1
    """torch intra-op threads in each rollout worker."""
    verify_deadline_s: float = 60.0
    """A verifier actor that has not answered a chunk after this long is killed and restarted; each item
    of the chunk is then re-judged alone and one that hangs again gets outcome ``timeout``."""
    generate_deadline_s: float = 600.0
    """A rollout worker that has not answered after this long is killed, restarted and its rows re-issued."""
    max_restarts: int = 3
    """Restarts of one worker within a single step before the step fails."""
    max_staleness: int = 0
    """Asynchronous rollouts: batches are generated up to this many policy versions ahead of training,
    from a bounded queue of version-tagged samples; older samples are dropped (0 = on-policy, synchronous)."""

    @model_validator(mode="after")
    def _positive(self) -> DistributedConfig:
        for name in ("rollout_workers", "verifier_actors"):
            if getattr(self, name) < 1:
                raise ValueError(f"distributed.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_staleness < 0:
            raise ValueError(f"distributed.max_staleness must be >= 0, got {self.max_staleness}")
        return self
