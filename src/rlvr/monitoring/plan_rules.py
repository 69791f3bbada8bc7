"""The plan's rules: one table deciding, for each stage, run / skip / replace, with the measured reason.

A stage is seen through its stage-table role (``rlvr.stages.StageKind.plan_role``: demonstrate, prefer, reinforce,
distil, support) and the **facts** measured on the policy it would start from (:func:`facts` builds them):

=====================  ======================================================================================
``pass_at_1``          held-out pass@1 of that policy (None: not measured), on ``heldout_n`` tasks (None: unknown)
``screen``             ``rlvr.monitoring.screen.screen_model``'s figures at the (next) RL stage's G and
                       temperature: ``p``, ``p_star``, ``signal_frac_observed``, ``entropy``, ``above_threshold``
``sft``                the latest SFT stage before it: ``{"plateaued": bool, "last", "best", "gain"}`` of its
                       held-out loss curve (None: no SFT ran before, or it logged no held-out loss)
``demonstrated``       an SFT stage comes before it
``verifiable``         its reward is executable: every task of its data has a verifier and the gold it needs,
                       or a python reward scores it
``params``             the policy's parameters; ``teacher_params``: the plan's teacher's (None: no teacher)
``teacher_pass_at_1``  the plan's teacher's held-out pass@1 on the same tasks (None: no teacher, or not measured)
``later_reinforce``    an RL stage comes after it
=====================  ======================================================================================

The first rule of :data:`RULES` whose role matches and whose test returns a reason decides; a stage no rule
stops runs. Each rule names what replaces the stage (``instead``) and where the rule comes from (``source``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rlvr.monitoring.intervals import wilson_lower


@dataclass(frozen=True)
class Rule:
    """One rule of the plan."""

    name: str
    roles: tuple[str, ...]
    """The stage-table roles it applies to."""
    test: Callable[[dict, object], str | None]
    """``(facts, plan config) -> the measured reason it fires, or None``."""
    decision: str
    """skip or replace."""
    instead: Callable[[dict, object], str | None]
    """``(facts, plan config) -> what replaces the stage`` (None for a skip)."""
    source: str
    """Why the rule holds (the article or the measurement behind it)."""


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _no_verifier(f: dict, cfg) -> str | None:
    if f.get("verifiable", True):
        return None
    return "tasks of its data have no verifier or no gold answer, and no python reward: nothing can be verified"


def _target_met(f: dict, cfg) -> str | None:
    t, p1, n = cfg.target, f.get("pass_at_1"), f.get("heldout_n")
    if t is None or p1 is None or p1 < t:
        return None
    if not n:
        return f"held-out pass@1 {p1:.3f} >= target {t:.3f}"
    low = wilson_lower(p1, n)
    if low < t:  # at the target by the point estimate only: as likely under it as over
        return None
    return f"held-out pass@1 {p1:.3f} on {n} tasks, 95% lower bound {low:.3f} >= target {t:.3f}"


def _sft_rising(f: dict, cfg) -> str | None:
    s = f.get("sft")
    if not s or s["plateaued"]:
        return None
    return (f"SFT's held-out loss still falls ({_fmt(s['best'])} -> {_fmt(s['last'])}, {s['gain']:.1%} better than "
            f"its best before, above plateau_rel {cfg.plateau_rel:g}): it has not reached its plateau")


def _below_p_star(f: dict, cfg) -> str | None:
    s = f.get("screen")
    if not s or s["p"] >= s["p_star"]:
        return None
    return (f"p {s['p']:.3f} < p*(G) {s['p_star']:.3f} at T = {s['temperature']:g}: most groups of {s['group_size']} "
            f"all fail ({s['signal_frac_observed']:.0%} informative)")


def _small_with_teacher(f: dict, cfg) -> str | None:
    n, tn, sp, tp = f.get("params"), f.get("teacher_params"), f.get("pass_at_1"), f.get("teacher_pass_at_1")
    if not n or not tn or tn < cfg.small_ratio * n or sp is None or tp is None:
        return None
    need = sp + cfg.teacher_margin * (1.0 - sp)
    if tp < need:  # the teacher would cap the student below what it does not yet solve
        return None
    return (f"the model ({n:,} parameters) is small beside the teacher ({tn:,}, >= {cfg.small_ratio:g}x), and the "
            f"teacher's held-out pass@1 {tp:.3f} closes >= {cfg.teacher_margin:g} of the model's gap "
            f"({sp:.3f} -> needs {need:.3f})")


def _no_signal(f: dict, cfg) -> str | None:
    s = f.get("screen")
    if not s or s["signal_frac_observed"] >= cfg.no_signal:
        return None
    side = "all pass" if s["above_threshold"] else "agree"
    return (f"{s['signal_frac_observed']:.0%} of groups informative (< no_signal {cfg.no_signal:g}; p {s['p']:.3f}, "
            f"entropy {s['entropy']:.3f}): most groups {side}, RL has no signal")


def _rl_has_signal(f: dict, cfg) -> str | None:
    s = f.get("screen")
    if not f.get("later_reinforce") or not s or s["signal_frac_observed"] < 0.5:
        return None
    return (f"RL after it already has signal ({s['signal_frac_observed']:.0%} of groups informative, p {s['p']:.3f}, "
            f"entropy {s['entropy']:.3f}): preference training first would narrow the sampled entropy RL needs")


def _more_sft(f: dict, cfg) -> str:
    return "sft (continue the SFT stage)" if f.get("demonstrated") else "sft (an SFT stage on demonstrations)"


def _distil_or_rft(f: dict, cfg) -> str:
    return f"distill (from the teacher {cfg.teacher})" if cfg.teacher else "rft (rejection sampling)"


def _distil_or_more_sft(f: dict, cfg) -> str:
    """Below p*(G): SFT (or distillation) first, then the RL stage decided again on the policy it leaves."""
    first = f"distill (from the teacher {cfg.teacher})" if cfg.teacher else _more_sft(f, cfg)
    return f"{first}, then this stage"


def _judge_pairs(f: dict, cfg) -> str:
    return "preference on judge-scored pairs (pairs.scorer: judge with a probed judge_model and rubric; RLAIF)"


def _nothing(f: dict, cfg) -> None:
    return None


REINFORCE, LATER = ("reinforce",), ("prefer", "reinforce", "distil")
RULES: tuple[Rule, ...] = (
    Rule("no_verifier", REINFORCE, _no_verifier, "replace", _judge_pairs,
         "RLVR needs an executable reward; for prose, preference pairs judged by a probed model (RLAIF)"),
    Rule("target_met", LATER, _target_met, "skip", _nothing,
         "stop before RL when SFT and preference alignment already meet the target (its 95% lower bound does: at "
         "90.2% of 400 a 0.9 target stopped a run GRPO took to 99.0% in 45 s, docs/plan_checked.md)"),
    Rule("sft_not_plateaued", LATER, _sft_rising, "replace", _more_sft,
         "the quickstart's SFT stage run longer alone beats its three-stage recipe (99.9% vs 69.7%, hard family)"),
    Rule("sft_before_rl", REINFORCE, _below_p_star, "replace", _distil_or_more_sft,
         "signal_frac = 1 - p^G - (1-p)^G: under p*(G) = 1 - 2^(-1/G) most groups are dead (rlvr.monitoring.screen)"),
    Rule("small_with_teacher", REINFORCE, _small_with_teacher, "replace", _distil_or_rft,
         "a small model gains more from distilling a stronger model than from RL; distillation teaches what the "
         "teacher solves, so the teacher must solve much of what the student fails (a 0.5m student at 72% with an "
         "81% teacher: GRPO 87.0 / 92.8%, distillation 82.5 / 92.8%, docs/plan_checked.md)"),
    Rule("no_signal", REINFORCE, _no_signal, "replace", _distil_or_rft,
         "zero-variance groups carry no gradient: RL burns its budget on them"),
    Rule("rl_has_signal", ("prefer",), _rl_has_signal, "skip", _nothing,
         "the measured informative-group share predicts RL's gain (Spearman +0.92 on the hard family, +0.78 on "
         "spell_backward; entropy did not: docs/plan_checked.md); where RL already has it, preference training "
         "first lowers the sampling entropy RL explores with"),
)
"""The plan's rules, in the order they are tried."""


