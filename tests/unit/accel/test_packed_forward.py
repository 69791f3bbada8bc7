"""The packed training forward (accel/packed_forward.py) against HF's forward: the same logprobs and
entropies (fp32, atol 1e-5) on left-padded, right-padded and ragged rows, with shared prefixes or not;
the same gradients of the GRPO and DPO losses; a hand-worked packing; the fallbacks."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlvr.accel import packed_forward
from rlvr.accel.packed_forward import Packing, unsupported_reason
from rlvr.config.preference import DPOLoss, PreferenceStage
from rlvr.config.rl import GRPOLoss, KLConfig, RLStage, SamplingConfig
from rlvr.data.collate import TokenBatch, pad_batch
from rlvr.models.logprobs import token_logprobs
from rlvr.models.tiny import build_tiny
from rlvr.trainers import preference, rl


def llama():
    model, _ = build_tiny(size="test", seed=0)
    return model.train()


def qwen2_gqa():
    """Qwen2 (q/k/v biases) with grouped-query attention (4 heads, 2 key/value heads)."""
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=105, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=128, max_position_embeddings=128,
                      tie_word_embeddings=False)
    return Qwen2ForCausalLM(cfg).train()


def ragged(left: bool):
    g = torch.Generator().manual_seed(1)
    lens = [17, 5, 12, 2, 9, 17]
    seqs = [torch.randint(3, 100, (n,), generator=g).tolist() for n in lens]
    seqs[5][:6] = seqs[0][:6]  # a shared prefix
    return pad_batch(seqs, 0, left=left)[:2]


def has_prev(att):
    """Real tokens whose predecessor in the row is real: where a logprob is defined."""
    prev = torch.cat([torch.zeros_like(att[:, :1]), att[:, :-1]], 1)
    return att.bool() & prev.bool()


@pytest.mark.parametrize("make", [llama, qwen2_gqa])
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("share", [False, True])
def test_logprobs_and_entropy_equal_the_hf_forward(make, left, share, monkeypatch):
    model = make()
    ids, att = ragged(left)
    lp_hf, ent_hf = token_logprobs(model, ids, att, 0.7, with_entropy=True, packed=False)
    ps = packed_forward.packed_states
    monkeypatch.setattr(packed_forward, "packed_states", lambda *a, **k: ps(*a, share_prefix=share, **k))
    lp, ent = token_logprobs(model, ids, att, 0.7, with_entropy=True, packed=True)
    ok = has_prev(att)
    assert torch.allclose(lp[ok], lp_hf[ok], atol=1e-5) and torch.allclose(ent[ok], ent_hf[ok], atol=1e-5)
    assert bool((lp[~ok] == 0).all()) and bool((ent[~ok] == 0).all())


def test_wanted_positions_only():
    model = llama()
    ids, att = ragged(False)
    wanted = torch.zeros_like(att, dtype=torch.float32)
    wanted[:, 3:7] = 1
    lp_hf, _ = token_logprobs(model, ids, att, packed=False)
    lp, _ = token_logprobs(model, ids, att, packed=True, wanted=wanted)
    ok = has_prev(att) & wanted.bool()
    assert torch.allclose(lp[ok], lp_hf[ok], atol=1e-5) and bool((lp[~ok] == 0).all())


def test_packing_by_hand():
    # rows (right-padded): [5 6 7 8], [5 6 9 _], [4 _ _ _]. Trie nodes numbered in the rows' lexicographic
    # order ([4] < [5 6 7 8] < [5 6 9]): 4->0, 5->1, 5 6->2, 5 6 7->3, 5 6 7 8->4, 5 6 9->5 (its first two
    # tokens are [5 6 7 8]'s): six packed tokens for the eight real ones; positions 0,0,1,2,3,2.
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 9, 0], [4, 0, 0, 0]])
    att = (ids != 0).long()
    pk = Packing(ids, att)
    assert pk.slot_tok.tolist() == [1, 2, 3, 4, 1, 2, 5, 0]
    assert pk.ids.tolist() == [4, 5, 6, 7, 8, 9] and pk.pos.tolist() == [0, 0, 1, 2, 3, 2]
    assert pk.L == 4 and pk.slot_view.tolist() == [0, 1, 2, 3, 4, 5, 6, 8]
    # the attention view (B x L = 3 x 4): each position's packed token; padding (7, 9, 10, 11) reads token 0
    assert pk.view_tok.tolist() == [1, 2, 3, 4, 1, 2, 5, 0, 0, 0, 0, 0]
    assert Packing(ids, att, share=False).slot_tok is None
    assert Packing(ids, att, share=False).view_tok.tolist() == [0, 1, 2, 3, 4, 5, 6, 0, 7, 0, 0, 0]
    # dummy rounding tokens (pad_to: 20 real tokens -> 32) are read by no view position
    long = torch.arange(3, 23).view(2, 10)
    pk = Packing(long, torch.ones_like(long), pad_to=4)
    assert pk.N == 32 and pk.view_tok.tolist() == list(range(20))


def grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def both_paths(model, fn, monkeypatch):
    """``fn()`` (a forward/backward) on the HF path then the packed path -> the two flat gradients."""
    out = []
    for packed in (False, True):
        monkeypatch.setattr(packed_forward, "supports", lambda m, p=packed: p)
        model.zero_grad(set_to_none=True)
        fn()
        out.append(grads(model))
    return out


def test_grpo_loss_gradient_is_the_hf_paths(monkeypatch):
    model = llama()
    ref = build_tiny(size="test", seed=1)[0].eval()
    prompts = [[4, 11, 12, 13], [4, 21, 22]]
    g = torch.Generator().manual_seed(2)
    seqs = [prompts[i // 3] + torch.randint(3, 100, (n,), generator=g).tolist()
            for i, n in enumerate([5, 2, 7, 3, 6, 1])]
    masks = [[0] * len(prompts[i // 3]) + [1] * (len(s) - len(prompts[i // 3])) for i, s in enumerate(seqs)]
    batch = TokenBatch.from_rows(seqs, masks, old_logprobs=[[0.0] * len(s) for s in seqs],
                                 advantages=[1.0, -0.5, 0.3, -1.2, 0.8, 0.1])
    cfg = RLStage(loss=GRPOLoss(), sampling=SamplingConfig(max_new_tokens=8, temperature=0.9), micro_batch_size=6,
                  kl=KLConfig(beta=0.04), entropy_coef=0.01)

    def step():
        batch.ref_logprobs = rl.reference_logprobs(ref, model, batch, 0.9, 6)
        rl.update_minibatch(model, batch, cfg, on_policy=True)
    hf, packed = both_paths(model, step, monkeypatch)
    assert hf.abs().max() > 1e-3
    assert torch.allclose(hf, packed, atol=1e-6, rtol=1e-4)


def test_dpo_loss_gradient_is_the_hf_paths(monkeypatch):
    model = llama()
    prompt = [4, 30, 31, 32]
    chosen = [(prompt + [40, 41, 42, 43], [0] * 4 + [1] * 4), (prompt[:2] + [50, 51], [0, 0, 1, 1])]
    rejected = [(prompt + [40, 41, 60], [0] * 4 + [1] * 3), (prompt[:2] + [50, 52, 53], [0, 0, 1, 1, 1])]
    data = preference.PairData(chosen, rejected, torch.tensor([[-20.0, -15.0], [-9.0, -12.0]]), torch.zeros(2),
                               torch.ones(2), torch.ones(2), torch.zeros(2))
    stage = PreferenceStage(loss=DPOLoss(beta=0.1), batch_size=2, micro_batch_size=2)
    hf, packed = both_paths(model, lambda: preference.paired_step(model, data, [0, 1], stage, 0, False),
                            monkeypatch)
    assert hf.abs().max() > 1e-4
    assert torch.allclose(hf, packed, atol=1e-6, rtol=1e-4)


def test_unsupported_models_take_the_hf_forward():
    model = llama()
    assert unsupported_reason(model) is None and packed_forward.supports(model)
    h = model.model.layers[0].register_forward_hook(lambda *a: None)
    assert "hooks" in unsupported_reason(model) and not packed_forward.supports(model)
    h.remove()
    assert packed_forward.supports(model)


def test_bf16_autocast_is_close_to_the_hf_forward():
    model = llama()
    ids, att = ragged(False)
    lp_hf, _ = token_logprobs(model, ids, att, bf16=True, packed=False)
    lp, _ = token_logprobs(model, ids, att, bf16=True, packed=True)
    ok = has_prev(att)
    assert lp.dtype == torch.float32 and (lp[ok] - lp_hf[ok]).abs().max() < 0.05


def test_rows_rounded_up_under_autocast_change_no_value_and_no_gradient(monkeypatch):
    """Under CPU bf16 autocast the packed tokens and logit rows are rounded up (AUTOCAST_ROWS; dummy tokens
    nothing reads): the logprobs and the gradient are those without rounding, and the GEMMs see a multiple
    of the rounding as their row count."""
    model = llama()
    ids, att = ragged(False)
    out = {}
    seen: list[int] = []
    real_linear = torch.nn.functional.linear

    def linear(x, *a, **k):
        seen.append(x.shape[0])
        return real_linear(x, *a, **k)
    for rows in (0, 1):
        monkeypatch.setattr(packed_forward, "AUTOCAST_ROWS", rows)
        model.zero_grad(set_to_none=True)
        seen.clear()
        monkeypatch.setattr(packed_forward.F, "linear", linear)
        lp, _ = token_logprobs(model, ids, att, bf16=True, packed=True)
        monkeypatch.setattr(packed_forward.F, "linear", real_linear)
        lp.sum().backward()
        out[rows] = (lp.detach(), torch.cat([p.grad.flatten() for p in model.parameters()]), list(seen))
    assert all(n == packed_forward.rounded_rows(n, 1) for n in out[1][2]) and out[1][2] != out[0][2]
    assert torch.allclose(out[0][0], out[1][0], atol=1e-6)
    assert torch.allclose(out[0][1], out[1][1], rtol=1e-3, atol=1e-5)
    assert [packed_forward.rounded_rows(n, 4) for n in (10, 17, 100, 1000, 1024, 1100)] == [10, 32, 112, 1024, 1024, 1280]


def test_gradient_checkpointing_takes_the_hf_forward():
    model = llama()
    (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    assert "checkpointing" in unsupported_reason(model)


def test_kl_is_exactly_zero_while_the_policy_is_the_reference():
    # the reference pass (no grad) and the training forward run the same packed ops on the same
    # micro-batches (shared prompts included): identical logprobs, so KL is exactly 0 at step 0
    import copy

    model = llama()
    ref = copy.deepcopy(model).eval()
    prompt = [4, 11, 12, 13]
    g = torch.Generator().manual_seed(3)
    seqs = [prompt + torch.randint(3, 100, (n,), generator=g).tolist() for n in (5, 2, 7, 3)]
    masks = [[0] * 4 + [1] * (len(s) - 4) for s in seqs]
    batch = TokenBatch.from_rows(seqs, masks, old_logprobs=[[0.0] * len(s) for s in seqs],
                                 advantages=[1.0, -1.0, 0.5, -0.5])
    cfg = RLStage(loss=GRPOLoss(), sampling=SamplingConfig(max_new_tokens=8), micro_batch_size=4,
                  kl=KLConfig(beta=0.04))
    batch.ref_logprobs = rl.reference_logprobs(ref, model, batch, 1.0, 4)
    met = rl.update_minibatch(model, batch, cfg, on_policy=True)
    assert packed_forward.supports(model) and met["kl/ref"] == 0.0
