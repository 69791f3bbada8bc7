"""Thresholds of the training-health rules (rlvr.monitoring.health) and whether they act."""

from __future__ import annotations

from pydantic import Field

from rlvr.config.base import Section


class HealthConfig(Section):
    """Health monitor of an RL stage."""

    window: int = Field(10, ge=0)
    """Steps averaged by the rules."""
    entropy_floor_frac: float = 0.1
    """entropy_collapse: entropy below this fraction of its starting value."""
    kl_max: float = 0.5
    """kl_drift: KL to the reference above this."""
    dead_frac: float = 0.95
    """dead_groups: zero-variance fraction at or above this for a whole window."""
    overfit_gap: float = 0.1
    """verifier_overfit: train pass rate up and held-out pass@1 down by at least this."""
    tool_collapse_frac: float = 0.5
    """tool_collapse (multi-turn): tool calls per trajectory below this fraction of their first-window
    mean while the pass rate did not rise."""
    stop_on_critical: bool = False
    """Stop the stage on a critical alert (entropy collapse, verifier overfitting, NaN)."""
