"""The multi-turn branch of the RL stage: rewards, credit, training rows and one update per estimator."""

import os
import sys

import pytest
import torch

from rlvr.config.agent import (
    AgentGuards,
    AgentLoopConfig,
    HGPOCredit,
    RolloutConfig,
    TrajectoryCredit,
    TurnCredit,
)
from rlvr.config.rl import RLStage, SamplingConfig
from rlvr.envs import registry
from rlvr.errors import ConfigError
from rlvr.models.tiny import build_tiny
from rlvr.rollout.hf_engine import HFEngine
from rlvr.trainers.agent import AgentRollout, assign_turn_rewards
from rlvr.trainers.common import build_optimizer
from rlvr.data.order import TaskStream
from rlvr.trainers.rl import policy_update
from rlvr.trainers.rl import update_minibatch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "rollout"))
from agent_fakes import EchoEnv, echo_task

LOOP = AgentLoopConfig(max_turns=3, max_new_tokens=10, max_total_tokens=300)


@pytest.fixture(autouse=True)
def echo_env(monkeypatch):
    monkeypatch.setitem(registry.ENVIRONMENTS, "echo", EchoEnv)


def stage(credit, **kw):
    return RLStage(rollout=RolloutConfig(mode="multi_turn", loop=LOOP, credit=credit, **kw), tasks_per_step=3,
                   sampling=SamplingConfig(group_size=4, temperature=1.5), micro_batch_size=8)


@pytest.mark.parametrize("credit", [TrajectoryCredit(), TurnCredit(gamma=0.8), HGPOCredit()], ids=lambda c: c.type)
def test_one_multi_turn_step_per_credit_estimator_trains_only_policy_tokens(credit):
    model, tok = build_tiny(size="test", seed=1)
    st = stage(credit)
    agent = AgentRollout(st, HFEngine(model, tok), tok, model)
    stream = TaskStream([echo_task(i) for i in range(6)], seed=0)
    batch, rec = agent.step(stream, seed=0, step=0, needs_all=False)
    assert rec["agent/turns_mean"] == 3.0 and rec["verifier/infra"] == 0 and "horizon" in rec["notes"]
    assert 0 < rec["rollout/pass_rate"] < 1 and len(batch) > 0  # echo's goal (even length) splits groups
    rows = [(batch.input_ids[i, :n].tolist(), batch.loss_mask[i, :n].tolist(), batch.advantages[i, :n].tolist())
            for i, n in enumerate(batch.lengths())]
    assert all(not any(a) for a in batch.advantages[:, max(batch.lengths()):].tolist())  # padding: nothing
    assert batch.group_ids.tolist() == sorted(batch.group_ids.tolist()) and set(batch.group_ids.tolist()) <= {0, 1, 2}
    for seq, mask, adv in rows:
        assert len(adv) == len(seq) == len(mask) and any(adv)
        assert all(a == 0.0 for a, m in zip(adv, mask) if not m)  # observation and prompt tokens: nothing
    if credit.type == "trajectory":  # every policy token of a row carries the same advantage
        assert all(len({a for a, m in zip(adv, mask) if m}) == 1 for _, mask, adv in rows)
    # token-in/token-out through the real update: with the sampler's old_logprobs (not the detached
    # current ones) the importance ratio of every policy token is 1 before the first optimizer step
    met = update_minibatch(model, batch, st, on_policy=False)
    assert abs(met["ratio/max"] - 1.0) < 1e-5 and abs(met["ratio/min"] - 1.0) < 1e-5
    model.zero_grad()
    before = [p.detach().clone() for p in model.parameters()]
    opt, sched = build_optimizer(model, st.optim, 4)
    assert policy_update(model, opt, sched, st, batch, False)["train/sequences"] == len(batch)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_budget_overruns_and_tool_errors_are_penalised_on_their_turn():
    from rlvr.rollout.multiturn import Trajectory, TurnSpan
    from rlvr.verifiers.base import Verdict

    tr = Trajectory(echo_task(), 0, 0)
    tr.turns = [TurnSpan(0, 1, "a", "stop", "s", tool_errors=1), TurnSpan(1, 2, "b", "stop", "s", refused=1)]
    tr.verdict = Verdict(0.0, False, "violation")
    assign_turn_rewards([tr], budget_penalty=0.5, tool_error_penalty=0.1)
    assert [t.reward for t in tr.turns] == [-0.1, -0.5] and tr.reward == pytest.approx(-0.6)
    tr.verdict = Verdict(1.0, True, "pass")
    assign_turn_rewards([tr], budget_penalty=0.5, tool_error_penalty=0.0)
    assert [t.reward for t in tr.turns] == [0.0, 0.5]


def test_a_loop_longer_than_the_models_positions_is_a_config_error():
    model, tok = build_tiny(size="test", max_positions=128)
    st = stage(TrajectoryCredit())
    with pytest.raises(ConfigError, match="max_total_tokens = 300 is more than the model's 128 positions"):
        AgentRollout(st, HFEngine(model, tok), tok, model)


def test_guards_config_is_typed():
    assert AgentGuards().budget_penalty == 0.5
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        AgentLoopConfig(max_turns=0)


