"""The plan's rules table (rlvr.monitoring.plan_rules): each rule fires on the figures it names, in order, and a
stage no rule stops runs with its figures as the reason."""

import pytest

from rlvr.config.plan import PlanConfig
from rlvr.monitoring.intervals import wilson_lower
from rlvr.monitoring.plan_rules import RULES, decide, facts, sft_plateau
from rlvr.monitoring.screen import p_star
from rlvr.stages import STAGES, stage_kind


def screen(p, signal, entropy=1.0, g=8, above=False):
    return {"p": p, "p_star": p_star(g), "signal_frac_observed": signal, "entropy": entropy, "temperature": 1.0,
            "group_size": g, "above_threshold": above}


CFG = PlanConfig(target=0.9)


def test_target_met_skips_rl_and_preference_but_not_sft():
    f = {"pass_at_1": 0.95, "screen": screen(0.5, 0.9)}
    for role in ("reinforce", "prefer", "distil"):
        d = decide("x", role, f, CFG)
        assert (d["decision"], d["rule"]) == ("skip", "target_met") and "0.950 >= target 0.900" in d["reason"]
    assert decide("x", "demonstrate", f, CFG)["decision"] == "run"
    assert decide("x", "reinforce", {**f, "pass_at_1": 0.89}, CFG)["rule"] != "target_met"
    assert decide("x", "reinforce", f, PlanConfig())["decision"] == "run"  # no target: nothing is met


def test_the_target_is_met_when_the_held_out_figures_lower_bound_meets_it():
    # Wilson 95% lower bound by hand: p 0.9025, n 400 -> (0.9025 + 0.0048 - 1.96 * sqrt(0.9025 * 0.0975 / 400
    # + 1.96² / 640000)) / (1 + 1.96² / 400) = 0.8695 < 0.9: at the target by the point estimate only
    assert wilson_lower(0.9025, 400) == pytest.approx(0.8695, abs=2e-4)
    at = {"pass_at_1": 0.9025, "heldout_n": 400, "screen": screen(0.5, 0.9)}
    d = decide("grpo", "reinforce", at, CFG)
    assert d["decision"] == "run" and "95% lower bound 0.869" in d["reason"]
    # 0.95 of 400: lower bound 0.924 -> met, the bound in the reason
    d = decide("grpo", "reinforce", {**at, "pass_at_1": 0.95}, CFG)
    assert d["rule"] == "target_met" and "on 400 tasks, 95% lower bound 0.924 >= target 0.900" in d["reason"]
    # 0.92 of 50 tasks: too few to say
    assert decide("grpo", "reinforce", {**at, "pass_at_1": 0.92, "heldout_n": 50}, CFG)["decision"] == "run"


def test_rl_below_p_star_is_replaced_by_sft_or_distillation():
    f = {"screen": screen(0.02, 0.05), "demonstrated": False}
    d = decide("grpo", "reinforce", f, CFG)
    assert (d["decision"], d["rule"]) == ("replace", "sft_before_rl") and d["instead"].startswith("sft")
    assert d["instead"].endswith("then this stage")  # SFT before RL, not SFT instead of it
    assert "p 0.020 < p*(G) 0.083" in d["reason"]
    assert "continue" in decide("grpo", "reinforce", {**f, "demonstrated": True}, CFG)["instead"]
    d = decide("grpo", "reinforce", f, PlanConfig(teacher="big/model"))
    assert d["instead"].startswith("distill") and "big/model" in d["instead"]


def test_sft_not_at_its_plateau_replaces_the_next_stage():
    curve = sft_plateau([{"heldout/loss": 2.0}, {"heldout/loss": 1.5}, {"heldout/loss": 1.0}], 0.02)
    assert curve == {"plateaued": False, "last": 1.0, "best": 1.5, "gain": pytest.approx(1 / 3)}
    f = {"sft": curve, "screen": screen(0.5, 0.9), "demonstrated": True}
    for role in ("reinforce", "prefer"):
        d = decide("next", role, f, CFG)
        assert (d["decision"], d["rule"]) == ("replace", "sft_not_plateaued") and "continue" in d["instead"]
    flat = sft_plateau([{"heldout/loss": 1.0}, {"loss": 3}, {"heldout/loss": 0.995}], 0.02)
    assert flat["plateaued"] and decide("next", "reinforce", {**f, "sft": flat}, CFG)["decision"] == "run"
    assert sft_plateau([{"heldout/loss": 2.0}, {"heldout/loss": 1.0}], 0.02, early_stop=True)["plateaued"]
    assert sft_plateau([{"heldout/loss": 2.0}], 0.02) is None  # one point is no curve


