"""The rollout sources of the RL stage, chosen once at stage setup from :data:`ROLLOUT_SOURCES` (the
protocol and the batch they return: ``rollout/source.py``).

- ``single_turn``: G samples per task from the stage's engine (in-process, Ray workers or vLLM: the
  distributed context's ``engine``), the 2026 rollout methods inside the collection
  (``rollout.methods.collect_with_methods``), verification, DAPO's dynamic sampling; advantages from the
  loss variant's estimator (``trainers/variants.py``), Residual Advantage's teacher term, and the held-out
  code tests' guard;
- ``multi_turn``: closed-loop trajectories over tool environments (``trainers/agent.py``), advantages from
  the credit estimator;
- asynchronous (``distributed.max_staleness`` > 0): :class:`AsynchronousSource` wraps the single-turn
  source, prefetching the next batches on a background thread (``rollout/prefetch.py``).

This module is the only place that reads the rollout mode (``tests/unit/architecture``).
"""

from __future__ import annotations

import numpy as np
import torch

from rlvr.advantages import zero_variance_groups
from rlvr.data.chat import check_prompt_lengths
from rlvr.data.collate import TokenBatch
from rlvr.models.load import load_pretrained
from rlvr.monitoring.heldout_guard import TestGuard, heldout_guard
from rlvr.monitoring.screen import sampled_entropy
from rlvr.monitoring.sinks import log_samples
from rlvr.rollout.collector import Rollouts, collect
from rlvr.rollout.methods import collect_with_methods, row_advantages, teacher_residuals
from rlvr.rollout.prefetch import Prefetcher
from rlvr.rollout.source import RolloutBatch, RolloutSource, staleness
from rlvr.trainers.agent import AgentRollout

# ---------------------------------------------------------------------------------------- single turn


def rollout_step(stage, engine, tok, stream, judge, seed: int, step: int, notes: list, model=None,
                 guard: TestGuard | None = None):
    """One rollout batch; with dynamic sampling, keep drawing until the batch is informative.

    A group is informative when its verifier outcomes are mixed (``sampling.dynamic_sampling: correct``,
    DAPO's 0 < #correct < G; DAPO's default) or its composed reward varies (``reward``). With dynamic sampling the
    batch *is* the informative groups (DAPO's definition, Yu et al. 2025, eq. 11: the token-mean runs over
    the kept groups only): filtered groups count in no loss denominator, unlike the zero-advantage rows of
    the other algorithms, which are skipped for speed but counted. With held-out code tests (``guard``) the
    verifier sees each task's training pool only.
    """
    dyn = stage.sampling.dynamic_sampling
    parts, kept, drawn, rnd = [], 0, 0, 0
    while True:
        tasks = stream.take(stage.tasks_per_step)
        if guard is not None:
            tasks = guard.training(tasks, step)
        ro, method_met = collect_with_methods(stage, engine, model, tok, tasks, judge, seed * 100003 + step * 97 + rnd,
                                              step)
        drawn += ro.num_groups
        if dyn in (None, "off"):
            return ro, {"rollout/groups_drawn": drawn, **method_met}
        signal = ro.passed.float() if dyn == "correct" else ro.rewards
        zv = zero_variance_groups(signal, ro.valid)
        keep = [g for g in range(ro.num_groups) if not zv[g]][: stage.tasks_per_step - kept]
        parts.append(ro.select_groups(keep))
        kept += len(keep)
        rnd += 1
        if kept >= stage.tasks_per_step or rnd > stage.sampling.max_resample_rounds:
            break
    if kept < stage.tasks_per_step:
        rate = float(ro.passed.float().mean())
        hint = "too easy" if rate > 0.5 else "too hard"
        notes.append(f"step {step}: dynamic sampling found {kept}/{stage.tasks_per_step} informative groups after "
                     f"{rnd} rounds (pass rate {rate:.0%}: the data looks {hint} for this policy)")
    merged = Rollouts.concat(parts) if kept else ro.select_groups([])
    return merged, {"rollout/groups_drawn": drawn, "rollout/resample_rounds": rnd, **method_met}


def reward_length_corr(rewards: torch.Tensor, lens: torch.Tensor) -> float:
    """Pearson correlation of the batch's rewards and completion lengths (0 when either is constant)."""
    r, n = rewards.reshape(-1).float(), lens.reshape(-1).float()
    if r.numel() < 2 or r.std() == 0 or n.std() == 0:
        return 0.0
    return float(torch.corrcoef(torch.stack([r, n]))[0, 1])


