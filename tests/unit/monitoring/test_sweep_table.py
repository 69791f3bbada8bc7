"""A sweep's table from its runs' figures: means, per-seed values, paired differences by hand."""

import json

import pytest

from rlvr.monitoring.sweep_table import build_table, markdown, read_run


def run(p, alone=True):
    return {"pass_at_1": p, "steps": 5, "train_s": 1.0, "sequences": 100, "wall_s": 2.0, "alone": alone,
            "time_cap": False, "zero_var_frac": 0.5, "entropy": 1.0, "kl": 0.01}


def test_paired_differences_pair_by_seed_within_the_other_keys():
    keys, values, seeds = ["loss", "lr"], [["grpo", "dr"], ["1", "2"]], [0, 1, 2]
    p = {("grpo", "1"): [0.1, 0.2, 0.3], ("dr", "1"): [0.2, 0.4, 0.6],
         ("grpo", "2"): [0.5, 0.5, 0.5], ("dr", "2"): [0.5, 0.6, 0.5]}
    runs = {(pt, s): run(v[s], alone=pt != ("dr", "2")) for pt, v in p.items() for s in seeds}
    t = build_table(keys, values, seeds, runs)
    cells = {tuple(c["values"].values()): c for c in t["cells"]}
    assert [tuple(c["values"].values()) for c in t["cells"]] == [("grpo", "1"), ("grpo", "2"), ("dr", "1"), ("dr", "2")]
    c = cells[("dr", "1")]
    assert c["per_seed"] == {"0": 0.2, "1": 0.4, "2": 0.6} and c["mean"] == pytest.approx(0.4)
    # vs (grpo, 1): diffs 0.1, 0.2, 0.3 -> mean 0.2, sd 0.1, half 4.3027 * 0.1 / sqrt(3) = 0.24841
    d = c["vs_first"]["loss"]
    assert d["reference"] == "grpo" and d["diffs"] == pytest.approx([0.1, 0.2, 0.3])
    assert d["mean"] == pytest.approx(0.2) and d["half_width"] == pytest.approx(0.248414, abs=1e-5)
    # (dr, 2) vs (dr, 1) on lr: 0.3, 0.2, -0.1; vs (grpo, 2) on loss: 0, 0.1, 0
    assert cells[("dr", "2")]["vs_first"]["lr"]["diffs"] == pytest.approx([0.3, 0.2, -0.1])
    assert cells[("dr", "2")]["vs_first"]["loss"]["diffs"] == pytest.approx([0.0, 0.1, 0.0])
    assert cells[("grpo", "1")]["vs_first"] == {}  # the reference of both keys
    assert cells[("dr", "1")]["wall_comparable"] and not cells[("dr", "2")]["wall_comparable"]
    md = markdown(t)
    assert "| dr | 1 | 40.0% | 20.0% / 40.0% / 60.0% | +20.0 [-4.8, +44.8] | (reference) |" in md
    assert "2*" in md.splitlines()[-1]  # the wall time of a cell that did not run alone is flagged


def test_a_missing_seed_is_left_out_of_the_pairs():
    runs = {(("a",), 0): run(0.1), (("a",), 1): run(0.3), (("b",), 0): run(0.2)}
    t = build_table(["k"], [["a", "b"]], [0, 1], runs)
    b = t["cells"][1]
    assert b["per_seed"] == {"0": 0.2, "1": None} and b["runs"] == 1
    assert b["vs_first"]["k"]["diffs"] == pytest.approx([0.1]) and b["vs_first"]["k"]["half_width"] is None
    assert "one seed: no interval" in markdown(t)


def test_a_sampled_metric_is_tabled_and_paired_like_pass_at_1(tmp_path):
    """``--metric pass_at_8_sampled``: the per-seed values, means and pairs are that figure of each run's summary
    row, not its greedy pass@1."""
    def sampled(p1, p8):
        return {**run(p1), "figures": {"pass_at_1": p1, "pass_at_8_sampled": p8}}

    runs = {(("a",), 0): sampled(0.5, 0.7), (("a",), 1): sampled(0.5, 0.8),
            (("b",), 0): sampled(0.9, 0.75), (("b",), 1): sampled(0.1, 0.95)}
    t = build_table(["k"], [["a", "b"]], [0, 1], runs, "pass_at_8_sampled")
    assert t["metric"] == "pass_at_8_sampled"
    assert t["cells"][1]["per_seed"] == {"0": 0.75, "1": 0.95}
    assert t["cells"][1]["vs_first"]["k"]["diffs"] == pytest.approx([0.05, 0.15])
    assert "pass@8 (sampled) mean" in markdown(t)
    summary = {"stages": [{"stage": "rl", "pass_at_1": 0.5, "pass_at_1_sampled": 0.4, "pass_at_8_sampled": 0.7,
                           "mean_score": 0.55, "ece_agreement": 0.1, "wall_s": 1.0}]}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    r = read_run(tmp_path, ["rl"])
    assert r["figures"] == {"pass_at_1": 0.5, "pass_at_1_sampled": 0.4, "pass_at_8_sampled": 0.7, "mean_score": 0.55}


