"""The recipe's ``plan`` section: what ``rlvr plan`` decides against, and whether ``rlvr run`` follows it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.base import Section


class PlanConfig(Section):
    """``rlvr plan``'s decisions (run / skip / replace each stage; rules in docs/evaluation.md#the-plans-rules)."""

    follow: Literal["off", "auto"] = "off"
    """auto: ``rlvr run`` decides each stage just before it (the plan's rules on the figures measured then) and does
    not run a stage the plan skips or replaces, recording why in summary.json (``rlvr run --plan auto`` sets it)."""
    target: float | None = Field(None, ge=0, le=1)
    """The held-out pass@1 the run is for: a preference, RL or distillation stage is skipped once the policy it
    would start from meets it (None: no target)."""
    teacher: str | None = None
    """A stronger model's folder: distillation (or rejection sampling from it) replaces RL where RL has no signal
    or the student is small beside it."""
    small_ratio: float = Field(10.0, gt=1)
    """The student is small when the teacher has at least this many times its parameters."""
    teacher_margin: float = Field(0.5, ge=0, le=1)
    """Distillation replaces RL for a small student only when the teacher's held-out pass@1 closes at least this
    fraction of the student's gap to 1 (teacher >= student + margin x (1 - student)): distillation teaches what the
    teacher solves, RL what the student's own samples find (docs/plan_checked.md). The plan evaluates the teacher
    on the held-out tasks."""
    no_signal: float = Field(0.1, ge=0, le=1)
    """A measured share of informative groups under which RL is said to have no signal."""
    plateau_rel: float = Field(0.02, ge=0)
    """SFT's held-out loss has reached its plateau when its last evaluation improved on the best of the earlier
    ones by less than this fraction (or held-out patience stopped it)."""
    screen_tasks: int = Field(32, ge=1)
    """Tasks screened (at the RL stage's G and temperature) for each decision."""
