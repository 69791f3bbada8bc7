"""The equal-time SFT control: the SFT stage continued for the later stages' training seconds, evaluated by
the recipe's eval at each later stage's cumulative boundary; off with ``none``; resumed like any stage."""

import json
import math

import pytest

from rlvr.commands.run import print_summary
from rlvr.config.load import load_recipe
from rlvr.data.arithmetic import generate
from rlvr.errors import ConfigError
from rlvr.pipeline import run_pipeline
from rlvr.stages import stage_kind

RECIPE = """\
name: c
run_dir: {run_dir}
threads: 1
eval_base: false
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 4, split: heldout}}, max_new_tokens: 6, control: {control}}}
stages:
  - {{type: sft, max_steps: 3, batch_size: 4, micro_batch_size: 4, save_every: 0, log_every: 1,
     data: {{families: [add2], n: 16}}}}
  - {{type: preference, name: dpo, pairs: {{path: {pairs}}}, batch_size: 4, micro_batch_size: 4, max_steps: 3}}
  - {{type: preference, name: dpo2, pairs: {{path: {pairs}}}, batch_size: 4, micro_batch_size: 4, max_steps: 2}}
"""


def recipe(tmp_path, tiny_dir, control="sft"):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": t.prompt, "chosen": t.solution, "rejected": "\\boxed{0}"}) + "\n"
                             for t in generate(["add2"], 8, seed=5)))
    p = tmp_path / "r.yaml"
    p.write_text(RECIPE.format(run_dir=tmp_path / "run", model=tiny_dir, pairs=pairs, control=control))
    return p


