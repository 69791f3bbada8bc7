"""Task and trajectory types shared by every stage. A leaf module: no torch, no model.

A task's ``gold`` payload (answer, tests, gold SQL, goal state) travels beside the prompt but never
inside anything the policy sees: only :meth:`Task.policy_messages` is rendered for the model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

TaskKind = Literal["math", "code", "sql", "env", "reasoning_gym"]
Split = Literal["train", "heldout"]
AnswerFormat = Literal["boxed", "hash", "code_fence", "last_number", "raw"]

TASK_KINDS: tuple[str, ...] = ("math", "code", "sql", "env", "reasoning_gym")


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

    def __getattr__(self, name: str) -> Any:
        """Only reached for a name that is not an attribute: say what a Task has (a reward reading
        ``task.answer`` learns the answer is ``task.gold["answer"]``)."""
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(missing_attribute_message(self.__dict__, name))

    def policy_messages(self) -> list[dict[str, str]]:
        """The chat the policy sees (never contains ``gold``)."""
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.prompt}]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_line(self) -> dict[str, Any]:
        """The task as a task-file line (``rlvr.data.jsonl.load_tasks`` reads it back equal): every set field
        but ``source`` (the reader sets it to the line's ``file:line``); the chat alone where there is one
        (its last turn is the prompt)."""
        out = {k: v for k, v in self.to_dict().items() if v is not None and k != "source"}
        if "messages" in out:
            out.pop("prompt")
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Task":
        return cls(**d)


TASK_ATTRIBUTES = ("id", "prompt", "kind", "gold", "messages", "family", "difficulty", "split", "answer_format",
                   "solution", "meta")


def missing_attribute_message(fields: dict[str, Any], name: str) -> str:
    """``'Task' object has no attribute 'answer'``, plus what a Task has and where ``name`` does live."""
    gold, meta = fields.get("gold") or {}, fields.get("meta") or {}
    hint = (f"; did you mean task.gold[{name!r}]?" if name in gold
            else f"; did you mean task.meta[{name!r}]?" if name in meta else "")
    return (f"'Task' object has no attribute {name!r}{hint} (a Task has: {', '.join(TASK_ATTRIBUTES)}; "
            f"this task's gold keys: {sorted(gold)}, meta keys: {sorted(meta)})")


class Completion(str):
    """A completion's text that also carries the token ids the policy sampled (``ids``; None where only the
    text is known, e.g. a completions file). It is a ``str`` everywhere else, so verifiers see the text."""

    ids: list[int] | None

    def __new__(cls, text: str, ids: list[int] | None = None) -> "Completion":
        obj = super().__new__(cls, text)
        obj.ids = None if ids is None else [int(i) for i in ids]
        return obj

    def __reduce__(self):
        return (Completion, (str(self), self.ids))


def with_ids(texts: list[str], ids: list[list[int]]) -> list[str]:
    """The completions ``texts`` carrying their sampled ``ids`` (for rewards that read the token ids)."""
    return [Completion(t, i) for t, i in zip(texts, ids)]
