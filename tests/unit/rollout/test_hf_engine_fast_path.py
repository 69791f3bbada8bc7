"""HFEngine's hot path (preallocated KV cache, dropping finished rows) changes speed, not results."""

import torch

from rlvr.data.chat import stop_token_ids
from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import token_logprobs
from rlvr.rollout import hf_engine
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine, make_cache


def prompts(tok):
    # different lengths, so rows are left-padded and the attention mask matters
    texts = ["<|user|>12+7=?<|end|><|assistant|>", "<|user|>3*4=?<|end|><|assistant|>", "<|user|>1=?"]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


@torch.no_grad()
def naive_greedy(model, prompt, n):
    """Reference: recompute the whole sequence every token, no cache, no batching."""
    ids, lps = list(prompt), []
    for _ in range(n):
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
        t = int(logits.argmax())
        lps.append(float(torch.log_softmax(logits, -1)[t]))
        ids.append(t)
    return ids[len(prompt):], lps


def test_greedy_matches_uncached_single_row_decoding(tiny_dir):
    model, tok = load_pretrained(tiny_dir)
    ps = prompts(tok)
    gen = HFEngine(model, tok).generate(ps, SamplingParams(greedy=True, max_new_tokens=12))
    for p, c, lp in zip(ps, gen.completion_ids, gen.old_logprobs):
        ref, ref_lp = naive_greedy(model, p, 12)
        assert c == ref
        assert torch.allclose(torch.tensor(lp), torch.tensor(ref_lp), atol=1e-4)


def test_sampled_logprobs_match_the_trainers_recomputation(tiny_dir):
    model, tok = load_pretrained(tiny_dir)
    ps = prompts(tok)
    params = SamplingParams(n=4, temperature=0.7, max_new_tokens=10, stop_token_ids=stop_token_ids(tok), seed=1)
    gen = HFEngine(model, tok).generate(ps, params)
    for p, c, lp in zip(gen.prompt_ids, gen.completion_ids, gen.old_logprobs):
        ids = torch.tensor([p + c])
        ref, _ = token_logprobs(model, ids, torch.ones_like(ids), temperature=0.7)
        assert torch.allclose(torch.tensor(lp), ref[0, len(p):], atol=1e-4)


def test_dropping_finished_rows_does_not_change_any_sample(tiny_dir, monkeypatch):
    model, tok = load_pretrained(tiny_dir)
    # stop on a frequent character so that rows finish at many different steps
    params = SamplingParams(n=8, temperature=1.5, max_new_tokens=24, seed=3,
                            stop_token_ids=stop_token_ids(tok) + tok("1", add_special_tokens=False)["input_ids"])
    ps = prompts(tok)
    monkeypatch.setattr(hf_engine, "COMPACT_FRACTION", 0.01)  # compact whenever a row finishes
    eager = HFEngine(model, tok).generate(ps, params)
    monkeypatch.setattr(hf_engine, "COMPACT_FRACTION", 2.0)  # never compact
    full = HFEngine(model, tok).generate(ps, params)
    lengths = {len(c) for c in full.completion_ids}
    assert len(lengths) > 2, lengths  # the test does exercise rows finishing at different steps
    assert eager.completion_ids == full.completion_ids
    assert eager.finish_reason == full.finish_reason
    for a, b in zip(eager.old_logprobs, full.old_logprobs):
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5)


def test_preallocated_cache_grows_past_its_capacity_and_keeps_its_contents():
    cache = make_cache(capacity=2)
    ks = [torch.randn(3, 2, 1, 4) for _ in range(5)]
    for k in ks:
        keys, values = cache.update(k, -k, 0)
    assert torch.equal(keys, torch.cat(ks, dim=2)) and torch.equal(values, -torch.cat(ks, dim=2))
    assert cache.get_seq_length() == 5
    cache.batch_select_indices(torch.tensor([2, 0]))
    assert torch.equal(cache.layers[0].keys, torch.cat(ks, dim=2)[[2, 0]])


