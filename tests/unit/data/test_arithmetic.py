"""Built-in arithmetic tasks: worked solutions are right, splits are disjoint, draws are deterministic."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.data.arithmetic import FAMILIES, add_solution, generate, make_task, mul_solution, split_of


def boxed(s):
    return re.findall(r"\\boxed\{(\d+)\}", s)[-1]


def test_addition_solution_hand_worked():
    # 47+85: 7+5=12 (write 2, carry 1); 4+8+1=13 (write 3, carry 1) -> 132
    assert add_solution(47, 85) == "7+5=12, 4+8+1=13. \\boxed{132}"


def test_multiplication_solution_hand_worked():
    # 47*6: 7*6=42 (write 2, carry 4); 4*6+4=28 -> 282
    assert mul_solution(47, 6) == "7*6=42, 4*6+4=28. \\boxed{282}"
    # 24*17: 24*7=168, 24*1=24 shifted -> 168+240=408
    assert mul_solution(24, 17) == "24*7=168, 24*1=24, 168+240=408. \\boxed{408}"


@given(st.sampled_from(sorted(FAMILIES)), st.integers(0, 999), st.integers(0, 99))
@settings(max_examples=200, deadline=None)
def test_every_solution_boxes_the_true_answer(fam, a, b):
    t = make_task(fam, a, b)
    assert boxed(t.solution) == t.gold["answer"]
    assert "answer" not in t.policy_messages()[0]["content"]


def test_splits_are_disjoint_and_a_pure_function_of_the_problem():
    train = generate(["add2", "mul21"], 3000, split="train", seed=0)
    held = generate(["add2", "mul21"], 300, split="heldout", seed=0)
    assert not ({t.id for t in train} & {t.id for t in held})
    assert all(split_of(t.family, *map(int, re.findall(r"\d+", t.prompt))) == "heldout" for t in held)
    # another seed draws other problems, never crossing the partition
    assert not ({t.id for t in generate(["add2"], 3000, "train", seed=9)} & {t.id for t in held})


def test_generation_is_deterministic_and_weighted():
    a = generate(["add2", "add3"], 50, seed=5, weights=[1, 0])
    assert [t.id for t in a] == [t.id for t in generate(["add2", "add3"], 50, seed=5, weights=[1, 0])]
    assert {t.family for t in a} == {"add2"}


def test_unknown_family_is_named():
    with pytest.raises(ValueError, match="add9"):
        generate(["add9"], 1)


def test_heldout_sets_never_repeat_a_problem():
    held = generate(["add2", "mul31"], 500, split="heldout", seed=3)
    assert len({t.id for t in held}) == 500
    with pytest.raises(ValueError, match="distinct heldout problems"):
        generate(["mul21"], 200, split="heldout")  # mul21 has ~80 held-out problems in all
