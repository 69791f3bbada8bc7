"""Load the policy (HF causal LM + tokenizer from a local path, or the tiny model) and LoRA adapters."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from rlvr.config.model import ModelConfig
from rlvr.errors import ModelLoadError
from rlvr.models.hf import import_transformers
from rlvr.models.lm_head import set_logit_chunk

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_model_and_tokenizer(cfg: ModelConfig, path: str | None = None):
    """Return ``(model, tokenizer)`` for a stage. ``path`` (a previous stage's output) wins over cfg."""
    path = path or cfg.path
    set_logit_chunk(cfg.logit_chunk)
    if path is None:
        if cfg.tiny is None:
            raise ModelLoadError("model: set either model.path (a local HF checkpoint) or model.tiny")
        from rlvr.models.tiny import build_tiny

        model, tok = build_tiny(size=cfg.tiny.size, seed=cfg.tiny.seed, max_positions=cfg.tiny.max_positions,
                                tokenizer=cfg.tiny.tokenizer)
        model = model.to(DTYPES[cfg.dtype])
    else:
        impl = cfg.implementation
        if cfg.lora is not None or cfg.gradient_checkpointing or cfg.train_dropout:  # what only HF's classes do
            if impl == "native":
                raise ModelLoadError("model.implementation: native does not take model.lora / "
                                     "model.gradient_checkpointing / model.train_dropout (use auto or hf)")
            impl = "hf"
        model, tok = load_pretrained(path, cfg.dtype, impl)
    model = model.to(resolve_device(cfg.device))
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if cfg.lora is not None:
        model = add_lora(model, cfg.lora)
    if not cfg.train_dropout:
        disable_dropout(model)
    cfg.resolve_precision(model)  # autocast_bf16: auto
    return model, tok


def disable_dropout(model):
    """Turn off every dropout of ``model`` in train mode too: ``nn.Dropout`` modules (LoRA's included)
    get p = 0, and so do the float ``*dropout`` / ``*_pdrop`` rates modules read at forward time (HF
    attention's ``attention_dropout``). The model config is left as it is (saved checkpoints keep it)."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
            continue
        for name, value in list(vars(m).items()):
            if name.endswith(("dropout", "_pdrop")) and isinstance(value, float):
                setattr(m, name, 0.0)
    return model


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; an unavailable cuda is an error naming the field."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"model.device is {name!r} but no CUDA device is available (use 'auto' or 'cpu')")
    return torch.device(name)


def load_pretrained(path: str | os.PathLike, dtype: str = "float32", implementation: str = "auto"):
    """Load a causal LM and its tokenizer from a local folder, offline; errors name the path.
    ``implementation``: see ``ModelConfig.implementation`` (a LoRA adapter folder always loads the HF class)."""
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"model path {str(p)!r} does not exist (rlvr loads checkpoints from local "
                             "folders only; build the embedded default with `model.tiny` instead)")
    if not (p / "config.json").exists() and (p / "adapter_config.json").exists():
        return load_adapter_folder(p, dtype)
    if not (p / "config.json").exists():
        raise ModelLoadError(f"model path {str(p)!r} has no config.json (nor adapter_config.json): not an HF "
                             "model or LoRA adapter folder")
    try:
        tok = load_tokenizer(p)
        model = load_causal_lm(p, dtype, implementation)
    except ModelLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - turned into a one-paragraph error
        raise ModelLoadError(f"could not load model from {str(p)!r}: {type(e).__name__}: {e}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return model, tok


def load_tokenizer(path: Path):
    """The tokenizer saved in ``path``: the class its ``tokenizer_config.json`` names, loaded directly (what
    ``AutoTokenizer`` would pick, without reading the model config: that import chain costs ~50 MB resident),
    else ``AutoTokenizer``."""
    import json

    import_transformers()
    from transformers import AutoTokenizer
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    cfg_file = path / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text()) if cfg_file.exists() else {}
    name = cfg.get("tokenizer_class")
    cls = tokenizer_class_from_name(name) if isinstance(name, str) and "auto_map" not in cfg else None
    if cls is not None:
        return cls.from_pretrained(path, local_files_only=True)
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def load_causal_lm(path: Path, dtype: str = "float32", implementation: str = "auto"):
    """The causal LM in ``path``: the class the ``causal_lm`` hook loads it into (``rlvr.hooks``: with the
    accelerations on, rlvr's own Llama module where it applies) or transformers' class (see
    ``ModelConfig.implementation``)."""
    from rlvr import hooks

    if implementation not in ("auto", "native", "hf"):
        raise ModelLoadError(f"model.implementation must be auto, native or hf, got {implementation!r}")
    if implementation != "hf":
        if hooks.HOOKS.causal_lm is not None:
            model = hooks.HOOKS.causal_lm(path, DTYPES[dtype], implementation)
            if model is not None:
                return model
        elif implementation == "native":
            raise ModelLoadError(f"model path {str(path)!r}: model.implementation is native but the accelerations "
                                 "are off (RLVR_ACCEL=0); use auto or hf")
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=DTYPES[dtype])


def adapter_base(adapter_dir: str | Path) -> Path:
    """The base model folder a LoRA adapter folder names (``base_model_name_or_path``, absolute or relative
    to the adapter folder); ModelLoadError naming both when it is not a local folder."""
    import json

    p = Path(adapter_dir)
    cfg = json.loads((p / "adapter_config.json").read_text())
    base = cfg.get("base_model_name_or_path") or ""
    for cand in ([Path(base)] if os.path.isabs(base) else [p / base, Path(base)]) if base else []:
        if (cand / "config.json").exists() or (cand / "adapter_config.json").exists():
            return cand
    raise ModelLoadError(f"LoRA adapter {str(p)!r}: its base model {base!r} (adapter_config.json: "
                         "base_model_name_or_path) is not a local model folder; edit that field to point at the base")


def load_adapter_folder(path: str | Path, dtype: str = "float32"):
    """A LoRA adapter folder as a starting point: its base model with the adapter merged in."""
    from peft import PeftModel

    base, tok = load_pretrained(adapter_base(path), dtype, "hf")  # peft wraps transformers' classes
    try:
        model = PeftModel.from_pretrained(base, str(path)).merge_and_unload()
    except Exception as e:  # noqa: BLE001 - turned into a one-paragraph error
        raise ModelLoadError(f"could not apply the LoRA adapter {str(path)!r}: {type(e).__name__}: {e}") from None
    for p in model.parameters():  # peft loads for inference (frozen); a starting point trains
        p.requires_grad_(True)
    return model, tok


def add_lora(model, lora_cfg, task_type: str = "CAUSAL_LM"):
    """Wrap the model with peft LoRA adapters (only adapter weights train; ``SEQ_CLS`` also trains the
    new score head in full)."""
    from peft import LoraConfig, get_peft_model

    names = {n.split(".")[-1] for n, _ in model.named_modules()}
    targets = [t for t in lora_cfg.target_modules if t in names]
    if not targets:
        raise ModelLoadError(f"model.lora.target_modules {lora_cfg.target_modules} match no module of the model")
    pcfg = LoraConfig(r=lora_cfg.r, lora_alpha=lora_cfg.alpha, lora_dropout=lora_cfg.dropout,
                      target_modules=targets, task_type=task_type)
    return upcast_trainable(get_peft_model(model, pcfg))


def upcast_trainable(model):
    """Cast every trainable parameter to float32 in place (fp32 master weights over a low-precision base:
    LoRA adapters, a new head trained in full); frozen weights keep their dtype. Returns ``model``."""
    for p in model.parameters():
        if p.requires_grad and p.is_floating_point() and p.dtype != torch.float32:
            p.data = p.data.float()
    return model


def is_peft(model) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")
