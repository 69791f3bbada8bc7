"""Per-token and per-sequence log-probabilities against a direct log-softmax, padding invariance; under bf16
autocast the logits are upcast to float32 before the division by T."""

import torch

from rlvr.data.collate import pad_batch
from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import autocast_ctx, cached_sequence_logprobs, sequence_logprobs, token_logprobs
from rlvr.models.tiny import build_tiny


def test_token_logprobs_match_log_softmax_and_ignore_padding_side():
    model, _ = build_tiny(size="test", seed=0)
    model.eval()
    seqs = [[4, 10, 11, 12, 13], [4, 20, 21]]
    ids, att, _ = pad_batch(seqs, 0, left=False)
    lp, ent = token_logprobs(model, ids, att, temperature=0.7, with_entropy=True)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([seqs[0]])).logits[0, :-1].float() / 0.7
    direct = torch.log_softmax(logits, -1).gather(-1, torch.tensor(seqs[0][1:])[:, None]).squeeze(-1)
    assert lp[0, 0] == 0 and torch.allclose(lp[0, 1:5], direct, atol=1e-5)
    assert bool((ent[0, 1:] > 0).all())
    ids_l, att_l, _ = pad_batch(seqs, 0, left=True)            # left padding: positions restart per row
    lp_l, _ = token_logprobs(model, ids_l, att_l, temperature=0.7)
    assert torch.allclose(lp_l[1, -2:], lp[1, 1:3], atol=1e-5)


def test_sequence_logprobs_sum_the_masked_tokens_and_the_cache_agrees():
    model, _ = build_tiny(size="test", seed=0)
    model.eval()
    rows = [([4, 10, 11, 12], [0, 0, 1, 1]), ([4, 20, 21, 22, 23, 24], [0, 0, 0, 1, 1, 1])]
    s, n = sequence_logprobs(model, rows, pad_id=0)
    ids, att, _ = pad_batch([r[0] for r in rows], 0, left=False)
    lp, _ = token_logprobs(model, ids, att)
    assert n.tolist() == [2.0, 3.0]
    assert torch.allclose(s[0], lp[0, 2:4].sum(), atol=1e-5) and torch.allclose(s[1], lp[1, 3:6].sum(), atol=1e-5)
    cached = cached_sequence_logprobs(model, rows, pad_id=0, micro=1)
    assert torch.allclose(cached, s.detach(), atol=1e-5)


def test_bf16_logits_are_upcast_before_the_temperature(tiny_dir):
    model, _ = load_pretrained(tiny_dir)
    with torch.no_grad():  # sharpen the logits, as a trained model's are: bf16 rounding of z / T grows with |z|
        model.lm_head.weight.mul_(40.0)
    ids = torch.tensor([[2, 20, 21, 22, 23, 24, 25, 26, 27]])
    att = torch.ones_like(ids)
    T = 0.7
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, att, T, bf16=True)
        with autocast_ctx(True):
            z = model(input_ids=ids, attention_mask=att).logits[:, :-1]
        assert z.dtype == torch.bfloat16  # the forward really ran in bf16
        ref = torch.log_softmax(z.float() / T, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    err = float((lp[:, 1:] - ref).abs().max())
    assert err < 1e-5, f"max |logprob error| {err:.2e}: logits divided by T in bf16"
