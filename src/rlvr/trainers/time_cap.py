"""A user-set ``max_minutes`` cap: whether it has ended a stage, and the report when it cut one short."""

from __future__ import annotations

from typing import Any


def time_capped(run: Any) -> bool:
    """The stage's training time (a ``StageRun``'s ``seconds``) has reached its ``max_minutes`` (None: no cap)."""
    minutes = getattr(run.cfg, "max_minutes", None)
    return minutes is not None and run.seconds >= minutes * 60


def time_cap_event(run: Any, main: bool) -> dict | None:
    """When the cap ended the stage before its steps: print so (``main``: the process that prints) and return
    the ``time_cap`` event to log; None when the stage ran its steps."""
    if run.step >= run.n_steps or not time_capped(run):
        return None
    minutes = run.cfg.max_minutes
    if main:
        run.progress.console.print(f"stage {run.cfg.name}: stopped by max_minutes: {minutes:g} at step "
                                   f"{run.step}/{run.n_steps}", markup=False)
    return {"event": "time_cap", "max_minutes": minutes, "step": run.step, "of": run.n_steps}
