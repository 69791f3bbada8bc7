r"""The math verifier's relative tolerance is one rule on both paths (fast in-process comparison of plain
numbers, and math-verify in the worker), configurable within [0, 1e-4]; units/percent/degree/notation
normalisation (``rlvr.verifiers.math_units``) on hand-worked inputs."""

from __future__ import annotations

import pytest

from rlvr.data.types import Task
from rlvr.verifiers.math import REL_TOL, MathVerifier
from rlvr.verifiers.math_units import number_notations, split_degrees, split_percent, strip_units


def _verdict(v: MathVerifier, gold: str, answer: str):
    return v.verify(Task(id="t", prompt="?", kind="math", gold={"answer": gold}), rf"\boxed{{{answer}}}")


@pytest.fixture(scope="module")
def default():
    v = MathVerifier(timeout_s=10.0)
    yield v
    v.close()


@pytest.fixture(scope="module")
def loose():
    v = MathVerifier(timeout_s=10.0, rel_tol=1e-4)
    yield v
    v.close()


def test_default_is_no_looser_than_1e_4_and_documented():
    assert REL_TOL == 1e-9 and MathVerifier().rel_tol == REL_TOL
    with pytest.raises(ValueError, match="rel_tol"):
        MathVerifier(rel_tol=2e-4)


@pytest.mark.parametrize("gold, answer, path", [
    ("1", "1.00005", "fast"),  # 5e-5 relative: plain numbers, compared in-process
    (r"\sqrt{4}", "2.0001", "math_verify"),  # 5e-5 relative: a radical, compared by the worker
    (r"\pi", "3.14159", "math_verify"),  # 8.4e-7 relative
])
def test_same_tolerance_on_both_paths(default, loose, gold, answer, path):
    strict, lax = _verdict(default, gold, answer), _verdict(loose, gold, answer)
    assert strict.outcome == "wrong" and lax.outcome == "pass", (strict.details, lax.details)
    assert lax.details["path"] == path


@pytest.mark.parametrize("gold, answer", [
    (r"1.2\times10^{-7}", r"1.3\times10^{-7}"),  # 8% apart: wrong at any allowed tolerance
    (r"1.6\times10^{-19}", r"1.9\times10^{-19}"),
    ("0.000001", r"1.4\times10^{-6}"),
    (r"\frac{\sqrt{4}}{4}", "0.52"),
])
def test_small_magnitudes_stay_apart_even_when_loose(loose, gold, answer):
    assert _verdict(loose, gold, answer).outcome == "wrong"


@pytest.mark.parametrize("gold, answer, expected", [
    ("1000000", "1000000.01", "wrong"),  # 1e-8 relative: equal under the old 1e-8 default (failed before)
    (r"\frac{\sqrt{4}}{4}", "0.5000004", "wrong"),  # the worker path, 8e-7 relative
    ("0.3", "0.30000000000000004", "pass"),  # float noise
    (r"2\pi", "6.283185307179586", "pass"),
    (r"\infty", "0", "wrong"),  # oo - 0 <= tol * oo was read as equal (failed before)
    (r"\infty", r"-\infty", "wrong"),
    (r"-\infty", r"-\infty", "pass"),
])
def test_default_tolerance_cases(default, gold, answer, expected):
    assert _verdict(default, gold, answer).outcome == expected


@pytest.mark.parametrize("text, expected", [
    (r"12\text{ cm}", "12"), (r"\text{12 cm}", "12"), (r"12 \mathrm{m}/\mathrm{s}", "12"), (r"\$12", "12"),
    (r"12 apples", "12"), (r"50\Omega", "50"), (r"50\mu\text{m}", "50"), (r"9.81\frac{\text{m}}{\text{s}^2}", "9.81"),
    ("1.2 million", r"1.2\times10^{6}"),
    (r"2\mu", r"2\mu"), (r"\mathrm{i}", r"\mathrm{i}"), (r"3\pi", r"3\pi"), (r"x + y", "x + y"),  # not units
])
def test_strip_units(text, expected):
    assert strip_units(text) == expected


def test_percent_degrees_and_notations():
    assert split_percent(r"12.5\%") == ("12.5", True) and split_percent("25 percent") == ("25", True)
    assert split_percent("25") == ("25", False)
    assert split_degrees(r"30^\circ") == ("30", r"(30\cdot\frac{\pi}{180})")
    assert split_degrees(r"25^\circ C") == ("25", "")  # a temperature, not an angle
    assert number_notations("3e8") == r"3\times10^{8}" and number_notations("6.02E-23") == r"6.02\times10^{-23}"
    assert number_notations(r"0.\overline{3}") == r"\frac{1}{3}" and number_notations(r"0.8\bar{3}") == r"\frac{5}{6}"
    assert number_notations("1,000,000") == "1000000" and number_notations("e8") == "e8"
