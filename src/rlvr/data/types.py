"""Task and trajectory types shared by every stage. A leaf module: no torch, no model.

A task's ``gold`` payload (answer, tests, gold SQL, goal state) travels beside the prompt but never
inside anything the policy sees: only :meth:`Task.policy_messages` is rendered for the model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

TaskKind = Literal["math", "code", "sql", "env"]
Split = Literal["train", "heldout"]
AnswerFormat = Literal["boxed", "hash", "code_fence", "last_number", "raw"]

TASK_KINDS: tuple[str, ...] = ("math", "code", "sql", "env")


@dataclass
class Task:
    """One unit of work for the policy.

    id: unique id; prompt: the user text (or ``messages`` for a full chat);
    kind: which verifier family judges it; gold: hidden payload for the verifier only
    (``{"answer": ...}``, ``{"tests": ..., "entry_point": ...}``, ``{"gold_sql": ..., "database": ...}``);
    family/difficulty: for curricula and per-family breakdowns; split: train or heldout ("" when a file does not say);
    answer_format: how the final answer is extracted from a completion;
    solution: a worked demonstration for SFT (optional);
    source: where the task was read, for messages (``file:line`` of a JSONL file, ``dir[split]#row`` of a
    dataset; "" for generated tasks); not part of the task's identity.
    """

    id: str
    prompt: str = ""
    kind: str = "math"
    gold: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, str]] | None = None
    family: str = "default"
    difficulty: int = 1
    split: str = "train"
    answer_format: str = "boxed"
    solution: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = field(default="", compare=False)

    @property
    def where(self) -> str:
        """How messages name this task: its ``source`` (file:line) when it has one, else its id."""
        return self.source or f"task {self.id!r}"

    def policy_messages(self) -> list[dict[str, str]]:
        """The chat the policy sees (never contains ``gold``)."""
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.prompt}]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Task":
        return cls(**d)
