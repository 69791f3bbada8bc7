"""Built-in arithmetic task families with worked solutions, deterministic by seed.

Families (easy -> hard):
  add2   2-digit + 2-digit          (difficulty 1)
  add3   3-digit + 3-digit          (difficulty 2)
  mul21  2-digit x 1-digit          (difficulty 3; only ~80 held-out problems)
  mul31  3-digit x 1-digit          (difficulty 3)
  mul2   2-digit x 2-digit          (difficulty 4)
  mul81  8-digit x 1-digit          (difficulty 5; worked solutions of ~95 tokens)
  mul121 12-digit x 1-digit         (difficulty 6; worked solutions of ~135 tokens: the long-output family)

Worked solutions go digit by digit from the right, carrying explicitly, then give the answer in
``\\boxed{}`` (what the math verifier reads), e.g. ``47+85`` -> ``7+5=12, 4+8+1=13. \\boxed{132}``.

An imperfect teacher (``teacher_rate``) writes some families' worked solutions with a systematic error: on
that share of the problems where it matters it forgets the carry into the leading digit (``3*6=18`` where
``3*6+2=20`` is right), and its boxed answer follows its steps. Which problems it errs on is a pure function of
the problem (a hash), so repeated draws agree and the error is the mode wherever ``teacher_rate > 0.5``:
imitation learns it, a verifier can catch it. The task's ``gold`` answer is always right.

Train and held-out splits are provably disjoint: a problem's split is a pure function of the problem
itself (a hash of its family and operands), so no seed or sample size can put one problem in both.
"""

from __future__ import annotations

import hashlib
import random
import re
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
    "mul81": Family("mul81", "*", 8, 1, 5),
    "mul121": Family("mul121", "*", 12, 1, 6),
}


def split_of(family: str, a: int, b: int) -> str:
    """The split a problem belongs to (a pure function of the problem: train/held-out are disjoint)."""
    h = hashlib.blake2b(f"{family}:{a}:{b}".encode(), digest_size=8).digest()
    return "heldout" if int.from_bytes(h, "big") % 100 < HELDOUT_PERCENT else "train"


def teacher_errs(family: str, a: int, b: int, rate: float) -> bool:
    """Whether the imperfect teacher of error ``rate`` drops the leading carry of this problem (a pure
    function of the problem, independent of its split's hash)."""
    h = hashlib.blake2b(f"teacher:{family}:{a}:{b}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") % 10_000 < round(rate * 10_000)


def add_solution(a: int, b: int, drop_last_carry: bool = False) -> str:
    """Digit-wise addition with explicit carries: ``7+5=12, 4+8+1=13. \\boxed{132}``; with ``drop_last_carry``
    the leading column forgets its carry (``4+8=12``) and the answer follows."""
    da, db = str(a)[::-1], str(b)[::-1]
    steps, digits, carry = [], [], 0
    cols = max(len(da), len(db))
    for i in range(cols):
        x = int(da[i]) if i < len(da) else 0
        y = int(db[i]) if i < len(db) else 0
        if drop_last_carry and i == cols - 1:
            carry = 0
        s = x + y + carry
        steps.append(f"{x}+{y}={s}" if i == 0 else f"{x}+{y}+{carry}={s}")
        digits.append(s % 10)
        carry = s // 10
    answer = (str(carry) if carry else "") + "".join(str(d) for d in reversed(digits))
    assert drop_last_carry or int(answer) == a + b
    return f"{', '.join(steps)}. \\boxed{{{answer}}}"


def mul1_solution(a: int, d: int, drop_last_carry: bool = False) -> tuple[list[str], int]:
    """Steps of ``a * d`` for a single digit ``d``: ``7*6=42, 4*6+4=28`` (``drop_last_carry``: the leading
    digit's step forgets its carry)."""
    steps, digits, carry = [], [], 0
    last = len(str(a)) - 1
    for i, ch in enumerate(str(a)[::-1]):
        if drop_last_carry and i == last:
            carry = 0
        p = int(ch) * d + carry
        steps.append(f"{ch}*{d}={p}" if i == 0 else f"{ch}*{d}+{carry}={p}")
        digits.append(p % 10)
        carry = p // 10
    value = int((str(carry) if carry else "") + "".join(str(x) for x in reversed(digits)))
    assert drop_last_carry or value == a * d
    return steps, value


