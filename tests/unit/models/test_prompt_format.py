"""prompt_format.json: written inside the checkpoint's atomic write (listed in its manifest), by every save
made while a run's format is set, never otherwise; read back with one-line errors naming file and field."""

import json

import pytest
import torch

from rlvr.errors import DataError
from rlvr.models.checkpoint import save_pretrained_atomic, save_training_checkpoint, verify_checkpoint
from rlvr.models.prompt_format import FILE, checkpoint_format, make_format, read_format
from rlvr.models.tiny import build_tiny


@pytest.fixture(scope="module")
def tiny():
    return build_tiny(size="test", seed=0)


def test_a_save_inside_the_runs_format_carries_it_in_its_manifest(tiny, tmp_path):
    model, tok = tiny
    fmt = make_format("Be brief.", [{"name": "python", "function": "m:f"}], "float32", 16, 24)
    with checkpoint_format(fmt):
        final = save_pretrained_atomic(model, tok, tmp_path / "final")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step = save_training_checkpoint(tmp_path / "checkpoints", 5, model, tok, opt, None, {})
    for d in (final, step):
        got = read_format(d)
        assert got["system_prompt"] == "Be brief." and got["rewards"] == [{"name": "python", "function": "m:f"}]
        assert got["eval_batch_size"] == 16 and got["eval_max_new_tokens"] == 24
        assert got["chat_template"] is bool(tok.chat_template) is True  # the tiny tokenizer has one
        assert FILE in json.loads((d / "manifest.json").read_text())["files"]
        verify_checkpoint(d)
    outside = save_pretrained_atomic(model, tok, tmp_path / "plain")
    assert read_format(outside) is None  # no run format set: a plain HF folder, as before


def test_build_tiny_writes_a_format_without_a_system_prompt(tmp_path):
    build_tiny(tmp_path / "m", size="test")
    assert read_format(tmp_path / "m")["system_prompt"] is None


@pytest.mark.parametrize("text, field", [("{not json", "not valid JSON"), ('{"system_prompt": 3}', "'system_prompt'"),
                                         ('{"dtype": "int8"}', "'dtype'"), ('{"chat_template": "yes"}', "'chat_template'"),
                                         ('{"eval_batch_size": true}', "'eval_batch_size'"), ("[1]", "JSON object")])
def test_a_damaged_file_is_one_error_naming_the_file_and_field(tmp_path, text, field):
    (tmp_path / FILE).write_text(text)
    with pytest.raises(DataError) as e:
        read_format(tmp_path)
    assert str(tmp_path / FILE) in str(e.value) and field in str(e.value)
