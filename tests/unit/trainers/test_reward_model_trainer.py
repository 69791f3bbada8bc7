"""Reward model: the scalar head reads the last non-pad token, loads with AutoModelForSequenceClassification,
trains with Bradley-Terry on one concatenated forward and reports held-out pair accuracy."""

import json

import pytest
import torch

from rlvr.config.model import LoraConfig, ModelConfig
from rlvr.config.optim import OptimConfig
from rlvr.config.preference import PairsFile
from rlvr.config.rlhf import RewardModelStage
from rlvr.data.preference import PreferencePair, encode_pair, write_pairs_jsonl
from rlvr.models.heads import (last_token_index, load_reward_model, sequence_classifier_from_causal,
                               sequence_rewards, token_scores, token_values)
from rlvr.models.tiny import build_tiny
from rlvr.data.collate import pad_batch
from rlvr.models.heads import RM_MARKER
from rlvr.trainers.reward_model import score_pairs, train_reward_model


def pairs(n, offset=0):
    # chosen ends in a "7", rejected in a "2": a token-level rule a tiny RM learns in a few steps
    return [PreferencePair(f"{i + offset}+1=?", f"ok {i % 5}7", f"ok {i % 5}2", id=str(i)) for i in range(n)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("rm_pairs")
    write_pairs_jsonl(d / "train.jsonl", pairs(16))
    write_pairs_jsonl(d / "heldout.jsonl", pairs(6, offset=40))
    return str(d / "train.jsonl"), str(d / "heldout.jsonl")


def test_score_is_the_head_on_the_last_non_pad_token_and_padding_side_does_not_matter():
    model, tok = build_tiny(size="test", seed=0)
    rm = sequence_classifier_from_causal(model, tok, seed=0)
    seqs = [[5, 6, 7, 8, 9], [10, 11]]
    ids_r, att_r, _ = pad_batch(seqs, tok.pad_token_id, left=False)
    ids_l, att_l, _ = pad_batch(seqs, tok.pad_token_id, left=True)
    assert last_token_index(att_r).tolist() == [4, 1] and last_token_index(att_l).tolist() == [4, 4]
    right, left = sequence_rewards(rm, ids_r, att_r), sequence_rewards(rm, ids_l, att_l)
    assert torch.allclose(right, left, atol=1e-5)
    alone = sequence_rewards(rm, torch.tensor([seqs[1]]), torch.ones(1, 2, dtype=torch.long))
    assert torch.allclose(alone[0], right[1], atol=1e-5)
    # HF's own forward (pooling at the last non-pad token) gives the same score
    assert torch.allclose(rm(input_ids=ids_r, attention_mask=att_r).logits.squeeze(-1), right, atol=1e-5)
    # critic values: V[t] is the head on the prefix ids[:t] (state before token t)
    s, v = token_scores(rm, ids_r, att_r), token_values(rm, ids_r, att_r)
    assert v[0, 0] == 0 and torch.allclose(v[:, 1:], s[:, :-1])


def test_backbone_copied_from_the_policy_and_head_seeded():
    model, tok = build_tiny(size="test", seed=0)
    a, b = sequence_classifier_from_causal(model, tok, 3), sequence_classifier_from_causal(model, tok, 3)
    assert torch.equal(a.score.weight, b.score.weight)
    assert torch.equal(a.model.embed_tokens.weight, model.model.embed_tokens.weight)
    assert a.config.num_labels == 1 and a.config.pad_token_id == tok.pad_token_id


def test_train_reaches_heldout_accuracy_and_saves_an_auto_loadable_model(tiny_dir, tmp_path, files):
    st = RewardModelStage(pairs=PairsFile(path=files[0], heldout_path=files[1]), batch_size=8, micro_batch_size=8,
                          epochs=6, optim=OptimConfig(lr=3e-3, warmup_steps=0))
    res = train_reward_model(st, ModelConfig(path=tiny_dir), tmp_path, seed=0, init_path=tiny_dir)
    with open(res.metrics_path) as f:
        recs = [json.loads(x) for x in f]
    assert recs[0]["event"] == "start" and "heldout/accuracy" in recs[0]
    assert 0 <= recs[0]["heldout/policy_logp_accuracy"] <= 1 and "heldout/policy_logp_accuracy" in res.extra
    assert res.steps == 12 and res.extra["heldout/accuracy"] == 1.0 and res.extra["policy"] == tiny_dir
    assert recs[-1]["train/loss"] < recs[1]["train/loss"] and "rm/accuracy" in recs[-1]
    assert json.loads((tmp_path / "reward_model" / "final" / RM_MARKER).read_text())["policy"] == tiny_dir
    from transformers import AutoModelForSequenceClassification

    auto = AutoModelForSequenceClassification.from_pretrained(res.checkpoint)
    rm, tok = load_reward_model(res.checkpoint)
    e = encode_pair(tok, pairs(1, offset=90)[0], 64)
    rc, rr = score_pairs(rm, [e], tok.pad_token_id)
    assert rc > rr
    hf = auto(input_ids=torch.tensor([e.chosen_ids])).logits.squeeze()
    assert torch.allclose(hf, rc[0], atol=1e-5)


def test_chosen_and_rejected_share_one_forward():
    model, tok = build_tiny(size="test", seed=0)
    rm = sequence_classifier_from_causal(model, tok)
    calls = []
    rm.model.register_forward_hook(lambda m, i, o: calls.append(1))
    rc, rr = score_pairs(rm, [encode_pair(tok, p, 64) for p in pairs(3)], tok.pad_token_id)
    assert len(calls) == 1 and rc.shape == rr.shape == (3,)


def test_lora_reward_model_trains_and_merges_on_save(tiny_dir, tmp_path, files):
    st = RewardModelStage(pairs=PairsFile(path=files[0]), batch_size=8, max_steps=2)
    cfg = ModelConfig(path=tiny_dir, lora=LoraConfig(r=4, alpha=8, target_modules=["q_proj", "v_proj"]))
    res = train_reward_model(st, cfg, tmp_path, init_path=tiny_dir)
    rm, _ = load_reward_model(res.checkpoint)
    assert not any("lora" in n for n, _ in rm.named_parameters())


def test_policy_logp_accuracy_is_the_policys_own_ranking_of_the_pairs():
    from rlvr.models.logprobs import token_logprobs
    from rlvr.trainers.reward_model import policy_logp_accuracy

    model, tok = build_tiny(size="test", seed=0)
    encs = [encode_pair(tok, p, 64) for p in pairs(6)]

    def summed(ids, mask):
        with torch.no_grad():
            lp, _ = token_logprobs(model, torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))
        return float((lp[0] * torch.tensor(mask, dtype=torch.float32)).sum())

    want = sum(summed(e.chosen_ids, e.chosen_mask) > summed(e.rejected_ids, e.rejected_mask) for e in encs) / 6
    got = policy_logp_accuracy(model, encs, tok.pad_token_id, micro=2)["heldout/policy_logp_accuracy"]
    assert got == pytest.approx(want)
    swapped = [type(e)(e.rejected_ids, e.rejected_mask, e.chosen_ids, e.chosen_mask) for e in encs]
    assert policy_logp_accuracy(model, swapped, tok.pad_token_id, micro=4)["heldout/policy_logp_accuracy"] == \
        pytest.approx(1 - want)
    assert policy_logp_accuracy(model, [], tok.pad_token_id, micro=4) == {}


