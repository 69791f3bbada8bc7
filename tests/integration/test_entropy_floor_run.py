"""The collapsing configuration of ``bench/entropy_floor.yaml`` (GRPO from a from-scratch tiny model on mod10:
"4817%10=?" -> "7", temperature 0.5, beta = 0), shortened to 30 steps of 8 tasks and run at lr 1e-2 so it
collapses within them: without a health action the monitor flags ENTROPY COLLAPSE; with ``entropy_floor`` on
the entropy statuses the action fires, the entropy coefficient the loss uses moves off 0, and the sampled
entropy ends above the run without it. (The held-out pass@1 comparison of the full 150-step recipe over
seeds is ``bench/entropy_floor.py``; its table is in docs/health.md.)
"""

import json
from pathlib import Path

import torch

from rlvr.config.load import load_recipe
from rlvr.config.model import ModelConfig
from rlvr.monitoring.health import ema_series
from rlvr.trainers.rl import train_rl

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run(tiny_dir, out, action=None):
    sets = ["stages.0.max_steps=30", "stages.0.tasks_per_step=8", "stages.0.optim.lr=1e-2",
            f"stages.0.data.path={BENCH / 'data' / 'entropy_floor' / 'train.jsonl'}"]
    if action:
        sets += [f"stages.0.health.actions.{s}=[{action}]" for s in ("entropy_collapse", "entropy_trending_down")]
    recipe = load_recipe(BENCH / "entropy_floor.yaml", sets)
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)  # the recipe's `threads: 1`, as `rlvr run` sets it: the trajectory (and
    try:                                   # so the measured entropies) must not depend on the test machine's cores
        res = train_rl(recipe.stages[0], ModelConfig(path=tiny_dir), out, seed=0)
    finally:
        torch.set_num_threads(threads)
    return [r for r in map(json.loads, open(res.metrics_path)) if "event" not in r]


def test_the_entropy_floor_fires_in_the_collapsing_mod10_run_and_keeps_entropy_above_the_run_without_it(
        tiny_dir, tmp_path):
    off = run(tiny_dir, tmp_path / "off")
    floor = run(tiny_dir, tmp_path / "floor", "entropy_floor")
    assert any("ENTROPY COLLAPSE" in r["health/status"] for r in off), [r["health/status"] for r in off]
    assert not any("health/action" in r for r in off)                  # alert only: nothing acted
    acted = [r for r in floor if "health/action" in r]
    assert acted and acted[0]["health/action"].startswith("entropy_floor: entropy"), acted[:1]
    assert floor[-1]["health/entropy_coef"] > 0                         # the coefficient the loss used moved
    # identical until the first firing (same seed, same data): the action is what separates the runs
    first = acted[0]["step"]
    assert [r["rollout/entropy"] for r in off[:first]] == [r["rollout/entropy"] for r in floor[:first]]
    end = {k: ema_series([r["rollout/entropy"] for r in rs], 5)[-1] for k, rs in (("off", off), ("floor", floor))}
    assert end["floor"] > 1.2 * end["off"], end                         # measured: 1.22 vs 0.82 nats/token
