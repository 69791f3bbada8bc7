"""vLLM behind the rollout protocol (extra ``vllm``, GPU): batched sampling with the sampler's logprobs,
weights pushed after every update, sleep/wake to share the GPU with training.

Two placements (``distributed.vllm.mode``):

* ``colocate`` — an ``LLM`` in the trainer process on the trainer's GPU. After each update the trainer's
  weights are loaded through vLLM's own ``load_weights`` on its workers; between generations the engine
  sleeps (``sleep_level`` 1: weights offloaded to CPU and the KV cache freed) so training gets the memory.
* ``server`` — an ``LLM`` with ``WeightTransferConfig(backend="nccl")`` on other GPUs (e.g. a Ray actor
  or a ``vllm serve`` with the dev weight-transfer routes): the trainer joins vLLM's weight-transfer
  group and broadcasts its parameters over NCCL (``init_weight_transfer_engine`` / ``start_weight_update``
  / ``update_weights`` / ``finish_weight_update``), the documented vLLM >= 0.16 API.

What the trainer gets is token-in, token-out: the prompt ids go in as ``TokensPrompt``, the completion
ids come back with their logprobs and are decoded with the trainer's tokenizer. Logprobs are taken
after temperature, top-k and top-p (``logprobs_mode="processed_logprobs"``): those of the renormalised
distribution each token was drawn from, the quantity the trainer recomputes under the same truncation
(``rlvr.models.truncation``); they still differ from the trainer's (kernels, bf16), which is what
``rlvr.losses.mismatch`` corrects.

Per-row seeds (``SamplingParams.row_seeds``) become one request per row with ``n=1, seed=row_seed``:
vLLM's per-request generator makes a row's sample independent of the batch (vLLM's own RNG stream, so
not the HF engine's samples). Nothing here runs without a GPU; ``bench/gpu_vllm_check.py`` is the test.
"""

from __future__ import annotations

import tempfile

from rlvr.config.distributed import VLLMConfig
from rlvr.rollout.engine import Generation, SamplingParams


def vllm_requests(prompts: list[list[int]], params: SamplingParams) -> list[tuple[int, dict, int | None, int]]:
    """``(prompt index, TokensPrompt dict, seed, n)`` per request: one per row when ``row_seeds`` are given
    (prompt-major, so the row order is the protocol's), else one per prompt with ``n`` samples."""
    if params.row_seeds is not None:
        if len(params.row_seeds) != len(prompts) * params.n:
            raise ValueError(f"row_seeds has {len(params.row_seeds)} seeds for {len(prompts) * params.n} rows")
        return [(i, {"prompt_token_ids": list(p)}, params.row_seeds[i * params.n + j], 1)
                for i, p in enumerate(prompts) for j in range(params.n)]
    return [(i, {"prompt_token_ids": list(p)}, params.seed, params.n) for i, p in enumerate(prompts)]


LOGPROBS_MODE = "processed_logprobs"
"""vLLM's ``logprobs_mode``: the sampled token's logprob after temperature, top-k and top-p (the renormalised
distribution it was drawn from), the quantity the trainer recomputes (``rlvr.models.truncation``)."""


def vllm_sampling_kwargs(params: SamplingParams, seed: int | None, n: int) -> dict:
    """vLLM ``SamplingParams`` keywords for one request: the protocol's temperature, top-k (0 -> vLLM's -1, off)
    and top-p, the sampled token's logprob (``logprobs=0``), stops kept in the output."""
    return {"n": n, "temperature": 0.0 if params.greedy else params.temperature, "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1, "max_tokens": params.max_new_tokens, "seed": seed,
            "logprobs": 0, "stop_token_ids": list(params.stop_token_ids), "stop": list(params.stop_strings) or None,
            "include_stop_str_in_output": True, "skip_special_tokens": False}


def to_generation(requests, outputs, tokenizer, version: int) -> Generation:
    """vLLM ``RequestOutput``s (one per request, in order) -> :class:`Generation` rows, prompt-major.

    Each completion's sampled-token logprob is read from ``output.logprobs[t][token]`` (vLLM returns the
    sampled token's entry whatever ``logprobs=k`` asks). ``finish_reason`` ``stop`` (a stop token or
    string) becomes ``eos``; ``length`` stays ``length``."""
    g = Generation([], [], [], [], [], [], [])
    for (pi, prompt, _, _), out in zip(requests, outputs):
        for comp in out.outputs:
            ids = list(comp.token_ids)
            if comp.logprobs is None or len(comp.logprobs) < len(ids):
                raise RuntimeError("vLLM returned no logprobs for a completion: the engine must be asked for "
                                   "logprobs=0 (the sampled token's)")
            g.prompt_ids.append(list(prompt["prompt_token_ids"]))
            g.completion_ids.append(ids)
            g.old_logprobs.append([float(_logprob(comp.logprobs[t][tok])) for t, tok in enumerate(ids)])
            g.finish_reason.append("length" if comp.finish_reason == "length" else "eos")
            g.prompt_index.append(pi)
            g.policy_version.append(version)
    g.texts = tokenizer.batch_decode(g.completion_ids, skip_special_tokens=True)
    return g


