"""A recipe: a starting model, held-out eval, and ordered stages, each starting from the previous one."""

from __future__ import annotations

from pydantic import model_validator

from rlvr.config.base import Section, typed_union
from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig, TinyModel
from rlvr.config.preference import PreferenceStage
from rlvr.config.rl import RLStage
from rlvr.config.rlhf import PPOStage, RewardModelStage
from rlvr.config.sft import SFTStage

Stage = typed_union(SFTStage, PreferenceStage, RewardModelStage, PPOStage, RLStage)


class Recipe(Section):
    """A complete post-training run."""

    name: str = "run"
    """Recipe name."""
    seed: int = 0
    """Global seed (python, numpy, torch, data order)."""
    run_dir: str = "runs/run"
    """Where checkpoints, metrics, the resolved config and reports go."""
    threads: int | None = None
    """torch intra-op threads (None: torch's default)."""
    model: ModelConfig = ModelConfig(tiny=TinyModel())
    """The model the first stage starts from."""
    eval: EvalConfig = EvalConfig()
    """Held-out evaluation after every stage."""
    eval_base: bool = True
    """Evaluate the starting model first (stage ``base`` in the summary)."""
    stages: list[Stage] = []
    """Stages in order."""

    @model_validator(mode="after")
    def _unique_stage_names(self) -> "Recipe":
        names = [s.name for s in self.stages]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"stage names must be unique (they name run sub-directories): {sorted(dup)}")
        return self