def test_small_model_with_a_teacher_distils_and_dead_groups_leave_rl():
    live = {"screen": screen(0.5, 0.9), "params": 1_000_000, "pass_at_1": 0.6, "teacher_pass_at_1": 0.85}
    d = decide("rl", "reinforce", {**live, "teacher_params": 20_000_000}, PlanConfig(teacher="t"))
    assert d["rule"] == "small_with_teacher" and "0.850 closes >= 0.5 of the model's gap (0.600 -> needs 0.800)" in \
        d["reason"]
    assert decide("rl", "reinforce", {**live, "teacher_params": 5_000_000}, PlanConfig(teacher="t"))["decision"] == "run"
    # a teacher not far enough ahead caps the student: RL runs (0.733 student, 0.81 teacher: needs 0.867)
    weak = {**live, "teacher_params": 20_000_000, "pass_at_1": 0.733, "teacher_pass_at_1": 0.81}
    assert decide("rl", "reinforce", weak, PlanConfig(teacher="t"))["decision"] == "run"
    assert decide("rl", "reinforce", weak, PlanConfig(teacher="t", teacher_margin=0.2))["rule"] == "small_with_teacher"
    # the teacher's figure unknown: no size argument alone
    unknown = {**live, "teacher_params": 20_000_000, "teacher_pass_at_1": None}
    assert decide("rl", "reinforce", unknown, PlanConfig(teacher="t"))["decision"] == "run"
    dead = {"screen": screen(0.97, 0.02, above=True)}
    d = decide("rl", "reinforce", dead, CFG)
    assert (d["rule"], d["instead"]) == ("no_signal", "rft (rejection sampling)") and "all pass" in d["reason"]


def test_preference_before_rl_is_skipped_only_when_rl_already_has_signal():
    f = {"later_reinforce": True, "screen": screen(0.5, 0.8)}
    assert decide("dpo", "prefer", f, CFG)["rule"] == "rl_has_signal"
    assert decide("dpo", "prefer", {**f, "screen": screen(0.1, 0.3)}, CFG)["decision"] == "run"
    assert decide("dpo", "prefer", {**f, "later_reinforce": False}, CFG)["decision"] == "run"


def test_no_verifier_offers_judge_scored_pairs():
    d = decide("rl", "reinforce", {"verifiable": False}, CFG)
    assert d["decision"] == "replace" and "judge-scored pairs" in d["instead"] and "RLAIF" in d["instead"]


def test_the_rules_read_the_stage_tables_roles():
    roles = {k.plan_role for k in STAGES.values()}
    assert {r for rule in RULES for r in rule.roles} <= roles
    assert all(rule.source for rule in RULES) and len({r.name for r in RULES}) == len(RULES)
    from rlvr.config.sft import SFTStage
    from rlvr.config.rl import RLStage
    from rlvr.config.preference import PreferenceStage

    stages = [SFTStage(), PreferenceStage(), RLStage()]
    f = facts(lambda s: stage_kind(s).plan_role, stages, 1)
    assert f == {"demonstrated": True, "later_reinforce": True}


def test_a_stage_is_verifiable_when_its_tasks_have_gold_or_a_python_reward_scores_them(tmp_path):
    from rlvr.config.rl import RLStage
    from rlvr.monitoring.plan_facts import verifiable

    f = tmp_path / "prose.jsonl"
    f.write_text('{"prompt": "Write a haiku about rain.", "kind": "math"}\n')  # no answer: nothing to check
    assert verifiable(RLStage())  # built-in arithmetic: verifier and gold
    prose = RLStage.model_validate({"data": {"type": "jsonl", "path": str(f)}})
    assert not verifiable(prose)
    assert decide("rl", "reinforce", {"verifiable": verifiable(prose)}, CFG)["rule"] == "no_verifier"
    scored = RLStage.model_validate({"data": {"type": "jsonl", "path": str(f)},
                                     "rewards": [{"name": "python", "function": "m:f"}]})
    assert verifiable(scored)
