"""The CPU-testable parts of the vLLM engine (vLLM itself needs a GPU: bench/gpu_vllm_check.py): requests
are one per row under per-row seeds, vLLM outputs become Generation rows token-in/token-out, and a missing
logprob is an error rather than a silent zero."""

from types import SimpleNamespace as NS

import pytest

from rlvr.models.tiny import build_tiny
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.vllm_engine import to_generation, vllm_requests


def test_one_request_per_row_with_row_seeds_else_one_per_prompt():
    prompts = [[5, 6], [7]]
    reqs = vllm_requests(prompts, SamplingParams(n=2, seed=3, row_seeds=[11, 12, 13, 14]))
    assert [(i, r["prompt_token_ids"], s, n) for i, r, s, n in reqs] == [
        (0, [5, 6], 11, 1), (0, [5, 6], 12, 1), (1, [7], 13, 1), (1, [7], 14, 1)]
    reqs = vllm_requests(prompts, SamplingParams(n=2, seed=3))
    assert [(i, s, n) for i, _, s, n in reqs] == [(0, 3, 2), (1, 3, 2)]
    with pytest.raises(ValueError, match="3 seeds for 4 rows"):
        vllm_requests(prompts, SamplingParams(n=2, row_seeds=[1, 2, 3]))


def completion(ids, lps, reason):
    return NS(token_ids=ids, logprobs=[{t: NS(logprob=lp)} for t, lp in zip(ids, lps)], finish_reason=reason)


def test_outputs_become_generation_rows():
    _, tok = build_tiny(size="test")
    prompts = [[5, 6], [7]]
    reqs = vllm_requests(prompts, SamplingParams(n=2, seed=0))
    a = tok("12", add_special_tokens=False)["input_ids"]
    outs = [NS(outputs=[completion(a + [tok.eos_token_id], [-0.5, -0.25, -0.1], "stop"),
                        completion(a, [-1.0, -2.0], "length")]),
            NS(outputs=[completion([], [], "length"), completion(a, [-0.3, -0.4], "stop")])]
    g = to_generation(reqs, outs, tok, version=7)
    assert g.prompt_ids == [[5, 6], [5, 6], [7], [7]] and g.prompt_index == [0, 0, 1, 1]
    assert g.completion_ids[0] == a + [tok.eos_token_id] and g.old_logprobs[0] == [-0.5, -0.25, -0.1]
    assert g.finish_reason == ["eos", "length", "length", "eos"]
    assert g.texts[0] == "12" and g.texts[2] == "" and g.policy_version == [7, 7, 7, 7]
    broken = [NS(outputs=[NS(token_ids=[3], logprobs=None, finish_reason="stop")])]
    with pytest.raises(RuntimeError, match="no logprobs"):
        to_generation(vllm_requests([[1]], SamplingParams(n=1)), broken, tok, 0)


def test_requests_carry_top_k_top_p_and_ask_for_the_processed_logprobs():
    """vLLM draws from the top-k / top-p truncated distribution and, in ``processed_logprobs`` mode, reports the
    sampled token's logprob under it (renormalised): the quantity the trainer recomputes under the same
    truncation. Checked with vLLM on a GPU by tests/gpu/test_vllm_truncation.py."""
    from rlvr.rollout.vllm_engine import LOGPROBS_MODE, vllm_sampling_kwargs

    assert LOGPROBS_MODE == "processed_logprobs"
    kw = vllm_sampling_kwargs(SamplingParams(n=2, temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=5), 3, 2)
    assert (kw["top_p"], kw["top_k"], kw["temperature"], kw["logprobs"], kw["seed"], kw["n"]) == (0.9, 20, 0.7, 0, 3, 2)
    assert vllm_sampling_kwargs(SamplingParams(), None, 1)["top_k"] == -1  # off
