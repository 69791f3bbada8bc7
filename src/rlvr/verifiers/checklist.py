"""TCR (Thinking Checklist Reward, Liu et al. 2026-07): a process reward from a checklist of declared criteria.

For the built-in arithmetic families the checklist is exact: the task's worked solution (``Task.solution``,
e.g. ``7*6=42, 4*6+4=28, 3*6+2=20. \\boxed{2082}``) declares one criterion per step — "step k states
``<gold step k>``" — and a completion's steps (the comma-separated equations before the final answer) are
checked against it position by position, each also checked to be true arithmetic::

    checklist(y) = (1/K) · #{k : step_k(y) == gold_k  and  eval(lhs_k) == rhs_k}

A value in [0, 1], composed with the outcome reward by the recipe's weights (``rewards: [{name: correct},
{name: checklist, weight: 0.5}]``). A task without a worked solution has no checklist (score 0).
"""

from __future__ import annotations

import re

_STEP = re.compile(r"^\s*([0-9+*\-]+)=(-?[0-9]+)\s*$")
_ARITH = re.compile(r"^[0-9]+(?:[+*][0-9]+)*$")


def steps_of(text: str) -> list[str]:
    """The comma-separated steps before the final ``. \\boxed{...}`` (or the whole text without one)."""
    body = text.split("\\boxed")[0].rstrip().rstrip(".")
    return [s.strip() for s in body.split(",") if s.strip()]


def step_is_true(step: str) -> bool:
    """``a*b+c=p`` style equation whose left side evaluates to its right side (only + and * on integers)."""
    m = _STEP.match(step)
    if not m or not _ARITH.match(m.group(1)):
        return False
    total = 0
    for term in m.group(1).split("+"):
        prod = 1
        for f in term.split("*"):
            prod *= int(f)
        total += prod
    return total == int(m.group(2))


def checklist_score(task, completion: str) -> float:
    """The share of the task's checklist items (gold worked steps) the completion states, correctly, in place."""
    gold = steps_of(task.solution) if getattr(task, "solution", None) else []
    if not gold:
        return 0.0
    got = steps_of(completion)
    ok = sum(1 for k, g in enumerate(gold) if k < len(got) and got[k] == g and step_is_true(got[k]))
    return ok / len(gold)
