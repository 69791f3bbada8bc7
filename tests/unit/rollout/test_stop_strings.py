"""A row stopped by a stop string ends where it stopped (reason ``stop``): no trailing pad is trained on.

Both decode paths (the lean FastDecoder and the HF forward) share the engine's loop, so both are checked.
"""

import pytest
import torch

from rlvr.config.rl import GRPOLoss, RewardTerm, SamplingConfig
from rlvr.data.chat import stop_token_ids
from rlvr.data.types import Task
from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import token_logprobs
from rlvr.rollout.collector import collect
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.trainers.rl import build_train_batch
from rlvr.trainers.variants import rl_variant
from rlvr.verifiers.base import Verdict

PROMPTS = ["<|user|>12+7=?<|end|><|assistant|>", "<|user|>3*4=?<|end|><|assistant|>", "<|user|>1=?"]
STOPS = ["a", "e", "1", "%", "x"]  # the untrained model samples ~uniformly: rows stop at many different steps


def first_stop(text: str) -> int:
    """Index just past the first stop string in ``text`` (-1 if none)."""
    hits = [text.index(s) + len(s) for s in STOPS if s in text]
    return min(hits) if hits else -1


@pytest.mark.parametrize("fast", [True, False])
def test_stop_string_rows_are_cut_where_they_stopped(tiny_dir, fast):
    model, tok = load_pretrained(tiny_dir)
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in PROMPTS]
    params = SamplingParams(n=8, temperature=1.5, max_new_tokens=24, seed=3, stop_token_ids=stop_token_ids(tok),
                            stop_strings=STOPS)
    eng = HFEngine(model, tok, fast_decode=fast)
    gen = eng.generate(prompts, params)
    assert eng.decode_path == ("fast" if fast else "hf: fast_decode=False")
    for p, c, lp, r, text in zip(gen.prompt_ids, gen.completion_ids, gen.old_logprobs, gen.finish_reason, gen.texts):
        assert len(lp) == len(c)
        # every kept token was sampled: its logprob is the trainer's (a frozen row's filler has logprob 0)
        ids = torch.tensor([p + c])
        ref, _ = token_logprobs(model, ids, torch.ones_like(ids), temperature=params.temperature)
        assert torch.allclose(torch.tensor(lp), ref[0, len(p):], atol=1e-4), (r, text, lp[-3:])
        if r == "stop":
            assert first_stop(text) == len(text), text  # cut right after the first stop string
        elif r == "length":
            assert len(c) == params.max_new_tokens and first_stop(text) == -1, f"reason 'length' for {text!r}"
    reasons = set(gen.finish_reason)
    assert "stop" in reasons and len({len(c) for c in gen.completion_ids}) > 2, reasons


def test_stop_string_rows_train_on_their_own_tokens_only(tiny_dir):
    """Through the collector: lengths, length rewards and loss_mask count only the sampled tokens."""
    model, tok = load_pretrained(tiny_dir)

    tasks = [Task(id=f"t{i}", prompt=p, gold={"answer": "0"}) for i, p in enumerate(["12+7=?", "3*4=?"])]
    judge = lambda ts, cs: [Verdict(float(len(c) % 2), bool(len(c) % 2), "pass") for c in cs]
    sampling = SamplingConfig(group_size=6, temperature=1.5, max_new_tokens=24, stop=STOPS)
    ro = collect(HFEngine(model, tok), tok, tasks, judge, sampling, [RewardTerm()], seed=3)
    adv = rl_variant(GRPOLoss()).advantages(GRPOLoss(), ro.rewards, ro.valid)
    batch = build_train_batch(ro, adv, needs_all=True, mask_truncated=False)
    for c, text, m, r in zip(ro.completion_ids, ro.texts, batch.loss_mask, ro.finish_reason):
        if first_stop(text) != -1:
            assert r == "stop" and first_stop(text) == len(text), (r, text)
        assert sum(m) == len(c), (text, c)
    assert "stop" in ro.finish_reason
