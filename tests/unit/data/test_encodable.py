"""Text the model's tokenizer cannot encode is named by file, line, field and character (with its code
point); the test is the tokenizer's own (unknown-token id, or a round trip), so a byte-level BPE tokenizer
passes every character."""

import json

import pytest

from rlvr.data.encodable import CharCheck, refuse_unencodable, unencodable
from rlvr.data.jsonl import load_tasks
from rlvr.errors import DataError


@pytest.fixture(scope="module")
def char_tok():
    from rlvr.models.tokenizer import build_char_tokenizer

    return build_char_tokenizer()


@pytest.fixture(scope="module")
def byte_bpe():
    """A byte-level BPE tokenizer (GPT-2 / Qwen style) trained on a few words: no unknown token."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["hello world", "one two three"], vocab_size=300, show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer)


def test_the_char_tokenizer_reads_unknown_characters_as_unk(char_tok):
    """The premise: `café` is read as `caf<unk>`."""
    assert char_tok.decode(char_tok.encode("café", add_special_tokens=False)) == "caf<unk>"


@pytest.mark.parametrize("ch", ["\t", "×", "−", "é", "→", "😀", "\u00a0"])
def test_each_character_outside_the_vocabulary_is_named_with_its_code_point(tmp_path, char_tok, ch):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"prompt": "2+2", "answer": "4"}) + "\n" + json.dumps({"prompt": f"a{ch}b", "answer": "1"})
                 + "\n")
    with pytest.raises(DataError) as e:
        refuse_unencodable(char_tok, load_tasks(f))
    msg = str(e.value)
    assert f"{f}:2: field 'prompt': character {ch!r} (U+{ord(ch):04X})" in msg, msg
    assert f"{f}:1" not in msg


def test_chat_messages_and_demonstrations_are_checked_where_they_are_trained_on(tmp_path, char_tok):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": "3×4?"}], "completion": "12 é"}) + "\n")
    tasks = load_tasks(f)
    assert unencodable(char_tok, tasks, demonstrations=False) == [
        (f"{f}:1: field 'messages[1] (user)': character '×' (U+00D7) not in the model's tokenizer (read as its "
         "unknown token)")]
    both = unencodable(char_tok, tasks, demonstrations=True)
    assert len(both) == 2 and "field 'solution': character 'é' (U+00E9)" in both[1]


def test_plain_ascii_passes(tmp_path, char_tok):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"prompt": "What is 12 + 30?\nAnswer in \\boxed{}.", "answer": "42"}) + "\n")
    assert unencodable(char_tok, load_tasks(f)) == []


def test_a_byte_level_tokenizer_encodes_every_character(byte_bpe):
    check = CharCheck(byte_bpe)
    assert check.bad_chars("café\t3×4 − 1 → 😀\u00a0") == []
