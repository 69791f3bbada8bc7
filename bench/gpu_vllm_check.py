"""The vLLM rollout engine on a lent GPU machine (marked ``gpu``; skipped without CUDA or vllm).

    pip install 'rlvr[vllm]'          # on the GPU box
    PYTHONPATH=src python -m pytest -q -s -p no:cacheprovider bench/gpu_vllm_check.py 2>&1 | tee gpu_vllm.log

Three checks, each printing its measured figures (docs/scaling.md records them):

1. the sampler's logprobs against the trainer's recomputation of the same tokens, in fp32 (tight) and
   bf16 (loose): mean and max |Δ logprob|, and what the mismatch correction does with them;
2. a weight sync changes the samples (greedy decode before / after perturbing the trainer's weights), and
   syncing the original weights back restores them;
3. GRPO steps end to end with ``distributed.engine: vllm`` (colocated, sleeping between generations):
   finite loss, the mismatch metrics logged, the weights move.

The model is the tiny Llama built from scratch with head_dim 64 (vLLM's attention kernels want a
supported head size): no download.
"""

from __future__ import annotations

import json

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
vllm = pytest.importorskip("vllm")

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.distributed import DistributedConfig, VLLMConfig
from rlvr.config.model import ModelConfig
from rlvr.config.rl import RewardTerm, RLStage, SamplingConfig
from rlvr.data.arithmetic import generate
from rlvr.data.chat import encode_prompt, stop_token_ids
from rlvr.data.collate import pad_batch
from rlvr.losses.mismatch import mismatch_weights
from rlvr.models.load import load_pretrained
from rlvr.models.logprobs import token_logprobs
from rlvr.models.tiny import build_tiny
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.vllm_engine import VLLMEngine


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny") / "model"
    build_tiny(d, size="5m", seed=0, num_attention_heads=4, num_key_value_heads=4)  # head_dim 256 / 4 = 64
    return str(d)


def recompute(model, g):
    seqs = [p + c for p, c in zip(g.prompt_ids, g.completion_ids)]
    masks = [[0] * len(p) + [1] * len(c) for p, c in zip(g.prompt_ids, g.completion_ids)]
    ids, att, lm = pad_batch(seqs, 0, masks, left=False, device=model.device)
    with torch.no_grad():
        trainer, _ = token_logprobs(model, ids, att, 1.0)
    sampler = torch.zeros_like(trainer)
    for i, (p, lp) in enumerate(zip(g.prompt_ids, g.old_logprobs)):
        sampler[i, len(p):len(p) + len(lp)] = torch.tensor(lp, device=trainer.device)
    return trainer, sampler, lm


@pytest.mark.parametrize("dtype,bound", [("float32", 1e-3), ("bfloat16", 0.5)])
def test_sampler_logprobs_match_the_trainer(model_dir, dtype, bound):
    model, tok = load_pretrained(model_dir)
    model = model.cuda().eval()
    eng = VLLMEngine(model, tok, VLLMConfig(dtype=dtype, sleep_level=0, gpu_memory_utilization=0.3))
    prompts = [encode_prompt(tok, t) for t in generate(["add2", "mul31"], 32)]
    g = eng.generate(prompts, SamplingParams(n=4, max_new_tokens=24, seed=0, stop_token_ids=stop_token_ids(tok)))
    trainer, sampler, lm = recompute(model, g)
    _, m = mismatch_weights(trainer, sampler, lm)
    print(f"\n[vllm {dtype}] {json.dumps({k: round(v, 6) for k, v in m.items()})}")
    assert m["mismatch/logprob_diff_mean"] < bound
    eng.close()


def test_weight_sync_changes_the_samples(model_dir):
    model, tok = load_pretrained(model_dir)
    model = model.cuda().eval()
    eng = VLLMEngine(model, tok, VLLMConfig(dtype="float32", sleep_level=1, gpu_memory_utilization=0.3))
    prompts = [encode_prompt(tok, t) for t in generate(["add2"], 16)]
    params = SamplingParams(n=1, max_new_tokens=16, greedy=True, stop_token_ids=stop_token_ids(tok))
    before = eng.generate(prompts, params).completion_ids
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    eng.sync_weights(model, version=1)
    after = eng.generate(prompts, params)
    assert after.policy_version == [1] * len(prompts)
    changed = sum(a != b for a, b in zip(before, after.completion_ids))
    model.load_state_dict(saved)
    eng.sync_weights(model, version=2)
    again = eng.generate(prompts, params).completion_ids
    print(f"\n[vllm sync] {changed}/{len(prompts)} greedy completions changed after the sync; "
          f"{sum(a == b for a, b in zip(before, again))}/{len(prompts)} restored")
    assert changed > 0 and again == before
    eng.close()


def test_grpo_steps_with_the_vllm_engine(model_dir, tmp_path):
    from rlvr.distributed import make_context
    from rlvr.trainers.rl import train_rl

    st = RLStage(data=BuiltinArithmetic(families=["add2"], n=256), max_steps=3, tasks_per_step=16,
                 sampling=SamplingConfig(group_size=8, max_new_tokens=24),
                 rewards=[RewardTerm(name="correct"), RewardTerm(name="length", weight=0.5)], save_every=0)
    ctx = make_context(DistributedConfig(engine="vllm", vllm=VLLMConfig(gpu_memory_utilization=0.3)))
    try:
        res = train_rl(st, ModelConfig(path=model_dir, device="cuda"), tmp_path / "run", dist=ctx)
    finally:
        ctx.close()
    rows = [json.loads(x) for x in open(res.metrics_path) if '"rollout/pass_rate"' in x]
    for r in rows:
        print(f"\n[vllm grpo] step {r['step']}: loss {r.get('train/loss')}, time/generate {r['time/generate']:.2f}s, "
              f"time/train {r['time/train']:.2f}s, " + ", ".join(f"{k} {v:.3g}" for k, v in r.items()
                                                                    if k.startswith("mismatch/")))
    assert len(rows) == 3 and all(torch.isfinite(torch.tensor(r.get("train/loss", 0.0))) for r in rows)
    assert any("mismatch/logprob_diff_mean" in r for r in rows)
