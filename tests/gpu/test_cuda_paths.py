"""The same trainers on a CUDA device (skipped without a GPU): SFT, GRPO with KL, LoRA reference,
bf16 autocast generation; losses finite, weights move, outputs land on the GPU."""

import json

import pytest
import torch

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.model import LoraConfig, ModelConfig
from rlvr.config.rl import KLConfig, RLStage, SamplingConfig
from rlvr.config.sft import SFTStage
from rlvr.data.chat import encode_prompt, stop_token_ids
from rlvr.data.arithmetic import generate
from rlvr.models.load import load_model_and_tokenizer
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.trainers.rl import train_rl
from rlvr.trainers.sft import train_sft
from rlvr.verifiers.base import Verdict

pytestmark = pytest.mark.gpu


def parity(tasks, comps):
    return [Verdict(float(len(c) % 2 == 0), len(c) % 2 == 0, "pass" if len(c) % 2 == 0 else "wrong") for c in comps]


def test_model_lands_on_cuda_and_generates_with_bf16(tiny_dir):
    model, tok = load_model_and_tokenizer(ModelConfig(path=tiny_dir, device="cuda"))
    assert model.device.type == "cuda"
    prompts = [encode_prompt(tok, t) for t in generate(["add2"], 8)]
    for bf16 in (False, True):
        g = HFEngine(model, tok, bf16=bf16).generate(prompts, SamplingParams(n=4, max_new_tokens=12, seed=0,
                                                                              stop_token_ids=stop_token_ids(tok)))
        assert len(g.completion_ids) == 32 and all(len(c) == len(lp) for c, lp in zip(g.completion_ids, g.old_logprobs))


def test_sft_and_grpo_with_kl_on_cuda(tiny_dir, tmp_path):
    cfg = ModelConfig(path=tiny_dir, device="cuda")
    sft = train_sft(SFTStage(data=BuiltinArithmetic(n=64), max_steps=5, batch_size=8, micro_batch_size=4, save_every=0),
                    cfg, tmp_path, seed=0)
    losses = [json.loads(x)["train/loss"] for x in open(sft.metrics_path) if "train/loss" in x]
    assert all(torch.isfinite(torch.tensor(losses)))
    st = RLStage(data=BuiltinArithmetic(n=16), sampling=SamplingConfig(group_size=4, max_new_tokens=8), max_steps=3,
                 tasks_per_step=4, kl=KLConfig(beta=0.1), save_every=2)
    res = train_rl(st, ModelConfig(path=sft.checkpoint, device="cuda"), tmp_path, judge=parity)
    recs = [json.loads(x) for x in open(res.metrics_path)]
    assert any(r.get("train/sequences", 0) > 0 for r in recs) and any("kl/ref" in r for r in recs)


def test_lora_on_cuda(tiny_dir, tmp_path):
    cfg = ModelConfig(path=tiny_dir, device="cuda", lora=LoraConfig(r=4, alpha=8), autocast_bf16=True)
    st = RLStage(data=BuiltinArithmetic(n=16), sampling=SamplingConfig(group_size=4, max_new_tokens=8), max_steps=2,
                 tasks_per_step=4, kl=KLConfig(beta=0.05), save_every=0)
    res = train_rl(st, cfg, tmp_path, judge=parity)
    assert (tmp_path / "rl" / "final" / "model.safetensors").exists() and res.steps == 2


def test_agent_closed_loop_sft_and_multi_turn_grpo_on_cuda(tiny_dir, tmp_path):
    # the agent recipe's path on a GPU (tiny model: the Qwen checkpoint of recipes/gpu/agent_qwen.yaml is not
    # shipped): multi-turn demonstrations, closed-loop rollouts with HGPO credit, closed-loop evaluation
    from rlvr.config.agent import AgentLoopConfig, HGPOCredit, RolloutConfig
    from rlvr.config.data import BuiltinEnvTasks
    from rlvr.config.eval import EvalConfig

    cfg = ModelConfig(path=tiny_dir, device="cuda")
    loop = AgentLoopConfig(max_turns=3, max_new_tokens=24, max_total_tokens=400)
    sft = train_sft(SFTStage(data=BuiltinEnvTasks(env="calculator", n=32), max_steps=3, batch_size=8,
                             max_length=400, save_every=0), cfg, tmp_path, seed=0)
    rl = RLStage(data=BuiltinEnvTasks(env="calculator", n=32, seed=1), max_steps=2, tasks_per_step=2, save_every=0,
                 sampling=SamplingConfig(group_size=4, temperature=2.0), micro_batch_size=8,
                 rollout=RolloutConfig(mode="multi_turn", loop=loop, credit=HGPOCredit()))
    ev = EvalConfig(tasks=BuiltinEnvTasks(env="calculator", n=8, split="heldout"), agent=loop)
    res = train_rl(rl, cfg, tmp_path, seed=0, init_path=sft.checkpoint, eval_cfg=ev)
    rows = [json.loads(x) for x in open(res.metrics_path)]
    assert res.steps == 2 and all(r["verifier/infra"] == 0 and r["agent/replay_disagree"] == 0 for r in rows[-2:])
    assert "eval/turns_mean" in rows[-1]
