"""Rejection-sampling fine-tuning (expert iteration): the policy samples K completions per task, the
verifier keeps the passing ones (deduplicated, optionally the shortest), the policy is fine-tuned on
them; ``rounds`` times, each round sampling from the weights the previous one left.

setup -> per round: sample (the live policy, seeded by (seed, round)) -> verify -> filter -> SFT steps ->
log / eval / checkpoint (the loop shared with distillation: :mod:`rlvr.trainers.sample_sft`).
"""

from __future__ import annotations

from pathlib import Path

from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.rft import RFTStage
from rlvr.trainers.common import StageResult
from rlvr.trainers.sample_sft import train_sample_sft


def train_rft(stage: RFTStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
              init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
              judge=None, crash_at_step: int | None = None) -> StageResult:
    """Run an RFT stage; the sampler is the policy being trained."""
    return train_sample_sft(stage, model_cfg, run_dir, seed, init_path, resume, eval_cfg, judge, crash_at_step,
                            sampler=None, label="rft")
