"""A character-level tokenizer built with the `tokenizers` library, with pad/eos and a chat template.

Every printable ASCII character and newline is one token, so digits are single tokens (what small
models need to learn arithmetic). Saved with ``save_pretrained`` it loads with
``AutoTokenizer.from_pretrained`` like any HF tokenizer.
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


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """Build the deterministic character tokenizer (ids: specials first, then sorted characters)."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>",
        additional_special_tokens=SPECIAL_TOKENS[4:], padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
