"""The stage table: what each stage type of a recipe is, in one place.

Every stage ``type`` of a recipe (``rlvr.config.recipe.STAGE_TYPES``) has one :class:`StageKind` in
:data:`STAGES`, and everything that differs between stage types is read from it: the pipeline (which
trainer runs the stage, whether its checkpoint is the next stage's policy, what it hands to later stages,
whether it may run under torchrun), the dry run (``rlvr.commands.preflight``: the stage's own checks, the
model folders it reads, whether its data is judged by the verifiers or trained on as demonstrations),
``rlvr plan`` (which stages it screens), the run header, and the CLI (one stage command each, generated
in ``rlvr.cli``). Nothing outside this module branches on a stage type's identity
(``tests/unit/architecture/test_layers.py``).

Its layer sits between ``distributed`` and ``pipeline``: it reads the trainers (imported when a stage
runs, so ``rlvr --help`` loads no torch) and is read by ``pipeline``, ``commands`` and ``cli``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Check = Callable[[Any, Any, frozenset], list[tuple[str, str]]]
"""``(stage, the recipe's distributed section, what earlier stages produce) -> [(key under the stage, why)]``."""


def _no_check(st: Any, distributed: Any, earlier: frozenset) -> list[tuple[str, str]]:
    return []


def _no_models(st: Any) -> list[tuple[str, str | None]]:
    return []


@dataclass(frozen=True)
class StageKind:
    """One stage type: how it trains, what it is checked for before a run, how the CLI runs it alone."""

    type: str
    """The recipe's ``type`` (``rlvr.config.recipe.STAGE_TYPES``)."""
    trainer: Callable[[], Callable]
    """Imports and returns the training function ``(stage, model_cfg, run_dir, seed, init_path=, resume=,
    eval_cfg=, judge=[, dist=]) -> StageResult``."""
    command: str | None
    """The CLI command that runs only this recipe's stages of this type (None: only ``rlvr run``)."""
    help: str = ""
    """That command's help line."""
    produces: Literal["policy", "reward_model"] = "policy"
    """What its checkpoint is: a policy (the next stage starts from it and it gets a held-out evaluation) or a
    reward model (handed to later stages that ``consumes`` one; the policy passes on unchanged)."""
    consumes: dict[str, str] = field(default_factory=dict)
    """``{field: what}``: a field left unset takes the checkpoint of the latest earlier stage producing ``what``."""
    distributed: Literal["data_parallel", "one_process"] = "one_process"
    """data_parallel: takes the recipe's distributed context (``dist=``: Ray, vLLM, torchrun ranks);
    one_process: runs in this process only, and is refused under torchrun."""
    check: Check = _no_check
    """Its own dry-run checks (batch arithmetic, option combinations, inputs an earlier stage must provide)."""
    model_paths: Callable[[Any], list[tuple[str, str | None]]] = _no_models
    """``stage -> [(field, folder)]``: the model folders it reads, each checked to be a local model folder."""
    judges_data: Callable[[Any], bool] | bool = False
    """Whether its ``data`` tasks are judged by their kind's verifier (True, False, or a function of the
    stage: an RL stage scored by ``correct``, PPO against the verifier)."""
    demonstrations: bool = False
    """Its ``data`` / ``heldout`` tasks are trained on their demonstrations (each must have one)."""
    screened: bool = False
    """``rlvr plan`` screens the starting checkpoint at its group size and temperature on its data."""
    data_noun: str = "data"
    """What its epochs run over, in the run header (``2 epochs of its pairs``)."""
    judge_option: bool = False
    """Its CLI command takes ``--allow-unprobed-judge`` (its rewards or pairs may be model-judged)."""
    plan_role: Literal["demonstrate", "prefer", "reinforce", "distil", "support"] = "support"
    """What ``rlvr plan``'s rules (:mod:`rlvr.monitoring.plan_rules`) see it as: SFT on demonstrations, preference
    alignment, RL, distillation / rejection sampling, or a support stage (a reward model) they leave alone."""

    @property
    def produces_policy(self) -> bool:
        return self.produces == "policy"

    def data_judged(self, st: Any) -> bool:
        """Whether stage ``st``'s ``data`` tasks are judged by their kind's verifier."""
        return self.judges_data(st) if callable(self.judges_data) else self.judges_data

    @property
    def may_judge_data(self) -> bool:
        """Whether some stage of this type has its data judged (the raw-YAML check's approximation)."""
        return self.judges_data is not False


def _rl_check(st: Any, distributed: Any, earlier: frozenset) -> list[tuple[str, str]]:
    from rlvr.trainers.variants import check_rl_combination, rl_variant

    out = []
    g = st.sampling.group_size
    if g < 2 and rl_variant(st.loss).group_baseline(st.loss):
        why = (f"group_size {g}: {st.loss.type} compares samples within a group, so a group of 1 has zero advantage "
               "and trains on nothing; use >= 2")
        out.append(("sampling.group_size", why))
    out += check_rl_combination(st, distributed)
    if st.mini_batches > st.tasks_per_step * g:
        why = (f"mini_batches {st.mini_batches} > the {st.tasks_per_step * g} sequences of a rollout batch "
               "(tasks_per_step x group_size)")
        out.append(("mini_batches", why))
    return out


def _ppo_check(st: Any, distributed: Any, earlier: frozenset) -> list[tuple[str, str]]:
    out = []
    if st.mini_batches > st.tasks_per_step:
        out.append(("mini_batches", f"mini_batches {st.mini_batches} > tasks_per_step {st.tasks_per_step}"))
    if st.reward == "reward_model" and st.reward_model_path is None and "reward_model" not in earlier:
        why = "reward: reward_model needs reward_model_path or an earlier stage of type reward_model"
        out.append(("reward_model_path", why))
    return out


def _ppo_models(st: Any) -> list[tuple[str, str | None]]:
    return [("reward_model_path", st.reward_model_path)] if st.reward == "reward_model" else []


def _sft():
    from rlvr.trainers.sft import train_sft

    return train_sft


def _preference():
    from rlvr.trainers.preference import train_preference

    return train_preference


def _reward_model():
    from rlvr.trainers.reward_model import train_reward_model

    return train_reward_model


def _ppo():
    from rlvr.trainers.ppo import train_ppo

    return train_ppo


def _rl():
    from rlvr.trainers.rl import train_rl

    return train_rl


def _rft():
    from rlvr.trainers.rft import train_rft

    return train_rft


def _distill():
    from rlvr.trainers.distill import train_distill

    return train_distill


def _onpolicy_distill():
    from rlvr.trainers.onpolicy_distill import train_onpolicy_distill

    return train_onpolicy_distill


STAGES: dict[str, StageKind] = {k.type: k for k in (
    StageKind("sft", _sft, "sft", "Run the recipe's SFT stage(s).", demonstrations=True, plan_role="demonstrate"),
    StageKind("rl", _rl, "grpo", "Run the recipe's RL stage(s) (GRPO, DAPO, GSPO, Dr.GRPO, RLOO, REINFORCE++).",
              distributed="data_parallel", check=_rl_check, screened=True, judge_option=True, plan_role="reinforce",
              judges_data=lambda st: any(r.name == "correct" for r in st.rewards)),
    StageKind("preference", _preference, "dpo", "Run the recipe's preference stage(s) (dpo, ipo, simpo, kto, orpo, "
              "cpo).", data_noun="pairs", plan_role="prefer", judge_option=True),
    StageKind("reward_model", _reward_model, "rm", "Train the recipe's reward model stage.", produces="reward_model",
              model_paths=lambda st: [("backbone", st.backbone)]),
    StageKind("ppo", _ppo, "ppo", "Run the recipe's PPO stage.", consumes={"reward_model_path": "reward_model"},
              check=_ppo_check, model_paths=_ppo_models, judges_data=lambda st: st.reward == "verifier",
              plan_role="reinforce"),
    StageKind("rft", _rft, "rft", "Run the recipe's rejection-sampling fine-tuning stage(s) (expert iteration).",
              judges_data=True, plan_role="distil"),
    StageKind("distill", _distill, "distill", "Run the recipe's distillation stage(s) (SFT on a teacher's verified "
              "samples).", judges_data=True, model_paths=lambda st: [("teacher", st.teacher)], plan_role="distil"),
    StageKind("onpolicy_distill", _onpolicy_distill, None, judges_data=True, plan_role="distil"),
)}
"""Stage type -> its :class:`StageKind`. A new stage type is one entry here (see docs/architecture.md)."""


def stage_kind(stage_or_type: Any) -> StageKind:
    """The table entry of a stage config (its ``type``) or of a type name."""
    kind = stage_or_type if isinstance(stage_or_type, str) else stage_or_type.type
    try:
        return STAGES[kind]
    except KeyError:
        raise ValueError(f"unknown stage type {kind!r}") from None


def stage_commands() -> list[StageKind]:
    """The stage types that have a CLI command, in the table's order (the order of ``rlvr --help``)."""
    return [k for k in STAGES.values() if k.command is not None]
