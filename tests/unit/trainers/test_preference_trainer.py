"""The preference trainer: one concatenated forward, the reference cached once (LoRA: adapters off),
reference-free losses, pair weights, pathology flags, held-out accuracy, exact resume."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config.model import LoraConfig, ModelConfig
from rlvr.config.optim import OptimConfig
from rlvr.config.preference import PairsFile, PreferenceStage
from rlvr.data.preference import PreferencePair, write_pairs_jsonl
from rlvr.errors import ConfigError, DataError
from rlvr.losses.preference import dpo, uni_dpo_weights
from rlvr.models.tiny import build_tiny
from rlvr.trainers import preference as pref_mod
from rlvr.trainers.preference import LengthProbe, displacement_flag, encode_pairs, train_preference
from rlvr.trainers.preference import pair_logprobs, paired_step
from rlvr.trainers.variants import PREFERENCE_VARIANTS


def make_pairs(n, offset=0):
    out = []
    for i in range(n):
        a, b = 10 + i + offset, 3 + i % 5
        out.append(PreferencePair(f"{a}+{b}=?", f"\\boxed{{{a + b}}}", f"\\boxed{{{a + b + 1 + i % 3}}}",
                                  id=f"p{i}", votes=[1, 1] if i % 4 else [-1, -1]))
    return out


@pytest.fixture(scope="module")
def pair_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("pairs")
    write_pairs_jsonl(d / "train.jsonl", make_pairs(12))
    write_pairs_jsonl(d / "heldout.jsonl", make_pairs(4, offset=50))
    return str(d / "train.jsonl"), str(d / "heldout.jsonl")


def stage(pair_files, **kw):
    base = {"pairs": PairsFile(path=pair_files[0], heldout_path=pair_files[1]), "batch_size": 4,
            "micro_batch_size": 4, "max_steps": 3, "monitor_every": 0, "probe_prompts": 2,
            "optim": OptimConfig(lr=1e-3, warmup_steps=0)}
    base.update(kw)
    return PreferenceStage(**base)


def run(tiny_dir, tmp_path, st, **kw):
    cfg = kw.pop("model_cfg", ModelConfig(path=tiny_dir))
    return train_preference(st, cfg, tmp_path, seed=0, init_path=tiny_dir, **kw)


def records(res):
    with open(res.metrics_path) as f:
        return [json.loads(x) for x in f]


def test_dpo_logs_rewards_pathologies_and_heldout_accuracy(tiny_dir, tmp_path, pair_files):
    res = run(tiny_dir, tmp_path, stage(pair_files, monitor_every=2, batch_size=12, micro_batch_size=6))
    recs = records(res)
    start, steps = recs[0], [r for r in recs if r["step"] > 0]
    assert start["event"] == "start" and start["reference"] == "policy" and start["reference_model"] is True
    assert start["heldout/pairs"] == 4 and "length/ratio" in start
    for key in ("rewards/chosen", "rewards/rejected", "rewards/margin", "rewards/accuracy", "train/loss",
                "pathology/chosen_logp_delta", "pathology/rejected_logp_delta",
                "pathology/likelihood_displacement"):
        assert all(key in r for r in steps), key
    assert "heldout/accuracy" in steps[1] and "pathology/length_bias" in steps[-1]
    assert steps[0]["train/loss"] == pytest.approx(0.6931, abs=1e-3)        # policy == reference at step 1
    assert steps[-1]["train/loss"] < steps[0]["train/loss"]                  # full batch: the same 12 pairs
    assert res.steps == 3 and (tmp_path / "preference" / "final" / "model.safetensors").exists()
    assert "heldout/accuracy" in res.extra


def test_chosen_and_rejected_share_one_forward(tiny_dir, pair_files):
    model, tok = build_tiny(size="test", seed=0)
    data = encode_pairs(tok, make_pairs(4), 64)
    calls = []
    model.model.register_forward_hook(lambda m, i, o: calls.append(1))  # the body (the head runs chunked after it)
    pc, pr, _, _ = pair_logprobs(model, data.chosen, data.rejected, tok.pad_token_id)
    assert len(calls) == 1 and pc.shape == pr.shape == (4,)
    alone, _, _, _ = pair_logprobs(model, data.chosen[:1], data.rejected[:1], tok.pad_token_id)
    assert torch.allclose(alone[0], pc[0], atol=1e-4)                             # padding does not leak


def test_reference_logprobs_computed_once_and_cached(tiny_dir, tmp_path, pair_files, monkeypatch):
    calls = []
    real = pref_mod.cached_sequence_logprobs
    monkeypatch.setattr(pref_mod, "cached_sequence_logprobs", lambda *a, **k: calls.append(1) or real(*a, **k))
    run(tiny_dir, tmp_path, stage(pair_files, max_steps=None, epochs=3))      # 3 epochs x 3 steps
    assert len(calls) == 4                 # chosen, rejected, held-out chosen, held-out rejected: once each
    assert (tmp_path / "preference" / "reference_logprobs.pt").exists()


def test_lora_reference_is_the_base_with_adapters_disabled(tiny_dir, tmp_path, pair_files):
    lora = ModelConfig(path=tiny_dir, lora=LoraConfig(r=4, alpha=8, target_modules=["q_proj", "v_proj"]))
    res = run(tiny_dir, tmp_path, stage(pair_files), model_cfg=lora)
    assert res.extra["reference"] == "base"
    cache = torch.load(tmp_path / "preference" / "reference_logprobs.pt", weights_only=False)["logprobs"]
    tok = build_tiny(size="test", seed=0)[1]
    from rlvr.models.load import load_pretrained
    base, _ = load_pretrained(tiny_dir)
    data = encode_pairs(tok, make_pairs(12), 256)
    pc, pr, _, _ = pair_logprobs(base.eval(), data.chosen, data.rejected, tok.pad_token_id)
    assert torch.allclose(cache[0], pc.detach(), atol=1e-4) and torch.allclose(cache[1], pr.detach(), atol=1e-4)


@pytest.mark.parametrize("loss", ["dpo", "ipo", "simpo", "orpo", "cpo", "kto", "constrained_po"])
def test_every_loss_trains_without_nan(tiny_dir, tmp_path, pair_files, loss):
    res = run(tiny_dir, tmp_path, stage(pair_files, loss={"type": loss}, max_steps=2))
    last = records(res)[-1]
    # metrics.jsonl writes a NaN as the string "nan": only a real finite number passes
    assert isinstance(last["train/loss"], float) and math.isfinite(last["train/loss"]) and "rewards/accuracy" in last


def test_kto_trains_on_an_unpaired_file(tiny_dir, tmp_path):
    f = tmp_path / "labels.jsonl"
    rows = [{"prompt": f"{i}+1=?", "completion": str(i + 1 + i % 2), "desirable": i % 2 == 0} for i in range(8)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run(tiny_dir, tmp_path, stage((str(f), None), pairs=PairsFile(path=str(f)), loss={"type": "kto"}))
    last = records(res)[-1]
    assert "kto/kl_ref_point" in last and isinstance(last["train/loss"], float) and math.isfinite(last["train/loss"])


def test_reference_free_losses_ignore_the_cached_start_logprobs():
    assert [t for t in ("dpo", "ipo", "kto", "simpo", "orpo", "cpo") if not PREFERENCE_VARIANTS[t].needs_reference] == \
        ["simpo", "orpo", "cpo"]
    model, tok = build_tiny(size="test", seed=0)

    def grads(loss, start):
        data = encode_pairs(tok, make_pairs(4), 64)
        data.ref_logprobs = start
        model.zero_grad()
        paired_step(model, data, [0, 1, 2, 3], PreferenceStage(loss={"type": loss}), tok.pad_token_id, False)
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    zero, junk = torch.zeros(4, 2), torch.randn(4, 2) * 5
    assert torch.equal(grads("simpo", zero), grads("simpo", junk))
    assert not torch.allclose(grads("dpo", zero), grads("dpo", junk))


def test_micro_batches_accumulate_exactly():
    model, tok = build_tiny(size="test", seed=0)
    data = encode_pairs(tok, make_pairs(4), 64)
    data.ref_logprobs = torch.randn(4, 2)

    def grads(micro):
        model.zero_grad()
        paired_step(model, data, [0, 1, 2, 3], PreferenceStage(micro_batch_size=micro), tok.pad_token_id, False)
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert torch.allclose(grads(4), grads(1), atol=1e-6)


def test_uni_dpo_weights_are_wired_from_config():
    model, tok = build_tiny(size="test", seed=0)
    data = encode_pairs(tok, make_pairs(4), 64)
    data.margin = torch.tensor([1.0, 0.0, 2.0, 1.0])
    st = PreferenceStage(weighting={"type": "uni_dpo", "eta": 0.5, "tau_ref": 0.3})
    met = paired_step(model, data, [0, 1, 2, 3], st, tok.pad_token_id, False)
    pc, pr, lc, lr = pair_logprobs(model, data.chosen, data.rejected, tok.pad_token_id)
    w = uni_dpo_weights(data.margin, pc / lc - pr / lr, beta=2.0, eta=0.5, tau_ref=0.3, gamma=3.0)
    per, _ = dpo(pc, pr, data.ref_logprobs[:, 0], data.ref_logprobs[:, 1], 0.1)
    assert met["weights/mean"] == pytest.approx(float(w.mean()), abs=1e-5)
    assert met["train/loss"] == pytest.approx(float((w * per).mean().detach()), abs=1e-5)


def test_rgpo_swaps_pairs_whose_votes_contradict_the_label():
    tok = build_tiny(size="test")[1]
    pairs = make_pairs(8)                                         # pairs 0 and 4 carry votes [-1, -1]
    data = encode_pairs(tok, pairs, 64, dataset_weights=True)
    plain = encode_pairs(tok, pairs, 64)
    assert data.chosen[0] == plain.rejected[0] and data.chosen[1] == plain.chosen[1]
    assert data.weight[0] == pytest.approx(data.weight[1]) and 0 < float(data.weight[1]) <= 1
    assert float(data.smoothing[1]) < 0.5


def test_kto_rejects_pair_weighting_and_dpo_rejects_unpaired_file(tiny_dir, tmp_path, pair_files):
    with pytest.raises(ConfigError, match="'kto' trains on unpaired"):
        run(tiny_dir, tmp_path, stage(pair_files, loss={"type": "kto"}, weighting={"type": "rgpo"}))
    f = tmp_path / "unpaired.jsonl"
    f.write_text(json.dumps({"prompt": "1+1=?", "completion": "2", "desirable": True}) + "\n")
    with pytest.raises(DataError, match=r"unpaired.jsonl:1: loss dpo needs paired lines"):
        run(tiny_dir, tmp_path, stage(pair_files, pairs=PairsFile(path=str(f))))


def test_pathology_flags_by_hand():
    rec = {"pathology/chosen_logp_delta": -0.6, "pathology/rejected_logp_delta": -2.0}
    displacement_flag(rec, 0.5)
    assert rec["pathology/likelihood_displacement"] == 1
    rec = {"pathology/chosen_logp_delta": -0.4, "pathology/rejected_logp_delta": -2.0}
    displacement_flag(rec, 0.5)
    assert rec["pathology/likelihood_displacement"] == 0          # chosen fell less than the tolerance
    model, tok = build_tiny(size="test", seed=0)
    probe = LengthProbe(tok, make_pairs(6), 3, 8, seed=0)
    assert len(probe.prompts) == 3 and probe.chosen_len == 11.0        # "\\boxed{13}" + end-of-turn token
    first = probe.run(model, tol=0.2)
    assert first["pathology/length_bias"] == 0 and first["length/ratio_start"] == first["length/ratio"]
    probe.start_ratio = first["length/ratio"] - 0.3               # the policy now writes 0.3 chosen-lengths more
    assert probe.run(model, tol=0.2)["pathology/length_bias"] == 1


def test_resume_matches_uninterrupted(tiny_dir, tmp_path, pair_files):
    st = stage(pair_files, max_steps=6, save_every=3)
    full = run(tiny_dir, tmp_path / "full", st)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_dir, tmp_path / "cut", st, crash_at_step=4)
    resumed = run(tiny_dir, tmp_path / "cut", st, resume=True)
    a, b = load_file(full.checkpoint + "/model.safetensors"), load_file(resumed.checkpoint + "/model.safetensors")
    assert all(torch.allclose(a[k], b[k], atol=1e-6, rtol=0) for k in a)
    ra, rb = records(full), records(resumed)
    assert next(r for r in rb if r.get("event") == "resume")["reference"] == "cache"
    assert [(r["step"], round(r["train/loss"], 6)) for r in ra if "train/loss" in r] == \
        [(r["step"], round(r["train/loss"], 6)) for r in rb if "train/loss" in r]
