"""The embedded default: a small Llama-architecture model built from scratch, deterministic by seed.

``build_tiny(out_dir, size="1m")`` writes an HF-format model (safetensors) and the character
tokenizer, so ``AutoModelForCausalLM.from_pretrained(out_dir)`` and ``AutoTokenizer.from_pretrained``
load it exactly like a hub checkpoint. ``tokenizer="bytes"`` gives it the byte-fallback tokenizer
that encodes any text (reasoning-gym's questions hold characters beyond printable ASCII). Sizes run from ~0.5M to ~20M parameters.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rlvr.models.hf import import_transformers

import_transformers()
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402 (after import_transformers)

from rlvr.models.tokenizer import build_tokenizer

# name -> (hidden, layers, heads, intermediate)
SIZES: dict[str, tuple[int, int, int, int]] = {
    "test": (64, 2, 4, 128),      # ~0.1M: unit tests
    "0.5m": (96, 4, 4, 256),
    "1m": (128, 4, 4, 384),
    "2m": (160, 6, 4, 448),
    "5m": (256, 6, 8, 704),
    "20m": (512, 6, 8, 1408),
}


def tiny_config(size: str = "1m", vocab_size: int = 105, max_positions: int = 512, **kw) -> LlamaConfig:
    """The LlamaConfig for a named size; extra keyword arguments override fields."""
    if size not in SIZES:
        raise ValueError(f"unknown tiny model size {size!r}; choose one of {sorted(SIZES)}")
    hidden, layers, heads, inter = SIZES[size]
    cfg = dict(
        vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=heads, intermediate_size=inter, max_position_embeddings=max_positions,
        rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=10000.0, pad_token_id=0, eos_token_id=1,
        bos_token_id=2, initializer_range=0.02,
    )
    cfg.update(kw)
    return LlamaConfig(**cfg)


def build_tiny(out_dir: str | Path | None = None, size: str = "1m", seed: int = 0, tokenizer: str = "char",
               **overrides):
    """Build (and optionally save) the tiny model and its tokenizer (kind ``tokenizer``: ``char`` or
    ``bytes``, :func:`rlvr.models.tokenizer.build_tokenizer`); returns ``(model, tokenizer)``."""
    tok = build_tokenizer(tokenizer)
    cfg = tiny_config(size, vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                      bos_token_id=tok.bos_token_id, **overrides)
    gen = torch.random.fork_rng(devices=[])
    with gen:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = [tok.eos_token_id, tok.convert_tokens_to_ids("<|end|>")]
    if out_dir is not None:
        from rlvr.models.checkpoint import save_pretrained_atomic
        from rlvr.models.prompt_format import make_format

        save_pretrained_atomic(model, tok, out_dir, prompt_format=make_format())  # no system prompt
    return model, tok


def num_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
