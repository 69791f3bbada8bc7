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


def test_imperfect_teacher_drops_the_leading_carry_hand_worked():
    # 347*6: 7*6=42, 4*6+4=28, then 3*6+2=20 -> 2082; the teacher forgets the 2: 3*6+0=18 -> 1882
    assert mul_solution(347, 6, drop_last_carry=True) == "7*6=42, 4*6+4=28, 3*6+0=18. \\boxed{1882}"
    assert add_solution(47, 85, drop_last_carry=True) == "7+5=12, 4+8+0=12. \\boxed{122}"
    # no carry to forget: the same, right solution
    assert mul_solution(111, 2, drop_last_carry=True) == mul_solution(111, 2)


def test_imperfect_teacher_errs_systematically_where_a_carry_matters():
    perfect = generate(["add2", "mul31"], 3000, seed=3)
    taught = generate(["add2", "mul31"], 3000, seed=3, teacher_rate=0.7, teacher_families=["mul31"])
    assert [t.id for t in taught] == [t.id for t in perfect]  # the draw does not change
    assert [t.gold for t in taught] == [t.gold for t in perfect]  # nor the verifier's gold answers
    wrong = [t for t in taught if boxed(t.solution) != t.gold["answer"]]
    assert all(t.family == "mul31" for t in wrong)  # add2 keeps the perfect teacher
    carried = [t for t in taught if t.family == "mul31" and "+0=" not in mul_solution(*map(int, t.prompt[:-2].split("*")))
               .split(", ")[-1]]
    assert 0.65 < len(wrong) / len(carried) < 0.75  # ~rate of the problems with a leading carry to forget
    # systematic: the same problem gets the same solution in every draw, so the error is the mode to imitate
    again = {t.id: t.solution for t in generate(["mul31"], 3000, seed=4, teacher_rate=0.7)}
    assert all(again.get(t.id, t.solution) == t.solution for t in taught if t.family == "mul31")


def test_teacher_rate_out_of_range_is_an_error():
    with pytest.raises(ValueError, match="teacher_rate"):
        generate(["add2"], 4, teacher_rate=1.5)


def test_teacher_option_of_the_builtin_source():
    from pydantic import ValidationError

    from rlvr.config.data import BuiltinArithmetic
    from rlvr.data.sources import load_task_source

    src = BuiltinArithmetic(families=["add2", "mul31"], n=400, teacher={"rate": 1.0, "families": ["mul31"]})
    tasks = load_task_source(src)
    wrong = {t.family for t in tasks if boxed(t.solution) != t.gold["answer"]}
    assert wrong == {"mul31"}
    with pytest.raises(ValidationError, match="rate"):
        BuiltinArithmetic(teacher={"rate": 1.5})
    with pytest.raises(ValidationError, match="unknown arithmetic family"):
        BuiltinArithmetic(teacher={"families": ["mul9"]})
    with pytest.raises(ValidationError, match="extra|not permitted|rat"):
        BuiltinArithmetic(teacher={"rat": 0.5})


def test_long_families_write_one_step_per_digit_hand_worked():
    # 12-digit x 1-digit: twelve carried steps from the right, then the product
    t = make_task("mul121", 365117016338, 5)
    assert t.solution == ("8*5=40, 3*5+4=19, 3*5+1=16, 6*5+1=31, 1*5+3=8, 0*5+0=0, 7*5+0=35, 1*5+3=8, 1*5+0=5, "
                          "5*5+0=25, 6*5+2=32, 3*5+3=18. \\boxed{1825585081690}")
    assert t.gold == {"answer": str(365117016338 * 5)} and t.prompt == "365117016338*5=?"
    held = generate(["mul81", "mul121"], 500, split="heldout", seed=1)
    assert {len(t.prompt) for t in held if t.family == "mul81"} == {len("12345678*9=?")}
    assert all(boxed(t.solution) == t.gold["answer"] for t in held)
    assert min(len(t.solution) for t in held if t.family == "mul121") > 110  # long outputs for a byte model