def test_read_run_takes_the_last_stage_row_and_the_rl_stage_health(tmp_path):
    summary = {"stages": [
        {"stage": "base", "pass_at_1": 0.9, "wall_s": 1.0},
        {"stage": "sft", "pass_at_1": 0.1, "steps": 3, "train_s": 1.5, "wall_s": 2.0},
        {"stage": "grpo", "pass_at_1": 0.25, "steps": 4, "train_s": 2.5, "wall_s": 3.0},
        {"stage": "sft-control@grpo", "pass_at_1": 0.5, "control_for": "grpo", "wall_s": 9.0}]}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "grpo").mkdir()
    rows = [{"step": 0, "event": "start"},
            {"step": 1, "rollout/zero_var_frac": 0.5, "rollout/entropy": 2.0, "kl/ref": 0.1, "train/sequences": 30,
             "rollout/truncation_rate": 0.5, "rollout/length_mean": 100.0},
            {"step": 2, "rollout/zero_var_frac": 0.25, "rollout/entropy": 1.5, "train/sequences": 40,
             "rollout/groups_drawn": 12, "rollout/truncation_rate": 0.25, "rollout/length_mean": 90.0},
            {"step": 2, "eval/pass_at_1": 0.25}]
    (tmp_path / "grpo" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = read_run(tmp_path, ["sft", "grpo"])
    assert r["pass_at_1"] == 0.25 and r["stage"] == "grpo" and r["steps"] == 7 and r["train_s"] == 4.0
    assert r["wall_s"] == 5.0 and not r["alone"]  # no marker: not known to have run alone
    assert (r["zero_var_frac"], r["entropy"], r["kl"], r["sequences"], r["groups_drawn"]) == (0.25, 1.5, 0.1, 70, 12)
    assert r["entropy_key"] == "rollout/entropy" and r["rl_stage"] == "grpo"
    # over the whole stage, not its last step: (0.5 + 0.25) / 2 of the samples cut, (100 + 90) / 2 tokens long
    assert (r["truncated"], r["length"]) == (0.375, 95.0)
    table = build_table(["k"], [["a"]], [0], {(("a",), 0): r})
    assert (table["cells"][0]["truncated"], table["cells"][0]["length"]) == (0.375, 95.0)
    assert "| a | 25.0% | 25.0% | (reference) | 0.25 | 1.500 | 0.1000 | 37.5% | 95.0 | 7 |" in markdown(table)


def test_held_out_curves_per_cell_are_the_seed_means_at_the_steps_every_seed_evaluated(tmp_path):
    """The curve shows where a cell's held-out figure flattens: the last stage that logs eval/pass_at_1."""
    from rlvr.monitoring.sweep_table import plot_curves

    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "metrics.jsonl").write_text(json.dumps({"step": 5, "eval/pass_at_1": 0.9}) + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"stages": [{"stage": "rl", "pass_at_1": 0.5}]}))
    (tmp_path / "rl").mkdir()
    rows = [{"step": 0, "eval/pass_at_1": 0.2}, {"step": 1, "rollout/zero_var_frac": 0.5},
            {"step": 10, "eval/pass_at_1": 0.4}, {"step": 20, "eval/pass_at_1": 0.5}]
    (tmp_path / "rl" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert read_run(tmp_path, ["sft", "rl"])["curve"] == [[0, 0.2], [10, 0.4], [20, 0.5]]
    runs = {(("a",), 0): {**run(0.5), "curve": [[0, 0.2], [10, 0.4], [20, 0.5]]},
            (("a",), 1): {**run(0.3), "curve": [[0, 0.2], [10, 0.2]]},      # stopped before step 20
            (("b",), 0): run(0.2), (("b",), 1): run(0.2)}                       # no curve logged
    t = build_table(["k"], [["a", "b"]], [0, 1], runs)
    a, b = t["cells"]
    assert a["curve"]["steps"] == [0, 10] and a["curve"]["mean"] == pytest.approx([0.2, 0.3])
    assert a["curve"]["per_seed"] == {"0": [0.2, 0.4], "1": [0.2, 0.2]}
    assert b["curve"] is None
    pytest.importorskip("matplotlib")
    assert plot_curves(t, tmp_path / "curves.png") == tmp_path / "curves.png"
    assert (tmp_path / "curves.png").stat().st_size > 1000
    assert plot_curves(build_table(["k"], [["b"]], [0, 1], runs), tmp_path / "none.png") is None
