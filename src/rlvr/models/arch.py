"""The Llama-family architecture check shared by rlvr's own forwards (``accel/packed_forward.py`` for
training, ``rollout/fast_decode.py`` for decoding): both re-implement the decoder on the model's own
Parameters, so both need the same module layout, activation and a static RoPE."""

from __future__ import annotations

SUPPORTED_CLASSES = {"LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"}
STATIC_ROPE_TYPES = {"default", "linear", "llama3", "yarn"}


def llama_family_reason(model) -> str | None:
    """None when ``model`` (not peft-wrapped) has the layout both flat forwards implement, else why not."""
    name = type(model).__name__
    if name not in SUPPORTED_CLASSES and not getattr(model, "is_rlvr_native", False):
        return f"{name} is not one of {sorted(SUPPORTED_CLASSES)}"
    cfg, inner = model.config, getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        return f"{name} has no .model.layers / .model.rotary_emb"
    if getattr(cfg, "hidden_act", None) != "silu":
        return f"hidden_act {getattr(cfg, 'hidden_act', None)!r} is not 'silu'"
    rope_type = getattr(inner.rotary_emb, "rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        return f"rope type {rope_type!r} is not one of {sorted(STATIC_ROPE_TYPES)}"
    return None
