"""The recipes bench/screen_validation.py and bench/plan_situations.py derive from the shipped ones are valid
recipes with the properties each measurement relies on, and a seed's plan decisions map to the option they mean."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.config.load import load_recipe

BENCH = Path(__file__).resolve().parents[2] / "bench"
QUICKSTART = BENCH.parent / "recipes" / "quickstart.yaml"


def _module(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _valid(recipe: dict, tmp_path: Path, name: str):
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return load_recipe(p)


def test_screen_validation_saves_fixed_fractions_and_starts_rl_from_each(tmp_path):
    sv = _module("screen_validation")
    r = yaml.safe_load(QUICKSTART.read_text())
    sft, rl = sv.stage_of(r, "sft", None), sv.stage_of(r, "rl", None)
    s = _valid(sv.sft_recipe(r, sft, 900, 6, tmp_path / "sft"), tmp_path, "sft")
    (st,) = s.stages
    assert (st.max_steps, st.save_every, st.keep_last, st.patience, st.keep_best) == (900, 150, 0, 0, False)
    assert s.eval.control == "none"
    with pytest.raises(SystemExit, match="not a multiple"):
        sv.sft_recipe(r, sft, 1000, 6, tmp_path / "x")
    ck = tmp_path / "ck"
    rr = _valid(sv.rl_recipe(r, rl, ck, 3, 40, tmp_path / "rl"), tmp_path, "rl")
    (st,) = rr.stages
    assert st.type == "rl" and st.max_steps == 40 and rr.seed == 3 and rr.eval_base
    assert rr.model.path == str(ck) and rr.model.tiny is None and rr.model.micro_tokens == 1536


def test_every_situation_option_is_a_valid_recipe(tmp_path):
    ps = _module("plan_situations")
    sits = ps.situations(1, 60, tmp_path / "teacher")
    assert set(sits) == {"base_no_sft", "quickstart_sft", "at_target", "small_student"}
    for name, sit in sits.items():
        plan = _valid(sit["plan"], tmp_path, f"{name}_plan")
        assert plan.seed == 1
        for opt, (run, rec, stage) in sit["options"].items():
            if isinstance(rec, dict):
                got = _valid(rec, tmp_path, f"{name}_{run}")
                assert stage in [s.name for s in got.stages] or stage.startswith("sft-control@"), (name, opt)
    assert _valid(sits["at_target"]["plan"], tmp_path, "t").plan.target == 0.9
    small = _valid(sits["small_student"]["plan"], tmp_path, "s")
    assert small.model.tiny.size == "0.5m" and small.plan.teacher == str(tmp_path / "teacher")


@pytest.mark.parametrize("name, decisions, want", [
    ("base_no_sft", {"grpo": ("replace", "sft (an SFT stage on demonstrations), then this stage")}, "sft then grpo"),
    ("base_no_sft", {"grpo": ("replace", "sft (an SFT stage on demonstrations)")}, "sft instead"),
    ("base_no_sft", {"grpo": ("run", None)}, "grpo (as written)"),
    ("quickstart_sft", {"sft": ("done", None), "dpo": ("skip", None), "grpo": ("run", None)}, "grpo only"),
    ("quickstart_sft", {"sft": ("done", None), "dpo": ("run", None), "grpo": ("run", None)}, "dpo then grpo"),
    ("quickstart_sft", {"sft": ("done", None), "dpo": ("replace", "sft (continue the SFT stage)"),
                        "grpo": ("replace", "sft (continue the SFT stage)")}, "more sft"),
    ("at_target", {"sft": ("done", None), "grpo": ("skip", None)}, "stop"),
    ("small_student", {"sft": ("done", None), "grpo": ("replace", "distill (from the teacher t)")}, "distill"),
    ("small_student", {"sft": ("done", None), "grpo": ("run", None)}, "grpo"),
])
def test_decisions_map_to_the_option_they_mean(name, decisions, want):
    ps = _module("plan_situations")
    decs = [{"stage": s, "decision": d, "instead": i} for s, (d, i) in decisions.items()]
    assert ps.recommended(name, decs) == want


def test_a_target_is_judged_by_the_cheapest_option_that_meets_it_with_confidence():
    ps = _module("plan_situations")
    fig = {"stop": {"pass_at_1": 0.9025, "n_tasks": 400, "train_s": 0.0},   # lower bound 0.869: not met
           "grpo": {"pass_at_1": 0.99, "n_tasks": 400, "train_s": 45.0},
           "more sft": {"pass_at_1": 0.932, "n_tasks": 400, "train_s": 46.0}}
    t = ps.target_check(fig, "grpo", 0.9)
    assert t["meets"] == ["grpo", "more sft"] and t["cheapest"] == "grpo" and t["ok"]
    assert not ps.target_check(fig, "stop", 0.9)["ok"]
    fig["stop"]["pass_at_1"] = 0.95  # lower bound 0.924: met at no cost
    assert ps.target_check(fig, "stop", 0.9)["ok"] and not ps.target_check(fig, "grpo", 0.9)["ok"]
