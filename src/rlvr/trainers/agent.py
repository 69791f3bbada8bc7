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

from rlvr.errors import ConfigError
from rlvr.rollout.agent_stats import agent_metrics, horizon_note
from rlvr.rollout.multiturn import MultiTurnCollector, Trajectory
from rlvr.data.collate import TrainBatch
from rlvr.trainers.variants import CreditInput, credit_estimator


def assign_turn_rewards(trajs: list[Trajectory], budget_penalty: float, tool_error_penalty: float) -> None:
    """Each turn's reward: minus the penalties for its refused and failed calls; the last turn also gets
    the verdict's reward."""
    for tr in trajs:
        for span in tr.turns:
            span.reward = -budget_penalty * span.refused - tool_error_penalty * (span.tool_errors + span.format_errors)
        if tr.turns and tr.verdict is not None:
            tr.turns[-1].reward += tr.verdict.reward


def turn_advantages(trajs: list[Trajectory], credit) -> list[list[float]]:
    """Per trajectory, one advantage per turn (empty for invalid trajectories)."""
    flat = [(i, k) for i, tr in enumerate(trajs) if tr.valid for k in range(len(tr.turns))]
    out: list[list[float]] = [[] for _ in trajs]
    if not flat:
        return out
    rewards = torch.tensor([trajs[i].turns[k].reward for i, k in flat], dtype=torch.float64)
    turns = CreditInput(groups=[trajs[i].group for i, _ in flat], traj_ids=[i for i, _ in flat],
                        turn_index=[k for _, k in flat], states=[trajs[i].turns[k].state for i, k in flat])
    adv = credit_estimator(credit)(credit, rewards, turns)
    for (i, _), a in zip(flat, adv.tolist()):
        out[i].append(a)
    return out


def token_advantages(tr: Trajectory, per_turn: list[float]) -> list[list[float]]:
    """Per segment of ``tr``: a turn's advantage on each of its policy tokens, 0 on prompt and observation
    tokens."""
    adv = [[0.0] * len(seg.ids) for seg in tr.segments]
    for span, a in zip(tr.turns, per_turn):
        adv[span.segment][span.start:span.end] = [a] * (span.end - span.start)
    return adv


def build_agent_batch(trajs: list[Trajectory], per_turn: list[list[float]], needs_all: bool) -> TrainBatch:
    """Training rows: exactly the ids of each segment of each valid trajectory (one segment unless the
    template split it), with per-token advantages; rows whose advantages are all 0 are not forwarded
    unless ``needs_all`` (KL, entropy) but still counted in the loss's denominators (``skipped_masks``)."""
    rows = TrainBatch([], [], [], None, [])
    for tr, adv in zip(trajs, per_turn):
        if not tr.valid or not tr.turns:
            continue
        for seg, seg_adv in zip(tr.segments, token_advantages(tr, adv)):
            if 1 not in seg.loss_mask:
                continue
            if not needs_all and not any(seg_adv):
                rows.skipped_masks.append(list(seg.loss_mask))
                continue
            rows.input_ids.append(list(seg.ids))
            rows.loss_mask.append(list(seg.loss_mask))
            rows.old_logprobs.append(list(seg.old_logprobs))
            rows.advantages.append(seg_adv)
    return rows


class AgentRollout:
    """The multi-turn rollout of an RL stage: collector, rewards, credit, rows and metrics."""

    def __init__(self, stage, engine, tokenizer, model):
        loop = stage.rollout.loop
        max_pos = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        if max_pos is not None and loop.max_total_tokens > max_pos:
            raise ConfigError(f"stage {stage.name}: rollout.loop.max_total_tokens = {loop.max_total_tokens} is more "
                              f"than the model's {max_pos} positions")
        self.stage = stage
        self.collector = MultiTurnCollector(engine, tokenizer, loop)
        self.noted_horizon = False

    def step(self, stream, seed: int, step: int, needs_all: bool) -> tuple[TrainBatch, dict]:
        """One rollout batch -> (training rows, metrics)."""
        stage = self.stage
        tasks = stream.take(stage.tasks_per_step)
        trajs = self.collector.collect(tasks, stage.sampling.group_size, stage.sampling.temperature,
                                       stage.sampling.top_p, seed=seed * 100003 + step * 97)
        secs = self.collector.seconds
        guards = stage.rollout.guards
        assign_turn_rewards(trajs, guards.budget_penalty, guards.tool_error_penalty)
        batch = build_agent_batch(trajs, turn_advantages(trajs, stage.rollout.credit), needs_all)
        rec = {**agent_metrics(trajs), "time/generate": secs["generate"], "time/env": secs["env"],
               "time/verify": secs["verify"], "rollout/groups_drawn": len(tasks)}
        if not self.noted_horizon:
            rec["notes"], self.noted_horizon = horizon_note(rec), True
        return batch, rec
