"""Rollout methods on the tiny model: EDEN's perturbed position, OC-GRPO's privileged samples, Double-Rollout."""

import pytest
import torch

from rlvr.config.methods import DoubleRolloutConfig, EdenConfig, OffContextConfig
from rlvr.config.rl import RewardTerm, SamplingConfig
from rlvr.data.arithmetic import make_task
from rlvr.data.chat import encode_prompt
from rlvr.models.load import load_pretrained
from rlvr.rollout.collector import collect
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.methods import double_rollout, eden_part, off_context, perturbed_position, privileged_prompt
from rlvr.verifiers.base import Verdict


def never(tasks, completions):
    return [Verdict(0.0, False, "wrong") for _ in completions]


def by_length(tasks, completions):  # reward = 1 for even-length completions
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass") for c in completions]


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    model, tok = load_pretrained(tiny_dir)
    return model, tok, HFEngine(model, tok)


def test_perturbed_position_replaces_only_the_marker_embedding(tiny):
    model, tok, _ = tiny
    emb = model.get_input_embeddings()
    ids = torch.tensor([[5, 6, tok.pad_token_id]])
    plain = emb(ids)
    with perturbed_position(model, tok.pad_token_id, noise_std=0.0, seed=0):
        out = emb(ids)
    # σ = 0: the marker position is exactly the anchor (mean token embedding); the others are untouched
    assert torch.equal(out[0, :2], plain[0, :2])
    assert torch.allclose(out[0, 2], emb.weight.mean(dim=0), atol=1e-6)
    with perturbed_position(model, tok.pad_token_id, noise_std=1.0, seed=0):
        a = emb(ids)
        b = emb(ids)
    assert not torch.allclose(a[0, 2], b[0, 2])  # a fresh draw per occurrence
    assert torch.equal(emb(ids), plain)  # the hook is gone afterwards


def test_eden_samples_are_rebased_on_the_plain_prompt(tiny):
    model, tok, engine = tiny
    tasks = [make_task("add2", 12, 34)]
    samp = SamplingConfig(group_size=4, max_new_tokens=6)
    part = eden_part(EdenConfig(enabled=True), model, engine, tok, tasks, by_length, samp, [RewardTerm()], 2, seed=0)
    assert part.group_size == 2 and all(p == encode_prompt(tok, tasks[0]) for p in part.prompt_ids)
    assert part.row_extras["adv_weight"] == [0.5, 0.5]
    assert all(len(lp) == len(c) for lp, c in zip(part.old_logprobs, part.completion_ids))


def test_eden_refuses_an_engine_that_samples_from_another_copy(tiny):
    """A remote engine (vLLM, Ray workers) never sees the hook on the trainer's model: refused, not silently plain."""
    import copy

    from rlvr.errors import ConfigError
    from rlvr.rollout.hf_engine import HFEngine

    model, tok, _ = tiny
    other = HFEngine(copy.deepcopy(model), tok)
    with pytest.raises(ConfigError, match="another copy"):
        eden_part(EdenConfig(enabled=True), model, other, tok, [make_task("add2", 12, 34)], by_length,
                  SamplingConfig(group_size=4, max_new_tokens=6), [RewardTerm()], 2, seed=0)


def test_off_context_rescues_all_wrong_groups_with_capped_is(tiny):
    model, tok, engine = tiny
    tasks = [make_task("mul31", 347, 6), make_task("add2", 12, 34)]
    samp = SamplingConfig(group_size=4, max_new_tokens=6)
    ro = collect(engine, tok, tasks, never, samp, [RewardTerm()], seed=0)
    cfg = OffContextConfig(enabled=True, fraction=0.5, is_cap=2.0)
    out, n = off_context(cfg, model, engine, tok, ro, never, samp, [RewardTerm()], seed=1)
    assert n == 2  # both groups were all wrong
    ti = out.row_extras["token_is"]
    # fraction .5 of G = 4: the last 2 rows of each group are privileged samples, trained on the plain prompt
    assert [t is None for t in ti] == [True, True, False, False] * 2
    assert all(0 < w <= 2.0 for t in ti if t for w in t)
    assert out.prompt_ids[2] == encode_prompt(tok, tasks[0])
    assert "(2082)" in tok.decode(privileged_prompt(tok, tasks[0], "answer"))


