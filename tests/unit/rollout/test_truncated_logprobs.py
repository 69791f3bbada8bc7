"""Top-k / top-p sampling records the logprob of the distribution actually drawn from (the renormalised kept
set), on every in-process decode path (FastDecoder with and without its C step, the HF forward, bf16), and
the trainer's recomputation under the same truncation gives the same numbers."""

import math

import pytest
import torch

from rlvr.data.arithmetic import generate
from rlvr.data.chat import encode_prompt, stop_token_ids
from rlvr.data.collate import pad_batch
from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import token_logprobs
from rlvr.models.truncation import Truncation, kept_tokens, truncated_logprobs
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine, _sample


def test_sampled_logprob_is_the_renormalised_nucleus_by_hand():
    # probs [0.5, 0.3, 0.15, 0.05]; top_p 0.75: the mass before each token is 0, 0.5, 0.8, 0.95 -> tokens 0 and 1
    # are kept (0.5 < 0.75), token 2 is not (0.8 >= 0.75); renormalised: 0.5 / 0.8 = 0.625 and 0.3 / 0.8 = 0.375
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log().repeat(2, 1)
    u = torch.tensor([[0.9], [0.1]])  # inverse CDF at v = (1 - u) * total: 0.1 -> token 0, 0.9 -> token 1
    tok, lp = _sample(logits, SamplingParams(top_p=0.75), u)
    assert tok.tolist() == [0, 1]
    assert lp.tolist() == pytest.approx([math.log(0.625), math.log(0.375)], abs=1e-6)
    # top_k 3 first (0.5, 0.3, 0.15 renormalised by 0.95), then top_p 0.75: mass before 0, 0.526 -> tokens 0, 1
    tok, lp = _sample(logits, SamplingParams(top_k=3, top_p=0.75), u)
    assert lp.tolist() == pytest.approx([math.log(0.625), math.log(0.375)], abs=1e-6)
    # top_k 1: the most probable token, with probability 1
    tok, lp = _sample(logits, SamplingParams(top_k=1), u)
    assert tok.tolist() == [0, 0] and lp.tolist() == pytest.approx([0.0, 0.0], abs=1e-6)
    # no truncation: the full softmax, as before (v = 0.9 lands on token 2's slice [0.8, 0.95))
    tok, lp = _sample(logits, SamplingParams(), u)
    assert tok.tolist() == [0, 2] and lp.tolist() == pytest.approx([math.log(0.5), math.log(0.15)], abs=1e-6)


def test_a_taken_token_outside_the_trainers_kept_set_keeps_a_finite_logprob():
    z = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    assert kept_tokens(z, Truncation(top_p=0.75)).tolist() == [[True, True, False, False]]
    # token 3 is outside the nucleus: counted in, log(0.05 / (0.5 + 0.3 + 0.05))
    lp = truncated_logprobs(z, torch.tensor([3]), Truncation(top_p=0.75))
    assert float(lp) == pytest.approx(math.log(0.05 / 0.85), abs=1e-6)


def test_kept_sets_are_the_same_whatever_the_rows_sorted_together():
    """The training forward's logits are sorted in slices of rows (memory): each row's kept set is its own."""
    z = torch.randn(600, 37, generator=torch.Generator().manual_seed(0)) * 3
    trunc = Truncation(top_p=0.7, top_k=9)
    whole = kept_tokens(z, trunc)
    assert torch.equal(whole, torch.cat([kept_tokens(z[i:i + 1], trunc) for i in range(600)]))
    assert bool((whole.sum(-1) <= 9).all()) and bool((whole.sum(-1) >= 1).all())


def reference_logprob(logits: torch.Tensor, token: int, T: float, top_p: float, top_k: int) -> float:
    """log π_K(token) worked out independently: sort, keep the top k, renormalise, keep while mass before < p
    (a token outside the kept set counted in, as the trainer does)."""
    p = torch.softmax(logits.double() / T, -1)
    order = p.argsort(descending=True).tolist()
    kept = order[:top_k] if top_k else order
    mass = p[kept].sum()
    nucleus, before = [], 0.0
    for i in kept:
        if before < top_p:
            nucleus.append(i)
        before += float(p[i] / mass)
    if token not in nucleus:
        nucleus.append(token)
    return math.log(float(p[token] / p[nucleus].sum()))


@pytest.mark.parametrize("path,T,top_p,top_k", [("fast", 1.0, 0.9, 0), ("fast-torch", 0.7, 0.8, 0),
                                                 ("hf", 1.3, 0.9, 12), ("fast-bf16", 1.0, 1.0, 5)])
def test_every_decode_path_records_the_truncated_logprob(tiny_dir, monkeypatch, path, T, top_p, top_k):
    if path == "fast-torch":
        monkeypatch.setenv("RLVR_KERNELS", "0")
    model, tok = load_pretrained(tiny_dir)
    engine = HFEngine(model, tok, fast_decode=path != "hf", bf16=path == "fast-bf16")
    prompts = [encode_prompt(tok, t) for t in generate(["add2"], 3, seed=4)]
    g = engine.generate(prompts, SamplingParams(n=3, temperature=T, top_p=top_p, top_k=top_k, max_new_tokens=10,
                                                seed=7, stop_token_ids=stop_token_ids(tok)))
    rows = [p + c for p, c in zip(g.prompt_ids, g.completion_ids)]
    ids, att, _ = pad_batch(rows, tok.pad_token_id, left=False)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=att).logits.float()
        full, _ = token_logprobs(model, ids, att, T, packed=False)
    trunc = Truncation(top_p, top_k)
    with torch.no_grad():
        trainer, _ = token_logprobs(model, ids, att, T, truncation=trunc)
    engine_err, shifts = [], []
    for r, (p, c, lp) in enumerate(zip(g.prompt_ids, g.completion_ids, g.old_logprobs)):
        for t, (y, got) in enumerate(zip(c, lp)):
            pos = len(p) + t
            want = reference_logprob(logits[r, pos - 1], y, T, top_p, top_k)
            engine_err.append(abs(got - want))
            assert float(trainer[r, pos]) == pytest.approx(want, abs=1e-4)  # the trainer's, same truncation
            shifts.append(got - float(full[r, pos]))
    if path == "fast-bf16":  # bf16 rounding, and now and then a kept set that differs at its edge
        assert sum(engine_err) / len(engine_err) < 1e-2
    else:
        assert max(engine_err) < 1e-4
    # the truncation is visible: the recorded logprob is above the full softmax's by -log Z > 0
    assert sum(shifts) / len(shifts) > 1e-2
