"""PPO for language models (Ziegler et al., 2019; Ouyang et al., 2022): actor, critic, frozen reward
model (or the task's verifier as the reward), frozen reference.

Reads top to bottom: setup -> rollout (one sample per prompt) -> reward (RM score of prompt +
completion, or the verifier's reward; verifier infrastructure failures are dropped) -> evaluate the
batch under the sampling policy, the reference and the critic -> per-token reward
``r_t = -kl_coef * (logp_t - ref_logp_t) + [t last] R`` -> GAE(γ, λ) -> whitened advantages ->
``ppo_epochs`` x ``mini_batches`` updates of the clipped policy loss and the clipped value loss ->
adaptive KL coefficient toward ``target_kl`` -> log -> checkpoint.

Models:

* the **critic** is a separate model with a scalar head (a ``*ForSequenceClassification`` whose head is
  read at every position, see ``rlvr.models.heads``). With a reward model it starts as a copy of the
  reward model, whatever its size (InstructGPT); with the verifier as the reward it
  starts from the policy's backbone with a zero head (V = 0 at first, so early advantages are the
  returns rather than a random head's noise). It has its own optimiser (``critic_optim``).
* the **reference** is a frozen copy of the starting policy; under LoRA it is the base with adapters
  disabled (no copy).
* the **reward model** is loaded frozen from ``reward_model_path``; by default from ``init_path`` when
  that is a reward_model stage's output (then the policy is the one that stage started from), else
  from ``run_dir/reward_model/final``.

Every random draw is seeded by (seed, step); a checkpoint holds the actor, the critic, both optimisers,
the task cursor and the KL coefficient, so a resumed run continues the same trajectory.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import numpy as np
import torch

from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.rlhf import PPOStage
from rlvr.data.chat import encode_prompt, stop_token_ids
from rlvr.data.sources import load_task_source
from rlvr.errors import ConfigError
from rlvr.losses.kl import adaptive_kl_coef
from rlvr.models.checkpoint import (
    latest_checkpoint,
    load_training_state,
    save_pretrained_atomic,
    seed_everything,
)
from rlvr.models.heads import backbone_and_head, load_reward_model, sequence_classifier_from_causal
from rlvr.models.load import disable_dropout, is_peft, load_model_and_tokenizer
from rlvr.monitoring.evaluate import default_judge
from rlvr.monitoring.metrics import MetricsWriter, truncate_metrics_after
from rlvr.monitoring.progress import make_progress
from rlvr.rollout.engine import SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.trainers.common import build_optimizer, end_of_step, stage_dir
from rlvr.trainers.eval_hook import EvalHook
from rlvr.trainers.ppo_update import (
    build_batch,
    compute_advantages,
    evaluate_batch,
    ppo_update,
    rm_scores,
    sampler_mismatch,
    verifier_rewards,
)
from rlvr.trainers.reward_model import RM_MARKER
from rlvr.trainers.rl import TaskStream
from rlvr.trainers.sft import StageResult


def reward_model_marker(path: str | None) -> dict | None:
    """The marker a reward_model stage leaves in its output (None if ``path`` is not such an output)."""
    if path is None or not (Path(path) / RM_MARKER).exists():
        return None
    return json.loads((Path(path) / RM_MARKER).read_text())


def resolve_paths(stage: PPOStage, run_dir: str | Path, init_path: str | None) -> tuple[str | None, str | None]:
    """``(policy init path, reward model path or None)``.

    When ``init_path`` is a reward_model stage's output (a pipeline passes the previous stage's
    checkpoint), the policy is the one that stage started from and the reward model defaults to it.
    Otherwise the reward model defaults to ``run_dir/reward_model/final``; a clear error when missing.
    """
    marker = reward_model_marker(init_path)
    rm_default = init_path if marker is not None else str(Path(run_dir) / "reward_model" / "final")
    policy = marker["policy"] if marker is not None else init_path
    if stage.reward != "reward_model":
        return policy, None
    path = stage.reward_model_path or rm_default
    if not (Path(path) / "config.json").exists():
        raise ConfigError(f"stage {stage.name!r}: reward: reward_model, but no reward model at {path!r}; set "
                          "reward_model_path or run a reward_model stage first (`rlvr rm RECIPE`)")
    return policy, path


def setup_models(stage: PPOStage, model_cfg: ModelConfig, run_dir, init_path, seed: int):
    """``(policy, tok, reference or None (LoRA), critic, reward model or None, rm tokenizer or None)``."""
    init_path, rm_path = resolve_paths(stage, run_dir, init_path)
    policy, tok = load_model_and_tokenizer(model_cfg, init_path)
    policy.train()
    ref = None
    if not is_peft(policy):
        ref = copy.deepcopy(policy).eval()
        for p in ref.parameters():
            p.requires_grad_(False)
    rm, rm_tok = None, None
    if rm_path is not None:
        rm, rm_tok = load_reward_model(rm_path)
        rm = rm.to(next(policy.parameters()).device)
    if rm is not None and rm_tok.get_vocab() == tok.get_vocab():
        critic = copy.deepcopy(rm)
    else:
        critic = sequence_classifier_from_causal(policy, tok, seed=seed + 1)
        _, head = backbone_and_head(critic)
        torch.nn.init.zeros_(head.weight)          # V = 0 at the start: the first advantages are the returns
    critic = critic.float().train()  # trained in full: fp32 master weights even over a bf16 base
    if not model_cfg.train_dropout:
        disable_dropout(critic)
    for p in critic.parameters():
        p.requires_grad_(True)
    return policy, tok, ref, critic, rm, rm_tok


def rollout_and_score(stage, engine, tok, tasks, judge, rm, rm_tok, seed: int, step: int):
    """Generate one completion per task and score it; returns (generation, rewards, valid, verifier metrics)."""
    params = SamplingParams(n=1, temperature=stage.temperature, max_new_tokens=stage.max_new_tokens,
                            stop_token_ids=stop_token_ids(tok), seed=seed * 100003 + step * 97 + 1)
    gen = engine.generate([encode_prompt(tok, t) for t in tasks], params)
    verdicts = judge(tasks, gen.texts)
    v_rewards, valid = verifier_rewards(verdicts)
    met = {"rollout/pass_rate": float(np.mean([v.passed for v in verdicts])),
           "verifier/infra": int((~valid).sum())}
    if rm is None:
        return gen, v_rewards, valid, met
    scores = rm_scores(rm, rm_tok, tok, tasks, gen.prompt_ids, gen.completion_ids, gen.texts, stage.micro_batch_size)
    return gen, scores, torch.ones(len(scores), dtype=torch.bool), met


def checkpoint_state(wall, stream, kl_coef, critic, copt, csched) -> dict:
    return {"wall_seconds": wall, "cursor": stream.cursor, "kl_coef": kl_coef, "critic": critic.state_dict(),
            "critic_optimizer": copt.state_dict(), "critic_scheduler": csched.state_dict()}


def train_ppo(stage: PPOStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
              init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
              judge=None, crash_at_step: int | None = None) -> StageResult:
    """Run a PPO stage; returns where the final actor is (the critic goes to ``<stage>/critic``)."""
    out = stage_dir(run_dir, stage.name)
    seed_everything(seed)
    policy, tok, ref, critic, rm, rm_tok = setup_models(stage, model_cfg, run_dir, init_path, seed)
    judge = judge or default_judge(stage.verifier_workers)
    engine = HFEngine(policy, tok, bf16=model_cfg.autocast_bf16)
    stream = TaskStream(load_task_source(stage.data), seed)
    popt, psched = build_optimizer(policy, stage.optim, stage.max_steps)
    copt, csched = build_optimizer(critic, stage.critic_optim or stage.optim, stage.max_steps)
    step, wall, kl_coef = 0, 0.0, stage.init_kl_coef
    ckpt = latest_checkpoint(out / "checkpoints") if resume else None
    if ckpt is not None:
        st = load_training_state(ckpt, policy, popt, psched)
        step, wall, stream.cursor, kl_coef = st["step"], st["wall_seconds"], st["cursor"], st["kl_coef"]
        critic.load_state_dict(st["critic"])
        copt.load_state_dict(st["critic_optimizer"])
        csched.load_state_dict(st["critic_scheduler"])
        truncate_metrics_after(out / "metrics.jsonl", step)
    writer = MetricsWriter(out / "metrics.jsonl")
    writer.log(step, {"event": "resume" if ckpt else "start", "reward": stage.reward,
                      "reference": "base (adapters disabled)" if ref is None else "frozen copy"})
    evaler = EvalHook(eval_cfg, tok, judge, stage.eval_every) if eval_cfg is not None and stage.eval_every else None
    if evaler is not None and step == 0:
        writer.log(0, evaler.run(policy, 0))
    bf16 = model_cfg.autocast_bf16
    with make_progress() as prog:
        bar = prog.add_task(f"ppo:{stage.name}", total=stage.max_steps, completed=step, info="")
        while step < stage.max_steps:
            t0 = time.perf_counter()
            tasks = stream.take(stage.prompts_per_step)
            gen, rewards, valid, rmet = rollout_and_score(stage, engine, tok, tasks, judge, rm, rm_tok, seed, step)
            batch, keep = build_batch(gen, rewards, valid, tok.pad_token_id, device=next(policy.parameters()).device)
            t1 = time.perf_counter()
            rec = {**rmet, "reward/mean": float(rewards[valid].mean()) if bool(valid.any()) else 0.0,
                   "reward/std": float(rewards[valid].std()) if int(valid.sum()) > 1 else 0.0,
                   "rollout/length_mean": float(np.mean([len(c) for c in gen.completion_ids])),
                   "rollout/truncation_rate": float(np.mean([r == "length" for r in gen.finish_reason])),
                   "kl/coef": kl_coef, "train/sequences": len(batch)}
            if len(batch):
                evaluate_batch(batch, policy, ref, critic, stage.temperature, stage.micro_batch_size, bf16)
                rec.update(sampler_mismatch(batch, gen, keep))
                rec.update(compute_advantages(batch, kl_coef, stage.gamma, stage.lam, stage.whiten_advantages))
                rec.update(ppo_update(batch, policy, critic, (popt, copt), (psched, csched), stage, seed, step, bf16))
                if stage.target_kl is not None:
                    kl_coef = adaptive_kl_coef(kl_coef, rec["kl/ref"], stage.target_kl, len(batch), stage.kl_horizon)
            else:
                psched.step(), csched.step()
            step += 1
            t2 = time.perf_counter()
            wall += t2 - t0
            rec.update({"time/rollout": t1 - t0, "time/train": t2 - t1, "time/step": t2 - t0,
                        "perf/minutes": wall / 60, "train/lr": psched.get_last_lr()[0]})
            if evaler is not None and evaler.due(step, stage.max_steps):
                rec.update(evaler.run(policy, step))
            writer.log(step, rec)
            prog.update(bar, advance=1, info=f"reward {rec['reward/mean']:.3f} kl {rec.get('kl/ref', 0.0):.2f}")
            end_of_step(out, stage, step, stage.max_steps, policy, tok, popt, psched,
                        checkpoint_state(wall, stream, kl_coef, critic, copt, csched), crash_at_step)
    writer.close()
    save_pretrained_atomic(critic, tok, out / "critic")
    final = save_pretrained_atomic(policy, tok, out / "final")
    return StageResult(stage.name, str(final), str(out / "metrics.jsonl"), step, wall,
                       {"critic": str(out / "critic"), "kl_coef": kl_coef, "reward": stage.reward})
