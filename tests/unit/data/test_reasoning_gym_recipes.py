"""The reasoning-gym recipes: their worked demonstrations are right by the dataset's own scorer, and every
recipe in the folder loads."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from rlvr.config.load import load_recipe  # noqa: E402
from rlvr.data.reasoning_gym import to_task  # noqa: E402
from rlvr.verifiers.reasoning_gym import ReasoningGymVerifier  # noqa: E402

FOLDER = Path(__file__).resolve().parents[3] / "recipes" / "reasoning-gym"


def _demos():
    spec = importlib.util.spec_from_file_location("rg_demos", FOLDER / "demos.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CONFIGS = {"chain_sum": {"min_terms": 2, "max_terms": 5, "min_digits": 1, "max_digits": 3},
           "letter_counting": {"min_words": 1, "max_words": 9},
           "spell_backward": {"min_word_len": 3, "max_word_len": 8},
           "word_sequence_reversal": {"min_words": 2, "max_words": 7}}


def _verdicts(name, slip_rate):
    """(demonstration, verdict of the dataset's scorer) for 40 train demonstrations of ``name``."""
    from rlvr.data.reasoning_gym import split_entries

    config = CONFIGS[name]
    lines = list(_demos().demo_lines(name, config, n=40, heldout=10, seed=3, slip_rate=slip_rate))
    assert [ln["split"] for ln in lines].count("heldout") == 10
    assert len({ln["prompt"] for ln in lines}) == 50  # held-out demonstrations share no question with training
    entries = {e["question"]: e for e in split_entries(name, config, 40, 3, "train")}
    v = ReasoningGymVerifier()
    return [(ln, v.verify(to_task(name, config, entries[ln["prompt"]], i, "train"), ln["solution"]))
            for i, ln in enumerate(ln for ln in lines if ln["split"] == "train")]


def test_every_worked_form_is_tested():
    assert set(_demos().WORKED) == set(CONFIGS)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_worked_demonstrations_end_in_an_answer_the_scorer_passes(name):
    for ln, verdict in _verdicts(name, slip_rate=0.0):
        assert verdict.passed and verdict.reward == 1.0, (ln, verdict)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_imperfect_teacher_fails_the_scorer_where_its_misconception_applies(name):
    """At slip rate 1 the teacher falls for its misconception wherever it applies: some demonstrations fail the
    scorer, the rest (where it does not apply) still pass, and the same question gets the same demonstration."""
    slipped = _verdicts(name, slip_rate=1.0)
    failed = [ln for ln, verdict in slipped if not verdict.passed]
    assert 0 < len(failed) < len(slipped), name
    assert [ln for ln, _ in slipped] == [ln for ln, _ in _verdicts(name, slip_rate=1.0)]


def test_the_slip_rate_is_the_fraction_of_applicable_questions_the_teacher_gets_wrong():
    mod = _demos()
    config = {"min_terms": 3, "max_terms": 5, "min_digits": 1, "max_digits": 1}
    wrong = [ln["solution"].rsplit("\n", 1)[-1] != ln["answer"] for ln in
             mod.demo_lines("chain_sum", config, n=2000, heldout=0, seed=0, slip_rate=0.5)]
    always = [ln["solution"].rsplit("\n", 1)[-1] != ln["answer"] for ln in
              mod.demo_lines("chain_sum", config, n=2000, heldout=0, seed=0, slip_rate=1.0)]
    assert all(a for w, a in zip(wrong, always) if w)  # a slip only where the misconception applies
    assert 0.4 < sum(wrong) / sum(always) < 0.6


def test_a_dataset_without_a_worked_form_gets_its_answer_alone():
    lines = list(_demos().demo_lines("gcd", {}, n=5, heldout=2, seed=0))
    assert all("\n" not in ln["solution"] and ln["solution"] == ln["answer"] for ln in lines)
    with pytest.raises(SystemExit, match="needs a worked form for gcd"):
        list(_demos().demo_lines("gcd", {}, n=5, heldout=2, seed=0, slip_rate=0.5))


@pytest.mark.parametrize("path", sorted(FOLDER.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_recipe_in_the_folder_loads(path):
    r = load_recipe(path)
    sft, rl = r.stages[0], r.stages[-1]
    assert sft.patience > 0  # SFT stops on held-out patience, not on a time cap
    assert rl.data.config == r.eval.tasks.config != {}  # RL trains on the target configuration it is scored on
