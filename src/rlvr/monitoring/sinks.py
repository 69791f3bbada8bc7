"""Where a stage's metrics go besides ``metrics.jsonl``: TensorBoard, W&B, plain log lines, sample completions.

The pipeline opens a :func:`stage_logging` context around each stage with the recipe's ``logging``
section; inside it, :class:`~rlvr.monitoring.metrics.MetricsWriter` also writes to the sinks it turns on,
:func:`~rlvr.monitoring.progress.make_progress` prints plain lines when stdout is not a terminal, and
:func:`log_samples` writes sample completions. Outside a context (a trainer called directly) only
``metrics.jsonl`` and the default progress output are written.

Text metrics (``health/status``, ``health/alerts``, ``health/action``, ``notes``, ``event``) go to
TensorBoard as text summaries; numbers as scalars (``health/code`` is the status as a number: 0 healthy,
1 warn, 2 critical).
"""

from __future__ import annotations

import contextvars
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.config.logging import LoggingConfig
from rlvr.errors import ConfigError


@dataclass
class StageLogging:
    """The logging settings and open sinks of the stage that is running."""

    cfg: LoggingConfig
    out: Path
    stage: str
    run: str
    sinks: list[Any] = field(default_factory=list)


_ACTIVE: contextvars.ContextVar[StageLogging | None] = contextvars.ContextVar(
    "rlvr_stage_logging", default=None
)


def active() -> StageLogging | None:
    """The running stage's logging context (None outside the pipeline)."""
    return _ACTIVE.get()


@contextmanager
def stage_logging(cfg: LoggingConfig, out: str | Path, stage: str, run: str = "run"):
    ctx = StageLogging(cfg, Path(out), stage, run)
    token = _ACTIVE.set(ctx)
    try:
        yield ctx
    finally:
        for s in ctx.sinks:
            s.close()
        _ACTIVE.reset(token)


class TensorBoardSink:
    def __init__(self, logdir: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError(
                "logging.tensorboard needs the `tensorboard` package: pip install tensorboard"
            ) from None
        self.w = SummaryWriter(str(logdir))

    def log(self, step: int, rec: dict[str, Any]) -> None:
        for k, v in rec.items():
            if k in ("step", "time") or v is None:
                continue
            if isinstance(v, bool) or isinstance(v, (int, float)):
                self.w.add_scalar(k, float(v), step)
            else:
                self.w.add_text(k, str(v), step)
        self.w.flush()

    def samples(self, step: int, rows: list[dict]) -> None:
        table = "\n\n".join(
            f"**{r['task_id']}** ({r['outcome']}, reward {r['reward']:.3g}):\n\n    "
            + r["completion"].replace("\n", "\n    ")
            for r in rows
        )
        self.w.add_text("samples", table, step)

    def close(self) -> None:
        self.w.close()


class WandbSink:
    def __init__(self, ctx: StageLogging):
        try:
            import wandb
        except ImportError:
            raise ConfigError("logging.wandb needs the `wandb` package: pip install wandb") from None
        c = ctx.cfg.wandb
        os.environ.setdefault("WANDB_SILENT", "true")
        self.wandb = wandb
        self.run = wandb.init(
            project=c.project,
            entity=c.entity,
            mode=c.mode,
            tags=c.tags,
            dir=str(ctx.out),
            name=f"{ctx.run}/{ctx.stage}",
            group=ctx.run,
            reinit="create_new",
            config={"stage": ctx.stage},
        )

    def log(self, step: int, rec: dict[str, Any]) -> None:
        self.run.log({k: v for k, v in rec.items() if k not in ("step", "time") and v is not None}, step=step)

    def samples(self, step: int, rows: list[dict]) -> None:
        cols = ["task_id", "completion", "reward", "outcome"]
        self.run.log(
            {"samples": self.wandb.Table(columns=cols, data=[[r[c] for c in cols] for r in rows])}, step=step
        )

    def close(self) -> None:
        self.run.finish()


def open_sinks() -> list[Any]:
    """The sinks the running stage's ``logging`` turns on (opened once per stage)."""
    ctx = active()
    if ctx is None:
        return []
    if not ctx.sinks:
        if ctx.cfg.tensorboard:
            ctx.sinks.append(TensorBoardSink(ctx.out / "tensorboard"))
        if ctx.cfg.wandb is not None and ctx.cfg.wandb.mode != "disabled":
            ctx.sinks.append(WandbSink(ctx))
    return ctx.sinks


def log_samples(step: int, ro: Any) -> None:
    """At a stage's first step and every ``logging.samples_every`` steps: one completion of each of the first
    ``logging.samples`` groups of a rollout batch, with its reward and verdict, to ``<stage>/samples.jsonl``
    (and the sinks). The first step's rows mean even a stage shorter than ``samples_every`` leaves some."""
    ctx = active()
    every = ctx.cfg.samples_every if ctx is not None else 0
    if not every or (step != 1 and step % every) or not ro.num_groups:
        return
    rows = []
    for g in range(min(ctx.cfg.samples, ro.num_groups)):
        i = g * ro.group_size
        t = ro.tasks[g]
        rows.append(
            {
                "step": step,
                "task_id": t.id,
                "prompt": t.policy_messages()[-1]["content"],
                "completion": ro.texts[i],
                "reward": float(ro.rewards[g, 0]),
                "outcome": ro.outcomes[i],
                "finish_reason": ro.finish_reason[i],
            }
        )
    ctx.out.mkdir(parents=True, exist_ok=True)
    with open(ctx.out / "samples.jsonl", "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    for s in open_sinks():
        s.samples(step, rows)