def decide(stage: str, role: str, f: dict, cfg) -> dict:
    """``{"stage", "role", "decision": run | skip | replace, "rule", "reason", "instead", "source"}`` for one stage."""
    for r in RULES:
        if role not in r.roles:
            continue
        why = r.test(f, cfg)
        if why is not None:
            return {"stage": stage, "role": role, "decision": r.decision, "rule": r.name, "reason": why,
                    "instead": r.instead(f, cfg), "source": r.source}
    return {"stage": stage, "role": role, "decision": "run", "rule": None, "reason": _figures(f), "instead": None,
            "source": None}


def _figures(f: dict) -> str:
    """The measured figures a stage runs on, as one line."""
    parts = []
    if f.get("pass_at_1") is not None:
        n = f.get("heldout_n")
        parts.append(f"held-out pass@1 {f['pass_at_1']:.3f}" + (
            f" of {n} (95% lower bound {wilson_lower(f['pass_at_1'], n):.3f})" if n else ""))
    s = f.get("screen")
    if s:
        parts.append(f"p {s['p']:.3f} (p*(G) {s['p_star']:.3f}), {s['signal_frac_observed']:.0%} of groups "
                     f"informative, entropy {s['entropy']:.3f}")
    return "no rule against it" + (f": {', '.join(parts)}" if parts else "")


def sft_plateau(rows: list[dict], plateau_rel: float, early_stop: bool = False) -> dict | None:
    """Whether an SFT stage's held-out loss curve (its metrics rows' ``heldout/loss``) reached its plateau: the
    last value improved on the best of the earlier ones by less than ``plateau_rel`` (relative), or patience
    stopped it. None when fewer than two held-out losses were logged."""
    xs = [r["heldout/loss"] for r in rows if isinstance(r.get("heldout/loss"), (int, float))]
    if len(xs) < 2:
        return None
    best, last = min(xs[:-1]), xs[-1]
    gain = (best - last) / best if best > 0 else 0.0
    return {"plateaued": early_stop or gain < plateau_rel, "last": last, "best": best, "gain": gain}


def facts(role_of: Callable, stages: list, index: int, **measured) -> dict:
    """The facts of ``stages[index]`` besides what was measured on its starting policy (``measured``): whether an
    SFT stage comes before it and an RL stage after it (``role_of(stage) -> plan_role``)."""
    before, after = stages[:index], stages[index + 1:]
    return {"demonstrated": any(role_of(s) == "demonstrate" for s in before),
            "later_reinforce": any(role_of(s) == "reinforce" for s in after), **measured}
