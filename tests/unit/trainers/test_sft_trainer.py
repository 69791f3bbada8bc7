"""SFT: completion-only loss, exact resume (N == N/2 + resume + N/2), accumulation invariance."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.model import ModelConfig
from rlvr.config.optim import OptimConfig
from rlvr.config.sft import SFTStage
from rlvr.models.checkpoint import list_checkpoints
from rlvr.data.order import data_order
from rlvr.trainers.sft import train_sft


def stage(**kw):
    base = dict(data=BuiltinArithmetic(families=["add2"], n=64), optim=OptimConfig(lr=3e-3, warmup_steps=2),
                max_steps=6, batch_size=8, micro_batch_size=8, save_every=3, keep_last=2, log_every=1)
    base.update(kw)
    return SFTStage(**base)


def weights(path):
    return load_file(f"{path}/model.safetensors")


def test_resume_equals_uninterrupted(tiny_dir, tmp_path):
    cfg = ModelConfig(path=tiny_dir)
    full = train_sft(stage(), cfg, tmp_path / "a", seed=1)
    with pytest.raises(KeyboardInterrupt):
        train_sft(stage(), cfg, tmp_path / "b", seed=1, crash_at_step=4)  # dies after the step-3 checkpoint
    resumed = train_sft(stage(), cfg, tmp_path / "b", seed=1, resume=True)
    wa, wb = weights(full.checkpoint), weights(resumed.checkpoint)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-6, rtol=0), k
    la = [json.loads(x) for x in open(full.metrics_path)]
    lb = [json.loads(x) for x in open(resumed.metrics_path) if "event" not in x]
    final_a = [r["train/loss"] for r in la if r["step"] == 6]
    final_b = [r["train/loss"] for r in lb if r["step"] == 6]
    assert final_a and final_a[-1] == pytest.approx(final_b[-1], abs=1e-6)
    # the interrupted run's metrics were kept (append-only): steps 1..4 then a resume event then 4..6
    assert any("event" in x for x in open(resumed.metrics_path))


def test_accumulation_split_gives_same_weights(tiny_dir, tmp_path):
    cfg = ModelConfig(path=tiny_dir)
    a = train_sft(stage(max_steps=2, save_every=0, micro_batch_size=8), cfg, tmp_path / "a", seed=2)
    b = train_sft(stage(max_steps=2, save_every=0, micro_batch_size=2), cfg, tmp_path / "b", seed=2)
    wa, wb = weights(a.checkpoint), weights(b.checkpoint)
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-5), k


def test_default_micro_batch_is_cut_by_the_token_budget(tiny_dir, tmp_path, monkeypatch):
    """``micro_batch_size`` unset: the step is cut by ``model.micro_tokens`` with the whole-batch gradient; a
    number given is taken as rows, the budget unread."""
    from rlvr.trainers import common

    seen = []
    real = common.accumulate
    monkeypatch.setattr(common, "accumulate", lambda micros, fwd, n: seen.append(micros) or real(micros, fwd, n))
    whole = train_sft(stage(max_steps=2, save_every=0), ModelConfig(path=tiny_dir), tmp_path / "a", seed=2)
    assert [len(m) for m in seen] == [1, 1]
    seen.clear()
    cut = train_sft(stage(max_steps=2, save_every=0, micro_batch_size=None),
                    ModelConfig(path=tiny_dir, micro_tokens=40), tmp_path / "b", seed=2)
    assert len(seen) == 2 and all(len(m) > 1 for m in seen)  # two steps, each cut
    wa, wb = weights(whole.checkpoint), weights(cut.checkpoint)
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-5), k
    seen.clear()
    train_sft(stage(max_steps=1, save_every=0, micro_batch_size=8), ModelConfig(path=tiny_dir, micro_tokens=40),
              tmp_path / "c", seed=2)
    assert [len(m) for m in seen] == [1]  # 8 rows given: one forward, the budget not applied


@pytest.mark.parametrize("budget, expected", [(None, [[0, 1, 2, 3]]), (80, [[0, 1], [2, 3]]),
                                              (30, [[0], [1], [2], [3]]), (200, [[0, 1, 2, 3]])])
def test_micro_batches_take_budget_over_longest_rows(budget, expected):
    from rlvr.trainers.common import micro_batches

    examples = [([1] * n, [1] * n) for n in (10, 20, 30, 40)]
    assert micro_batches(examples, [3, 1, 0, 2], 4, True, budget=budget) == expected


def test_loss_falls_and_checkpoints_are_pruned(tiny_dir, tmp_path):
    res = train_sft(stage(max_steps=12, save_every=3), ModelConfig(path=tiny_dir), tmp_path / "r", seed=0)
    losses = [r["train/loss"] for r in map(json.loads, open(res.metrics_path)) if "train/loss" in r]
    assert losses[-1] < losses[0] * 0.8
    cks = list_checkpoints(tmp_path / "r" / "sft" / "checkpoints")
    assert [c.name for c in cks] == ["step-000006", "step-000009"]  # keep_last=2 (step 12 is final/)


def test_data_order_is_a_deterministic_epoch_permutation():
    seen = [i for s in range(4) for i in data_order(10, seed=0, step=s, batch_size=5)]
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:]) == list(range(10))
    assert data_order(10, 0, 3, 5) == data_order(10, 0, 3, 5)


def test_demos_without_solution_are_rejected(tiny_dir, tmp_path):
    from rlvr.config.data import JsonlTasks
    from rlvr.errors import DataError

    p = tmp_path / "t.jsonl"
    p.write_text('{"id": "a", "prompt": "1+1=?", "answer": "2"}\n')
    with pytest.raises(DataError, match="no demonstration"):
        train_sft(stage(data=JsonlTasks(path=str(p))), ModelConfig(path=tiny_dir), tmp_path / "r")


def test_a_time_cap_that_cuts_the_stage_is_reported(tiny_dir, tmp_path, capsys):
    res = train_sft(stage(max_steps=50, max_minutes=1e-6, save_every=0), ModelConfig(path=tiny_dir), tmp_path / "r")
    assert res.steps == 1
    events = [json.loads(x) for x in Path(res.metrics_path).read_text().splitlines()]
    cut = [e for e in events if e.get("event") == "time_cap"]
    assert cut and cut[0]["max_minutes"] == 1e-6 and cut[0]["steps_done"] == 1 and cut[0]["steps_planned"] == 50
    assert "stopped by its time cap (max_minutes 1e-06) after step 1 of 50 planned" in capsys.readouterr().out


def test_a_stage_that_runs_its_steps_reports_no_time_cap(tiny_dir, tmp_path, capsys):
    res = train_sft(stage(max_steps=2, max_minutes=60, save_every=0), ModelConfig(path=tiny_dir), tmp_path / "r")
    assert res.steps == 2 and "time_cap" not in Path(res.metrics_path).read_text()
    assert "max_minutes" not in capsys.readouterr().out


def test_demos_cut_to_nothing_by_max_length_are_refused_before_training(tiny_dir, tmp_path):
    """A prompt longer than max_length leaves no completion token to learn from: the stage trained on nothing
    (loss 0.000) until it refused. The error names the field, the count and the length that fits."""
    from rlvr.errors import DataError

    long = stage(max_length=8)  # add2 prompts are longer than 8 tokens: every completion is cut away
    with pytest.raises(DataError, match=r"max_length 8: 64 of 64 demonstrations keep no completion token"):
        train_sft(long, ModelConfig(path=tiny_dir), tmp_path / "a", seed=1)
    assert not (tmp_path / "a" / "sft" / "metrics.jsonl").exists()


def test_demos_whose_completion_is_cut_are_counted_in_a_warning(tiny_dir, tmp_path, capsys):
    from rlvr.data.chat import encode_demos
    from rlvr.data.arithmetic import generate
    from rlvr.models.load import load_model_and_tokenizer

    _, tok = load_model_and_tokenizer(ModelConfig(path=tiny_dir))
    tasks = generate(["add2"], 4, seed=0)
    full = encode_demos(tasks, tok, 10_000)
    cut = min(sum(1 - m for m in mask) + 1 for _, mask in full)  # every prompt fits, no completion does whole
    got = encode_demos(tasks, tok, cut, "SFT (stages.sft.max_length)")
    assert all(len(ids) <= cut and sum(mask) >= 1 for ids, mask in got)
    err = capsys.readouterr().err
    assert "4 of 4 demonstrations lose the end of their completion" in err and f"max_length {cut}" in err
