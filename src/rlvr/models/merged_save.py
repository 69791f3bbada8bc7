"""A LoRA model saved merged (``W + s·BA``, loadable with ``AutoModelForCausalLM``) one merged tensor at a time.

``merge_and_unload`` on a copy of the adapted layers (:func:`rlvr.models.checkpoint.merged_copy`) holds every
merged weight at once: at the Qwen2.5-0.5B shape with LoRA on the attention and MLP projections that is 1.4 GB
on top of the live model, in every final checkpoint, ``best/`` save and merged evaluation. :func:`save_merged`
writes the same ``model.safetensors`` without it: the file's header is laid out from the base weights' shapes
and dtypes (a merged weight has its base weight's), then each tensor is written in turn, an adapted layer's
merged weight computed just before it is written (peft's own merge op on a copy of one weight,
``W += get_delta_weight``, so the bytes are the merged copy's) and freed after. The extra memory is one layer's weight.

The names are the merged model's (``….q_proj.base_layer.weight`` → ``….q_proj.weight``, the adapters' own
tensors left out) and tied weights are dropped as transformers' ``save_pretrained`` drops them; ``config.json``
and ``generation_config.json`` are written by transformers. Where the merge is not a plain addition (DoRA,
``lora_bias``, several active adapters, other peft tuners or wrapped modules) or transformers would rewrite the
state dict on save (weight conversions), nothing is written and the caller takes the merged copy.
"""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path

import torch

WEIGHTS_NAME = "model.safetensors"

_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
           torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
           torch.bool: "BOOL"}


def merge_plan(model) -> dict[str, tuple[torch.Tensor, object]] | None:
    """``{merged name: (base tensor, LoRA module or None)}`` of a peft model whose adapters merge by plain
    addition, in transformers' saved naming (tied weights dropped); None where :func:`save_merged` cannot
    stream it (module doc)."""
    try:
        from peft.tuners.lora.layer import LoraLayer, Linear
        from transformers.modeling_utils import remove_tied_weights_from_state_dict
    except ImportError:
        return None
    adapters = list(getattr(model, "active_adapters", None) or [])
    base = model.get_base_model()
    if len(adapters) != 1 or getattr(base, "_keys_to_ignore_on_save", None):
        return None
    adapter = adapters[0]
    lora = {}
    for name, mod in base.named_modules():
        if "modules_to_save" in name or "original_module" in name:
            return None
        if isinstance(mod, LoraLayer):
            plain = (type(mod) is Linear and adapter in mod.lora_A and adapter not in mod.lora_variant
                     and not mod.lora_bias.get(adapter, False) and not mod.merged)
            if not plain:
                return None
            lora[name] = mod
    state = {}
    for key, t in base.state_dict().items():
        if "lora_" in key:
            continue
        name = key.replace(".base_layer.", ".")
        owner = key.rsplit(".base_layer.", 1)[0] if ".base_layer." in key else None
        if owner is not None and owner not in lora:
            return None
        state[name] = (t, lora[owner] if owner is not None and key.endswith(".base_layer.weight") else None)
    kept = remove_tied_weights_from_state_dict({k: t for k, (t, _) in state.items()}, base)
    if not _same_after_conversion(base, kept):
        return None
    if any(t.dtype not in _DTYPES for t in kept.values()):
        return None
    return {k: state[k] for k in kept}


def _same_after_conversion(base, state: dict) -> bool:
    """Whether transformers' save would write ``state`` as it is (no weight conversion reverted on save)."""
    try:
        from transformers.modeling_utils import revert_weight_conversion
    except ImportError:
        return True
    try:
        out = revert_weight_conversion(base, dict(state))
    except Exception:  # noqa: BLE001 (an architecture transformers cannot revert: take the merged copy)
        return False
    return out.keys() == state.keys() and all(out[k] is state[k] for k in state)


def _merged(t: torch.Tensor, mod, adapter: str) -> torch.Tensor:
    if mod is None:
        return t
    merged = t.clone()
    merged += mod.get_delta_weight(adapter)  # peft's merge, the same op: base_layer.weight.data += delta
    return merged


def save_merged(model, out_dir: str | Path) -> bool:
    """Write ``model`` (a peft LoRA model) merged into ``out_dir`` (``model.safetensors``, ``config.json``,
    ``generation_config.json``), one merged tensor in memory at a time; False, with nothing written, where it
    cannot (module doc)."""
    plan = merge_plan(model)
    if plan is None:
        return False
    adapter = model.active_adapters[0]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(plan)
    header, offset = {}, 0
    for name in names:
        t = plan[name][0]
        size = t.numel() * t.element_size()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    with torch.no_grad(), open(out / WEIGHTS_NAME, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name in names:
            t, mod = plan[name]
            m = _merged(t, mod, adapter).detach().cpu().contiguous()
            f.write(m.reshape(-1).view(torch.uint8).numpy())  # the bytes as they lie, no copy
            del m
    base = model.get_base_model()
    cfg = copy.deepcopy(base.config)
    cfg.architectures = [type(base).__name__]
    cfg.save_pretrained(out)
    gen = getattr(base, "generation_config", None)
    if gen is not None and base.can_generate():
        gen.save_pretrained(out)
    return True
