"""Measure the facts the plan's rules (:mod:`rlvr.monitoring.plan_rules`) decide a stage on, on the policy it would
start from: the screen at the RL stage's G and temperature, SFT's held-out curve, model sizes, verifiers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from rlvr.monitoring.plan_rules import facts, sft_plateau


def screened_stage(role_of: Callable, stages: list, index: int):
    """The RL stage whose G, temperature and tasks the screen of ``stages[index]`` uses: itself when it is RL with
    single-turn rollouts, the next RL stage for a preference stage before one, else None."""
    st = stages[index]
    if role_of(st) == "prefer":
        st = next((s for s in stages[index + 1:] if role_of(s) == "reinforce"), None)
    elif role_of(st) != "reinforce":
        return None
    if st is None or not hasattr(st, "sampling") or getattr(getattr(st, "rollout", None), "closed_loop", False):
        return None
    return st


def param_count(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def teacher_params(teacher: str | None) -> int | None:
    """The teacher's parameter count (loaded once to count), None without a teacher."""
    if not teacher:
        return None
    from rlvr.models.load import load_pretrained

    model, _ = load_pretrained(teacher)
    return param_count(model)


def verifiable(stage) -> bool:
    """The stage's reward is executable: a python reward term, or every task of its data judgeable by its kind's
    verifier (:func:`rlvr.verifiers.registry.task_problem`: a verifier for the kind and the gold payload it needs;
    environment tasks have their goal predicate)."""
    from rlvr.data.sources import load_task_source
    from rlvr.verifiers.registry import task_problem

    data = getattr(stage, "data", None)
    if data is None or any(t.name == "python" for t in getattr(stage, "rewards", ())):
        return True
    return not any(t.kind != "env" and task_problem(t) is not None for t in load_task_source(data))


def last_sft_curve(role_of: Callable, stages: list, index: int, run_dir: Path, plateau_rel: float) -> dict | None:
    """:func:`rlvr.monitoring.plan_rules.sft_plateau` of the latest SFT stage before ``stages[index]`` that ran in
    ``run_dir`` (its metrics.jsonl; an ``early_stop`` event counts as a plateau)."""
    sft = next((s for s in reversed(stages[:index]) if role_of(s) == "demonstrate"), None)
    path = run_dir / sft.name / "metrics.jsonl" if sft is not None else None
    if path is None or not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    stopped = any(r.get("event") == "early_stop" for r in rows)
    return sft_plateau(rows, plateau_rel, stopped)


def measure(role_of: Callable, stages: list, index: int, model, tokenizer, cfg, run_dir: Path,
            pass_at_1: float | None, teacher_n: int | None, seed: int = 0, heldout_n: int | None = None,
            teacher_pass_at_1: float | None = None) -> dict:
    """The facts of ``stages[index]`` starting from ``model``: its screen (when it is, or precedes, an RL stage),
    the latest SFT stage's held-out curve, the model's and the teacher's sizes, ``pass_at_1`` (measured on
    ``heldout_n`` tasks) as given."""
    from rlvr.data.sources import load_task_source
    from rlvr.monitoring.screen import screen_model
    from rlvr.rollout.hf_engine import HFEngine
    from rlvr.verifiers.judge import default_judge

    st = stages[index]
    screen, target = None, screened_stage(role_of, stages, index)
    if target is not None and verifiable(target):
        s = target.sampling
        tasks = load_task_source(target.data)[: cfg.screen_tasks]
        screen = screen_model(HFEngine(model, tokenizer), tokenizer, tasks, default_judge(), s.group_size,
                              s.temperature, s.max_new_tokens, seed)
        screen = {k: v for k, v in screen.items() if k not in ("outcomes", "by_family")}
    return facts(role_of, stages, index, pass_at_1=pass_at_1, heldout_n=heldout_n, screen=screen,
                 sft=last_sft_curve(role_of, stages, index, run_dir, cfg.plateau_rel),
                 verifiable=verifiable(st), params=param_count(model), teacher_params=teacher_n,
                 teacher_pass_at_1=teacher_pass_at_1)
