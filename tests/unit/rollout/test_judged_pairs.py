"""Judge-scored preference pairs (pairs.scorer: judge, RLAIF): a model judge ranks each task's samples, chosen is
scored above rejected, an unscored sample is never paired, and an unprobed judge is refused before any work."""

import json

import pytest
from pydantic import ValidationError

from rlvr.commands.preflight import check_judges
from rlvr.config.data import BuiltinArithmetic
from rlvr.config.preference import PairBuilder, PreferenceStage
from rlvr.models.judge import checkpoint_hash, probe_report_path, rubric_hash
from rlvr.models.tiny import build_tiny
from rlvr.pipeline import _label
from rlvr.rollout.pairs import build_pairs, judge_scorer

RUBRIC = "Score 9 for a short answer."


class ScriptedJudge:
    """A judge for tests: shorter is better; a completion holding '1' gets no score (None: it did not answer)."""

    def __init__(self):
        self.seen = []

    def score(self, prompts, completions):
        self.seen += list(zip(prompts, completions))
        return [None if "1" in c else 1.0 / (1 + len(c)) for c in completions]


def test_a_model_judge_decides_chosen_and_rejected():
    model, tok = build_tiny(size="test", seed=0)
    cfg = PairBuilder(tasks=BuiltinArithmetic(families=["add2"], n=12, seed=3), samples_per_task=4, pairs_per_task=2,
                      max_new_tokens=6, heldout_frac=0.0, scorer="judge", judge_model="unused", rubric=RUBRIC)
    judge = ScriptedJudge()
    ps = build_pairs(model, tok, cfg, judge=None, seed=0, scorer=judge_scorer(None, RUBRIC, tok, judge=judge))
    assert ps.train and len(judge.seen) == 12 * 4 and all(p for p, _ in judge.seen)  # every sample, with its prompt
    for p in ps.train:
        assert "1" not in p.chosen and "1" not in p.rejected  # unscored: neither chosen nor rejected
        assert p.chosen_score == 1 / (1 + len(p.chosen)) and p.chosen_score > p.rejected_score
        assert len(p.chosen) < len(p.rejected) and p.margin == pytest.approx(p.chosen_score - p.rejected_score)
    assert ps.stats["scorer"] == "judge" and ps.stats["reward_source"] == "RLAIF (model-judged)"


def test_judge_fields_are_checked_where_they_are_set():
    with pytest.raises(ValidationError, match="scorer: judge needs judge_model"):
        PairBuilder(scorer="judge", judge_model="j")
    with pytest.raises(ValidationError, match="only for scorer: judge"):
        PairBuilder(rubric=RUBRIC)


def stage(judge_dir):
    return PreferenceStage(pairs=PairBuilder(scorer="judge", judge_model=str(judge_dir), rubric=RUBRIC))


def test_an_unprobed_judge_is_refused_and_a_passing_probe_admits_it(tmp_path):
    judge = tmp_path / "judge"
    judge.mkdir()
    (judge / "config.json").write_text("{}")
    st = stage(judge)
    errors = [p for p in check_judges(3, st, allow_unprobed=False) if not p.warning]
    (e,) = errors
    assert e.key == "stages.3.pairs" and "no probe report" in e.message and "rlvr probe judge" in e.message
    labels = [p.message for p in check_judges(3, st, allow_unprobed=True)]
    assert all(p.warning for p in check_judges(3, st, allow_unprobed=True)) and "RLAIF" in labels[0]
    report = {"judge_hash": checkpoint_hash(judge), "rubric_hash": rubric_hash(RUBRIC), "passed": False,
              "attacks": [{"attack": "flattery", "moves_score": True}]}
    probe_report_path(judge, RUBRIC).write_text(json.dumps(report))
    (e,) = [p for p in check_judges(0, st, False) if not p.warning]
    assert "failed its probe" in e.message and "flattery" in e.message
    probe_report_path(judge, RUBRIC).write_text(json.dumps({**report, "passed": True}))
    assert all(p.warning for p in check_judges(0, st, False))
    assert check_judges(0, PreferenceStage(), False) == []  # verifier-scored pairs: no judge, no label


def test_a_stage_on_judge_scored_pairs_is_labelled_rlaif_in_the_summary(tmp_path):
    assert _label({}, stage(tmp_path))["reward_source"] == "RLAIF (model-judged)"
    assert "reward_source" not in _label({}, PreferenceStage())


def test_rlvr_validate_refuses_an_unprobed_pair_judge_naming_the_file(tiny_dir, tmp_path, rlvr_cli):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"""\
model: {{path: {tiny_dir}}}
stages:
  - type: dpo
    pairs: {{scorer: judge, judge_model: {tiny_dir}, rubric: "{RUBRIC}", tasks: {{families: [add2], n: 4}}}}
""")
    code, out, err = rlvr_cli("validate", recipe)
    assert code == 2 and "stages.0.pairs" in err and "rlvr probe judge" in err and "r.yaml:4" in err
    code, out, err = rlvr_cli("validate", recipe, "--allow-unprobed-judge")
    assert code == 0 and "RLAIF" in out + err and "unprobed" in out + err
