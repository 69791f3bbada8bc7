"""The equal-time SFT control (``eval.control: sft``, docs/evaluation.md).

The last SFT stage before the recipe's first other stage is continued from its final checkpoint on its own
demonstrations (the data stream going on from its cursor, its batch settings) for the training seconds the
later stages took, each segment with the SFT stage's own optimiser schedule (warmup, then its decay) laid over
the segment's seconds: the optimiser starts fresh, as each later stage's does, and every boundary is read
annealed. It is evaluated at each later stage's cumulative time boundary, so
``dpo`` is read against ``sft-control@dpo`` (the SFT stage continued for DPO's seconds) and ``grpo`` against
``sft-control@grpo`` (for DPO's + GRPO's seconds). Each boundary is one segment, its own stage folder
``<run>/sft-control@STAGE/``, continuing the segment before it.

The clock is each stage's training seconds (``StageResult.train_seconds``: its steps' wall time, without
its held-out evaluations, checkpoint saves or model loading; a preference stage's pair building and reference
pass added, ``extra["prep_seconds"]``), on both sides. This module plans the segments
and writes the summary's lines; the pipeline trains and evaluates them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PREFIX = "sft-control"


@dataclass
class Segment:
    """One boundary of the control: train ``budget_s`` seconds more, then evaluate as ``name``."""

    name: str            # sft-control@STAGE
    stage: str           # the later stage read against it
    budget_s: float      # this segment's training seconds (the later stage's, plus a reward model's before it)
    total_s: float       # the control's cumulative training seconds at this boundary


def control_name(stage: str) -> str:
    return f"{PREFIX}@{stage}"


def source_and_later(stages, kind) -> tuple[object | None, list, str | None]:
    """``(the SFT stage to continue, the stages after it, None)`` or ``(None, [], why there is no control)``;
    ``kind``: a stage -> its entry in the stage table (``rlvr.stages.stage_kind``: which types train on
    demonstrations)."""
    first = next((i for i, s in enumerate(stages) if not kind(s).demonstrations), None)
    if first is None:
        return None, [], "no control: no stage after the SFT stage" if stages else "no control: no stages"
    if first == 0:
        return None, [], f"no control: no SFT stage before {stages[0].name}"
    return stages[first - 1], list(stages[first:]), None


def plan_segments(later, seconds: dict[str, float], kind) -> list[Segment]:
    """One segment per later policy stage, each as long as that stage's training seconds (``seconds``: stage
    name -> training seconds; a reward model's seconds go to the stage after it; a stage not run ends the plan;
    ``kind`` as for :func:`source_and_later`)."""
    out, pending, total = [], 0.0, 0.0
    for st in later:
        if st.name not in seconds:
            break
        pending += seconds[st.name]
        if not kind(st).produces_policy:  # e.g. a reward model: its seconds count towards the next stage
            continue
        total += pending
        out.append(Segment(control_name(st.name), st.name, pending, total))
        pending = 0.0
    return out


def segment_stage(sft, seg: Segment, seconds_per_step: float):
    """``(the SFT stage's config for a segment, lr_over)``: its own folder, stopped by ``budget_s`` of training
    time (steps planned with room to spare), no in-training evals, keep-best or patience; ``lr_over``: its own
    optimiser schedule over the steps the SFT stage's pace fits in the budget, laid over the budget's seconds."""
    est = max(1, math.ceil(seg.budget_s / max(seconds_per_step, 1e-6)))
    warmup = min(sft.optim.warmup_steps, est // 10)  # a short segment still decays: warmup at most a tenth
    stage = sft.model_copy(update={
        "name": seg.name, "max_steps": 4 * est + 20, "max_minutes": seg.budget_s / 60, "eval_every": 0,
        "heldout": None, "patience": 0, "keep_best": False,
        "optim": sft.optim.model_copy(update={"warmup_steps": warmup})})
    return stage, (est, seg.budget_s)


def add_gains(summary: dict) -> None:
    """Give each stage row read against a control ``gain_over_control`` (pass@1 difference, a fraction) and
    ``gain_by_family``."""
    rows = {r["stage"]: r for r in summary["stages"]}
    for r in summary["stages"]:
        ctl = rows.get(control_name(r["stage"]))
        if ctl is None or r.get("pass_at_1") is None or ctl.get("pass_at_1") is None:
            continue
        r["gain_over_control"] = r["pass_at_1"] - ctl["pass_at_1"]
        r["gain_by_family"] = {f: v - ctl["by_family"].get(f, 0.0) for f, v in r["by_family"].items()}


def control_lines(summary: dict) -> list[str]:
    """The summary's lines about the control: why there is none, or each stage's gain over its control."""
    info = summary.get("control")
    if not info:
        return []
    if info.get("note"):
        return [info["note"]]
    rows = {r["stage"]: r for r in summary["stages"]}
    lines = []
    for r in summary["stages"]:
        ctl = rows.get(control_name(r["stage"]))
        if ctl is None:
            continue
        head = (f"{r['stage']} vs {ctl['stage']} ({info['source']} continued {ctl.get('steps', '?')} steps: "
                f"{ctl.get('train_s', 0):.0f} s of training for the later stages' {ctl.get('budget_s', 0):.0f} s)")
        if "gain_over_control" not in r:
            lines.append(f"{head}: no pass@1 to compare")
            continue
        fams = ", ".join(f"{f} {100 * g:+.1f}" for f, g in sorted(r["gain_by_family"].items()))
        lines.append(f"{head}: pass@1 {100 * r['gain_over_control']:+.1f} points" + (f" ({fams})" if fams else ""))
    return lines