def test_double_rollout_rewards_are_means_of_continuations(tiny):
    model, tok, engine = tiny
    tasks = [make_task("add2", 12, 34)]
    samp = SamplingConfig(group_size=4, max_new_tokens=6)
    ro = collect(engine, tok, tasks, by_length, samp, [RewardTerm()], seed=0)
    out = double_rollout(DoubleRolloutConfig(enabled=True, continuations=4), engine, tok, ro, by_length, samp,
                         [RewardTerm()], seed=3)
    # each reward is now a mean of 4 binary rewards: a multiple of 1/4 in [0, 1]
    r = out.rewards.flatten()
    assert torch.equal(r * 4, torch.round(r * 4)) and bool(((r >= 0) & (r <= 1)).all())


def test_guidance_demos_are_judged_on_the_tokens_trained(tiny):
    from rlvr.config.methods import GuidanceConfig
    from rlvr.rollout.methods import demo_part

    model, tok, _ = tiny
    tasks = [make_task("mul31", 347, 6)]
    cfg = GuidanceConfig(enabled=True, weight=1.0, decay_steps=10)
    seen = []

    def judge(ts, texts):
        seen.extend(texts)
        return [Verdict(1.0, True, "pass") for _ in texts]

    full = demo_part(cfg, model, tok, tasks, judge, SamplingConfig(max_new_tokens=64), [RewardTerm()], step=10)
    assert seen[0] == tasks[0].solution and full.finish_reason == ["eos"]
    assert full.row_extras["adv_weight"] == [0.5]  # λ(10) = 10 / (10 + 10)
    cut = demo_part(cfg, model, tok, tasks, judge, SamplingConfig(max_new_tokens=5), [RewardTerm()], step=0)
    assert len(cut.completion_ids[0]) == 5 and cut.finish_reason == ["length"]
    assert seen[-1] == tok.decode(cut.completion_ids[0], skip_special_tokens=True)


class _NeverStops:
    """An engine whose samples never stop: every row runs to its ``max_new_tokens`` (or to a set length)."""

    def __init__(self, token: int, lengths=None):
        self.token, self.lengths = token, lengths

    def generate(self, prompts, params):
        from rlvr.rollout.engine import Generation

        idx = [i for i in range(len(prompts)) for _ in range(params.n)]
        lens = self.lengths or [params.max_new_tokens] * len(idx)
        comps = [[self.token] * n for n in lens]
        return Generation([prompts[i] for i in idx], comps, [[0.0] * n for n in lens],
                          ["length" if n == params.max_new_tokens else "stop" for n in lens],
                          ["x" * n for n in lens], idx)


def test_double_rollout_continuations_never_run_past_max_new_tokens(tiny):
    # originals of 6 (truncated), 2, 4 and 6 tokens, cut at half: prefixes 3, 1, 2, 3. Each continuation may
    # add at most max_new_tokens - its own prefix (3, 5, 4, 3): every re-scored completion is <= 6 tokens, one
    # the original sample could have produced (the shortest cut's budget, 5, let the truncated rows reach 8)
    _, tok, _ = tiny
    one = tok("7", add_special_tokens=False).input_ids[-1]  # decodes to one character
    tasks = [make_task("add2", 12, 34)]
    samp = SamplingConfig(group_size=4, max_new_tokens=6)
    ro = collect(_NeverStops(one, [6, 2, 4, 6]), tok, tasks, by_length, samp, [RewardTerm()], seed=0)
    seen = []

    def judge(ts, texts):
        seen.extend(texts)
        return by_length(ts, texts)

    double_rollout(DoubleRolloutConfig(enabled=True, continuations=2), _NeverStops(one), tok, ro, judge, samp,
                   [RewardTerm()], seed=3)
    assert len(seen) == 8
    assert max(len(t) for t in seen) <= samp.max_new_tokens, [len(t) for t in seen]
    assert sorted(len(t) for t in seen) == [6] * 8  # each prefix + its own budget, exactly the cap here
