"""Per-row sampling seeds: the tensor hash is SplitMix64, uniforms are uniform in [0, 1), and a row's
sample does not depend on the batch it is generated in (what lets rollout workers split a step)."""

import pytest
import torch

from rlvr.rollout.seeds import RowStream, _mix, _signed, row_seeds, splitmix64


def test_tensor_hash_equals_the_python_reference():
    xs = [0, 1, -5, 2**62 + 12345, -(2**63), 2**63 - 1]
    want = [_signed(splitmix64(x & (2**64 - 1))) for x in xs]
    assert _mix(torch.tensor(xs, dtype=torch.int64)).tolist() == want
    # the published first output of SplitMix64 seeded with 0 is 0xE220A8397B1DCDAF
    assert splitmix64(0) == 0xE220A8397B1DCDAF


def test_uniforms_are_in_range_and_uniform():
    s = RowStream(row_seeds(7, 1000))
    u = torch.cat([s.next() for _ in range(50)]).flatten()
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0 and u.dtype == torch.float32
    counts = torch.histc(u, bins=10, min=0.0, max=1.0)
    # 50,000 draws, 5,000 expected a bin; a chi-square of 10 bins above 30 has p < 0.001
    chi2 = float(((counts - 5000.0) ** 2 / 5000.0).sum())
    assert chi2 < 30.0, counts
    # a row's stream depends on its own seed only
    assert torch.equal(RowStream(row_seeds(7, 1000)[500:]).next(), RowStream(row_seeds(7, 1000)).next()[500:])


def test_a_rows_sample_does_not_depend_on_the_batch_split(tiny_dir):
    from rlvr.data.arithmetic import generate
    from rlvr.data.chat import encode_prompt, stop_token_ids
    from rlvr.models.load import load_pretrained
    from rlvr.rollout.engine import SamplingParams
    from rlvr.rollout.hf_engine import HFEngine

    model, tok = load_pretrained(tiny_dir)
    prompts = [encode_prompt(tok, t) for t in generate(["add2", "mul31"], 6)]
    n, seeds = 3, row_seeds(11, 6 * 3)
    params = lambda s: SamplingParams(n=n, max_new_tokens=10, stop_token_ids=stop_token_ids(tok), row_seeds=s)
    engine = HFEngine(model, tok)
    whole = engine.generate(prompts, params(seeds))
    a, b = engine.generate(prompts[:2], params(seeds[:6])), engine.generate(prompts[2:], params(seeds[6:]))
    assert whole.completion_ids == a.completion_ids + b.completion_ids
    for x, y in zip(whole.old_logprobs, a.old_logprobs + b.old_logprobs):
        assert x == pytest.approx(y, abs=1e-5)
    with pytest.raises(ValueError, match="row_seeds has 5 seeds for 18 rows"):
        engine.generate(prompts, params(seeds[:5]))