def test_single_turn_options_are_refused_or_off_in_the_closed_loop():
    """Dynamic sampling and extra reward terms act on single-turn completions: a multi_turn stage refuses
    them by name instead of ignoring them; DAPO's defaults stay off there."""
    import pytest
    from pydantic import ValidationError

    from rlvr.config.rl import RLStage

    base = {"data": {"type": "builtin_env", "env": "calculator", "n": 8}, "rollout": {"mode": "multi_turn"}}
    dapo = RLStage(**base, loss={"type": "dapo"})
    assert dapo.sampling.dynamic_sampling == "off" and [t.name for t in dapo.rewards] == ["correct"]
    with pytest.raises(ValidationError, match="dynamic_sampling is for single-turn"):
        RLStage(**base, sampling={"dynamic_sampling": "correct"})
    with pytest.raises(ValidationError, match=r"reward terms \['length'\] apply to single-turn"):
        RLStage(**base, rewards=[{"name": "correct"}, {"name": "length", "weight": 0.1}])


def test_health_knobs_reach_the_multi_turn_rollout():
    """raise_temperature / grow_group move the stage's sampling knobs; the multi-turn rollout must sample with
    the moved values (it used the stage it was built with: the actions did nothing in agent runs)."""
    from rlvr.monitoring.health_actions import apply_knobs

    model, tok = build_tiny(size="test", seed=1)
    st = stage(TrajectoryCredit())
    agent = AgentRollout(st, HFEngine(model, tok), tok, model)
    seen = {}

    def collect(tasks, group_size=1, temperature=1.0, top_p=1.0, **kw):
        seen.update(n=len(tasks), group_size=group_size, temperature=temperature)
        raise StopIteration

    agent.collector.collect = collect
    moved = apply_knobs(st, {"temperature": 2.0, "group_size": 6})
    with pytest.raises(StopIteration):
        agent.step(TaskStream([echo_task(i) for i in range(6)], seed=0), seed=0, step=0, needs_all=False, stage=moved)
    assert seen == {"n": 3, "group_size": 6, "temperature": 2.0}


def test_the_dynamic_sampling_action_is_not_claimed_or_applied_in_a_multi_turn_stage():
    """The closed loop trains on every group: the ``dynamic_sampling`` health action has no knob there. It must
    say so (alert only), never set the knob behind the validator's back and log it as done."""
    from rlvr.config.health import HealthActions, HealthConfig
    from rlvr.monitoring.health import Alert, HealthMonitor
    from rlvr.monitoring.health_actions import apply_knobs, rl_knobs, take_actions

    st = stage(TrajectoryCredit())
    knobs = rl_knobs(st)
    mon = HealthMonitor(HealthConfig(actions=HealthActions(dead_groups=["dynamic_sampling"])), knobs=dict(knobs),
                        supports=frozenset(knobs))
    done = take_actions(mon, [Alert("dead_groups", "warn", "most groups are dead")], step=3)
    assert len(done) == 1 and "alert only" in done[0] and "dynamic sampling on" not in done[0], done
    assert apply_knobs(st, {**mon.knobs, "dynamic_sampling": "correct"}).sampling.dynamic_sampling == "off"


def test_settings_the_closed_loop_cannot_honour_are_refused_by_name():
    from rlvr.config.health import CodeTestSplit, HealthActions, HealthConfig
    from rlvr.trainers.variants import check_rl_combination

    def refused(**kw):
        st = RLStage(rollout=RolloutConfig(mode="multi_turn", loop=LOOP), **kw)
        return {k for k, _ in check_rl_combination(st)}

    assert refused() == set()
    assert "health.actions.dead_groups" in refused(health=HealthConfig(actions=HealthActions(
        dead_groups=["grow_group", "dynamic_sampling"])))
    assert "sampling.max_new_tokens" in refused(sampling=SamplingConfig(max_new_tokens=32))
    assert "sampling.stop" in refused(sampling=SamplingConfig(stop=["</s>"]))
    assert "verifier_workers" in refused(verifier_workers=2)
    assert "health.code_tests.heldout_frac" in refused(health=HealthConfig(code_tests=CodeTestSplit(heldout_frac=0.5)))
    from rlvr.config.distributed import DistributedConfig

    st = RLStage(rollout=RolloutConfig(mode="multi_turn", loop=LOOP))
    assert check_rl_combination(st, DistributedConfig()) == []
    assert [k for k, _ in check_rl_combination(st, DistributedConfig(max_staleness=1))] == ["rollout.mode"]


def test_mask_truncated_drops_truncated_trajectories_from_the_loss():
    """``loss.mask_truncated`` (DAPO's overlong filtering) in the closed loop: a trajectory whose turn ran out of
    its token budget is not part of the loss at all (no row, not in the denominators)."""
    from rlvr.rollout.multiturn import Segment, Trajectory, TurnSpan
    from rlvr.trainers.agent import build_agent_batch
    from rlvr.verifiers.base import Verdict

    def traj(finish, end="final"):
        tr = Trajectory(echo_task(), 0, 0, end=end, verdict=Verdict(0.0, False, "wrong"))
        tr.segments = [Segment([1, 2, 3, 4], [0, 1, 1, 0], [0.0, -0.1, -0.2, 0.0])]
        tr.turns = [TurnSpan(1, 3, "ab", finish, "s")]
        return tr

    trajs = [traj("stop"), traj("length"), traj("stop", end="tokens")]
    adv = [[1.0], [-1.0], [0.5]]
    assert len(build_agent_batch(trajs, adv, needs_all=False)) == 3
    kept = build_agent_batch(trajs, adv, needs_all=False, mask_truncated=True)
    assert len(kept) == 1 and kept.advantages[0][1] == 1.0 and kept.num_rows == 1
