"""Scale-out: torchrun ranks (``torch_dist``), Ray rollout workers and verifier actors (``ray_backend``),
whose engines hold their own weights, so the RL stage may prefetch its rollouts (``max_staleness``;
``rollout/prefetch.py``). The only package that imports ray, and only
inside ``ray_backend`` when a Ray context is built: importing ``rlvr.distributed`` does not need ray.
"""

from __future__ import annotations

from rlvr.config.distributed import DistributedConfig
from rlvr.trainers.parallel import LOCAL, DistContext


class VLLMContext(DistContext):
    """One trainer process sampling with vLLM (``distributed.engine: vllm``); weights pushed after each update."""

    def __init__(self, cfg: DistributedConfig):
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise ImportError("distributed.engine is 'vllm' but vllm is not installed: pip install 'rlvr[vllm]' "
                              "(needs a CUDA GPU)")
        self.cfg, self._engine = cfg, None

    def engine(self, model, tokenizer, bf16: bool = False):
        from rlvr.rollout.vllm_engine import VLLMEngine

        if self._engine is not None:
            self._engine.close()
        self._engine = VLLMEngine(model, tokenizer, self.cfg.vllm)
        return self._engine

    def publish(self, model, version: int) -> None:
        if self._engine is not None and version > 0:  # version 0: vLLM was built from these weights
            self._engine.sync_weights(model, version)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()


def make_context(cfg: DistributedConfig) -> DistContext:
    """The context RL stages run in: Ray actors (``backend: ray``), this torchrun rank (launched by
    torchrun with WORLD_SIZE > 1), or this one process."""
    from rlvr.distributed.torch_dist import TorchDist, launched_by_torchrun

    if cfg.backend == "ray":
        if launched_by_torchrun():
            raise ValueError("distributed.backend 'ray' under torchrun is not supported: run the Ray backend "
                             "from one trainer process (docs/scaling.md)")
        from rlvr.distributed.ray_backend import RayContext

        return RayContext(cfg)
    if cfg.engine == "vllm":
        if launched_by_torchrun() or cfg.backend == "ray":
            raise ValueError("distributed.engine 'vllm' runs in the trainer process (backend: local, one process) "
                             "for now; see docs/scaling.md")
        return VLLMContext(cfg)
    if cfg.max_staleness > 0:
        raise ValueError("distributed.max_staleness > 0 (asynchronous rollouts) needs engines that hold their "
                         "own weights: set distributed.backend: ray")
    if launched_by_torchrun():
        return TorchDist()
    return LOCAL
