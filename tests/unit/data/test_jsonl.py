"""JSONL task files: errors name the file and line; gold fields stay out of the prompt."""

import pytest

from rlvr.data.jsonl import load_tasks
from rlvr.errors import DataError


def test_malformed_line_is_named(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"id": "a", "prompt": "1+1", "answer": "2"}\n{"id": "b", "prompt": \n')
    with pytest.raises(DataError, match=rf"{p}:2: malformed JSON"):
        load_tasks(p)


def test_missing_field_is_named(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"id": "a", "answer": "2"}\n')
    with pytest.raises(DataError, match=rf"{p}:1: missing required field 'prompt'"):
        load_tasks(p)


def test_id_defaults_to_file_and_line(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"prompt": "1+1", "answer": "2"}\n')
    assert load_tasks(p)[0].id == f"{p}:1"


def test_unknown_field_and_kind(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"id": "a", "prompt": "x", "answr": "2"}\n')
    with pytest.raises(DataError, match="unknown field"):
        load_tasks(p)
    p.write_text('{"id": "a", "prompt": "x", "kind": "poetry"}\n')
    with pytest.raises(DataError, match="kind"):
        load_tasks(p)


def test_gold_goes_to_gold_and_paths_resolve(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"id": 1, "kind": "sql", "prompt": "q", "database": "db.sqlite", "gold_sql": "SELECT 1"}\n')
    (t,) = load_tasks(p)
    assert t.id == "1" and t.gold["gold_sql"] == "SELECT 1"
    assert t.gold["database"] == str(tmp_path / "db.sqlite")
    assert "SELECT 1" not in str(t.policy_messages())
