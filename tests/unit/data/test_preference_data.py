"""Preference data: JSONL/HF-row parsing with located errors, pairs <-> unpaired, truncation, templating."""

import json

import pytest

from rlvr.data.chat import encode_prompt, end_of_turn_id
from rlvr.data.preference import (PreferencePair, UnpairedExample, as_pairs, as_unpaired, encode_pair,
                                  encode_unpaired, fit_length, load_preference_jsonl, load_preferences,
                                  records_from_rows, write_pairs_jsonl)
from rlvr.errors import DataError
from rlvr.models.tokenizer import build_char_tokenizer


def write(tmp_path, lines, name="p.jsonl"):
    p = tmp_path / name
    p.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return p


def test_pair_unpaired_and_optional_fields(tmp_path):
    p = write(tmp_path, [
        {"prompt": "1+1=?", "chosen": "2", "rejected": "3", "id": 7, "margin": 0.5, "votes": [1, -1, 0],
         "chosen_score": 1, "rejected_score": 0},
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2=?"}],
         "completion": "4", "desirable": True},
    ])
    a, b = load_preference_jsonl(p)
    assert isinstance(a, PreferencePair) and (a.prompt, a.chosen, a.rejected, a.id) == ("1+1=?", "2", "3", "7")
    assert a.margin == 0.5 and a.votes == [1, -1, 0] and a.chosen_score == 1.0 and a.source == f"{p}:1"
    assert isinstance(b, UnpairedExample) and b.desirable is True and b.prompt == "2+2=?"
    assert b.task().policy_messages()[0] == {"role": "system", "content": "be brief"}


def test_chat_style_chosen_takes_last_assistant_turn_and_context_as_prompt(tmp_path):
    conv = [{"role": "user", "content": "hi"}]
    p = write(tmp_path, [{"chosen": conv + [{"role": "assistant", "content": "hello"}],
                          "rejected": conv + [{"role": "assistant", "content": "go away"}]}])
    (pair,) = load_preference_jsonl(p)
    assert (pair.prompt, pair.chosen, pair.rejected, pair.messages) == ("hi", "hello", "go away", conv)


@pytest.mark.parametrize("line, needle", [
    ({"prompt": "x", "chosen": "a", "rejected": "b", "extra": 1}, "unknown field(s) ['extra']"),
    ({"prompt": "x", "chosen": "a"}, "missing required field 'rejected'"),
    ({"prompt": "x", "completion": "a"}, "missing required field 'label'"),
    ({"prompt": "x", "completion": "a", "desirable": "yes"}, "'desirable' must be true or false"),
    ({"prompt": "x", "chosen": "a", "rejected": "b", "votes": [2]}, "'votes' must be"),
    ({"prompt": "x", "chosen": "a", "rejected": "b", "margin": "big"}, "'margin' must be a number"),
    ({"chosen": "a", "rejected": "b"}, "missing required field 'prompt'"),
    ({"prompt": "x", "chosen": [{"role": "user", "content": "a"}], "rejected": "b"}, "not 'assistant'"),
    ({"prompt": "x"}, "needs 'chosen' and 'rejected'"),
])
def test_bad_lines_name_file_line_and_field(tmp_path, line, needle):
    p = write(tmp_path, [{"prompt": "ok", "chosen": "a", "rejected": "b"}, line])
    with pytest.raises(DataError) as e:
        load_preference_jsonl(p)
    assert f"{p}:2" in str(e.value) and needle in str(e.value)


def test_malformed_json_and_empty_file(tmp_path):
    with pytest.raises(DataError, match=r"p.jsonl:1: malformed JSON"):
        load_preference_jsonl(write(tmp_path, ["{not json"]))
    with pytest.raises(DataError, match="no preference records"):
        load_preference_jsonl(write(tmp_path, [], name="e.jsonl"))


def test_as_pairs_rejects_unpaired_line_by_location_and_as_unpaired_splits_pairs(tmp_path):
    p = write(tmp_path, [{"prompt": "x", "chosen": "a", "rejected": "b"},
                         {"prompt": "y", "completion": "c", "desirable": False}])
    recs = load_preference_jsonl(p)
    with pytest.raises(DataError, match=rf"{p}:2: loss dpo needs paired lines"):
        as_pairs(recs, "loss dpo")
    un = as_unpaired(recs)
    assert [(u.prompt, u.completion, u.desirable) for u in un] == [("x", "a", True), ("x", "b", False),
                                                                  ("y", "c", False)]


def test_hf_rows_ignore_extra_columns_and_name_the_row():
    rows = [{"prompt": "x", "chosen": "a", "rejected": "b", "source_dataset": "hh"}, {"prompt": "y"}]
    with pytest.raises(DataError, match=r"ds\[train\]#1"):
        records_from_rows(rows, "ds[train]")
    (r,) = records_from_rows(rows[:1], "ds[train]")
    assert (r.prompt, r.chosen, r.rejected) == ("x", "a", "b")


def test_hf_path_without_datasets_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_datasets(name, *a, **k):
        if name == "datasets":
            raise ImportError("no")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(DataError, match="needs the `datasets` package"):
        load_preferences("some/hub-dataset")


def test_write_then_read_round_trip(tmp_path):
    pairs = [PreferencePair("1+1=?", "2", "3", id="a", margin=0.0, votes=[1, 0], meta={"family": "add"}),
             PreferencePair("hi", "x", "y", messages=[{"role": "user", "content": "hi"}])]
    write_pairs_jsonl(tmp_path / "out.jsonl", pairs)
    back = load_preference_jsonl(tmp_path / "out.jsonl")
    for a, b in zip(pairs, back):
        assert (a.prompt, a.chosen, a.rejected, a.id, a.margin, a.votes, a.meta, a.messages) == \
               (b.prompt, b.chosen, b.rejected, b.id, b.margin, b.votes, b.meta, b.messages)


def test_fit_length_by_hand():
    p, cs = [1, 2, 3, 4, 5, 6], [[10, 11, 12], [20, 21]]
    assert fit_length(p, cs, 9) == (p, cs)                        # 6 + 3 fits
    # L = 8: completion budget max(8 - 6, 4) = 4 -> unchanged; prompt keeps 8 - 3 = 5 tokens from the end
    assert fit_length(p, cs, 8) == ([2, 3, 4, 5, 6], cs)
    # L = 4: budget max(-2, 2) = 2 -> [10, 11], [20, 21]; prompt keeps 4 - 2 = 2 tokens
    assert fit_length(p, cs, 4) == ([5, 6], [[10, 11], [20, 21]])


def test_encode_pair_shares_prompt_masks_completion_and_ends_turn():
    tok = build_char_tokenizer()
    pair = PreferencePair("12*3=?", "36", "39")
    e = encode_pair(tok, pair, 256)
    p = encode_prompt(tok, pair.task())
    assert e.chosen_ids[:len(p)] == p and e.rejected_ids[:len(p)] == p
    assert e.chosen_mask == [0] * len(p) + [1] * 3 and e.rejected_mask == [0] * len(p) + [1] * 3
    assert e.chosen_ids[-1] == end_of_turn_id(tok) and tok.decode(e.chosen_ids[len(p):-1]) == "36"
    ids, mask = encode_unpaired(tok, UnpairedExample("12*3=?", "36", True), 256)
    assert ids == e.chosen_ids and mask == e.chosen_mask
    short = encode_pair(tok, pair, 6)
    assert len(short.chosen_ids) == 6 and sum(short.chosen_mask) == 3
