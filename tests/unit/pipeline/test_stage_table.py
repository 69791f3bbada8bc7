"""The stage table (rlvr.stages) is what the CLI, the pipeline and the dry run read: one command per entry
with its help, inputs handed from the stage that produces them, torchrun refusing one-process stages."""

import pytest
import typer

from rlvr.config.recipe import Recipe
from rlvr.config.rl import RLStage
from rlvr.config.rlhf import PPOStage
from rlvr.config.sft import SFTStage
from rlvr.stages import STAGES, stage_commands, stage_kind


def _cli():
    from rlvr.cli import app

    return typer.main.get_command(app)


def test_each_stage_command_comes_from_its_entry():
    group = _cli()
    for kind in stage_commands():
        cmd = group.commands[kind.command]
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert cmd.help == kind.help
        assert {"--set", "--resume", "--model", "--run-dir", "--allow-config-change", "--overwrite"} <= opts
        assert ("--allow-unprobed-judge" in opts) == kind.judge_option
    assert [k.command for k in stage_commands()] == ["sft", "grpo", "dpo", "rm", "ppo", "rft", "distill"]
    assert STAGES["onpolicy_distill"].command is None and "onpolicy_distill" not in group.commands


@pytest.mark.parametrize("argv,kind,judge", [(["rm", "r.yaml", "--resume", "--model", "m"], "reward_model", False),
                                             (["grpo", "r.yaml", "--allow-unprobed-judge"], "rl", True)])
def test_a_stage_command_runs_its_type_only(monkeypatch, argv, kind, judge):
    from rlvr.commands import run

    seen = {}
    monkeypatch.setattr(run, "stage_command", lambda k, recipe, sets, resume, init, **kw: seen.update(
        kind=k, recipe=recipe, resume=resume, init=init, judge=kw["allow_unprobed_judge"]))
    _cli().main(argv, standalone_mode=False)
    assert seen["kind"] == kind and seen["recipe"] == "r.yaml" and seen["judge"] is judge
    assert seen["resume"] is ("--resume" in argv) and seen["init"] == ("m" if "--model" in argv else None)


def test_a_stage_takes_what_an_earlier_stage_produced():
    from rlvr.pipeline import with_inputs

    ppo = PPOStage(name="ppo", reward="reward_model")
    assert with_inputs(ppo, {"reward_model": "rm/final"}).reward_model_path == "rm/final"
    assert with_inputs(ppo, {"policy": "sft/final"}).reward_model_path is None
    given = ppo.model_copy(update={"reward_model_path": "mine"})
    assert with_inputs(given, {"reward_model": "rm/final"}).reward_model_path == "mine"
    sft = SFTStage(name="sft")
    assert with_inputs(sft, {"reward_model": "rm/final"}) is sft
    assert not STAGES["reward_model"].produces_policy and stage_kind(ppo).consumes == {"reward_model_path": "reward_model"}


def test_torchrun_runs_only_data_parallel_stages():
    from rlvr.pipeline import _check_torchrun_stages

    recipe = Recipe(stages=[SFTStage(name="sft"), RLStage(name="grpo")])
    with pytest.raises(ValueError, match=r"\['sft \(sft\)'\]"):
        _check_torchrun_stages(recipe, None)
    _check_torchrun_stages(recipe, "rl")  # only the RL stage: fine
