"""Which model a stage starts from, its precision and its adapters."""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from rlvr.config.base import Section

# rlvr.models.tiny.SIZES defines them (a test keeps both equal); config imports no torch.
TINY_SIZES: tuple[str, ...] = ("test", "0.5m", "1m", "2m", "5m", "20m")


class TinyModel(Section):
    """Build the embedded default model from scratch (rlvr.models.tiny)."""

    size: str = "1m"
    """Named size: test, 0.5m, 1m, 2m, 5m, 20m."""
    seed: int = 0
    """Initialisation seed."""
    max_positions: int = Field(512, ge=16)
    """Context length (position embeddings): raise it for long multi-turn trajectories (kvchain: 3072)."""
    tokenizer: Literal["char", "bytes"] = "char"
    """char: printable ASCII only (the quickstart's); bytes: also any other character as its UTF-8 bytes."""

    @field_validator("size")
    @classmethod
    def _known_size(cls, v: str) -> str:
        if v not in TINY_SIZES:
            raise ValueError(f"unknown tiny model size {v!r}; choose one of {list(TINY_SIZES)}")
        return v


class LoraConfig(Section):
    """LoRA adapters (peft). With LoRA the reference policy is the base with adapters disabled."""

    r: int = Field(8, ge=1)
    """Adapter rank."""
    alpha: int = 16
    """Scaling numerator (scale = alpha / r)."""
    dropout: float = 0.0
    """Dropout on the adapter input (active only with ``model.train_dropout: true``)."""
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    """Module names that get adapters."""


