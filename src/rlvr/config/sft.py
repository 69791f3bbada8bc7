"""Supervised fine-tuning on demonstrations."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlvr.config.base import Section, typed_union
from rlvr.config.data import BuiltinArithmetic, TaskSource
from rlvr.config.limits import BatchSize, micro_batch_divides
from rlvr.config.optim import OptimConfig


class NLLSFT(Section):
    """Plain completion-only negative log-likelihood."""

    type: Literal["nll"] = "nll"


class TrimSFT(Section):
    """TrimSFT (entropy-preserving SFT: the token-confidence layer): tokens the model already
    predicts with probability >= ``confidence`` get no gradient (still counted in the denominator), so SFT
    stops sharpening what it has learned and leaves sampling entropy for RL (``rlvr.losses.sft``)."""

    type: Literal["trim"] = "trim"
    confidence: float = Field(0.9, gt=0, lt=1)
    """τ: trim tokens with p_t >= τ."""


SFTLoss = typed_union(NLLSFT, TrimSFT, default="nll")


class SFTStage(Section):
    """Completion-only SFT on the tasks' worked solutions (``Task.solution``)."""

    type: Literal["sft"] = "sft"
    name: str = "sft"
    """Stage name (its run sub-directory)."""
    data: TaskSource = BuiltinArithmetic()
    """Demonstrations: tasks with a ``solution``."""
    loss: SFTLoss = NLLSFT()
    """The token loss: plain NLL, or an entropy-preserving variant (``{type: trim, confidence: 0.9}``)."""
    optim: OptimConfig = OptimConfig()
    """Optimiser and schedule."""
    max_steps: int = Field(1000, ge=1)
    """Optimizer steps."""
    max_minutes: float | None = None
    """Stop early after this much training wall time.
    A stage it cuts before ``max_steps`` says so (console, summary.json: steps done of planned)."""
    batch_size: BatchSize = Field(64)
    """Sequences per optimizer step."""
    micro_batch_size: BatchSize | None = None
    """Sequences per forward pass (accumulation = batch_size / micro_batch_size). ``null`` (the default): the
    step's batch cut by ``model.micro_tokens`` (on the CPU a budget of tokens x hidden size x layers, one row at
    a time at a 0.5B shape, 6,144 tokens at the 1m tiny model; on a GPU none: the whole batch); a
    number: that many sequences, the token budget not applied. The gradient does not depend on the cutting."""
    _micro_batch_divides = field_validator("micro_batch_size")(micro_batch_divides)
    max_length: int = Field(256, ge=2)
    """Truncate prompt+completion to this many tokens."""
    bucketing: bool = True
    """Group sequences of similar length in a micro-batch to cut padding."""
    packing: bool = False
    """Pack several examples into one row, no longer than the step's longest example (attention kept within
    each example, positions restarting at each; same loss and gradient as unpacked). Off by default: on this
    CPU it measured no faster than bucketing (ragged 16-256-token rows, CPU time: 0.95-1.03x at 1m, 0.99x at
    5m, ``bench/sft_throughput.py --packing-compare --cpu-time``); where no two examples fit in the longest
    (e.g. the built-in arithmetic) it is exactly the bucketed step. A checkpoint loaded into rlvr's own module
    (``model.implementation: auto`` on a Llama/Qwen2/Mistral folder) is never packed: its forward computes
    only the real tokens of each row already."""
    save_every: int = Field(200, ge=0)
    """Write a checkpoint every N steps (0: only at the end)."""
    keep_last: int = Field(2, ge=0)
    """Keep this many step checkpoints."""
    eval_every: int = Field(0, ge=0)
    """Held-out eval every N steps for the learning curve (0: only at the end)."""
    log_every: int = Field(10, ge=1)
    """Write metrics every N steps."""
    heldout: TaskSource | None = None
    """Held-out demonstrations (tasks with a solution) whose loss is logged as ``heldout/loss`` (None: no held-out loss)."""
    heldout_every: int = Field(0, ge=0)
    """Held-out loss every N steps (0: every ``log_every`` steps)."""
    keep_best: bool = False
    """Ship the checkpoint with the best ``best_metric`` as ``final/`` instead of the last one."""
    best_metric: Literal["heldout/loss", "eval/pass_at_1"] = "heldout/loss"
    """What "best" means for keep_best and patience (loss: lower is better; pass@1: higher)."""
    patience: int = Field(0, ge=0)
    """Stop after this many held-out measurements without improvement of ``best_metric`` (0: never stop early)."""