def test_decode_threads_apply_during_generate_only(tiny_dir, monkeypatch):
    """``SamplingParams.threads`` (``sampling.decode_threads``) sets torch's intra-op threads for the call
    and restores the caller's count afterwards, also when generation fails."""
    model, tok = load_pretrained(tiny_dir)
    eng, seen = HFEngine(model, tok), []
    inner = eng._generate_batch
    monkeypatch.setattr(eng, "_generate_batch", lambda *a: (seen.append(torch.get_num_threads()), inner(*a))[1])
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    params = SamplingParams(n=2, max_new_tokens=3, seed=0, threads=want)
    eng.generate(prompts(tok), params)
    assert seen == [want] and torch.get_num_threads() == before
    monkeypatch.setattr(eng, "_generate_batch", lambda *a: 1 / 0)
    try:
        eng.generate(prompts(tok), params)
    except ZeroDivisionError:
        pass
    assert torch.get_num_threads() == before
    eng._generate_batch = inner
    eng.generate(prompts(tok), SamplingParams(n=2, max_new_tokens=3, seed=0))  # None: left as it is
    assert torch.get_num_threads() == before


def test_decode_threads_reach_the_engine_from_the_stage_config():
    from rlvr.config.rl import SamplingConfig
    from rlvr.data.types import Task
    from rlvr.rollout.collector import collect

    got = []

    class Engine:
        def generate(self, prompts, params):
            got.append(params.threads)
            raise StopIteration

    class Tok:
        chat_template = None
        eos_token_id = 1

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [2, 3]}

        def get_vocab(self):
            return {}

    for threads in (None, 1):
        try:
            collect(Engine(), Tok(), [Task(id="t", prompt="1+1=?", gold={"answer": "2"})], None,
                    SamplingConfig(decode_threads=threads), [], seed=0)
        except StopIteration:
            pass
    assert got == [None, 1]


def test_auto_decode_threads_use_one_thread_for_small_cpu_batches_only(tiny_dir, monkeypatch):
    """``decode_threads: auto`` (the default), idle threads sleeping at once (passive): rows × parameters
    under SINGLE_THREAD_DECODE_WORK -> one thread; above it, or with one thread already, or an explicit count
    -> left as asked. Idle threads that spin first: every thread at any size."""
    model, tok = load_pretrained(tiny_dir)
    eng = HFEngine(model, tok)
    n = sum(p.numel() for p in model.parameters())
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    try:
        monkeypatch.setattr(hf_engine, "SINGLE_THREAD_DECODE_WORK", 10 * n)
        assert eng.decode_threads("auto", 9) == 1          # 9 rows x n < 10 n
        assert eng.decode_threads("auto", 10) is None       # 10 n is not under it
        assert eng.decode_threads(3, 9) == 3 and eng.decode_threads(None, 9) is None
        monkeypatch.delenv("OMP_WAIT_POLICY")
        monkeypatch.setenv("GOMP_SPINCOUNT", "100000")
        assert eng.decode_threads("auto", 9) is None        # spinning threads: two win
        assert eng.decode_threads(1, 9) == 1
        monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
        torch.set_num_threads(1)
        assert eng.decode_threads("auto", 9) is None        # nothing to save
    finally:
        torch.set_num_threads(before)
    from rlvr.config.rl import SamplingConfig

    assert SamplingConfig().decode_threads == "auto"


def test_the_hf_prefill_forwards_each_distinct_prompt_once_and_changes_no_sample(tiny_dir, monkeypatch):
    """G samples of each prompt: the HF decoder's prompt pass runs each distinct prompt once (3 rows, not 12)
    and copies its cache to the group's rows; the samples are those of the row-by-row prefill."""
    model, tok = load_pretrained(tiny_dir)
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=10, stop_token_ids=stop_token_ids(tok), seed=2)
    ps = prompts(tok)
    rows_forwarded = []
    forward = hf_engine._HFDecoder._forward

    def spy(self, ids, pos, att):
        rows_forwarded.append(ids.shape[0])
        return forward(self, ids, pos, att)

    monkeypatch.setattr(hf_engine._HFDecoder, "_forward", spy)
    shared = HFEngine(model, tok, fast_decode=False).generate(ps, params)
    assert rows_forwarded[0] == 3 and rows_forwarded[1] == 12
    monkeypatch.setattr(hf_engine, "distinct_rows", lambda key: (None, None))  # every row's prompt forwarded
    rows_forwarded.clear()
    each = HFEngine(model, tok, fast_decode=False).generate(ps, params)
    assert rows_forwarded[0] == 12
    assert shared.completion_ids == each.completion_ids
    for a, b in zip(shared.old_logprobs, each.old_logprobs):
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5)
