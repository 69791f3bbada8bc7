"""The run header's parts: steps of each stage, the model's size without loading it, the precision in effect."""

from pathlib import Path

import pytest

from rlvr.commands.header import model_params, precision_text, stage_text
from rlvr.config.model import ModelConfig, TinyModel
from rlvr.config.preference import PreferenceStage
from rlvr.config.rl import RLStage
from rlvr.config.sft import SFTStage


def test_stage_text_gives_steps_time_cap_and_eval_interval():
    assert stage_text(SFTStage(name="sft", max_steps=450, eval_every=150)) == "sft (sft): 450 steps, eval every 150"
    rl = RLStage(name="grpo", max_steps=160, max_minutes=4.5)
    assert stage_text(rl) == "grpo (rl): 160 steps, time cap 4.5 min"
    pref = PreferenceStage.model_validate({"name": "dpo", "epochs": 4, "pairs": {"path": "p.jsonl"}})
    assert stage_text(pref) == "dpo (preference): 4 epochs of its pairs"
    patient = SFTStage(name="sft", max_steps=1500, eval_every=100, patience=2, best_metric="eval/pass_at_1")
    assert stage_text(patient) == ("sft (sft): 1500 steps, eval every 100, stops after 2 held-out measurements "
                                   "without a better eval/pass_at_1")


def test_model_params_without_loading_the_model(tiny_dir):
    from rlvr.models.load import load_model_and_tokenizer
    from rlvr.models.tiny import build_tiny, num_params

    model, _ = load_model_and_tokenizer(ModelConfig(path=tiny_dir))
    assert model_params(ModelConfig(path=tiny_dir)) == num_params(model)  # from the safetensors header
    assert model_params(ModelConfig(tiny=TinyModel(size="test"))) == num_params(build_tiny(size="test")[0])


def test_precision_text_says_what_auto_decides(monkeypatch):
    import rlvr.commands.header as h

    auto = ModelConfig(tiny=TinyModel(), autocast_bf16="auto")
    monkeypatch.setattr(h, "cpu_bf16_units", lambda: "avx512")
    assert "auto -> bf16 training forwards (CPU bf16 units: avx512)" in precision_text(auto, 866_560, "cpu")
    assert "bf16 training forwards and generation" in precision_text(auto, 5_000_000, "cpu")
    assert "float32 compute (model too small)" in precision_text(auto, 100_000, "cpu")
    monkeypatch.setattr(h, "cpu_bf16_units", lambda: None)
    assert "float32 compute (no CPU bf16 units)" in precision_text(auto, 866_560, "cpu")
    assert precision_text(ModelConfig(tiny=TinyModel(), autocast_bf16=True), 1, "cuda") == \
        "float32 weights, bf16 autocast (training and generation)"


def test_stage_text_says_how_many_demonstrations_of_an_imperfect_teacher_fail():
    from rlvr.config.sft import SFTStage

    honest = SFTStage(data={"type": "builtin", "families": ["mul31"], "n": 400})
    taught = SFTStage(data={"type": "builtin", "families": ["add2", "mul31"], "n": 400,
                            "teacher": {"rate": 1.0, "families": ["mul31"]}})
    assert "teacher" not in stage_text(honest)
    text = stage_text(taught)
    share = int(text.split("teacher (mul31): ")[1].split("%")[0])
    assert 20 <= share <= 40, text  # half the draws are mul31, ~60% of those have a leading carry to drop
    assert text.endswith("of them fail the verifier")


def test_a_teacher_named_by_its_file_is_named_and_measured_by_replaying_its_demonstrations():
    pytest.importorskip("textarena")
    from rlvr.config.load import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "textarena.yaml")
    sft = recipe.stages[0]
    sft = sft.model_copy(update={"data": sft.data.model_copy(update={"n": 40})})
    text = stage_text(sft)
    assert ", demonstrations from a teacher (recipes/textarena_teacher.py:random_in_range): " in text, text
    share = int(text.rsplit(": ", 1)[1].split("%")[0])
    assert 15 <= share <= 70, text  # it guesses uniformly inside the range the hints allow: it loses ~40% of games
