"""Multi-turn (agentic) rollouts: the closed loop's limits, credit assignment and guards."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlvr.config.base import Section, typed_union


class AgentLoopConfig(Section):
    """Limits of one closed-loop trajectory (generate a turn, step the environment, append its answer)."""

    max_turns: int = 8
    """Assistant turns per trajectory (the environment's own ``max_turns`` also applies)."""
    max_new_tokens: int = 64
    """Generation budget of one turn."""
    max_total_tokens: int = 1024
    """Cap on a trajectory's whole sequence (prompt, turns, observations); it ends when reached."""
    tool_timeout_s: float = 5.0
    """Wall-clock limit of one tool call: past it the policy sees an error observation."""
    step_timeout_s: float = 30.0
    """Wall-clock limit of one environment step: past it the environment counts as broken (infra)."""
    trajectory_timeout_s: float = 300.0
    """Wall-clock limit of a whole trajectory (environment time, summed over its steps)."""
    history: Literal["concat", "template"] = "concat"
    """How the next turn's context is built. ``concat``: the previous context + the sampled ids + the
    templated observation (one training sample per trajectory). ``template``: the chat template's
    rendering of the whole conversation (what the model saw in its own training); where the template
    rewrites history (e.g. drops earlier reasoning) the exact prefix breaks and the trajectory is split
    into several training samples, each exactly the context its turns were sampled from."""
    tool_role: str = "tool"
    """Chat-template role of observations (``tool``; ``user`` for templates without a tool role)."""
    replay_check: bool = True
    """Replay every trajectory with the environment-predicate verifier; a disagreement with the live
    end state is an ``infra`` outcome and a logged error."""

    @model_validator(mode="after")
    def _positive(self) -> AgentLoopConfig:
        for name in ("max_turns", "max_new_tokens", "max_total_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("tool_timeout_s", "step_timeout_s", "trajectory_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        return self


class TrajectoryCredit(Section):
    """GRPO over whole trajectories: every turn gets its trajectory's group-relative advantage."""

    type: Literal["trajectory"] = "trajectory"
    scale: Literal["group", "none"] = "group"
    """Divide by the group's reward std (GRPO) or only centre (Dr.GRPO)."""


class TurnCredit(Section):
    """Turn-level: each turn's return is the discounted reward-to-go, compared with the group's turns at
    the same turn index."""

    type: Literal["turn"] = "turn"
    gamma: float = 0.9
    """Discount γ per turn: R_t = Σ_{s>=t} γ^(s-t) r_s."""
    scale: Literal["group", "none"] = "group"
    """Divide by the group's std of trajectory returns, or only centre."""


class HGPOCredit(Section):
    """HGPO step regrouping (advantages/turn_level.py): turns from the same state and history are
    compared with each other; added to the trajectory-level advantage (GiGPO's A^E + ω A^S)."""

    type: Literal["hgpo"] = "hgpo"
    gamma: float = 1.0
    """Discount of the per-turn returns that the step groups compare."""
    max_history: int = 2
    """K: the deepest level (previous states that must match)."""
    alpha: float = 1.0
    """Level-weight exponent, w_k ∝ (k + 1)^alpha."""
    step_weight: float = 1.0
    """ω: weight of the step-group advantage added to the trajectory-level one."""
    scale: Literal["group", "none"] = "group"
    """Std normalisation of both parts."""


class TurnCritic(Section):
    """A small learned value head on turn-level states: an MLP on the policy's final hidden state at the
    token before each turn (detached: the critic never moves the policy), trained inside the stage by MSE
    and saved in its checkpoints (``turn_critic.pt`` in ``final/``)."""

    hidden: int = Field(64, ge=1)
    """Width of the MLP's hidden layer."""
    lr: float = Field(1e-3, gt=0)
    """Adam learning rate of the critic."""
    steps: int = Field(4, ge=1)
    """Critic optimizer steps per rollout batch (full batch of the batch's turns)."""


class ARPOCredit(Section):
    """ARPO: a light critic on turn-level states redistributes the trajectory's GRPO advantage across its
    turns by how much each turn moved the expected value toward the outcome (advantages/turn_credit.py)."""

    type: Literal["arpo"] = "arpo"
    mix: float = Field(0.5, ge=0.0, le=1.0)
    """λ: 0 is trajectory GRPO, 1 is fully redistributed by the critic's value changes."""
    scale: Literal["group", "none"] = "group"
    """Std normalisation of the trajectory advantage."""
    critic: TurnCritic = TurnCritic()
    """The turn-level critic."""


class StepPOCredit(Section):
    """StepPO: per-step advantages from step scores, a process checklist the environment evaluates on its
    state after every turn (fraction of the goal's conditions met), added to the trajectory's GRPO
    advantage. Needs an environment with a checklist (kvstore, kvchain, calculator)."""

    type: Literal["steppo"] = "steppo"
    step_weight: float = Field(1.0, ge=0.0)
    """ω: weight of the step advantage."""
    scale: Literal["group", "none"] = "group"
    """Std normalisation of both parts."""


class TurnPPOCredit(Section):
    """Turn-PPO: the turn is the MDP step; a small learned per-turn value gives GAE advantages over turns
    (no group baseline), applied to every token of the turn in the clipped PPO loss."""

    type: Literal["turn_ppo"] = "turn_ppo"
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    """Discount per turn."""
    lam: float = Field(0.95, ge=0.0, le=1.0)
    """GAE λ over turns."""
    scale: Literal["batch", "none"] = "batch"
    """Whiten the advantages over the batch's turns, or not."""
    critic: TurnCritic = TurnCritic()
    """The per-turn value head."""


Credit = typed_union(TrajectoryCredit, TurnCredit, HGPOCredit, ARPOCredit, StepPOCredit, TurnPPOCredit,
                     default="trajectory")


class AgentGuards(Section):
    """Shaping penalties of multi-turn training (the alerts are health rules: ``tool_collapse``,
    ``env_leak``)."""

    budget_penalty: float = 0.5
    """Subtracted from a turn's reward for each call refused because the tool budget was spent."""
    tool_error_penalty: float = 0.0
    """Subtracted from a turn's reward for each tool error or malformed call in it."""


class RolloutConfig(Section):
    """How the RL stage produces trajectories."""

    mode: Literal["single_turn", "multi_turn"] = "single_turn"
    """single_turn: one completion per sample; multi_turn: the closed loop over an environment."""
    loop: AgentLoopConfig = AgentLoopConfig()
    """Limits of the closed loop (multi_turn)."""
    credit: Credit = TrajectoryCredit()
    """Credit assignment over turns (multi_turn): trajectory, turn, hgpo, arpo, steppo, turn_ppo."""
    guards: AgentGuards = AgentGuards()
    """Penalties and alerts (multi_turn)."""

    @property
    def closed_loop(self) -> bool:
        """Whether an environment drives the turns (multi_turn): what the checks outside the rollout sources
        (``trainers/sources.py``, which picks the source from the mode) read."""
        return self.mode == "multi_turn"
