"""Final-answer extraction: each format, hedges reported, linear time on hostile input."""

import time

import pytest

from rlvr.verifiers.extract import extract_answer, extract_boxed_all, extract_code, normalize_answer


def test_boxed_last_answer_and_balanced_braces():
    ext = extract_answer(r"so \frac{a}{b} gives \boxed{\frac{1}{2}}.")
    assert ext.answer == r"\frac{1}{2}" and ext.candidates == [r"\frac{1}{2}"] and not ext.ambiguous


def test_boxed_same_answer_twice_is_not_ambiguous():
    ext = extract_answer(r"\boxed{ 7 } ... finally $\boxed{7}$")
    assert ext.candidates == ["7"] and not ext.ambiguous


def test_boxed_two_different_answers_reported():
    ext = extract_answer(r"It is \boxed{3} or \boxed{4}")
    assert ext.answer == "4" and ext.candidates == ["3", "4"] and ext.ambiguous


def test_boxed_nested_and_fbox_and_spaced():
    assert extract_answer(r"\boxed{\boxed{3}}").candidates == ["3"]
    assert extract_answer(r"\fbox{5}").answer == "5"
    assert extract_answer(r"answer: \boxed 12 done").answer == "12"
    assert extract_answer(r"\boxedx").answer is None  # not a box


def test_boxed_missing_empty_or_unterminated_is_not_found():
    assert not extract_answer("the answer is 3").found
    assert not extract_answer(r"\boxed{}").found
    ext = extract_answer(r"\boxed{3")
    assert not ext.found and ext.note == "unterminated"


def test_boxed_too_many_boxes_stops_and_flags():
    found, note = extract_boxed_all(r"\boxed{1}" * 100, max_answers=10)
    assert len(found) == 10 and note == "too many"
    assert extract_answer(r"\boxed{1}\boxed{2}" * 40).ambiguous


def test_hash_format():
    ext = extract_answer("work...\n#### 1,234\n", "hash")
    assert ext.answer == "1,234" and not ext.ambiguous
    two = extract_answer("#### 3\nno wait\n#### 4", "hash")
    assert two.candidates == ["3", "4"] and two.ambiguous
    assert not extract_answer("no marker", "hash").found


def test_code_fence_prefers_language_and_reports_several_blocks():
    text = "```python\nprint(1)\n```\nthen\n```sql\nSELECT 1\n```\n```sql\nSELECT 2\n```"
    ext = extract_code(text, "sql")
    assert ext.answer == "SELECT 2" and ext.candidates == ["SELECT 1", "SELECT 2"] and ext.ambiguous
    assert extract_code("```\nSELECT 3\n```", "sql").answer == "SELECT 3"  # untagged fence counts
    assert extract_code("```sqlite\nSELECT 4\n```", "sql").answer == "SELECT 4"  # alias


def test_code_fence_bare_unterminated_and_empty():
    bare = extract_answer("SELECT 1", "code_fence", lang="sql")
    assert bare.answer == "SELECT 1" and bare.note == "bare"
    cut = extract_answer("```python\ndef f():\n    return 1", "code_fence", lang="python")
    assert cut.answer == "def f():\n    return 1" and cut.note == "unterminated fence"
    assert not extract_answer("```sql\n```", "code_fence", lang="sql").found


def test_last_number_and_its_hedge():
    assert extract_answer("costs $1,234.50 total", "last_number").answer == "1234.50"
    hedge = extract_answer("maybe 7\nit is 3 or 4", "last_number")
    assert hedge.ambiguous and hedge.candidates == ["3", "4"]
    assert not extract_answer("no digits", "last_number").found


def test_raw_and_unknown_format():
    assert extract_answer("  42 \n", "raw").answer == "42"
    with pytest.raises(ValueError, match="unknown answer_format"):
        extract_answer("x", "xml")


def test_normalize_answer_only_trims():
    assert normalize_answer("  $ x  +  1 $ ") == "x + 1"


@pytest.mark.parametrize("text", [
    r"\boxed{" * 150_000,          # every box unterminated: scans must not overlap
    r"\boxed{\boxed{" * 80_000,
    "{" * 1_000_000 + r"\boxed{1}",
    "```\n" * 250_000,
    "#### 1\n" * 150_000,
    "1 " * 500_000,
], ids=["unclosed-boxes", "nested-unclosed", "braces-then-box", "fences", "hashes", "numbers"])
def test_megabyte_inputs_are_linear(text):
    t0 = time.perf_counter()
    for fmt in ("boxed", "hash", "code_fence", "last_number"):
        extract_answer(text, fmt)
    assert time.perf_counter() - t0 < 3.0  # quadratic scans take minutes here