def _logprob(entry) -> float:
    return entry.logprob if hasattr(entry, "logprob") else entry


class VLLMEngine:
    """The RolloutEngine over a vLLM ``LLM`` (see the module doc). ``sync_weights(model, version)`` after
    every update; ``policy_version`` of each sample is the version of its weights."""

    def __init__(self, model, tokenizer, settings: VLLMConfig | None = None):
        import os

        self.s = settings or VLLMConfig()
        if self.s.batch_invariant:
            os.environ["VLLM_BATCH_INVARIANT"] = "1"  # batch-independent kernels (vLLM's deterministic mode)
        if self.s.mode == "colocate":
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # workers in this process
            os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # collective_rpc with a function
        from vllm import LLM

        self.tokenizer = tokenizer
        self._dir = tempfile.TemporaryDirectory(prefix="rlvr-vllm-")
        _save_plain(model, tokenizer, self._dir.name)
        kw = dict(model=self._dir.name, dtype=self.s.dtype, gpu_memory_utilization=self.s.gpu_memory_utilization,
                  tensor_parallel_size=self.s.tensor_parallel_size, enforce_eager=self.s.enforce_eager,
                  logprobs_mode=LOGPROBS_MODE, enable_prefix_caching=False)
        if self.s.mode == "colocate":
            kw["enable_sleep_mode"] = self.s.sleep_level > 0
        else:
            from vllm.config import WeightTransferConfig

            kw["weight_transfer_config"] = WeightTransferConfig(backend="nccl")
        self.llm = LLM(**kw)
        self.version = 0
        self.asleep = False
        self._group = None

    # ----------------------------------------------------------------------------------- generate

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> Generation:
        from vllm import SamplingParams as VSP

        reqs = vllm_requests(prompts, params)
        sps = [VSP(**vllm_sampling_kwargs(params, seed, n)) for _, _, seed, n in reqs]
        self._wake()
        try:
            outs = self.llm.generate([r[1] for r in reqs], sps, use_tqdm=False)
        finally:
            self._sleep()
        return to_generation(reqs, outs, self.tokenizer, self.version)

    # ------------------------------------------------------------------------------ weight sync

    def sync_weights(self, model, version: int = 0) -> None:
        """Load the trainer's weights into vLLM (colocate: vLLM's ``load_weights`` on its workers; server:
        an NCCL broadcast through vLLM's weight-transfer engine)."""
        from rlvr.models.export import named_plain_weights

        named = named_plain_weights(model)
        if self.s.mode == "colocate":
            self._wake()
            try:
                self.llm.collective_rpc(_load_weights, args=([(k, v) for k, v in named],))
            finally:
                self._sleep()
        else:
            self._broadcast(named)
        self.version = version

    def _broadcast(self, named) -> None:
        from vllm.distributed.weight_transfer.nccl_engine import (
            NCCLTrainerSendWeightsArgs,
            NCCLWeightTransferEngine,
        )

        if self._group is None:
            from vllm.utils.network_utils import get_ip, get_open_port

            addr, port = get_ip(), get_open_port()
            world = self.llm.get_world_size() + 1  # vLLM's workers + this trainer (rank 0)
            info = dict(master_address=addr, master_port=port, world_size=world)
            import threading

            t = threading.Thread(target=lambda: self.llm.init_weight_transfer_engine(
                dict(init_info=dict(**info, rank_offset=1))))
            t.start()
            self._group = NCCLWeightTransferEngine.trainer_init(info)
            t.join()
        names = [k for k, _ in named]
        self.llm.start_weight_update(is_checkpoint_format=True)
        import threading

        upd = threading.Thread(target=lambda: self.llm.update_weights(dict(update_info=dict(
            names=names, dtype_names=[str(v.dtype).split(".")[-1] for _, v in named],
            shapes=[list(v.shape) for _, v in named], packed=True))))
        upd.start()
        NCCLWeightTransferEngine.trainer_send_weights(iterator=iter(named),
                                                      trainer_args=NCCLTrainerSendWeightsArgs(group=self._group,
                                                                                              packed=True))
        upd.join()
        self.llm.finish_weight_update()

    # --------------------------------------------------------------------------------- sleep/wake

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def _sleep(self) -> None:
        if self.s.mode == "colocate" and self.s.sleep_level > 0:
            self.llm.sleep(level=self.s.sleep_level)
            self.asleep = True

    def close(self) -> None:
        self.llm = None
        self._dir.cleanup()


def _load_weights(worker, weights) -> None:
    """Runs on each vLLM worker (``collective_rpc``): vLLM's own loader maps HF names to its layout."""
    worker.model_runner.model.load_weights(weights=weights)


def _save_plain(model, tokenizer, out: str) -> None:
    """The trainer's model as a plain HF folder vLLM can open (LoRA merged, see models/export.py)."""
    from transformers import AutoModelForCausalLM

    from rlvr.models.export import base_config, named_plain_weights

    base = AutoModelForCausalLM.from_config(base_config(model))
    base.load_state_dict(dict(named_plain_weights(model)), strict=False)
    base.save_pretrained(out)
    tokenizer.save_pretrained(out)