class ModelConfig(Section):
    """The starting model of a stage: a local HF path, or the tiny model built from scratch."""

    path: str | None = None
    """Local folder: an HF causal LM + tokenizer, or a LoRA adapter folder (its base from adapter_config.json). Overrides ``tiny``."""
    tiny: TinyModel | None = None
    """Build the tiny from-scratch model when ``path`` is not set."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Dtype of the loaded weights. Trained weights are always float32 (master weights), so bfloat16/float16
    needs ``lora`` (a frozen low-precision base, fp32 adapters); for full fine-tuning in bf16 use float32
    with ``autocast_bf16``."""
    autocast_bf16: bool | Literal["train", "auto"] = False
    """Run forward passes under bf16 autocast: bf16 compute, fp32 weights (the usual choice on GPUs).
    ``train``: only the training forwards (the update, reference / old logprobs, the preference step and
    its reference cache, SFT) run under bf16 autocast; generation stays float32. ``true``: generation too
    (the lean decoder runs its projections in bf16 on per-batch weight copies, the residual stream, norms,
    KV cache and attention in float32, as autocast does). On a CPU with bf16 units (avx512_bf16) the
    packed training forward's GEMMs run ~2x faster: the GRPO update and the DPO step took 0.64-0.68x
    their float32 CPU time on the 1m and 5m tiny models (docs/packed_forward.md); bf16 generation took
    0.72x the float32 decode's time at 5m and 0.57x at 20m, but 1.08x at 1m (too small to gain).
    ``auto``: bf16 where it pays, decided when the model is loaded (:func:`auto_bf16`): on a CPU with bf16
    units (AMX tiles or avx512_bf16, :func:`cpu_bf16_units`), ``train`` from :data:`AUTO_BF16_PARAMS`
    parameters (the 1m tiny model and up) and ``true`` (generation too) from :data:`AUTO_BF16_DECODE_PARAMS`
    (the 5m one and up); float32 otherwise (GPUs
    included: set ``true`` there). Logged (INFO, logger ``rlvr.config.model``) when the model loads; a run resumed
    on another machine decides again (set ``train`` or ``false`` where resuming must not change the precision)."""
    implementation: Literal["auto", "native", "hf"] = "auto"
    """Which class holds a checkpoint loaded from ``path``: ``native``, rlvr's own Llama-family module
    (``rlvr.accel.llama``, one of the CPU accelerations: HF's parameter names and files, ~95 MB less resident per
    process than importing transformers' modeling code); ``hf``, transformers' ``AutoModelForCausalLM``; ``auto``,
    native where it applies (the accelerations on; a Llama / Qwen2 / Mistral safetensors checkpoint, RoPE default
    or linear, no sliding window, no quantisation, no ``lora``, ``gradient_checkpointing`` nor ``train_dropout``),
    else hf. Both compute the same values: rlvr's packed forward and decoder run on either. With the
    accelerations off (``RLVR_ACCEL=0``) ``auto`` is hf and ``native`` an error."""
    lora: LoraConfig | None = None
    """Train LoRA adapters instead of all weights."""
    train_dropout: bool = False
    """Keep dropout (the model config's and LoRA's) active in training forwards. Off by default in every
    stage (policy, reference, sampler, reward model, critic): dropout noise would enter the log-ratios that
    compare two forwards (DPO's policy vs reference, the PPO/GRPO ratio, KL)."""
    gradient_checkpointing: bool = False
    """Trade compute for memory on large models."""
    micro_tokens: int | Literal["auto"] | None = "auto"
    """Most padded tokens in one training micro-batch (the RL update and its old-logprob pass, the preference
    step and its reference cache, an SFT step whose ``micro_batch_size`` is unset; a single longer row
    excepted): a bound on activation memory, paid for in speed (smaller GEMMs, prompts no longer shared across a
    cut). ``auto``: on the CPU, tokens x hidden size x layers <= 2048 x 256 x 6 (2048 tokens of the 5m tiny
    model, 6144 of the 1m, 146 of the Qwen2.5-0.5B shape; ``rlvr.data.collate``), none on other devices, and the
    RL and PPO reference passes, which keep no activations, cut by 16 times it
    (``rlvr.trainers.update.NO_GRAD_BUDGET_FACTOR``); an integer: that many tokens in every pass; ``null``: none
    (the fastest; the activations grow with the micro-batch). The gradient does not depend on the cutting. The
    trainers pass it to the micro-batch planner (``rlvr.data.collate.micro_token_budget``) as an argument."""
    logit_chunk: int | None = Field(None, ge=1)
    """Tokens whose logits exist at once in a training forward: the output projection runs with the log-softmax
    (logprobs, entropy, SFT's NLL) this many tokens at a time, forward and backward, so memory grows with it,
    not with the micro-batch's tokens x vocabulary (``rlvr.models.lm_head``). ``null``: as many as make 2^25
    logits (220 tokens at a 152k vocabulary; the whole micro-batch at the tiny models'). Set when the stage's
    model loads."""
    device: str = "auto"
    """Where the model runs: auto (cuda when available), cpu, cuda, cuda:N."""
    chat_template: Literal["required", "plain"] = "required"
    """required: the tokenizer must have a chat template (a run is refused before it starts otherwise);
    plain: a base model without one, prompted with the messages' text joined by newlines."""

    @field_validator("micro_tokens")
    @classmethod
    def _positive_tokens(cls, v):
        if isinstance(v, int) and v < 1:
            raise ValueError(f"micro_tokens must be >= 1, 'auto' or null; got {v}")
        return v

    _auto_bf16: bool | None = PrivateAttr(default=None)
    _auto_decode: bool = PrivateAttr(default=False)

    def resolve_precision(self, model) -> None:
        """Decide ``autocast_bf16: auto`` for ``model`` (called when a stage loads it; :func:`auto_bf16`)."""
        if self.autocast_bf16 == "auto":
            n, units = sum(p.numel() for p in model.parameters()), cpu_bf16_units()
            self._auto_bf16, self._auto_decode = auto_bf16(model, n, units)
            what = "bf16 training forwards and generation" if self._auto_decode else \
                "bf16 training forwards" if self._auto_bf16 else "float32"
            logging.getLogger(__name__).info(
                "model.autocast_bf16: auto -> %s (%.2fM parameters, CPU bf16 units: %s)", what, n / 1e6,
                units or "none")

    def _resolved(self) -> None:
        if self.autocast_bf16 == "auto" and self._auto_bf16 is None:
            raise RuntimeError("model.autocast_bf16: auto is decided when the model is loaded "
                               "(ModelConfig.resolve_precision)")

    @property
    def train_bf16(self) -> bool:
        """Training forwards under bf16 autocast (``autocast_bf16``: true, ``train``, or ``auto`` where it pays)."""
        self._resolved()
        return bool(self._auto_bf16) if self.autocast_bf16 == "auto" else bool(self.autocast_bf16)

    @property
    def decode_bf16(self) -> bool:
        """Generation under bf16 autocast (``autocast_bf16: true``, or ``auto`` from
        :data:`AUTO_BF16_DECODE_PARAMS`)."""
        self._resolved()
        return self._auto_decode if self.autocast_bf16 == "auto" else self.autocast_bf16 is True

    @model_validator(mode="after")
    def _fp32_master_weights(self) -> ModelConfig:
        if self.dtype != "float32" and self.lora is None:
            raise ValueError(
                f"model.dtype: {self.dtype} with full fine-tuning trains {self.dtype} weights without fp32 "
                "master weights: AdamW updates smaller than the weights' rounding step are lost (at lr 1e-6, "
                "10 steps move ~2% of a tiny model's weights). Use `dtype: float32` with `autocast_bf16: "
                "true` (fp32 weights, bf16 compute), or add `lora:` (a frozen bf16 base, fp32 adapters)")
        return self