def records(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def controlled(tiny_dir, tmp_path_factory):
    import rlvr.trainers.sft as sft

    tmp = tmp_path_factory.mktemp("ctl")
    p = recipe(tmp, tiny_dir)
    seen, order = [], sft.data_order
    with pytest.MonkeyPatch.context() as mp:  # which steps of the demonstration stream SFT and the control read
        mp.setattr(sft, "data_order", lambda n, seed, step, bs: seen.append(step) or order(n, seed, step, bs))
        return p, run_pipeline(load_recipe(p)), seen


def test_control_rows_get_the_later_stages_training_seconds_and_the_real_eval(controlled):
    p, summary, seen = controlled
    rows = {r["stage"]: r for r in summary["stages"]}
    assert list(rows) == ["sft", "dpo", "dpo2", "sft-control@dpo", "sft-control@dpo2"]
    assert summary["control"] == {"type": "sft", "source": "sft", "rows": ["sft-control@dpo", "sft-control@dpo2"]}
    run = p.parent / "run"
    for name, later in (("sft-control@dpo", ["dpo"]), ("sft-control@dpo2", ["dpo", "dpo2"])):
        ctl = rows[name]
        budget = sum(rows[s]["train_s"] for s in later)
        assert ctl["budget_s"] == pytest.approx(budget, abs=0.02) and ctl["control_for"] == later[-1]
        steps = [r["time/step"] for d in ("sft-control@dpo", name) for r in records(run / d / "metrics.jsonl")
                 if "time/step" in r]
        # trained until the budget was spent, overshooting by at most the segments' last steps
        assert budget <= ctl["train_s"] + 0.02 <= budget + 2 * max(steps) + 0.05, (ctl, budget, steps)
        ev = json.loads((run / name / "eval.json").read_text())  # the recipe's eval of the control's model
        assert ev["n_tasks"] == 4 and ctl["pass_at_1"] == ev["pass_at_1"] and ctl["by_family"] == ev["by_family"]
        assert rows[later[-1]]["gain_over_control"] == pytest.approx(rows[later[-1]]["pass_at_1"] - ctl["pass_at_1"])
    assert rows["sft-control@dpo2"]["steps"] > rows["sft-control@dpo"]["steps"] > 0
    # a preference stage's clock holds its pairs and reference pass too, not only its steps
    dpo_steps = sum(r["time/step"] for r in records(run / "dpo" / "metrics.jsonl") if "time/step" in r)
    assert rows["dpo"]["train_s"] > dpo_steps
    # the demonstrations continue from the SFT stage's cursor, segment after segment
    assert seen == list(range(3 + rows["sft-control@dpo2"]["steps"]))
    assert json.loads((run / "summary.json").read_text())["stages"][-1]["stage"] == "sft-control@dpo2"


def test_the_summary_table_prints_the_control_rows_and_gains(controlled, capsys):
    _, summary, _ = controlled
    print_summary(summary)
    out = capsys.readouterr().out
    assert "sft-control@dpo2" in out and "vs control" in out and "train s" in out
    assert "dpo2 vs sft-control@dpo2 (sft continued" in out and "points" in out


def test_resume_does_not_rerun_a_finished_control_and_finishes_an_interrupted_one(controlled):
    p, summary, _ = controlled
    run = p.parent / "run"
    first = (run / "sft-control@dpo" / "metrics.jsonl").read_text()
    state = json.loads((run / "pipeline.json").read_text())
    state["stages"]["sft-control@dpo2"] = {"status": "running"}  # as if killed during the second segment
    (run / "pipeline.json").write_text(json.dumps(state))
    again = run_pipeline(load_recipe(p), resume=True)
    assert (run / "sft-control@dpo" / "metrics.jsonl").read_text() == first  # not rerun
    starts = [r for r in records(run / "sft-control@dpo2" / "metrics.jsonl") if r.get("event") in ("start", "resume")]
    assert len(starts) == 2  # the interrupted segment ran again in its own folder
    assert [r["stage"] for r in again["stages"]] == [r["stage"] for r in summary["stages"]]
    assert json.loads((run / "pipeline.json").read_text())["stages"]["sft-control@dpo2"]["status"] == "done"


def test_none_turns_the_control_off(tiny_dir, tmp_path):
    p = recipe(tmp_path, tiny_dir, control="none")
    r = load_recipe(p)
    r = r.model_copy(update={"stages": r.stages[:2]})
    summary = run_pipeline(r)
    assert [row["stage"] for row in summary["stages"]] == ["sft", "dpo"]
    assert summary["control"]["note"] == "no control (eval.control: none)"
    assert not (tmp_path / "run" / "sft-control@dpo").exists()


def test_a_bad_value_names_the_field_and_line(tiny_dir, tmp_path, rlvr_cli):
    p = recipe(tmp_path, tiny_dir, control="sftt")
    with pytest.raises(ConfigError, match=r"r\.yaml:6: eval\.control"):
        load_recipe(p)
    code, out, err = rlvr_cli("run", p)
    assert code != 0 and "r.yaml:6: eval.control" in out + err and "Traceback" not in out + err
    assert not (tmp_path / "run").exists()  # before any work


def test_no_sft_stage_before_the_later_stages_says_so(capsys):
    from rlvr.config.preference import PreferenceStage
    from rlvr.config.sft import SFTStage
    from rlvr.monitoring.control import source_and_later

    dpo = PreferenceStage(name="dpo", pairs={"path": "x.jsonl"})
    assert source_and_later([dpo, SFTStage()], stage_kind)[2] == "no control: no SFT stage before dpo"
    assert source_and_later([SFTStage()], stage_kind)[2] == "no control: no stage after the SFT stage"
    sft2 = SFTStage(name="sft2")
    src, later, note = source_and_later([SFTStage(), sft2, dpo, SFTStage(name="sft3")], stage_kind)
    assert src is sft2 and [s.name for s in later] == ["dpo", "sft3"] and note is None
    row = {"stage": "dpo", "pass_at_1": 0.5, "by_family": {}, "mean_length": 3.0, "wall_s": 1.0}
    print_summary({"stages": [row], "control": {"type": "sft", "note": "no control: no SFT stage before dpo"}})
    assert "no control: no SFT stage before dpo" in capsys.readouterr().out


def test_the_run_header_names_the_control_or_why_there_is_none(tiny_dir, tmp_path):
    from rlvr.commands.header import header_lines

    r = load_recipe(recipe(tmp_path, tiny_dir))
    rows = dict(header_lines(r, "r.yaml"))
    assert rows["control"] == "sft continued for the training seconds of dpo, dpo2 (sft-control@dpo, sft-control@dpo2)"
    assert dict(header_lines(r.model_copy(update={"stages": r.stages[1:]}), "r.yaml"))["control"] == \
        "no control: no SFT stage before dpo"
    assert "control" not in dict(header_lines(r, "r.yaml", only="sft"))


def test_the_control_schedule_runs_over_its_seconds_not_its_steps():
    import torch

    from rlvr.config.optim import OptimConfig
    from rlvr.trainers.optimizer import build_optimizer, over_seconds

    cfg = OptimConfig(lr=1.0, warmup_steps=2, schedule="cosine", min_lr_ratio=0.1)
    model = torch.nn.Linear(2, 2)
    opt, sched = build_optimizer(model, cfg, 1000)
    now = [0.0]
    over_seconds(sched, cfg, 10, 5.0, clock=lambda: now[0])
    lrs = []
    for t in (0.0, 2.5, 5.0, 9.0):  # seconds spent: the start, half the budget, the budget, past it
        now[0] = t
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    assert lrs[0] == pytest.approx(1 / 3) and lrs[1] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 3 / 8)))
    assert lrs[2] == pytest.approx(0.1) and lrs[3] == pytest.approx(0.1)


def test_a_segment_shorter_than_the_sft_warmup_still_decays():
    from rlvr.config.optim import OptimConfig
    from rlvr.config.sft import SFTStage
    from rlvr.monitoring.control import Segment, segment_stage

    sft = SFTStage(optim=OptimConfig(warmup_steps=20), max_steps=450, patience=3, eval_every=50)
    stage, (steps, seconds) = segment_stage(sft, Segment("sft-control@dpo", "dpo", 22.0, 22.0), 1.25)
    assert (steps, seconds) == (18, 22.0) and stage.optim.warmup_steps == 1 and stage.max_minutes * 60 == 22.0
    assert stage.max_steps > steps and stage.patience == 0 and stage.eval_every == 0 and stage.name == "sft-control@dpo"
