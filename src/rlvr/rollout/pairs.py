"""Preference pairs without human labels: self-sampling + rule verification.

Sample the current policy ``samples_per_task`` times on each task (one batched HFEngine call), judge
every sample with the task's verifier (or score it with a reward model, or with a probed model judge against a
rubric: RLAIF, for tasks nothing can verify), and pair a passing sample
(chosen) with a failing one (rejected) — up to ``pairs_per_task`` distinct pairs per prompt. Tasks
whose samples all pass or all fail give no pair (they are counted). Verifier ``infra`` outcomes are
neither chosen nor rejected.

Each pair records what the per-pair weightings need:

* ``margin`` = reward(chosen) - reward(rejected): the verifier margin (1 for binary rewards) or the
  RM score gap — Uni-DPO's quality margin;
* ``votes`` = two annotators for RGPO: the verifier (+1: it prefers chosen) and self-consistency
  (Wang et al., 2022): +1 when chosen's extracted answer is the more frequent one among the task's
  samples, -1 when rejected's is, 0 on a tie. With a reward model as scorer the first vote is the
  RM's (+1 by construction) and self-consistency compares exact texts.

Held-out pairs are split by prompt (a hash of the rendered prompt text), so no held-out prompt has a
training pair. Everything is deterministic by seed.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from rlvr.config.preference import PairBuilder
from rlvr.console import phase
from rlvr.data.chat import encode_prompt, prompt_text, stop_token_ids
from rlvr.data.preference import PreferencePair
from rlvr.data.sources import load_task_source
from rlvr.data.types import Task
from rlvr.rollout.engine import SamplingParams
from rlvr.verifiers.base import INFRA_OUTCOMES


@dataclass
class PairSet:
    """Built pairs, split by prompt, and counts describing how they were obtained."""

    train: list[PreferencePair]
    heldout: list[PreferencePair]
    stats: dict = field(default_factory=dict)


@dataclass
class Scored:
    """One sample of one task and its judgement."""

    text: str
    score: float
    good: bool          # may be chosen
    bad: bool           # may be rejected
    answer: str


def unique_tasks(tasks: list[Task], tokenizer) -> list[Task]:
    """Drop tasks whose rendered prompt repeats an earlier one (draws with replacement repeat problems)."""
    seen, out = set(), []
    for t in tasks:
        key = prompt_text(tokenizer, t)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def is_heldout(key: str, frac: float) -> bool:
    """A pure function of the prompt: the same prompt always lands on the same side."""
    h = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
    return (h % 10_000) < round(frac * 10_000)


def judge_samples(tasks, texts, judge) -> list[Scored]:
    """Verifier judgement: pass -> may be chosen; any failure except infra -> may be rejected."""
    verdicts = judge(tasks, texts)
    out = []
    for text, v in zip(texts, verdicts):
        infra = v.outcome in INFRA_OUTCOMES
        ans = str(v.details.get("answer", text)) if isinstance(v.details, dict) else text
        out.append(Scored(text, float(v.reward), v.passed and not infra, (not v.passed) and not infra, ans))
    return out


def score_samples(tasks, texts, scorer) -> list[Scored]:
    """Reward-model or model-judge scoring: every scored sample may be chosen or rejected, the scores decide; a
    sample the scorer gave no score (None: the judge did not answer) is neither."""
    scores = scorer(tasks, texts)
    return [Scored(t, float(s or 0.0), s is not None, s is not None, t) for t, s in zip(texts, scores)]


def pairs_for_task(task: Task, samples: list[Scored], k: int, rng: np.random.Generator, min_margin: float,
                   ranked: bool) -> list[PreferencePair]:
    """Up to ``k`` distinct (chosen, rejected) pairs for one task.

    Verifier mode: (passing, failing) combinations of distinct texts; chosen texts in order of how
    often the policy produced them (a correct final answer reached by a rare path is more often right
    by luck — e.g. a wrong intermediate step that happens to give the right result), rejected texts in
    a seeded random order. Ranked (reward-model) mode: best-vs-worst first, then the next ones, margin
    > ``min_margin``.
    """
    uniq: dict[str, Scored] = {}
    for s in samples:
        uniq.setdefault(s.text, s)
    cands = list(uniq.values())
    freq = Counter(s.answer for s in samples)
    if ranked:
        order = sorted((s for s in cands if s.good or s.bad), key=lambda s: -s.score)
        combos = [(order[i], order[-1 - i]) for i in range(len(order) // 2)]
    else:
        count = Counter(s.text for s in samples)
        tie = {s.text: float(r) for s, r in zip(cands, rng.random(len(cands)))}
        good = sorted((s for s in cands if s.good), key=lambda s: (-count[s.text], tie[s.text]))
        bad = sorted((s for s in cands if s.bad), key=lambda s: tie[s.text])
        # the modal passing sample first, each with every failing one, then the next passing sample
        combos = [(g, b) for g in good for b in bad]
    out = []
    for w, l in combos:
        if len(out) >= k:
            break
        if w.score - l.score <= min_margin:
            continue
        sc = int(np.sign(freq[w.answer] - freq[l.answer]))
        out.append(PreferencePair(task.prompt, w.text, l.text, task.messages, f"{task.id}#{len(out)}",
                                  w.score - l.score, w.score, l.score, [1, sc],
                                  {"task_id": task.id, "family": task.family}))
    return out


def build_pairs(model, tokenizer, cfg: PairBuilder, judge, seed: int = 0, scorer=None,
                tasks: list[Task] | None = None, batch_size: int | None = None) -> PairSet:
    """Sample the policy on ``cfg.tasks``, judge (or score) the samples, and pair them (see module doc)."""
    from rlvr.rollout.hf_engine import HFEngine

    t0 = time.perf_counter()
    tasks = unique_tasks(tasks if tasks is not None else load_task_source(cfg.tasks), tokenizer)
    engine = HFEngine(model, tokenizer, batch_size=batch_size or cfg.batch_size)
    params = SamplingParams(n=cfg.samples_per_task, temperature=cfg.temperature,
                            max_new_tokens=cfg.max_new_tokens, stop_token_ids=stop_token_ids(tokenizer),
                            seed=seed * 1_000_003 + 17)
    with phase(f"sampling {len(tasks)} prompts x {cfg.samples_per_task}"):
        gen = engine.generate([encode_prompt(tokenizer, t) for t in tasks], params)
    reps = [tasks[i] for i in gen.prompt_index]
    ranked = cfg.scorer != "verifier"
    with phase(f"{'scoring' if ranked else 'judging'} {len(gen.texts)} samples"):
        scored = score_samples(reps, gen.texts, scorer) if ranked else judge_samples(reps, gen.texts, judge)
    rng = np.random.default_rng([seed, 11])
    train, heldout = [], []
    counts = Counter()
    n = cfg.samples_per_task
    for ti, task in enumerate(tasks):
        samples = scored[ti * n:(ti + 1) * n]
        pairs = pairs_for_task(task, samples, cfg.pairs_per_task, rng, cfg.min_margin, ranked)
        counts["all_good"] += all(s.good and not s.bad for s in samples) and not ranked
        counts["all_bad"] += all(s.bad and not s.good for s in samples) and not ranked
        counts["tasks_with_pairs"] += bool(pairs)
        (heldout if is_heldout(prompt_text(tokenizer, task), cfg.heldout_frac) else train).extend(pairs)
    goods = [s.good and not s.bad for s in scored]
    stats = {"tasks": len(tasks), "samples": len(scored), "pass_rate": float(np.mean(goods)) if goods else 0.0,
             "tasks_all_pass": counts["all_good"], "tasks_all_fail": counts["all_bad"],
             "tasks_with_pairs": counts["tasks_with_pairs"], "pairs_train": len(train),
             "pairs_heldout": len(heldout), "sample_length_mean": float(np.mean([len(c) for c in gen.completion_ids])),
             "seconds": round(time.perf_counter() - t0, 2), "scorer": cfg.scorer,
             **({"reward_source": "RLAIF (model-judged)"} if cfg.model_judged else {})}
    return PairSet(train, heldout, stats)


def flip_labels(pairs: list[PreferencePair], frac: float, seed: int) -> tuple[list[PreferencePair], int]:
    """Swap chosen and rejected in exactly ``round(frac * len(pairs))`` pairs, picked by ``seed``: label noise.

    The flipped pair is what a wrong annotator would hand over: its chosen/rejected scores swap with the texts,
    its margin stays the annotator's (positive) margin, its first vote (the annotator's) stays +1 and the
    self-consistency vote, which compares the two texts, changes sign. ``meta["label_flipped"]`` marks it. The
    input list is not changed; returns the new list and the number flipped.
    """
    k = round(frac * len(pairs))
    if k == 0:
        return list(pairs), 0
    picked = set(np.random.default_rng([seed, 13]).choice(len(pairs), size=k, replace=False).tolist())
    out = []
    for i, p in enumerate(pairs):
        if i in picked:
            votes = None if p.votes is None else [p.votes[0], *(-v for v in p.votes[1:])]
            p = replace(p, chosen=p.rejected, rejected=p.chosen, chosen_score=p.rejected_score,
                        rejected_score=p.chosen_score, votes=votes, meta={**p.meta, "label_flipped": True})
        out.append(p)
    return out, k


def reward_model_scorer(path: str, batch_size: int = 64):
    """``scorer(tasks, completions) -> [float]``: a frozen reward model's score of prompt + completion."""
    import torch

    from rlvr.data.chat import encode_completion
    from rlvr.data.collate import pad_batch
    from rlvr.models.heads import load_reward_model, sequence_rewards
    from rlvr.models.load import resolve_device

    rm, rm_tok = load_reward_model(path)
    rm = rm.to(resolve_device("auto"))

    @torch.no_grad()
    def scorer(tasks, completions):
        rows = [encode_prompt(rm_tok, t) + encode_completion(rm_tok, c) for t, c in zip(tasks, completions)]
        out = []
        for s in range(0, len(rows), batch_size):
            ids, att, _ = pad_batch(rows[s:s + batch_size], rm_tok.pad_token_id, left=False, device=rm.device)
            out.extend(sequence_rewards(rm, ids, att).tolist())
        return out
    return scorer


