"""Character-level tokenizers built with the `tokenizers` library, with pad/eos and a chat template.

Every printable ASCII character and newline is one token, so digits are single tokens (what small
models need to learn arithmetic). Kinds (:data:`TOKENIZER_KINDS`): ``char`` knows only those
characters (the quickstart's); ``bytes`` adds the 256 byte tokens ``<0x00>``..``<0xFF>`` and writes
any other character as its UTF-8 bytes (byte fallback), so every text encodes and decodes back
unchanged. Saved with ``save_pretrained`` either loads with ``AutoTokenizer.from_pretrained`` like
any HF tokenizer.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from rlvr.models.hf import import_transformers

import_transformers()
from transformers import PreTrainedTokenizerFast  # noqa: E402 (after import_transformers)

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<|user|>", "<|assistant|>", "<|system|>",
                  "<|tool|>", "<|end|>"]
CHARS = sorted(set(string.printable) - set("\t\r\x0b\x0c"))

# The assistant turn ends with <|end|>; <eos> closes the whole sequence. Generation stops at either.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>' + m['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


TOKENIZER_KINDS: tuple[str, ...] = ("char", "bytes")
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]


def build_tokenizer(kind: str = "char") -> PreTrainedTokenizerFast:
    """The tokenizer of a kind (:data:`TOKENIZER_KINDS`)."""
    if kind == "char":
        return build_char_tokenizer()
    if kind == "bytes":
        return build_char_tokenizer(byte_fallback=True)
    raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {list(TOKENIZER_KINDS)}")


def build_char_tokenizer(byte_fallback: bool = False) -> PreTrainedTokenizerFast:
    """Build the deterministic character tokenizer (ids: specials first, then sorted characters, then --
    with ``byte_fallback`` -- the 256 byte tokens that spell any other character in UTF-8)."""
    split = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    if byte_fallback:
        vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARS + BYTE_TOKENS)}
        tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    else:
        vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARS)}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        tok.decoder = decoders.Fuse()
    tok.pre_tokenizer = split
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>",
        additional_special_tokens=SPECIAL_TOKENS[4:], padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
