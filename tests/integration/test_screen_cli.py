"""``rlvr screen`` end to end on tiny saved checkpoints, and the p(1-p) arithmetic it reports."""

import json
import math
import shutil

import pytest

from rlvr.models.tiny import build_tiny
from rlvr.monitoring.screen import adv_var, p_star, rank_for_rl, signal_frac, usable_group_size

from test_cli_sft import rlvr

CONFIG = """\
name: t
run_dir: {run_dir}
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 6, split: heldout}}, max_new_tokens: 8}}
stages:
  - {{type: sft, max_steps: 2, data: {{families: [add2], n: 16}}}}
"""


def test_p_star_signal_and_the_usable_group_size():
    assert p_star(8) == pytest.approx(0.083, abs=5e-4)          # the screening paper's p*(8) = 0.083
    assert signal_frac(p_star(8), 8) == pytest.approx(0.5, abs=1e-3)
    # p = 0.5, G = 8: 1 - 2 * 0.5^8 = 0.9921875; 0.25 * 7/8 = 0.21875
    assert signal_frac(0.5, 8) == pytest.approx(0.9921875) and adv_var(0.5, 8) == pytest.approx(0.21875)
    assert signal_frac(0.02, 8) < 0.5 and usable_group_size(0.02) == 35   # 1 - 0.98^35 = 0.507, 0.98^34: 0.497
    assert usable_group_size(0.98) == 35 and usable_group_size(0.5) == 2
    assert usable_group_size(0.0) is None and usable_group_size(1.0) is None


def test_ranked_by_measured_signal_not_pass_at_1():
    rows = [{"pass_at_1": 0.9, "below_threshold": False, "above_threshold": True, "signal_frac_observed": 0.1,
             "entropy": 0.05},
            {"pass_at_1": 0.5, "below_threshold": False, "above_threshold": False, "signal_frac_observed": 0.7,
             "entropy": 0.6},
            {"pass_at_1": 0.6, "below_threshold": False, "above_threshold": False, "signal_frac_observed": 0.4,
             "entropy": 0.9}]
    assert [r["rank"] for r in rank_for_rl(rows)] == [3, 1, 2]


def test_screen_cli_defaults_to_the_runs_heldout_tasks(tiny_dir, tmp_path):
    run = tmp_path / "run"
    (run / "sft" / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(CONFIG.format(run_dir=run, model=tiny_dir))
    shutil.copytree(tiny_dir, run / "sft" / "final")
    build_tiny(run / "sft" / "checkpoints" / "step-000002", size="test", seed=1)
    ckpts = [str(run / "sft" / "final"), str(run / "sft" / "checkpoints" / "step-000002")]
    p = rlvr("screen", *ckpts, "--group-size", "4", "--temperature", "0.8", "--json")
    rows = json.loads(p.stdout)
    assert [r["path"] for r in rows] == ckpts and sorted(r["rank"] for r in rows) == [1, 2]
    for r in rows:
        assert r["n_tasks"] == 6 and r["group_size"] == 4 and r["temperature"] == 0.8   # the run's eval.tasks
        assert r["adv_var"] == pytest.approx(r["p"] * (1 - r["p"]) * 3 / 4)
        assert r["signal_frac"] == pytest.approx(1 - r["p"] ** 4 - (1 - r["p"]) ** 4)
        assert r["below_threshold"] == (r["p"] < 1 - 0.5 ** 0.25) and 0 < r["entropy"] < math.log(200)
    table = rlvr("screen", ckpts[0], "--tasks", "builtin:add2:3", "--group-size", "2").stdout
    assert "RL screen: G = 2" in table and "p*(G) = 0.293" in table


def test_without_a_run_around_the_checkpoint_it_asks_for_tasks(tiny_dir):
    from rlvr.commands.screen import default_tasks
    from rlvr.errors import ConfigError

    with pytest.raises(ConfigError, match="pass --tasks"):
        default_tasks(tiny_dir)
