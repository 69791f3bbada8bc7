"""The verifier protocol: ``verify(task, completion) -> Verdict``.

Outcomes:
  pass       the completion is correct (reward usually 1.0)
  wrong      a well-formed answer that is not correct
  format     no extractable answer
  timeout    the check ran past its time limit
  crash      the candidate crashed (code) or raised
  violation  the candidate broke a sandbox rule (forbidden SQL statement, tool-budget overrun, ...)
  infra      the verifier itself failed; never counted as a wrong answer (kept out of advantages)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from rlvr.data.types import Task

OUTCOMES: tuple[str, ...] = ("pass", "wrong", "format", "timeout", "crash", "violation", "infra")
# Outcomes that say something about the policy's answer; the others are excluded from advantages.
POLICY_OUTCOMES: frozenset[str] = frozenset({"pass", "wrong", "format", "violation", "crash", "timeout"})
INFRA_OUTCOMES: frozenset[str] = frozenset({"infra"})


@dataclass
class Verdict:
    """What a verifier says about one completion."""

    reward: float
    passed: bool
    outcome: str
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown verdict outcome {self.outcome!r}; expected one of {OUTCOMES}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def infra(cls, message: str, seconds: float = 0.0) -> "Verdict":
        return cls(0.0, False, "infra", {"error": message}, seconds)


@runtime_checkable
class Verifier(Protocol):
    """Anything that judges a completion for a task. Must be picklable (the pool ships it to workers)."""

    name: str

    def verify(self, task: Task, completion: str) -> Verdict: ...