AUTO_BF16_PARAMS = 800_000
"""``autocast_bf16: auto`` turns bf16 training forwards on from this many parameters (on a CPU with bf16 units).
Measured, GRPO steps of bench/grpo_vs_trl.py's stage alone (8 prompts x 8, 32 new tokens, median of 9 steps) and
DPO steps of bench/run.py: on the 2-core AMD EPYC host with avx512_bf16 (no AMX; 2026-12-05) the 1m tiny model
(0.87M) took 0.170-0.178 s a GRPO step in bf16 against 0.186-0.189 s in float32 (two pairs) and 0.099 s a DPO
step against 0.127 s; on the 2-core AMX host (2026-12-04, before the fused weights were reused across
micro-batches) 1m no gain, 2m (1.9M) 0.29-0.30 s vs 0.32-0.33 s, 5m (4.8M) 0.48 vs 0.61-0.65 s."""


AUTO_BF16_DECODE_PARAMS = 3_000_000
"""``autocast_bf16: auto`` runs generation in bf16 too (the lean decoder's projections, as ``true`` does) from
this many parameters on a CPU with bf16 units. Measured, the decode of bench/grpo_vs_trl.py's stage (64 rows, 32
new tokens, median of 9 steps; 2026-12-05, AMD EPYC with avx512_bf16): 5m tiny model 0.200-0.207 s in bf16
against 0.268 s in float32, 2m 0.127-0.135 vs 0.120-0.129 (no gain), 1m 0.072-0.073 vs 0.0625 (slower: the
casts cost more than the 64-row GEMMs save); on the AMX host (2026-12-04) 0.72x float32's time at 5m, 0.57x at
20m, 1.08x at 1m."""


def cpu_bf16_units(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The CPU's bf16 matrix units from its Linux flags: ``"amx"`` (AMX bf16 tiles, ``amx_bf16``), ``"avx512"``
    (bf16 dot products, ``avx512_bf16``: AMD Zen 4/5, Intel Cooper Lake), or None (neither, or the flags cannot
    be read). oneDNN runs bf16 GEMMs on either (~2x float32's speed at the tiny models' shapes on avx512_bf16)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split())
                    return "amx" if "amx_bf16" in flags else "avx512" if "avx512_bf16" in flags else None
    except OSError:
        pass
    return None


def auto_bf16(model, n_params: int, units: str | None) -> tuple[bool, bool]:
    """``autocast_bf16: auto``'s decision for ``model`` of ``n_params`` parameters on a CPU with bf16 ``units``
    (:func:`cpu_bf16_units`: AMX or avx512_bf16): (bf16 training forwards, bf16 generation). Training from
    :data:`AUTO_BF16_PARAMS` parameters, generation too from :data:`AUTO_BF16_DECODE_PARAMS`; float32 off the CPU
    or without bf16 units."""
    p = next(model.parameters(), None)
    if p is None or p.device.type != "cpu" or units is None or n_params < AUTO_BF16_PARAMS:
        return False, False
    return True, n_params >= AUTO_BF16_DECODE_PARAMS
