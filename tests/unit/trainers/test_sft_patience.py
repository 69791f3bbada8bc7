"""Held-out patience is an SFT stage's stopping rule: with a generous ``max_steps`` the stage stops once
``patience`` measurements in a row did not improve on the best, whichever ``best_metric`` it watches."""

import json

import pytest

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.eval import EvalConfig
from rlvr.config.model import ModelConfig
from rlvr.config.optim import OptimConfig
from rlvr.config.sft import SFTStage
from rlvr.trainers.sft import train_sft


def stage(**kw):
    # lr 0: the weights never move, so no measurement after step 0 improves on it
    return SFTStage(max_steps=10_000, batch_size=4, micro_batch_size=4, save_every=0, log_every=1,
                    optim=OptimConfig(lr=0.0, warmup_steps=0), data=BuiltinArithmetic(families=["add2"], n=8),
                    **kw)


@pytest.mark.parametrize("metric", ["heldout/loss", "eval/pass_at_1"])
def test_patience_stops_a_stage_with_a_generous_step_budget(tiny_dir, tmp_path, metric):
    kw = ({"heldout": BuiltinArithmetic(families=["add2"], n=4, split="heldout"), "heldout_every": 2}
          if metric == "heldout/loss" else {"eval_every": 2})
    ev = EvalConfig(tasks=BuiltinArithmetic(families=["add2"], n=4, split="heldout"), max_new_tokens=4)
    res = train_sft(stage(patience=2, best_metric=metric, **kw), ModelConfig(path=tiny_dir), tmp_path,
                    eval_cfg=ev)
    recs = [json.loads(x) for x in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    stop = [r for r in recs if r.get("event") == "early_stop"]
    # measured at 0, 2, 4: two measurements without improvement on step 0's -> stop at step 4
    assert stop and stop[0]["step"] == 4 and stop[0]["best_step"] == 0, stop
    assert res.steps == 4 and res.extra.get("early_stop", {}).get("best_step") == 0
