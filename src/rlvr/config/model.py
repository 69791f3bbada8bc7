"""Which model a stage starts from, its precision and its adapters."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlvr.config.base import Section

# rlvr.models.tiny.SIZES defines them (a test keeps both equal); config imports no torch.
TINY_SIZES: tuple[str, ...] = ("test", "0.5m", "1m", "2m", "5m", "20m")


class TinyModel(Section):
    """Build the embedded default model from scratch (rlvr.models.tiny)."""

    size: str = "1m"
    """Named size: test, 0.5m, 1m, 2m, 5m, 20m."""
    seed: int = 0
    """Initialisation seed."""

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
    """Dropout on the adapter input."""
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    """Module names that get adapters."""


class ModelConfig(Section):
    """The starting model of a stage: a local HF path, or the tiny model built from scratch."""

    path: str | None = None
    """Local folder: an HF causal LM + tokenizer, or a LoRA adapter folder (its base from adapter_config.json). Overrides ``tiny``."""
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
