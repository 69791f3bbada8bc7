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


@pytest.mark.parametrize("name,config", [("chain_sum", {"min_terms": 2, "max_terms": 5, "min_digits": 1, "max_digits": 3}),
                                         ("letter_counting", {"min_words": 1, "max_words": 9})])
def test_worked_demonstrations_end_in_an_answer_the_scorer_passes(name, config):
    mod = _demos()
    lines = list(mod.demo_lines(name, config, n=40, heldout=10, seed=3))
    assert [ln["split"] for ln in lines].count("heldout") == 10
    assert len({ln["prompt"] for ln in lines}) == 50  # held-out demonstrations share no question with training
    from rlvr.data.reasoning_gym import split_entries

    entries = {e["question"]: e for e in split_entries(name, config, 40, 3, "train")}
    v = ReasoningGymVerifier()
    for i, ln in enumerate(ln for ln in lines if ln["split"] == "train"):
        assert "\n" in ln["solution"]  # worked: steps, then the answer on its own last line
        verdict = v.verify(to_task(name, config, entries[ln["prompt"]], i, "train"), ln["solution"])
        assert verdict.passed and verdict.reward == 1.0, (ln, verdict)


def test_a_dataset_without_a_worked_form_gets_its_answer_alone():
    lines = list(_demos().demo_lines("spell_backward", {}, n=5, heldout=2, seed=0))
    assert all("\n" not in ln["solution"] and ln["solution"] == ln["answer"] for ln in lines)


@pytest.mark.parametrize("path", sorted(FOLDER.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_recipe_in_the_folder_loads(path):
    r = load_recipe(path)
    sft, rl = r.stages[0], r.stages[-1]
    assert sft.patience > 0  # SFT stops on held-out patience, not on a time cap
    assert rl.data.config == r.eval.tasks.config != {}  # RL trains on the target configuration it is scored on
