"""The tiny model's ``bytes`` tokenizer kind encodes any text (byte fallback) and decodes it back; the
quickstart's ``char`` kind is unchanged."""

from rlvr.data.encodable import CharCheck
from rlvr.models.tokenizer import build_tokenizer


def test_bytes_kind_round_trips_any_text_and_char_kind_is_unchanged(tmp_path):
    from transformers import AutoTokenizer

    from rlvr.models.tiny import build_tiny

    text = "café × −3\t→ 🙂 Ω\r\nplain 12+7="
    char, byt = build_tokenizer("char"), build_tokenizer("bytes")
    assert len(char) == 105 and len(byt) == 105 + 256
    assert char("plain 12+7=")["input_ids"] == byt("plain 12+7=")["input_ids"]  # same ids for ASCII
    ids = byt(text, add_special_tokens=False)["input_ids"]
    assert byt.unk_token_id not in ids and byt.decode(ids) == text
    assert all(not CharCheck(byt).is_bad(ch) for ch in text)
    assert CharCheck(char).is_bad("é")  # the char kind refuses (the encodable check), never drops silently
    model, _ = build_tiny(tmp_path / "m", size="test", tokenizer="bytes")
    assert model.config.vocab_size == len(byt)
    loaded = AutoTokenizer.from_pretrained(tmp_path / "m")
    assert loaded.decode(loaded(text, add_special_tokens=False)["input_ids"]) == text


def test_recipe_chooses_the_kind():
    import pytest

    from rlvr.config.model import TinyModel

    assert TinyModel().tokenizer == "char" and TinyModel(tokenizer="bytes").tokenizer == "bytes"
    with pytest.raises(ValueError):
        TinyModel(tokenizer="words")
