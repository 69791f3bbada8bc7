"""``rlvr run --plan auto``: the pipeline decides each stage before it and does not run what the plan skips; the
summary records each skipped stage with its reason."""

import json

import pytest

from test_cli_sft import rlvr

RECIPE = """\
name: t
run_dir: {run_dir}
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 4, split: heldout}}, max_new_tokens: 6}}
plan: {{target: {target}, screen_tasks: 4}}
stages:
  - {{type: sft, max_steps: 2, data: {{families: [add2], n: 8}}}}
  - {{type: rl, max_steps: 1, tasks_per_step: 2, data: {{families: [add2], n: 8}},
     sampling: {{group_size: 2, max_new_tokens: 6}}}}
"""


def test_a_stage_the_plan_skips_is_recorded_and_not_run(tiny_dir, tmp_path):
    recipe = tmp_path / "r.yaml"
    run = tmp_path / "run"
    recipe.write_text(RECIPE.format(run_dir=run, model=tiny_dir, target=0.0))  # pass@1 >= 0: the target is met
    out = rlvr("run", str(recipe), "--plan", "auto").stdout
    summary = json.loads((run / "summary.json").read_text())
    assert [r["stage"] for r in summary["stages"]][:2] == ["base", "sft"]
    (skipped,) = summary["skipped"]
    assert skipped["stage"] == "rl" and skipped["decision"] == "skip" and skipped["rule"] == "target_met"
    assert ">= target 0.000" in skipped["reason"]
    assert not (run / "rl" / "final").exists() and not (run / "rl" / "metrics.jsonl").exists()
    assert [d["decision"] for d in summary["plan"]] == ["run", "skip"]
    assert json.loads((run / "pipeline.json").read_text())["stages"]["rl"]["status"] == "skipped"
    assert "rl (not run)" in out and "rl: not run by the plan (target_met)" in out


def test_bad_plan_values_are_one_line_errors(tiny_dir, tmp_path, rlvr_cli):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir, target=1.5))
    code, _, err = rlvr_cli("run", recipe)
    assert code == 2 and "plan.target" in err and "r.yaml" in err and "Traceback" not in err
    recipe.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir, target=0.5))
    code, _, err = rlvr_cli("run", recipe, "--plan", "sometimes")
    assert code == 2 and "--plan" in err and not (tmp_path / "run").exists()


@pytest.mark.slow  # the whole plan: probes, determinism, screens, held-out evaluation (~25 s)
def test_rlvr_plan_prints_its_decisions_and_writes_plan_json(tiny_dir, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir, target=0.0))
    out = rlvr("plan", str(recipe), "--n-tasks", "4", "--out", str(tmp_path / "p" / "plan.json")).stdout
    rep = json.loads((tmp_path / "p" / "plan.json").read_text())
    sft, rl = rep["decisions"]
    assert sft["stage"] == "sft" and sft["decision"] == "run" and not sft["provisional"]
    assert rl["decision"] == "skip" and rl["rule"] == "target_met" and rl["provisional"]
    assert rl["facts"]["screen"]["group_size"] == 2 and rl["facts"]["pass_at_1"] is not None
    assert "the plan: each stage run, skipped or replaced" in out and "target_met" in out


def test_a_missing_teacher_is_refused_before_any_work(tiny_dir, tmp_path, rlvr_cli):
    recipe = tmp_path / "r.yaml"
    text = RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir, target=0.5)
    recipe.write_text(text.replace("screen_tasks: 4}", "screen_tasks: 4, teacher: nowhere/big}"))
    code, _, err = rlvr_cli("run", recipe, "--plan", "auto")
    assert code == 2 and "plan.teacher" in err and "'nowhere/big' is not a local model folder" in err
    assert "r.yaml:5" in err and not (tmp_path / "run").exists()


@pytest.mark.slow  # a teacher built and evaluated beside the plan (~30 s)
def test_the_plan_measures_the_teacher_before_it_replaces_rl_by_distillation(tiny_dir, tmp_path):
    from rlvr.models.tiny import build_tiny

    teacher = tmp_path / "teacher"
    build_tiny(teacher, size="2m", seed=3)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir, target=1.0).replace(
        "screen_tasks: 4}", f"screen_tasks: 4, teacher: {teacher}}}"))
    rlvr("plan", str(recipe), "--n-tasks", "4", "--out", str(tmp_path / "plan.json"))
    rl = json.loads((tmp_path / "plan.json").read_text())["decisions"][1]
    f = rl["facts"]
    assert f["teacher_params"] >= 10 * f["params"] and f["teacher_pass_at_1"] is not None
    # an untrained teacher solves nothing: it cannot close the student's gap, so RL is not replaced by it
    assert f["teacher_pass_at_1"] == 0.0 and rl["rule"] != "small_with_teacher"
