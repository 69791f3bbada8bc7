"""The multi-turn branch of the RL stage (``rollout.mode: multi_turn``): closed-loop rollouts over tool
environments, turn rewards and credit assignment, and the training rows (per-token advantages).

One step: ``tasks_per_step`` tasks × G trajectories from :class:`~rlvr.rollout.multiturn.MultiTurnCollector`
-> turn rewards (outcome on the last turn, shaping penalties where the guards say) -> per-turn
advantages (``rollout.credit``: trajectory, turn, hgpo; see :mod:`rlvr.advantages.credit`) -> rows of
exactly the sampled ids with the turn's advantage on its policy tokens and 0 on observation tokens.
``infra`` trajectories (broken environment, leak, replay disagreement) get no row and are counted.
"""

from __future__ import annotations

import torch

from rlvr.data.collate import TokenBatch
from rlvr.errors import ConfigError
from rlvr.models.turn_critic import TurnCritic, boundary_features, fit_critic, save_critic
from rlvr.rollout.agent_stats import agent_metrics, horizon_note
from rlvr.rollout.multiturn import MultiTurnCollector, Trajectory
from rlvr.trainers.variants import (
    CreditInput,
    credit_critic_targets,
    credit_estimator,
    credit_needs_step_scores,
)


def assign_turn_rewards(trajs: list[Trajectory], budget_penalty: float, tool_error_penalty: float) -> None:
    """Each turn's reward: minus the penalties for its refused and failed calls; the last turn also gets
    the verdict's reward."""
    for tr in trajs:
        for span in tr.turns:
            span.reward = -budget_penalty * span.refused - tool_error_penalty * (span.tool_errors + span.format_errors)
        if tr.turns and tr.verdict is not None:
            tr.turns[-1].reward += tr.verdict.reward


def flat_turns(trajs: list[Trajectory]) -> list[tuple[int, int]]:
    """``(trajectory, turn)`` of every turn of the valid trajectories, in order."""
    return [(i, k) for i, tr in enumerate(trajs) if tr.valid for k in range(len(tr.turns))]


def credit_input(trajs: list[Trajectory], values: list[float] | None = None) -> tuple[torch.Tensor, CreditInput]:
    """``(turn rewards [N], CreditInput)`` of the valid trajectories' turns (``values``: the critic's V(s_t))."""
    flat = flat_turns(trajs)
    spans = [trajs[i].turns[k] for i, k in flat]
    rewards = torch.tensor([s.reward for s in spans], dtype=torch.float64)
    return rewards, CreditInput(groups=[trajs[i].group for i, _ in flat], traj_ids=[i for i, _ in flat],
                                turn_index=[k for _, k in flat], states=[s.state for s in spans], values=values,
                                score_before=[s.score_before for s in spans],
                                score_after=[s.score_after for s in spans])


def turn_advantages(trajs: list[Trajectory], credit, values: list[float] | None = None) -> list[list[float]]:
    """Per trajectory, one advantage per turn (empty for invalid trajectories)."""
    flat = flat_turns(trajs)
    out: list[list[float]] = [[] for _ in trajs]
    if not flat:
        return out
    rewards, turns = credit_input(trajs, values)
    adv = credit_estimator(credit)(credit, rewards, turns)
    for (i, _), a in zip(flat, adv.tolist()):
        out[i].append(a)
    return out


