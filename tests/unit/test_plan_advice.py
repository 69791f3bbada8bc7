"""rlvr plan's advice on a screened RL stage: dead groups are named, but a stage is only called skippable when
almost no group carries signal (a minority of informative groups still trains it)."""

from types import SimpleNamespace

from rlvr.commands.plan import _screen_advice


def screened(informative: float) -> dict:
    return {"p": 0.6, "entropy": 0.05, "signal_frac_observed": informative, "below_threshold": False,
            "above_threshold": False, "temperature_fix": 1.25, "usable_group_size": 8, "p_star": 0.083}


def advice(informative: float) -> str:
    st = SimpleNamespace(name="grpo", sampling=SimpleNamespace(group_size=8, temperature=1.0))
    recipe = SimpleNamespace(stages=[SimpleNamespace(type="sft"), st])
    return _screen_advice(screened(informative), recipe, st, "dpo")


def test_a_third_of_groups_informative_is_no_reason_to_skip_the_stage():
    text = advice(0.33)
    assert "expect dead groups" in text and "raise the temperature to 1.25" in text
    assert "skip the stage" not in text and "33% informative groups still carry signal" in text


def test_almost_no_informative_groups_suggests_skipping():
    assert advice(0.05).endswith("raise the temperature to 1.25 or skip the stage")


def test_most_groups_informative_is_usable():
    assert advice(0.8).endswith("usable for RL")
