"""Built-in arithmetic task families with worked solutions, deterministic by seed.

Families (easy -> hard):
  add2   2-digit + 2-digit          (difficulty 1)
  add3   3-digit + 3-digit          (difficulty 2)
  mul21  2-digit x 1-digit          (difficulty 3; only ~80 held-out problems)
  mul31  3-digit x 1-digit          (difficulty 3)
  mul2   2-digit x 2-digit          (difficulty 4)

Worked solutions go digit by digit from the right, carrying explicitly, then give the answer in
``\\boxed{}`` (what the math verifier reads), e.g. ``47+85`` -> ``7+5=12, 4+8+1=13. \\boxed{132}``.

Train and held-out splits are provably disjoint: a problem's split is a pure function of the problem
itself (a hash of its family and operands), so no seed or sample size can put one problem in both.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from rlvr.data.types import Task

HELDOUT_PERCENT = 10  # share of each family's problem space reserved for held-out evaluation


@dataclass(frozen=True)
class Family:
    name: str
    op: str
    a_digits: int
    b_digits: int
    difficulty: int


FAMILIES: dict[str, Family] = {
    "add2": Family("add2", "+", 2, 2, 1),
    "add3": Family("add3", "+", 3, 3, 2),
    "mul21": Family("mul21", "*", 2, 1, 3),
    "mul31": Family("mul31", "*", 3, 1, 3),
    "mul2": Family("mul2", "*", 2, 2, 4),
}


def split_of(family: str, a: int, b: int) -> str:
    """The split a problem belongs to (a pure function of the problem: train/held-out are disjoint)."""
    h = hashlib.blake2b(f"{family}:{a}:{b}".encode(), digest_size=8).digest()
    return "heldout" if int.from_bytes(h, "big") % 100 < HELDOUT_PERCENT else "train"


def add_solution(a: int, b: int) -> str:
    """Digit-wise addition with explicit carries: ``7+5=12, 4+8+1=13. \\boxed{132}``."""
    da, db = str(a)[::-1], str(b)[::-1]
    steps, digits, carry = [], [], 0
    for i in range(max(len(da), len(db))):
        x = int(da[i]) if i < len(da) else 0
        y = int(db[i]) if i < len(db) else 0
        s = x + y + carry
        steps.append(f"{x}+{y}={s}" if i == 0 else f"{x}+{y}+{carry}={s}")
        digits.append(s % 10)
        carry = s // 10
    answer = (str(carry) if carry else "") + "".join(str(d) for d in reversed(digits))
    assert int(answer) == a + b
    return f"{', '.join(steps)}. \\boxed{{{answer}}}"


def mul1_solution(a: int, d: int) -> tuple[list[str], int]:
    """Steps of ``a * d`` for a single digit ``d``: ``7*6=42, 4*6+4=28``."""
    steps, digits, carry = [], [], 0
    for i, ch in enumerate(str(a)[::-1]):
        p = int(ch) * d + carry
        steps.append(f"{ch}*{d}={p}" if i == 0 else f"{ch}*{d}+{carry}={p}")
        digits.append(p % 10)
        carry = p // 10
    value = int((str(carry) if carry else "") + "".join(str(x) for x in reversed(digits)))
    assert value == a * d
    return steps, value


def mul_solution(a: int, b: int) -> str:
    """Digit-wise multiplication: one row per digit of ``b``, then the sum of the shifted rows."""
    if b < 10:
        steps, value = mul1_solution(a, b)
        return f"{', '.join(steps)}. \\boxed{{{value}}}"
    rows = []
    for i, ch in enumerate(str(b)[::-1]):
        _, value = mul1_solution(a, int(ch))
        rows.append(value * 10**i)
    parts = [f"{a}*{ch}={a * int(ch)}" for ch in str(b)[::-1]]
    total = sum(rows)
    return f"{', '.join(parts)}, {'+'.join(str(r) for r in rows)}={total}. \\boxed{{{total}}}"


def make_task(family: str, a: int, b: int) -> Task:
    fam = FAMILIES[family]
    answer = a + b if fam.op == "+" else a * b
    solution = add_solution(a, b) if fam.op == "+" else mul_solution(a, b)
    return Task(
        id=f"{family}-{a}{fam.op}{b}", prompt=f"{a}{fam.op}{b}=?", kind="math",
        gold={"answer": str(answer)}, family=family, difficulty=fam.difficulty,
        split=split_of(family, a, b), answer_format="boxed", solution=solution,
    )


def _operand(rng: random.Random, digits: int) -> int:
    return rng.randint(10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1)


def generate(families: list[str], n: int, split: str = "train", seed: int = 0,
             weights: list[float] | None = None) -> list[Task]:
    """Draw ``n`` tasks from ``families`` (weighted), all in ``split``; deterministic by ``seed``.

    Training draws are with replacement; held-out draws are distinct problems (an evaluation set with
    repeats would overstate its own precision), and asking for more than a family has is an error.
    """
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown arithmetic families {unknown}; choose from {sorted(FAMILIES)}")
    if weights is not None and len(weights) != len(families):
        raise ValueError(f"weights has {len(weights)} entries for {len(families)} families")
    rng = random.Random(f"{seed}:{split}:{','.join(families)}")
    tasks, seen, tries = [], set(), 0
    while len(tasks) < n:
        tries += 1
        if tries > 200 * n + 10_000:
            raise ValueError(f"only {len(tasks)} distinct {split} problems found in {families}; ask for fewer "
                             f"(held-out sets never repeat a problem)")
        fam = FAMILIES[rng.choices(families, weights=weights)[0]]
        a, b = _operand(rng, fam.a_digits), _operand(rng, fam.b_digits)
        if split_of(fam.name, a, b) != split or (split == "heldout" and (fam.name, a, b) in seen):
            continue
        seen.add((fam.name, a, b))
        tasks.append(make_task(fam.name, a, b))
    return tasks
