"""A recipe: a starting model, held-out eval, and ordered stages, each starting from the previous one."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator, model_validator

from rlvr.config.base import Section, typed_union
from rlvr.config.distributed import DistributedConfig
from rlvr.config.eval import EvalConfig
from rlvr.config.logging import LoggingConfig
from rlvr.config.model import ModelConfig, TinyModel
from rlvr.config.onpolicy import OnPolicyDistillStage
from rlvr.config.plan import PlanConfig
from rlvr.config.preference import PreferenceStage
from rlvr.config.rft import DistillStage, RFTStage
from rlvr.config.rl import RLStage
from rlvr.config.rlhf import PPOStage, RewardModelStage
from rlvr.config.sft import SFTStage

Stage = typed_union(SFTStage, PreferenceStage, RewardModelStage, PPOStage, RLStage, RFTStage, DistillStage,
                    OnPolicyDistillStage)
STAGE_TYPES: tuple[str, ...] = ("sft", "preference", "reward_model", "ppo", "rl", "rft", "distill", "onpolicy_distill")
# ``type: grpo`` is ``type: rl`` with ``loss: {type: grpo}`` (and, unless named, ``name: grpo``).
STAGE_ALIASES: dict[str, tuple[str, str | None]] = {
    **{a: ("rl", a) for a in ("grpo", "dapo", "gspo", "dr_grpo", "rloo", "reinforce_pp", "sign_balance", "asym_grpo",
                              "steer", "cispo", "sapo", "dar")},
    **{a: ("preference", a) for a in ("dpo", "ipo", "simpo", "kto", "orpo", "cpo")},
    "rm": ("reward_model", None),
}


def expand_stage_alias(stage: Any) -> Any:
    """``{type: dapo, ...}`` -> ``{type: rl, name: dapo, loss: {type: dapo}, ...}`` (other input unchanged)."""
    if not isinstance(stage, dict) or stage.get("type") not in STAGE_ALIASES:
        return stage
    alias = stage["type"]
    kind, loss = STAGE_ALIASES[alias]
    out = {**stage, "type": kind, "name": stage.get("name", alias)}
    if loss is not None:
        given = out.get("loss")
        if isinstance(given, dict) and given.get("type", loss) != loss:
            raise ValueError(f"type: {alias} means loss.type: {loss}, but loss.type: {given['type']} is set; "
                             f"write type: {kind} with loss: {{type: {given['type']}}}")
        out["loss"] = {**(given if isinstance(given, dict) else {}), "type": loss}
    return out


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
    omp_wait: Literal["auto", "spin", "passive"] = "auto"
    """How idle torch (OpenMP) threads wait between ops (``rlvr.omp_wait``): spin briefly (faster when the run
    has the cores to itself) or sleep at once (safe beside Ray workers, torchrun ranks, multi-turn tools);
    auto: spin unless the run shares the cores or other processes keep them busy at its start. OMP_WAIT_POLICY /
    GOMP_SPINCOUNT set by the user win."""
    model: ModelConfig = ModelConfig(tiny=TinyModel())
    """The model the first stage starts from."""
    system_prompt: str | None = None
    """System message put before every prompt (training, pairs and evaluation) unless a task source sets its own."""
    eval: EvalConfig = EvalConfig()
    """Held-out evaluation after every stage."""
    eval_base: bool = True
    """Evaluate the starting model first (stage ``base`` in the summary)."""
    logging: LoggingConfig = LoggingConfig()
    """Console log lines, TensorBoard, W&B and sample completions."""
    distributed: DistributedConfig = DistributedConfig()
    """Where RL stages run: this process (default), a Ray cluster, torchrun ranks (docs/scaling.md)."""
    plan: PlanConfig = PlanConfig()
    """What ``rlvr plan`` decides against (target, teacher, thresholds) and whether ``rlvr run`` follows it."""
    stages: list[Stage] = []
    """Stages in order. ``type`` is sft, preference, reward_model, ppo, rl, rft (rejection-sampling fine-tuning) or distill (off-policy distillation from a teacher), or an alias: grpo, dapo, gspo, dr_grpo, rloo, reinforce_pp (rl), dpo, ipo, simpo, kto, orpo, cpo (preference), rm (reward_model)."""

    @field_validator("stages", mode="before")
    @classmethod
    def _aliases(cls, v: Any) -> Any:
        return [expand_stage_alias(s) for s in v] if isinstance(v, list) else v

    @model_validator(mode="after")
    def _unique_stage_names(self) -> Recipe:
        names = [s.name for s in self.stages]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"stage names must be unique (they name run sub-directories): {sorted(dup)}")
        for i, st in enumerate(self.stages):
            src = getattr(st, "start_from", None)
            if src is not None and src not in names[:i]:
                raise ValueError(f"stages.{i}.start_from: {src!r} is not an earlier stage (earlier: {names[:i]})")
            if getattr(st, "start", "previous") == "screened" and i == 0:
                raise ValueError(f"stages.{i}.start: screened needs an earlier stage whose checkpoints are screened")
        return self


def task_sources(recipe: Recipe) -> list[tuple[str, Any]]:
    """Every task source of a recipe as ``(dotted key, source)``: eval, stage data, pair-builder tasks."""
    out: list[tuple[str, Any]] = [("eval.tasks", recipe.eval.tasks)]
    for i, st in enumerate(recipe.stages):
        for field in ("data", "heldout"):
            src = getattr(st, field, None)
            if src is not None:
                out.append((f"stages.{i}.{field}", src))
        pairs = getattr(st, "pairs", None)
        if pairs is not None and hasattr(pairs, "tasks"):
            out.append((f"stages.{i}.pairs.tasks", pairs.tasks))
    return out


def with_system_prompt(recipe: Recipe) -> Recipe:
    """The recipe with its ``system_prompt`` copied into every task source (and pairs file) that sets none."""
    sp = recipe.system_prompt
    if sp is None:
        return recipe

    def fill(src):
        return src.model_copy(update={"system_prompt": sp}) if src.system_prompt is None else src

    stages = []
    for st in recipe.stages:
        upd = {f: fill(getattr(st, f)) for f in ("data", "heldout") if getattr(st, f, None) is not None}
        pairs = getattr(st, "pairs", None)
        if pairs is not None:
            upd["pairs"] = pairs.model_copy(update={"tasks": fill(pairs.tasks)}) if hasattr(pairs, "tasks") \
                else fill(pairs)
        stages.append(st.model_copy(update=upd))
    ev = recipe.eval.model_copy(update={"tasks": fill(recipe.eval.tasks)})
    return recipe.model_copy(update={"stages": stages, "eval": ev})