def rollout_metrics(ro: Rollouts, zv: torch.Tensor) -> dict:
    lens = torch.tensor([len(c) for c in ro.completion_ids], dtype=torch.float32)
    m = {"rollout/pass_rate": float(ro.passed.float().mean()) if ro.num_groups else 0.0,
         "reward/mean": float(ro.rewards.mean()) if ro.num_groups else 0.0,
         "reward/std": float(ro.rewards.std()) if ro.rewards.numel() > 1 else 0.0,
         "rollout/zero_var_frac": float(zv.float().mean()) if ro.num_groups else 1.0,
         "rollout/length_mean": float(lens.mean()) if len(lens) else 0.0,
         "rollout/length_max": float(lens.max()) if len(lens) else 0.0,
         "rollout/truncation_rate": float(np.mean([r == "length" for r in ro.finish_reason])) if lens.numel() else 0.0,
         "rollout/reward_length_corr": reward_length_corr(ro.rewards, lens) if ro.num_groups else 0.0,
         **sampled_entropy(ro.old_logprobs),
         "verifier/infra": int((~ro.valid).sum())}
    for k, v in ro.reward_terms.items():
        m[f"reward/{k}"] = float(v.mean()) if v.numel() else 0.0
    for o in set(ro.outcomes):
        m[f"verifier/{o}"] = ro.outcomes.count(o)
    return m