def mul_solution(a: int, b: int, drop_last_carry: bool = False) -> str:
    """Digit-wise multiplication: one row per digit of ``b``, then the sum of the shifted rows
    (``drop_last_carry``: every row's leading digit forgets its carry)."""
    if b < 10:
        steps, value = mul1_solution(a, b, drop_last_carry)
        return f"{', '.join(steps)}. \\boxed{{{value}}}"
    rows, parts = [], []
    for i, ch in enumerate(str(b)[::-1]):
        _, value = mul1_solution(a, int(ch), drop_last_carry)
        rows.append(value * 10**i)
        parts.append(f"{a}*{ch}={value}")
    total = sum(rows)
    return f"{', '.join(parts)}, {'+'.join(str(r) for r in rows)}={total}. \\boxed{{{total}}}"


def make_task(family: str, a: int, b: int, teacher_rate: float = 0.0) -> Task:
    """The task ``a op b``; its worked solution from the imperfect teacher of error ``teacher_rate`` (module
    docstring), which is the perfect one at 0."""
    fam = FAMILIES[family]
    answer = a + b if fam.op == "+" else a * b
    errs = teacher_rate > 0 and teacher_errs(family, a, b, teacher_rate)
    solution = add_solution(a, b, errs) if fam.op == "+" else mul_solution(a, b, errs)
    return Task(
        id=f"{family}-{a}{fam.op}{b}", prompt=f"{a}{fam.op}{b}=?", kind="math",
        gold={"answer": str(answer)}, family=family, difficulty=fam.difficulty,
        split=split_of(family, a, b), answer_format="boxed", solution=solution,
    )


def _operand(rng: random.Random, digits: int) -> int:
    return rng.randint(10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1)


def generate(families: list[str], n: int, split: str = "train", seed: int = 0,
             weights: list[float] | None = None, teacher_rate: float = 0.0,
             teacher_families: list[str] | None = None) -> list[Task]:
    """Draw ``n`` tasks from ``families`` (weighted), all in ``split``; deterministic by ``seed``.

    Training draws are with replacement; held-out draws are distinct problems (an evaluation set with
    repeats would overstate its own precision), and asking for more than a family has is an error.
    ``teacher_rate``: the worked solutions of ``teacher_families`` (None: all) come from the imperfect teacher
    (module docstring); the draw itself does not change.
    """
    if not 0.0 <= teacher_rate <= 1.0:
        raise ValueError(f"teacher_rate {teacher_rate} is not in [0, 1]")
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
        erring = teacher_families is None or fam.name in teacher_families
        tasks.append(make_task(fam.name, a, b, teacher_rate if erring else 0.0))
    return tasks


_PROBLEM = re.compile(r"^(\d+)([+*])(\d+)=\?$")


def regenerate(task: Task, seed: int = 0) -> Task | None:
    """The same problem with other numbers: a built-in arithmetic task's family with operands drawn by
    (seed, task id) from the held-out split (never a training problem, never the task itself); None for a task
    that is not one of this generator's (its family unknown or its prompt not ``a op b=?``)."""
    fam = FAMILIES.get(task.family)
    m = _PROBLEM.match(task.prompt or "")
    if fam is None or m is None or m.group(2) != fam.op:
        return None
    rng = random.Random(f"{seed}:twin:{task.id}")
    for _ in range(10_000):
        a, b = _operand(rng, fam.a_digits), _operand(rng, fam.b_digits)
        if split_of(fam.name, a, b) == "heldout" and (a, b) != (int(m.group(1)), int(m.group(3))):
            return make_task(fam.name, a, b)
    return None
