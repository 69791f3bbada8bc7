"""The policy's weights as a plain HF state dict, for engines that hold their own copy (Ray workers, vLLM).

Under LoRA the engines get merged weights ``W + scale · B A`` computed beside the model (the trainer's
adapters are never merged in place, which would round the base weights), so a worker runs the plain base
architecture. Its samples then differ from the adapter forward's by float rounding only, which the
mismatch correction (``rlvr.losses.mismatch``) measures.
"""

from __future__ import annotations

import torch

from rlvr.models.hf import hf_config
from rlvr.models.load import is_peft


def base_config(model):
    """The HF config of the plain architecture (the base model's under LoRA; a native model's as transformers'
    config class: the engines build ``AutoModelForCausalLM.from_config`` from it)."""
    return hf_config(model.get_base_model() if is_peft(model) else model)


@torch.no_grad()
def plain_state_dict(model, device: str | torch.device | None = "cpu") -> dict[str, torch.Tensor]:
    """``{name: tensor}`` loadable into ``AutoModelForCausalLM.from_config(base_config(model))``: copies on
    ``device``, or (``device=None``) the model's own tensors where no merge is needed."""
    if not is_peft(model):
        if device is None:
            return {k: v.detach() for k, v in model.state_dict().items()}
        return {k: v.detach().to(device, copy=True) for k, v in model.state_dict().items()}
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    deltas = {}
    for name, mod in base.named_modules():
        if isinstance(mod, LoraLayer):
            deltas[f"{name}.weight"] = sum(mod.get_delta_weight(a) for a in mod.active_adapters
                                           if a in mod.lora_A)
    out = {}
    for k, v in base.state_dict().items():
        if ".lora_" in k:
            continue
        k = k.replace(".base_layer.", ".")
        v = v.detach()
        if k in deltas:
            v = v + deltas[k].to(v.dtype)
        out[k] = v if device is None else v.to(device, copy=True)
    return out


def named_plain_weights(model) -> list[tuple[str, torch.Tensor]]:
    """``plain_state_dict`` as ``(name, tensor)`` pairs on the model's device (for an engine's loader)."""
    return list(plain_state_dict(model, device=None).items())