def test_backbone_other_than_the_policy(tiny_dir, tmp_path, files):
    # a wider model with the same tokenizer: the RM takes its weights, the pairs still come from the policy
    from rlvr.models.tiny import build_tiny

    other = tmp_path / "wider"
    build_tiny(other, size="test", seed=1, hidden_size=96)
    st = RewardModelStage(pairs=PairsFile(path=files[0], heldout_path=files[1]), batch_size=8, micro_batch_size=8,
                          max_steps=2, backbone=str(other))
    res = train_reward_model(st, ModelConfig(path=tiny_dir), tmp_path / "run", seed=0, init_path=tiny_dir)
    rm, _ = load_reward_model(res.checkpoint)
    assert rm.config.hidden_size == 96 and res.extra["policy"] == tiny_dir
    assert json.loads((tmp_path / "run" / "reward_model" / "final" / RM_MARKER).read_text())["backbone"] == str(other)


def test_backbone_with_another_tokenizer_is_a_clear_error(tiny_dir, tmp_path, files):
    from transformers import AutoTokenizer

    from rlvr.errors import ConfigError
    from rlvr.models.tiny import build_tiny

    other = tmp_path / "other_vocab"
    build_tiny(other, size="test", seed=1)
    tok = AutoTokenizer.from_pretrained(other)
    tok.add_tokens(["<extra>"])
    tok.save_pretrained(other)
    st = RewardModelStage(pairs=PairsFile(path=files[0], heldout_path=files[1]), max_steps=1, backbone=str(other))
    with pytest.raises(ConfigError, match="reward_model.backbone: .*different tokenizer"):
        train_reward_model(st, ModelConfig(path=tiny_dir), tmp_path / "run", seed=0, init_path=tiny_dir)
