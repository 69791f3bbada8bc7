"""Text a model's tokenizer cannot encode, named by file, line, field and character.

A tokenizer with a fixed vocabulary and no byte fallback (the tiny model's character tokenizer, WordPiece,
SentencePiece without byte fallback) turns a character it does not know into ``<unk>``: the tiny model
reads ``café`` as ``caf<unk>`` and a tab, ``×`` or ``−`` as the same ``<unk>``, so the prompt it trains or is
evaluated on is not the one in the file. The test is the tokenizer's own, with no special case: each distinct
character is encoded alone, and it is unencodable when its ids contain the unknown token's id, are empty,
or (for a tokenizer with no unknown token) do not decode back to it. Byte-level BPE tokenizers (GPT-2, Qwen,
Llama 3) encode every character, so the check passes for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlvr.errors import DataError, listing


class CharCheck:
    """Which characters a tokenizer cannot encode (each character tested once, then cached)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.unk = getattr(tokenizer, "unk_token_id", None)
        self._bad: dict[str, bool] = {}

    def is_bad(self, ch: str) -> bool:
        hit = self._bad.get(ch)
        if hit is None:
            ids = self.tok.encode(ch, add_special_tokens=False)
            if not ids:
                hit = not ch.isspace()  # a SentencePiece tokenizer may drop a lone space: that is not a loss
            elif self.unk is not None:
                hit = self.unk in ids
            else:
                hit = self.tok.decode(ids).strip() != ch.strip()
            self._bad[ch] = hit
        return hit

    def bad_chars(self, text: str) -> list[str]:
        """The distinct characters of ``text`` the tokenizer cannot encode, in order of first appearance."""
        return [ch for ch in dict.fromkeys(text) if self.is_bad(ch)]


def describe_char(ch: str) -> str:
    """``'é' (U+00E9)``, ``'\\t' (U+0009)``."""
    return f"{ch!r} (U+{ord(ch):04X})"


def texts_of(item: Any, demonstrations: bool = True) -> list[tuple[str, str]]:
    """``(field, text)`` of everything of a task or preference record that the model reads or is trained on:
    the prompt (or each chat message), a demonstration (``solution``) when ``demonstrations``, a pair's
    ``chosen`` and ``rejected``, an unpaired example's ``completion``."""
    msgs = getattr(item, "messages", None)
    out = ([(f"messages[{i}] ({m['role']})", m["content"]) for i, m in enumerate(msgs)] if msgs
           else [("prompt", getattr(item, "prompt", "") or "")])
    for field in ("chosen", "rejected", "completion") + (("solution",) if demonstrations else ()):
        val = getattr(item, field, None)
        if isinstance(val, str):
            out.append((field, val))
    return out


def unencodable(tokenizer: Any, items: Iterable[Any], demonstrations: bool = True,
                check: CharCheck | None = None) -> list[str]:
    """``"<file:line>: field 'prompt': character 'é' (U+00E9) ..."`` for each field of ``items`` (tasks or
    preference records, located by their ``source``) holding characters the tokenizer cannot encode. A
    text met again (a system prompt put before every task) is reported once, where it first appears."""
    check = check or CharCheck(tokenizer)
    out, seen = [], set()
    for item in items:
        where = getattr(item, "source", "") or f"id {getattr(item, 'id', '?')!r}"
        for field, text in texts_of(item, demonstrations):
            if text in seen:
                continue
            seen.add(text)
            bad = check.bad_chars(text)
            if bad:
                chars = ", ".join(describe_char(c) for c in bad)
                out.append(f"{where}: field {field!r}: character{'s' if len(bad) > 1 else ''} {chars} not in the "
                           "model's tokenizer (read as its unknown token)")
    return out


def refuse_unencodable(tokenizer: Any, items: list, demonstrations: bool = False) -> list:
    """``items`` unchanged, or DataError naming every field (file, line, character) the tokenizer cannot encode."""
    problems = unencodable(tokenizer, items, demonstrations)
    if not problems:
        return items
    raise DataError(f"{listing(problems, 'fields hold text the tokenizer cannot encode')}. Replace those characters (e.g. 'x' for '×', '-' for '−'), or use a model whose "
                    "tokenizer has them (the tiny model: model.tiny.tokenizer: bytes, or rlvr build-tiny --tokenizer bytes)")
