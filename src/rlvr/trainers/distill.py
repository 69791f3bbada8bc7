"""Off-policy distillation: a frozen teacher checkpoint samples K completions per task, the verifier
keeps the passing ones (deduplicated, optionally the shortest), the student is fine-tuned on them;
``rounds`` rounds over fresh tasks. (The on-policy variant, where the student samples and the teacher
scores its tokens, is another stage.)

setup (student, teacher: same tokenizer) -> per round: sample (teacher) -> verify -> filter -> SFT
steps -> log / eval / checkpoint (:mod:`rlvr.trainers.sample_sft`).
"""

from __future__ import annotations

from pathlib import Path

from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.rft import DistillStage
from rlvr.errors import ConfigError
from rlvr.models.load import load_pretrained, resolve_device
from rlvr.rollout.hf_engine import HFEngine
from rlvr.trainers.common import StageResult
from rlvr.trainers.sample_sft import train_sample_sft


def load_teacher(stage: DistillStage, model_cfg: ModelConfig, student_tok):
    """The frozen teacher (eval mode, no grad) from ``stage.teacher``; its tokenizer must be the student's
    (the kept samples are the teacher's token ids)."""
    teacher, tok = load_pretrained(stage.teacher, "float32")
    if tok.get_vocab() != student_tok.get_vocab():
        raise ConfigError(f"stage {stage.name}: teacher {stage.teacher!r} has a different tokenizer from the "
                          "student's (vocabularies differ); distillation trains on the teacher's token ids")
    teacher = teacher.to(resolve_device(model_cfg.device)).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def train_distill(stage: DistillStage, model_cfg: ModelConfig, run_dir: str | Path, seed: int = 0,
                  init_path: str | None = None, resume: bool = False, eval_cfg: EvalConfig | None = None,
                  judge=None, crash_at_step: int | None = None) -> StageResult:
    """Run a distillation stage; the sampler is the teacher."""
    def sampler(model, tok):
        return HFEngine(load_teacher(stage, model_cfg, tok), tok, bf16=model_cfg.decode_bf16)
    return train_sample_sft(stage, model_cfg, run_dir, seed, init_path, resume, eval_cfg, judge, crash_at_step,
                            sampler=sampler, label="distill")
