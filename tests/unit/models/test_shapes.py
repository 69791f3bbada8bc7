"""Random-init models of real shapes (rlvr.models.shapes, `rlvr build-model`): a config.json with a real
vocabulary (151,936) and a small body builds, loads through the ordinary loader, generates and gives logprobs;
bad shapes are one-line errors naming them. The real 0.5B build is `slow`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import token_logprobs
from rlvr.models.shapes import SHAPES, shape_tokenizer
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine


def shrunk_qwen(tmp_path, **kw):
    cfg = {**SHAPES["qwen2.5-0.5b"], "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, **kw}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


def check_folder(out, vocab):
    model, tok = load_pretrained(out)
    assert model.config.vocab_size == vocab == len(tok)
    text = "What is 12 + 35? Ünïcode ✓ → 47"
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text and max(ids) < vocab
    assert tok.decode([vocab - 1]) != ""  # the reserved ids decode too
    prompt = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], add_generation_prompt=True)
    prompt = prompt if isinstance(prompt[0], int) else prompt["input_ids"]
    gen = HFEngine(model, tok).generate([prompt], SamplingParams(n=2, max_new_tokens=6, seed=0))
    row = prompt + gen.completion_ids[0]
    ids = torch.tensor([row])
    lp, _ = token_logprobs(model, ids, torch.ones_like(ids))
    assert lp.shape == ids.shape and bool(torch.isfinite(lp).all()) and float(lp[0, 1:].max()) < 0
    return model


@pytest.fixture(scope="module")
def real_vocab(tmp_path_factory):
    """A folder built from a config.json of Qwen2.5-0.5B's vocabulary (151,936) with a 2-layer, 32-wide body."""
    from rlvr.models.shapes import build_shape

    tmp = tmp_path_factory.mktemp("shape")
    build_shape(tmp / "m", str(shrunk_qwen(tmp)), seed=3)
    return tmp / "m"


def test_a_real_vocabulary_folder_loads_generates_and_gives_logprobs(real_vocab):
    model = check_folder(real_vocab, 151_936)
    assert model.config.num_key_value_heads == 2 and model.config.tie_word_embeddings
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def test_build_model_command_from_a_config_file(tmp_path, rlvr_cli):
    out = tmp_path / "m"
    code, stdout, err = rlvr_cli("build-model", out, "--shape", shrunk_qwen(tmp_path, vocab_size=2000))
    assert code == 0, err
    assert "vocabulary 2,000" in stdout
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 2000
    check_folder(out, 2000)


def test_set_overrides_fields_of_a_named_shape(tmp_path, rlvr_cli):
    out = tmp_path / "m"
    code, _, err = rlvr_cli("build-model", out, "--shape", "llama-3.2-1b", "--set", "hidden_size=64",
                            "--set", "intermediate_size=64", "--set", "num_hidden_layers=1",
                            "--set", "num_attention_heads=4", "--set", "num_key_value_heads=2", "--set", "head_dim=16",
                            "--set", "vocab_size=3000")
    assert code == 0, err
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["num_hidden_layers"] == 1 and cfg["vocab_size"] == 3000
    check_folder(out, 3000)


@pytest.mark.parametrize("shape, where", [
    ("qwen9-7b", "'qwen9-7b'"),
    ("{missing}/config.json", "does not exist"),
    ("{bad}", "line 2"),
    ("{nofield}", "'vocab_size'"),
])
def test_bad_shape_is_one_line_naming_it(tmp_path, rlvr_cli, shape, where):
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "qwen2",\n "vocab_size": }')
    nofield = tmp_path / "nofield.json"
    nofield.write_text('{"model_type": "qwen2", "hidden_size": 8, "num_hidden_layers": 1}')
    shape = shape.format(missing=tmp_path / "nowhere", bad=bad, nofield=nofield)
    code, out, err = rlvr_cli("build-model", tmp_path / "m", "--shape", shape)
    msg = (out + err).strip()
    assert code != 0 and where in msg and "Traceback" not in msg and len(msg.splitlines()) == 1, msg
    assert not (tmp_path / "m").exists()


def test_tokenizer_vocabulary_is_exactly_the_size():
    tok = shape_tokenizer(1000)
    assert len(tok) == 1000 and len(tok("a b c")["input_ids"]) >= 1


@pytest.mark.slow
def test_real_qwen_shape_builds_loads_and_generates(tmp_path, rlvr_cli):
    code, stdout, err = rlvr_cli("build-model", tmp_path / "q", "--shape", "qwen2.5-0.5b")
    assert code == 0, err
    assert "494,032,768 parameters" in stdout  # Qwen2.5-0.5B's count (tied embeddings)
    check_folder(tmp_path / "q", 151_936)


def test_sft_with_lora_trains_and_checkpoints_at_a_real_vocabulary(real_vocab, tmp_path, monkeypatch):
    """The ordinary trainer on a built folder: LoRA, the chunked head (16 tokens a chunk), the saved checkpoint."""
    from rlvr.config.data import BuiltinArithmetic
    from rlvr.config.model import LoraConfig, ModelConfig
    from rlvr.config.optim import OptimConfig
    from rlvr.config.sft import SFTStage
    from rlvr.models import lm_head
    from rlvr.trainers.sft import train_sft

    monkeypatch.setattr(lm_head, "_CHUNK", [None])
    out = real_vocab
    stage = SFTStage(data=BuiltinArithmetic(families=["add2"], n=16), optim=OptimConfig(lr=1e-2, warmup_steps=0),
                     max_steps=2, batch_size=4, micro_batch_size=4, save_every=0, log_every=1)
    cfg = ModelConfig(path=str(out), lora=LoraConfig(r=4, alpha=8), logit_chunk=16)
    res = train_sft(stage, cfg, tmp_path / "run", seed=0)
    rows = [json.loads(x) for x in Path(res.metrics_path).read_text().splitlines() if "train/loss" in x]
    assert len(rows) == 2 and all(r["train/loss"] > 5 for r in rows)  # ~log(151,936) = 11.9 at random init
    check_folder(res.checkpoint, 151_936)
