"""vLLM's recorded logprobs under top-p / top-k are those of the renormalised truncated distribution, equal (to
bf16 rounding) to the trainer's recomputation under the same truncation (needs a GPU and vLLM)."""

import pytest
import torch

from rlvr.config.distributed import VLLMConfig
from rlvr.data.arithmetic import generate
from rlvr.data.chat import encode_prompt, stop_token_ids
from rlvr.data.collate import pad_batch
from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import token_logprobs
from rlvr.models.truncation import Truncation
from rlvr.rollout.engine import SamplingParams

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("top_p,top_k", [(0.9, 0), (1.0, 8), (0.8, 20)])
def test_vllm_records_the_truncated_logprob(tiny_dir, top_p, top_k):
    pytest.importorskip("vllm")
    from rlvr.rollout.vllm_engine import VLLMEngine

    model, tok = load_pretrained(tiny_dir)
    model = model.cuda().eval()
    engine = VLLMEngine(model, tok, VLLMConfig(dtype="float32", sleep_level=0, gpu_memory_utilization=0.2))
    prompts = [encode_prompt(tok, t) for t in generate(["add2"], 4, seed=0)]
    g = engine.generate(prompts, SamplingParams(n=4, temperature=1.0, top_p=top_p, top_k=top_k, max_new_tokens=12,
                                                seed=0, stop_token_ids=stop_token_ids(tok)))
    rows = [p + c for p, c in zip(g.prompt_ids, g.completion_ids)]
    ids, att, _ = pad_batch(rows, tok.pad_token_id, left=False, device="cuda")
    with torch.no_grad():
        trunc, _ = token_logprobs(model, ids, att, 1.0, truncation=Truncation(top_p, top_k))
        full, _ = token_logprobs(model, ids, att, 1.0)
    err, shift = [], []
    for r, (p, lp) in enumerate(zip(g.prompt_ids, g.old_logprobs)):
        for t, got in enumerate(lp):
            err.append(abs(got - float(trunc[r, len(p) + t])))
            shift.append(got - float(full[r, len(p) + t]))
    assert sum(err) / len(err) < 1e-3, max(err)  # the renormalised truncated distribution ...
    assert sum(shift) / len(shift) > 1e-2  # ... not the full softmax