class CriticState:
    """The learned turn-level critic of ARPO / Turn-PPO (``credit.critic``): features at turn boundaries,
    values, fitting, and its part of the stage's resumable state."""

    def __init__(self, credit, model, targets, seed: int = 0):
        hidden_size = model.config.hidden_size
        self.credit, self.targets = credit, targets
        self.critic = TurnCritic(hidden_size, credit.critic.hidden, seed)
        self.opt = torch.optim.Adam(self.critic.parameters(), lr=credit.critic.lr)

    def features(self, model, trajs: list[Trajectory], pad_id: int) -> torch.Tensor:
        """``[N, H]``: the policy's last hidden state at the token before each valid turn."""
        seqs, positions, where = [], [], []
        for i, k in flat_turns(trajs):
            span = trajs[i].turns[k]
            key = (i, span.segment)
            if not where or where[-1] != key:
                where.append(key)
                seqs.append(list(trajs[i].segments[span.segment].ids))
                positions.append([])
            positions[-1].append(max(0, span.start - 1))
        feats = boundary_features(model, seqs, positions, pad_id)
        return torch.cat(feats) if feats else torch.zeros(0, model.config.hidden_size)

    def values(self, feats: torch.Tensor) -> list[float]:
        with torch.no_grad():
            return self.critic(feats).tolist()

    def fit(self, trajs: list[Trajectory], feats: torch.Tensor, values: list[float]) -> dict:
        """Regress V on the estimator's targets (computed with the values used for this batch's advantages)."""
        if not len(values):
            return {}
        rewards, turns = credit_input(trajs, values)
        target = self.targets(self.credit, rewards, turns)
        before = float(torch.mean((torch.tensor(values) - target) ** 2))
        fit_critic(self.critic, self.opt, feats, target, self.credit.critic.steps)
        return {"critic/loss": before, "critic/value_mean": sum(values) / len(values)}

    def state_dict(self) -> dict:
        return {"turn_critic": self.critic.state_dict(), "turn_critic_opt": self.opt.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if "turn_critic" in state:
            self.critic.load_state_dict(state["turn_critic"])
            self.opt.load_state_dict(state["turn_critic_opt"])


def token_advantages(tr: Trajectory, per_turn: list[float]) -> list[list[float]]:
    """Per segment of ``tr``: a turn's advantage on each of its policy tokens, 0 on prompt and observation
    tokens."""
    adv = [[0.0] * len(seg.ids) for seg in tr.segments]
    for span, a in zip(tr.turns, per_turn):
        adv[span.segment][span.start:span.end] = [a] * (span.end - span.start)
    return adv


def truncated(tr: Trajectory) -> bool:
    """A turn ran out of its token budget (finish ``length``) or the trajectory out of ``max_total_tokens``."""
    return tr.end == "tokens" or any(span.finish == "length" for span in tr.turns)


def build_agent_batch(trajs: list[Trajectory], per_turn: list[list[float]], needs_all: bool,
                      mask_truncated: bool = False, into=None, pad_id: int = 0) -> TokenBatch:
    """Training rows: exactly the ids of each segment of each valid trajectory (one segment unless the
    template split it), with per-token advantages; rows whose advantages are all 0 are not forwarded
    unless ``needs_all`` (KL, entropy) but still counted in the loss's denominators (``skipped_mask``).
    ``mask_truncated`` (``loss.mask_truncated``, DAPO's overlong filtering): a :func:`truncated` trajectory
    is not part of the loss at all (its advantages still entered its group's baseline, as in single-turn).
    ``into``: the step's :class:`~rlvr.rollout.source.RolloutBatch` to fill instead of a new batch; ``pad_id``:
    the tokenizer's padding id."""
    ids, masks, old, advs, skipped, rewards, groups = [], [], [], [], [], [], []
    for tr, adv in zip(trajs, per_turn):
        if not tr.valid or not tr.turns or (mask_truncated and truncated(tr)):
            continue
        for seg, seg_adv in zip(tr.segments, token_advantages(tr, adv)):
            if 1 not in seg.loss_mask:
                continue
            if not needs_all and not any(seg_adv):
                skipped.append(list(seg.loss_mask))
                continue
            ids.append(list(seg.ids))
            masks.append(list(seg.loss_mask))
            old.append(list(seg.old_logprobs))
            advs.append(seg_adv)
            rewards.append(tr.reward)
            groups.append(tr.group)
    rows = TokenBatch.from_rows(ids, masks, pad_id, old_logprobs=old, advantages=advs, skipped_masks=skipped,
                                rewards=rewards, group_ids=groups)
    return rows if into is None else into.set_rows(rows)


class AgentRollout:
    """The multi-turn rollout of an RL stage: collector, rewards, credit, rows and metrics."""

    def __init__(self, stage, engine, tokenizer, model):
        loop = stage.rollout.loop
        max_pos = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        if max_pos is not None and loop.max_total_tokens > max_pos:
            raise ConfigError(f"stage {stage.name}: rollout.loop.max_total_tokens = {loop.max_total_tokens} is more "
                              f"than the model's {max_pos} positions")
        self.stage = stage
        self.model, self.pad_id = model, tokenizer.pad_token_id
        self.collector = MultiTurnCollector(engine, tokenizer, loop)
        self.noted_horizon = False
        targets = credit_critic_targets(stage.rollout.credit)
        self.critic = CriticState(stage.rollout.credit, model, targets) if targets is not None else None
        self.needs_scores = credit_needs_step_scores(stage.rollout.credit)

    def state_dict(self) -> dict:
        """The resumable part (the turn-level critic and its optimiser, when the credit has one)."""
        return self.critic.state_dict() if self.critic is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.critic is not None:
            self.critic.load_state_dict(state)

    def save(self, folder) -> None:
        """Write the critic beside the final policy (``turn_critic.pt``)."""
        if self.critic is not None:
            save_critic(self.critic.critic, folder)

    def step(self, stream, seed: int, step: int, needs_all: bool, stage=None) -> tuple[TokenBatch, dict]:
        """One rollout batch -> (training rows, metrics). ``stage``: this step's stage with the health
        actions' knobs applied (temperature, group size, ...); default the stage it was built with."""
        stage = stage or self.stage
        trajs, rec = self.collect(stream, seed, step, stage)
        batch, crit = self.credit(trajs, needs_all, stage)
        return batch, {**rec, **crit}

    def collect(self, stream, seed: int, step: int, stage) -> tuple[list[Trajectory], dict]:
        """Generate and verify: ``tasks_per_step`` tasks x G trajectories with their turn rewards, and the
        rollout's metrics."""
        tasks = stream.take(stage.tasks_per_step)
        trajs = self.collector.collect(tasks, stage.sampling.group_size, stage.sampling.temperature,
                                       stage.sampling.top_p, seed=seed * 100003 + step * 97,
                                       top_k=stage.sampling.top_k)
        secs = self.collector.seconds
        guards = stage.rollout.guards
        assign_turn_rewards(trajs, guards.budget_penalty, guards.tool_error_penalty)
        if self.needs_scores:
            missing = [tr.task.id for tr in trajs if tr.valid and any(s.score_after is None for s in tr.turns)]
            if missing:
                raise ConfigError(f"stage {stage.name}: rollout.credit.type steppo needs step scores, but the "
                                  f"environment of task {missing[0]!r} has no process checklist "
                                  "(ToolEnv.checklist); use kvstore, kvchain or calculator, or another credit")
        rec = {**agent_metrics(trajs), "time/generate": secs["generate"], "time/env": secs["env"],
               "time/verify": secs["verify"], "rollout/groups_drawn": len(tasks)}
        if not self.noted_horizon:
            rec["notes"], self.noted_horizon = horizon_note(rec), True
        return trajs, rec

    def credit(self, trajs: list[Trajectory], needs_all: bool, stage, into=None) -> tuple[TokenBatch, dict]:
        """Advantages: per-turn credit (with the learned critic's values where the credit has one) spread
        over each turn's tokens, as training rows (written into ``into`` when given); then the critic's fit."""
        values, crit = None, {}
        if self.critic is not None:
            feats = self.critic.features(self.model, trajs, self.pad_id)
            values = self.critic.values(feats)
        batch = build_agent_batch(trajs, turn_advantages(trajs, stage.rollout.credit, values), needs_all,
                                  stage.loss.mask_truncated, into, self.pad_id)
        if self.critic is not None:
            crit = self.critic.fit(trajs, feats, values)
        return batch, crit