def judge_scorer(path: str, rubric: str, tokenizer=None, judge=None):
    """``scorer(tasks, completions) -> [float | None]``: a model judge's score of each completion against ``rubric``
    (:class:`rlvr.models.judge.ModelJudge`; None where it gave none). ``judge``: an already built one (tests)."""
    from rlvr.data.chat import prompt_text
    from rlvr.models.judge import ModelJudge

    scorer_model = judge or ModelJudge(path, rubric)

    def scorer(tasks, completions):
        return scorer_model.score([t.prompt or prompt_text(tokenizer, t) for t in tasks], completions)
    return scorer


def pair_scorer(pairs_cfg, tokenizer=None):
    """The scorer of a builder whose ``scorer`` is not the verifier: a reward model's or a model judge's."""
    from rlvr.errors import ConfigError

    if pairs_cfg.scorer == "reward_model":
        if not pairs_cfg.reward_model_path:
            raise ConfigError("pairs.scorer is 'reward_model' but pairs.reward_model_path is not set")
        return reward_model_scorer(pairs_cfg.reward_model_path)
    if pairs_cfg.scorer == "judge":
        return judge_scorer(pairs_cfg.judge_model, pairs_cfg.rubric, tokenizer)
    return None


def stage_pairs(pairs_cfg, model, tokenizer, judge, out_dir, seed: int = 0, reuse: bool = False):
    """The pairs a stage trains on: ``(train records, held-out records, stats)``.

    ``PairsFile``: read the file(s). ``PairBuilder``: build with the current policy and write
    ``out_dir/pairs/{train,heldout}.jsonl`` + ``stats.json`` (the pairs are inspectable); with ``reuse``
    (a resumed run) pairs already written are read back instead of rebuilt.
    """
    import json
    from pathlib import Path

    from rlvr.config.preference import PairsFile
    from rlvr.data.jsonl import write_json_atomic
    from rlvr.data.preference import load_preference_jsonl, load_preferences, write_pairs_jsonl
    from rlvr.errors import ConfigError, DataError

    if isinstance(pairs_cfg, PairsFile):
        train = load_preferences(pairs_cfg.path, pairs_cfg.system_prompt)
        held = load_preferences(pairs_cfg.heldout_path, pairs_cfg.system_prompt) if pairs_cfg.heldout_path else []
        train, flipped = flip_labels(train, pairs_cfg.label_noise, seed)
        return train, held, {"source": pairs_cfg.path, "pairs_train": len(train), "pairs_heldout": len(held),
                             **({"pairs_label_flipped": flipped} if pairs_cfg.label_noise else {})}
    d = Path(out_dir) / "pairs"
    if reuse and (d / "stats.json").exists():
        held = load_preference_jsonl(d / "heldout.jsonl") if (d / "heldout.jsonl").stat().st_size else []
        return load_preference_jsonl(d / "train.jsonl"), held, json.loads((d / "stats.json").read_text())
    scorer = pair_scorer(pairs_cfg, tokenizer)
    with phase("building preference pairs"):
        ps = build_pairs(model, tokenizer, pairs_cfg, judge, seed=seed, scorer=scorer)
    if not ps.train:
        raise DataError(f"the pair builder found no (chosen, rejected) pair on {ps.stats['tasks']} tasks "
                        f"(pass rate {ps.stats['pass_rate']:.0%}: {ps.stats['tasks_all_pass']} tasks always "
                        f"pass, {ps.stats['tasks_all_fail']} always fail); use harder or easier tasks, or "
                        "more samples_per_task")
    if pairs_cfg.label_noise:
        ps.train, ps.stats["pairs_label_flipped"] = flip_labels(ps.train, pairs_cfg.label_noise, seed)
    write_pairs_jsonl(d / "train.jsonl", ps.train)
    write_pairs_jsonl(d / "heldout.jsonl", ps.heldout)
    write_json_atomic(d / "stats.json", ps.stats)
    return ps.train, ps.heldout, ps.stats
