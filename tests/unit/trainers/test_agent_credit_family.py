"""ARPO, StepPO and Turn-PPO in the multi-turn RL step: rows, the learned turn critic (trained, never
touching the policy, resumable), step scores from the environment's checklist, bad input."""

import os
import sys
from typing import Any, ClassVar

import pytest
import torch

from rlvr.config.agent import AgentLoopConfig, ARPOCredit, RolloutConfig, StepPOCredit, TurnPPOCredit
from rlvr.config.rl import RLStage, SamplingConfig
from rlvr.data.order import TaskStream
from rlvr.envs import registry
from rlvr.errors import ConfigError
from rlvr.models.tiny import build_tiny
from rlvr.rollout.hf_engine import HFEngine
from rlvr.trainers.agent import AgentRollout
from rlvr.trainers.common import build_optimizer
from rlvr.trainers.rl import policy_update

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "rollout"))
from agent_fakes import EchoEnv, echo_task  # noqa: E402

LOOP = AgentLoopConfig(max_turns=3, max_new_tokens=10, max_total_tokens=300)


class ScoredEcho(EchoEnv):
    """Echo with a process checklist: the fraction of its turns so far whose length was even."""

    name: ClassVar[str] = "echo"

    @classmethod
    def checklist(cls, end_state: dict[str, Any], gold: dict[str, Any], family: str) -> float:
        return sum(n % 2 == 0 for n in end_state["lens"]) / 3


@pytest.fixture
def scored(monkeypatch):
    monkeypatch.setitem(registry.ENVIRONMENTS, "echo", ScoredEcho)


def stage(credit):
    return RLStage(rollout=RolloutConfig(mode="multi_turn", loop=LOOP, credit=credit), tasks_per_step=3,
                   sampling=SamplingConfig(group_size=4, temperature=1.5), micro_batch_size=8)


@pytest.mark.parametrize("credit", [ARPOCredit(mix=1.0), StepPOCredit(), TurnPPOCredit()], ids=lambda c: c.type)
def test_one_step_per_credit(scored, credit):
    model, tok = build_tiny(size="test", seed=1)
    st = stage(credit)
    agent = AgentRollout(st, HFEngine(model, tok), tok, model)
    stream = TaskStream([echo_task(i) for i in range(6)], seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    batch, rec = agent.step(stream, seed=0, step=0, needs_all=False)
    # the critic fit never touches the policy
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert ("critic/loss" in rec) == (credit.type != "steppo")
    assert len(batch) > 0
    assert not bool(((batch.advantages != 0) & (batch.loss_mask == 0)).any())  # prompt, observations, padding
    opt, sched = build_optimizer(model, st.optim, 4)
    policy_update(model, opt, sched, st, batch, False)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_critic_learns_and_resumes(scored):
    model, tok = build_tiny(size="test", seed=1)
    st = stage(ARPOCredit())
    agent = AgentRollout(st, HFEngine(model, tok), tok, model)
    stream = TaskStream([echo_task(i) for i in range(6)], seed=0)
    first = agent.step(stream, seed=0, step=0, needs_all=False)[1]["critic/loss"]
    losses = [agent.step(TaskStream([echo_task(i) for i in range(6)], seed=0), 0, 0, False)[1]["critic/loss"]
              for _ in range(5)]  # the same batch again: the critic fits it
    assert losses[-1] < first
    other = AgentRollout(st, HFEngine(model, tok), tok, model)
    other.load_state_dict(agent.state_dict())
    x = torch.randn(5, model.config.hidden_size)
    assert torch.equal(other.critic.critic(x), agent.critic.critic(x))


def test_steppo_without_a_checklist_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(registry.ENVIRONMENTS, "echo", EchoEnv)
    model, tok = build_tiny(size="test", seed=1)
    agent = AgentRollout(stage(StepPOCredit()), HFEngine(model, tok), tok, model)
    with pytest.raises(ConfigError, match="process checklist"):
        agent.step(TaskStream([echo_task(i) for i in range(3)], seed=0), seed=0, step=0, needs_all=False)
