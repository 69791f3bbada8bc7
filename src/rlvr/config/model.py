"""Which model a stage starts from, its precision and its adapters."""

from __future__ import annotations

from typing import Literal

from rlvr.config.base import Section


class TinyModel(Section):
    """Build the embedded default model from scratch (rlvr.models.tiny)."""

    size: str = "1m"
    """Named size: test, 0.5m, 1m, 2m, 5m, 20m."""
    seed: int = 0
    """Initialisation seed."""


class LoraConfig(Section):
    """LoRA adapters (peft). With LoRA the reference policy is the base with adapters disabled."""

    r: int = 8
    """Adapter rank."""
    alpha: int = 16
    """Scaling numerator (scale = alpha / r)."""
    dropout: float = 0.0
    """Dropout on the adapter input."""
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    """Module names that get adapters."""


class ModelConfig(Section):
    """The starting model of a stage: a local HF path, or the tiny model built from scratch."""

    path: str | None = None
    """Local path to an HF causal LM + tokenizer (offline). Overrides ``tiny`` when set."""
    tiny: TinyModel | None = None
    """Build the tiny from-scratch model when ``path`` is not set."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype for loading."""
    autocast_bf16: bool = False
    """Run forward passes under bf16 autocast (CPU bf16 units; pays from ~20M params)."""
    lora: LoraConfig | None = None
    """Train LoRA adapters instead of all weights."""
    gradient_checkpointing: bool = False
    """Trade compute for memory on large models."""
    device: str = "auto"
    """Where the model runs: auto (cuda when available), cpu, cuda, cuda:N."""
