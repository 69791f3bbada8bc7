"""Random-init models of real shapes: what a 0.5B or 1B model costs, without downloading its weights.

``build_shape(out_dir, "qwen2.5-0.5b")`` writes an HF folder (safetensors, ``config.json``, tokenizer) holding a
model of a named real configuration (:data:`SHAPES`) or of any HF ``config.json`` given by path, with random
weights (seeded) and a tokenizer whose vocabulary is exactly the config's ``vocab_size``: a byte-level BPE
trained here on a small built-in corpus (:func:`shape_tokenizer`), its vocabulary filled up to the size with
reserved tokens no text produces. Every id the model can emit decodes; every text encodes. The folder
loads, trains, generates and checkpoints through the same code as any HF checkpoint (``model.path``).

A random model's costs are the real one's (the same matmuls, the same logits, KV cache and optimizer
state); its text is noise. The special ids (pad, eos, bos) are the tokenizer's, written into the config.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rlvr.errors import ConfigError
from rlvr.models.hf import import_transformers

SHAPES: dict[str, dict] = {
    "qwen2.5-0.5b": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
        "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
        "tie_word_embeddings": True, "rope_theta": 1000000.0, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": 24, "attention_dropout": 0.0, "initializer_range": 0.02,
    },
    "llama-3.2-1b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
        "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
        "vocab_size": 128256, "tie_word_embeddings": True, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "hidden_act": "silu", "attention_bias": False,
        "mlp_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
    },
}
"""Named real configurations (the published ``config.json`` of each model, token ids aside)."""

REQUIRED = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers")

CORPUS = """\
The quick brown fox jumps over the lazy dog. A model learns to answer questions, to write programs and to
solve problems step by step. Question: what is 12 + 35? Answer: 47. What is 7 * 8? 56. Compute 144 / 12 = 12.
def add(a, b):
    return a + b

for i in range(10):
    print(i, i * i)

SELECT name, count(*) FROM users WHERE age > 30 GROUP BY name ORDER BY name;
The verifier checks the answer; the reward is 1 when it is correct and 0 otherwise. Reasoning comes first,
then the final answer in the requested format. <think>Let x be the number of apples.</think> The answer is 42.
"""
"""The built-in text the byte-level BPE is trained on (merges for common English, digits, code, SQL)."""

BASE_VOCAB = 4096
"""Most entries the BPE learns (the rest of a real vocabulary is reserved tokens)."""


def shape_config(shape: str) -> dict:
    """The configuration of a named shape (:data:`SHAPES`) or of a ``config.json`` path; ConfigError naming it."""
    if shape in SHAPES:
        return dict(SHAPES[shape])
    p = Path(shape)
    if p.is_dir():
        p = p / "config.json"
    if not p.suffix == ".json" and not p.exists():
        raise ConfigError(f"--shape {shape!r}: not a known shape ({', '.join(SHAPES)}) nor a config.json path")
    if not p.exists():
        raise ConfigError(f"--shape {shape!r}: file {str(p)!r} does not exist")
    try:
        raw = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}: line {e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: a config.json holds a JSON object")
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise ConfigError(f"{p}: no {missing[0]!r} field (an HF causal LM config.json has {', '.join(REQUIRED)})")
    return raw


def shape_tokenizer(vocab_size: int):
    """A byte-level BPE trained on :data:`CORPUS` (at most :data:`BASE_VOCAB` entries, rlvr's special tokens and
    chat template) whose vocabulary is filled with ``<|reserved_N|>`` entries up to exactly ``vocab_size``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from rlvr.models.tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS

    import_transformers()
    from transformers import PreTrainedTokenizerFast

    least = len(SPECIAL_TOKENS) + 256
    if vocab_size < least:
        raise ConfigError(f"vocab_size {vocab_size} is too small for a byte-level tokenizer (at least {least})")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=min(vocab_size, BASE_VOCAB), special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS] * 4, trainer)
    state = json.loads(tok.to_str())
    vocab = state["model"]["vocab"]
    n = len(vocab)
    vocab.update({f"<|reserved_{i}|>": n + i for i in range(vocab_size - n)})
    tok = Tokenizer.from_str(json.dumps(state))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>",
        additional_special_tokens=SPECIAL_TOKENS[4:], padding_side="left")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_shape(out_dir: str | Path | None, shape: str, seed: int = 0, overrides: dict | None = None,
                dtype: str = "float32"):
    """Build (and, given ``out_dir``, save) a random-init model of ``shape`` (a name of :data:`SHAPES` or a
    ``config.json`` path; ``overrides``: config fields replaced, e.g. ``num_hidden_layers``) and its tokenizer;
    returns ``(model, tokenizer)``."""
    raw = {**shape_config(shape), **(overrides or {})}
    tok = shape_tokenizer(int(raw["vocab_size"]))
    raw.update(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    transformers = import_transformers()
    kind = raw.pop("model_type")
    raw.pop("transformers_version", None)
    try:
        cfg = transformers.AutoConfig.for_model(kind, **raw)
    except ValueError as e:
        raise ConfigError(f"--shape {shape!r}: model_type {kind!r}: {e}".splitlines()[0]) from None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = [tok.eos_token_id, tok.convert_tokens_to_ids("<|end|>")]
    if out_dir is not None:
        from rlvr.models.checkpoint import save_pretrained_atomic
        from rlvr.models.prompt_format import make_format

        save_pretrained_atomic(model, tok, out_dir, prompt_format=make_format())
    return model, tok


def parse_overrides(items: list[str]) -> dict:
    """``KEY=VALUE`` strings (VALUE as JSON, else a string) -> a dict; ConfigError naming a malformed one."""
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE (e.g. num_hidden_layers=4)")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out