def build_train_batch(ro, advantages, needs_all: bool, mask_truncated: bool, into=None,
                      pad_id: int = 0) -> TokenBatch:
    """Flatten rollouts into training rows, one ``[B, T]`` batch (``advantages``: ``[n, G]``, or per row a float
    or a list over its completion tokens, see ``rollout.methods.row_advantages``). Zero-advantage rows are not
    forwarded unless ``needs_all`` (KL or entropy terms give them a gradient) but still counted
    (``skipped_mask``); invalid (infrastructure) verdicts, empty completions and, with ``mask_truncated``,
    truncated ones are not part of the loss at all. ``into``: the step's
    :class:`~rlvr.rollout.source.RolloutBatch` to fill instead of a new batch; ``pad_id``: the tokenizer's."""
    adv = advantages.reshape(-1).tolist() if isinstance(advantages, torch.Tensor) else advantages
    valid, rewards = ro.valid.reshape(-1).tolist(), ro.rewards.reshape(-1).tolist()
    ids, masks, old, advs, skipped, row_rewards, groups = [], [], [], [], [], [], []
    for i, (p, c) in enumerate(zip(ro.prompt_ids, ro.completion_ids)):
        if not valid[i] or not c or (mask_truncated and ro.finish_reason[i] == "length"):
            continue
        mask = [0] * len(p) + [1] * len(c)
        per_token = isinstance(adv[i], list)
        if not needs_all and (all(a == 0.0 for a in adv[i]) if per_token else adv[i] == 0.0):
            skipped.append(mask)
            continue
        ids.append(p + c)
        masks.append(mask)
        old.append([0.0] * len(p) + list(ro.old_logprobs[i]))
        advs.append([0.0] * len(p) + list(adv[i]) if per_token else adv[i])
        row_rewards.append(rewards[i])
        groups.append(i // ro.group_size)
    rows = TokenBatch.from_rows(ids, masks, pad_id, old_logprobs=old, advantages=advs, skipped_masks=skipped,
                                rewards=row_rewards, group_ids=groups)
    return rows if into is None else into.set_rows(rows)


class SingleTurnSource:
    """G single completions per task: collect (with the rollout methods) -> verify -> rewards."""

    def __init__(self, stage, setup: "SourceSetup"):
        self.stage, self.s = stage, setup
        self.notes: list[str] = []
        self.guard: TestGuard | None = None
        self.teacher = None
        check_prompt_lengths(setup.stream.tasks, setup.tok, setup.model, stage.sampling.max_new_tokens,
                             f"stage {stage.name}: data")

    def start(self, state: dict) -> None:
        s, stage = self.s, self.stage
        self.guard = heldout_guard(stage.health.code_tests, s.seed)
        if stage.residual.enabled:
            self.teacher = load_pretrained(stage.residual.teacher)[0].to(s.model.device).eval()

    def draw(self, step: int) -> RolloutBatch:
        """Generate and verify step ``step``'s groups with the current stage (a prefetching thread calls it too)."""
        s = self.s
        ro, extra = rollout_step(self.stage, s.engine, s.tok, s.stream, s.judge, s.seed, step, self.notes, s.model,
                                 self.guard)
        extra.update(self.twins(ro, step))
        return RolloutBatch.empty(episodes=ro, metrics=extra, cursor=s.stream.cursor,
                                  policy_version=list(ro.policy_version))

    def twins(self, ro, step: int) -> dict:
        """On the guard's twin steps: one sample of each regenerable task's twin (other numbers), judged, and
        the gap between the step's pass rate on those tasks and their twins' (``verifier/twin_*``)."""
        idx, twins = self.guard.twin_tasks(ro, step) if self.guard is not None else ([], [])
        if not twins:
            return {}
        s = self.s
        sampling = self.stage.sampling.model_copy(update={"group_size": 1})
        tro = collect(s.engine, s.tok, twins, s.judge, sampling, self.stage.rewards, s.seed * 100003 + step * 97 + 89)
        return self.guard.twin_metrics(ro, idx, tro.passed[:, 0].tolist())

    def finish(self, batch: RolloutBatch, step: int) -> RolloutBatch:
        """The drawn batch's metrics, staleness and infra totals, on the trainer's thread."""
        ro = batch.episodes
        batch.stale = staleness(ro.policy_version, step)
        zv = zero_variance_groups(ro.rewards, ro.valid) if ro.num_groups else torch.zeros(0, dtype=torch.bool)
        batch.metrics = {**rollout_metrics(ro, zv), **batch.metrics, "time/generate": ro.seconds.get("generate", 0.0),
                         "time/verify": ro.seconds.get("verify", 0.0), "rollout/staleness": batch.stale,
                         **(self.guard.measure(ro, self.s.judge) if self.guard is not None else {})}
        if self.notes:
            batch.metrics["notes"] = self.notes.pop()
        batch.task_ids = [t.id for t in ro.tasks]
        batch.verdicts, batch.reward_errors = ro.valid.numel(), ro.reward_errors
        return batch

    def next_batch(self, step: int, stage) -> RolloutBatch:
        self.stage = stage
        return self.finish(self.draw(step), step)

    def advantages(self, batch: RolloutBatch, stage, needs_all: bool) -> None:
        ro, s = batch.episodes, self.s
        adv = s.variant.advantages(stage.loss, ro.rewards, ro.valid) if ro.num_groups else torch.zeros(0, 1)
        res = teacher_residuals(s.model, self.teacher, ro, s.tok.pad_token_id, stage.sampling.temperature) \
            if self.teacher is not None else None
        build_train_batch(ro, row_advantages(ro, adv, res, stage.residual.weight), needs_all,
                          stage.loss.mask_truncated, into=batch, pad_id=s.tok.pad_token_id)

    def log_samples(self, step: int, batch: RolloutBatch) -> None:
        log_samples(step, batch.episodes)

    def state_dict(self) -> dict:
        return {}

    def save(self, folder) -> None:
        pass

    def close(self) -> None:
        pass


class AsynchronousSource:
    """A single-turn source whose next batches are generated while this one trains (bounded staleness:
    ``distributed.max_staleness``; ``rollout/prefetch.py``)."""

    def __init__(self, inner: SingleTurnSource, max_staleness: int):
        self.inner = inner
        self.prefetch = Prefetcher(max_staleness)

    def start(self, state: dict) -> None:
        self.inner.start(state)

    def next_batch(self, step: int, stage) -> RolloutBatch:
        self.inner.stage = stage
        batch = self.inner.finish(self.prefetch.next(self.inner.draw, step), step)
        batch.metrics["rollout/stale_dropped"] = self.prefetch.dropped
        return batch

    def advantages(self, batch: RolloutBatch, stage, needs_all: bool) -> None:
        self.inner.advantages(batch, stage, needs_all)

    def log_samples(self, step: int, batch: RolloutBatch) -> None:
        self.inner.log_samples(step, batch)

    def state_dict(self) -> dict:
        return {}

    def save(self, folder) -> None:
        pass

    def close(self) -> None:
        self.prefetch.close()


# ---------------------------------------------------------------------------------------- multi turn


class MultiTurnSource:
    """Closed-loop trajectories over tool environments; credit assignment per turn (``trainers/agent.py``)."""

    def __init__(self, stage, setup: "SourceSetup"):
        self.s = setup
        self.agent = AgentRollout(stage, setup.engine, setup.tok, setup.model)

    def start(self, state: dict) -> None:
        self.agent.load_state_dict(state)  # the turn-level critic of ARPO / Turn-PPO

    def next_batch(self, step: int, stage) -> RolloutBatch:
        trajs, rec = self.agent.collect(self.s.stream, self.s.seed, step, stage)
        return RolloutBatch.empty(episodes=trajs, metrics=rec, cursor=self.s.stream.cursor,
                                  verdicts=stage.tasks_per_step * stage.sampling.group_size)

    def advantages(self, batch: RolloutBatch, stage, needs_all: bool) -> None:
        _, crit = self.agent.credit(batch.episodes, needs_all, stage, into=batch)
        batch.metrics.update(crit)

    def log_samples(self, step: int, batch: RolloutBatch) -> None:
        pass

    def state_dict(self) -> dict:
        return self.agent.state_dict()

    def save(self, folder) -> None:
        self.agent.save(folder)

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------- the table


class SourceSetup:
    """What every source samples with: the policy, its tokenizer and engine, the judge, the task stream,
    the stage's seed and its loss variant (for the advantage estimator)."""

    def __init__(self, model, tok, engine, judge, stream, seed: int, variant):
        self.model, self.tok, self.engine, self.judge = model, tok, engine, judge
        self.stream, self.seed, self.variant = stream, seed, variant


ROLLOUT_SOURCES = {"single_turn": SingleTurnSource, "multi_turn": MultiTurnSource}
"""The source of each ``rollout.mode``."""


def rollout_source(stage, setup: SourceSetup, max_staleness: int = 0) -> RolloutSource:
    """The stage's source: its ``rollout.mode``'s entry, prefetched when ``max_staleness`` > 0 (a distributed
    context whose engines hold their own weights; ``rlvr validate`` refuses it for a multi-turn stage)."""
    source = ROLLOUT_SOURCES[stage.rollout.mode](stage, setup)
    return AsynchronousSource(source, max_staleness) if max_staleness > 0 else source
