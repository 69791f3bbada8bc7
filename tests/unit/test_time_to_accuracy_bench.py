"""bench/time_to_accuracy.py's pure parts: the window of checkpoints, curves read at the marks, the seeds' mean,
the acceptance lines, the JSON's shape, and TRL's reward adapter = rlvr's reasoning-gym reward."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


curves = _load("_accuracy_curves")


def test_the_window_keeps_the_checkpoints_before_the_end_and_the_first_at_or_after_it():
    ck = [[41.0, "d", 40, 400], [10.2, "a", 10, 100], [20.1, "b", 20, 200], [30.4, "c", 30, 300]]
    assert [c[1] for c in curves.in_window(ck, 30)] == ["a", "b", "c"]
    assert [c[1] for c in curves.in_window(ck, 25)] == ["a", "b", "c"]
    assert curves.window_summary(ck, 30, 16) == {"seconds": 30.4, "steps": 30, "rows_trained": 300, "rows_sampled": 480}
    assert curves.window_summary([], 30, 16)["steps"] == 0


def test_a_curve_starts_at_the_sft_score_and_reads_at_the_marks():
    c = curves.curve(0.25, [(20.3, 0.5), (10.1, 0.3), (31.0, 0.6)])
    assert c == [[0.0, 0.25], [10.1, 0.3], [20.3, 0.5], [31.0, 0.6]]
    assert curves.at_marks(c, 10, 30) == [[0, 0.25], [10, 0.3], [20, 0.5], [30, 0.6]]
    # a run whose first step ended after two marks: mark 10 keeps the SFT score, its 21 s checkpoint is mark 20's
    late = curves.curve(0.25, [(21.0, 0.4), (30.2, 0.45)])
    assert curves.at_marks(late, 10, 30) == [[0, 0.25], [10, 0.25], [20, 0.4], [30, 0.45]]
    # the last checkpoint of a slow step (saved at 44 s for the 30 s end) still counts at the last mark
    assert curves.at_marks(curves.curve(0.25, [(44.0, 0.5)]), 10, 30)[-1] == [30, 0.5]


def test_mean_and_acceptance_lines():
    r = [[[0, 0.2], [10, 0.5], [20, 0.6]], [[0, 0.2], [10, 0.3], [20, 0.6]]]
    t = [[[0, 0.2], [10, 0.25], [20, 0.35]], [[0, 0.2], [10, 0.25], [20, 0.3]]]
    mean = {"rlvr": curves.mean_curve(r), "trl": curves.mean_curve(t)}
    assert mean["rlvr"] == [[0, 0.2], [10, 0.4], [20, 0.6]] and mean["trl"][-1] == [20, 0.325]
    acc = curves.acceptance(mean)
    assert acc["rlvr_at_least_trl_every_mark"] and acc["rlvr_reaches_trl_final_s"] == 10
    assert acc["reach_ratio"] == 0.5 and acc["window_long_enough"] and acc["met"]
    assert acc["trl_gain_over_sft"] == pytest.approx(0.125)
    # TRL gains under 5 points: the window was too short, whatever rlvr did
    flat = {"rlvr": mean["rlvr"], "trl": [[0, 0.2], [10, 0.22], [20, 0.24]]}
    assert not curves.acceptance(flat)["met"] and not curves.acceptance(flat)["window_long_enough"]
    # rlvr below TRL at one mark, never reaching TRL's final score
    worse = {"rlvr": [[0, 0.2], [10, 0.2], [20, 0.3]], "trl": mean["trl"]}
    acc = curves.acceptance(worse)
    assert not acc["rlvr_at_least_trl_every_mark"] and acc["reach_ratio"] is None and not acc["met"]


def test_assembled_json_has_both_curves_per_seed_with_each_runs_window():
    def run(times):
        return {"checkpoints": [[s, f"{s}", int(s), int(s) * 10] for s in times], "rss": {"peak_mb": 400.0},
                "settings": {"precision": "fp32"}}
    runs = {"0": {"rlvr": run([10.1, 20.2, 30.1, 40.0]), "trl": run([12.0, 31.0])},
            "1": {"trl": run([10.5, 20.5, 30.5]), "rlvr": run([10.0, 20.0, 30.0])}}
    scores = {p: float(p) / 100 for sides in runs.values() for r in sides.values() for _, p, *_ in r["checkpoints"]}
    out = curves.assemble(runs, scores, 0.05, 10, 30, 128)
    json.dumps(out)  # serialisable
    assert set(out) == {"seeds", "mean", "acceptance"} and set(out["seeds"]) == {"0", "1"}
    for rec in out["seeds"].values():
        for side in ("rlvr", "trl"):
            assert rec[side][0] == [0.0, 0.05]
            assert all(isinstance(p, list) and len(p) == 2 for p in rec[side])
            assert [m for m, _ in rec["marks"][side]] == [0, 10, 20, 30]
            assert rec["runs"][side]["window"]["rows_sampled"] == rec["runs"][side]["window"]["steps"] * 128
    assert out["seeds"]["0"]["rlvr"][-1] == [30.1, 0.301]  # the 40 s checkpoint is after the window
    assert out["seeds"]["0"]["marks"]["trl"] == [[0, 0.05], [10, 0.12], [20, 0.12], [30, 0.31]]
    assert out["mean"]["rlvr"][1:] == [[10, 0.1005], [20, 0.201], [30, 0.3005]]


def test_trl_reward_adapter_equals_rlvrs_reasoning_gym_reward():
    pytest.importorskip("reasoning_gym")
    rewards = _load("_rewards")
    from rlvr.config.data import ReasoningGymTasks
    from rlvr.config.rl import RewardTerm
    from rlvr.data.sources import load_task_source
    from rlvr.rollout.collector import compose_rewards
    from rlvr.verifiers.judge import reward_judge
    from rlvr.verifiers.reasoning_gym import ReasoningGymVerifier

    tasks = load_task_source(ReasoningGymTasks(name="chain_sum", n=4, split="train", seed=5))
    gold = [t.gold["answer"] for t in tasks]
    wrong = [str(int(g) + 7) for g in gold]
    padded = [f"{g} {int(g) + 1} {int(g) + 2}" for g in gold]  # contains the oracle: the raw scorer pays 1/3
    texts = [f"{x}\n\\boxed{{{x}}}" for x in gold] + wrong + padded + ["", "no answer here"]
    idx = [i % len(tasks) for i in range(len(texts))]
    fn = rewards.make_trl_reward(tasks)
    got = fn([[{"role": "assistant", "content": x}] for x in texts], task_index=idx)
    assert got == fn(texts, task_index=idx)  # conversational and plain completions alike
    v = ReasoningGymVerifier()
    expect = [v.verify(tasks[i], x).reward for i, x in zip(idx, texts)]
    assert got == expect
    assert got[:4] == [1.0] * 4 and got[4:] == [0.0] * (len(texts) - 4)
    verdicts = reward_judge([RewardTerm(name="correct")])([tasks[i] for i in idx], texts)
    rlvr = compose_rewards(verdicts, [len(x) for x in texts], [RewardTerm(name="correct")], 72)["correct"].tolist()
    assert got == rlvr  # what rlvr's RL stage trains on


@pytest.mark.slow
def test_the_script_end_to_end_on_a_tiny_checkpoint(tiny_dir, tmp_path):
    """Two seeds (A B B A), 10 s windows, checkpoints every 5 s, a given TRL setting: the JSON holds both
    curves per seed from the same SFT score, each run's window, the settings, and the plot is drawn."""
    for mod in ("trl", "reasoning_gym", "matplotlib"):
        pytest.importorskip(mod)
    import os
    import subprocess

    env = {**os.environ, "BENCH_THREADS": "1", "BENCH_OMP_WAIT": "passive",
           "PYTHONPATH": os.pathsep.join([str(BENCH.parent / "src"), str(BENCH), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "tta.json"
    cmd = [sys.executable, str(BENCH / "time_to_accuracy.py"), "--model", tiny_dir, "--dataset", "chain_sum",
           "--config", '{"min_terms": 2, "max_terms": 2}', "--train-n", "64", "--heldout-n", "16",
           "--seconds", "10", "--every", "5", "--seeds", "0", "1", "--prompts", "2", "--group", "4", "--max-new", "8",
           "--trl-setting", "fp32:4", "--json", str(out)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    d = json.loads(out.read_text())
    assert set(d["seeds"]) == {"0", "1"}
    for rec in d["seeds"].values():
        for side in ("rlvr", "trl"):
            assert rec[side][0] == [0.0, d["sft_solved"]] and len(rec[side]) >= 2
            assert all(0 <= v <= 1 for _, v in rec[side])
            win = rec["runs"][side]["window"]
            assert win["steps"] >= 1 and win["rows_sampled"] == win["steps"] * 8 and win["seconds"] >= 10
            assert rec["runs"][side]["rss"]["peak_mb"] > 0 and "load_avg" in rec["runs"][side]
    assert d["settings"]["trl"]["precision"] == "fp32" and d["settings"]["trl"]["micro_batch"] == 4
    assert "autocast_bf16" in d["settings"]["rlvr"]["precision"] and d["trl_search"][0]["given"]
    assert [m for m, _ in d["mean"]["rlvr"]] == [0, 5, 10] and set(d["acceptance"]) >= {"met", "reach_ratio"}
    assert out.with_suffix(".png").stat().st_size > 1000
    for words in ("steps", "rows", "peak MB", "TRL:", "rlvr:"):
        assert words in res.stdout
