"""The mean score beside the solved fraction: partial credit is reported, never counted as a pass."""

from rlvr.monitoring.evaluate import mean_score
from rlvr.verifiers.base import Verdict


def _v(reward, outcome):
    return Verdict(passed=reward == 1.0, reward=reward, outcome=outcome)


def test_mean_score_averages_judged_rewards_and_leaves_infra_out():
    verdicts = [_v(1.0, "pass"), _v(0.5, "wrong"), _v(0.0, "wrong"), _v(0.0, "infra")]
    assert mean_score(verdicts) == 0.5  # (1 + 0.5 + 0) / 3: the scorer that raised is no score
    assert mean_score([_v(0.0, "infra")]) is None


def test_summary_shows_mean_score_only_where_partial_credit_makes_it_differ(capsys):
    from rlvr.commands.run import print_summary

    row = {"by_family": {}, "mean_length": 4.0, "wall_s": 1.0}
    print_summary({"stages": [{"stage": "sft", "pass_at_1": 0.25, "mean_score": 0.25, **row}]})
    assert "mean score" not in capsys.readouterr().out  # binary scoring: the column would repeat pass@1
    print_summary({"stages": [{"stage": "sft", "pass_at_1": 0.25, "mean_score": 0.4, **row},
                              {"stage": "grpo", "pass_at_1": 0.5, **row}]})
    out = capsys.readouterr().out
    assert "mean score" in out and "0.400" in out
