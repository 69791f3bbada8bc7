"""One prompt format and one scoring everywhere: the run's own held-out evaluation and `rlvr eval` on the
checkpoint give the same completion and verdict on every problem (same batch size and precision), also
after the checkpoint is moved; an RL stage's step-0 evaluation reads what the checkpoint it starts from
read, whatever the stage trains on."""

import json
import shutil

from rlvr.commands.evaluate import eval_command
from rlvr.config.load import load_recipe
from rlvr.pipeline import run_pipeline

SFT = """\
name: agree
run_dir: {run_dir}
threads: 1
eval_base: false
system_prompt: "Add the numbers. Put the result in a box."
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 12, split: heldout, seed: 1234}}, max_new_tokens: 10, batch_size: 5}}
stages:
  - {{type: sft, max_steps: 6, batch_size: 8, micro_batch_size: 8, eval_every: 6,
     data: {{families: [add2], n: 32}}, optim: {{lr: 0.01}}}}
"""


def _sft_run(tmp_path, tiny_dir):
    p = tmp_path / "r.yaml"
    p.write_text(SFT.format(run_dir=tmp_path / "run", model=tiny_dir))
    run_pipeline(load_recipe(p))
    return tmp_path / "run" / "sft"


def _by_problem(res):
    return [(s["task_id"], s["completion"], s["outcome"]) for s in res["samples"]]


def test_rlvr_eval_gives_the_runs_verdict_on_every_problem_with_a_system_prompt(tiny_dir, tmp_path, capsys):
    stage = _sft_run(tmp_path, tiny_dir)
    run_eval = json.loads((stage / "eval.json").read_text())
    moved = tmp_path / "elsewhere" / "model"
    shutil.copytree(stage / "final", moved)  # a moved checkpoint keeps its prompt format
    for ckpt in (stage / "final", moved):
        res = eval_command(str(ckpt), "builtin:add2:12", 1, 1.0, 10, None, 0, batch_size=5)
        assert _by_problem(res) == _by_problem(run_eval), ckpt
        assert res["pass_at_1"] == run_eval["pass_at_1"]
    out = capsys.readouterr().out
    assert "Add the numbers. Put the result in a box." in out and "prompt_format.json" in out
    # the stage's own last in-training evaluation (same weights as final/) reads the same, problem by problem
    in_stage = json.loads((stage / "evals" / "step-000006.json").read_text())
    assert _by_problem(in_stage) == _by_problem(run_eval)


def test_the_override_flags_change_the_format_and_say_so(tiny_dir, tmp_path, capsys):
    stage = _sft_run(tmp_path, tiny_dir)
    kept = eval_command(str(stage / "final"), "builtin:add2:12", 1, 1.0, 10, None, 0, batch_size=5)
    none = eval_command(str(stage / "final"), "builtin:add2:12", 1, 1.0, 10, None, 0, batch_size=5,
                        system_prompt=False)
    other = eval_command(str(stage / "final"), "builtin:add2:12", 1, 1.0, 10, None, 0, batch_size=5,
                         system_prompt="Something else.")
    out = capsys.readouterr().out
    assert "--no-system-prompt" in out and "--system-prompt" in out
    assert kept["prompt_format"]["system_prompt"] == "Add the numbers. Put the result in a box."
    assert none["prompt_format"]["system_prompt"] is None
    assert other["prompt_format"]["system_prompt"] == "Something else."
    assert _by_problem(none) != _by_problem(kept)


RL = """\
name: rlagree
run_dir: {run_dir}
threads: 1
eval_base: true
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 12, split: heldout, seed: 1234}}, max_new_tokens: 10, batch_size: 6}}
stages:
  - {{type: rl, name: grpo, max_steps: 1, tasks_per_step: 2, eval_every: 1,
     rewards: [{{name: python, function: "partial_credit:score"}}],
     sampling: {{group_size: 2, max_new_tokens: 10}}, data: {{families: [add2], n: 8}}}}
"""

PARTIAL = """\
def score(task, completion):
    # reasoning-gym style partial credit: 1 for the answer, a little for anything else
    return 1.0 if task.gold["answer"] in completion else 0.05
"""


def test_rl_step0_evaluation_reads_what_the_starting_checkpoint_read(tiny_dir, tmp_path, monkeypatch):
    """The step-0 held-out evaluation of an RL stage whose reward gives partial credit once counted every
    reward > 0 as a pass (it judged with the stage's training reward): 100% in the stage against 0% for the
    same weights evaluated as a checkpoint."""
    (tmp_path / "partial_credit.py").write_text(PARTIAL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "r.yaml"
    p.write_text(RL.format(run_dir=tmp_path / "run", model=tiny_dir))
    run_pipeline(load_recipe(p))
    base = json.loads((tmp_path / "run" / "base" / "eval.json").read_text())
    rows = [json.loads(x) for x in (tmp_path / "run" / "grpo" / "metrics.jsonl").read_text().splitlines()]
    step0 = next(r for r in rows if r["step"] == 0 and "eval/pass_at_1" in r)
    assert step0["eval/pass_at_1"] == base["pass_at_1"]
    in_stage = json.loads((tmp_path / "run" / "grpo" / "evals" / "step-000000.json").read_text())
    assert _by_problem(in_stage) == _by_problem(base)



def test_generate_and_screen_use_the_checkpoints_format(tiny_dir, tmp_path, capsys):
    from rlvr.commands.evaluate import generate_command
    from rlvr.commands.screen import screen_checkpoints

    stage = _sft_run(tmp_path, tiny_dir)
    run_eval = json.loads((stage / "eval.json").read_text())
    out = tmp_path / "c.jsonl"
    recs = generate_command(str(stage / "final"), "builtin:add2:12", str(out), max_new_tokens=10)
    assert [r["completion"] for r in recs] == [s["completion"] for s in run_eval["samples"]]
    assert "Add the numbers." in capsys.readouterr().out
    rows = screen_checkpoints([str(stage / "final")], "builtin:add2:12", 2, 1.0, 10)
    assert "system prompt 'Add the numbers. Put the result in a box.'" in rows[0]["prompt_format"]
    rows = screen_checkpoints([str(stage / "final")], "builtin:add2:12", 2, 1.0, 10, system_prompt=False)
    assert "no system prompt (from --no-system-prompt)" in rows[0]["prompt_format"]
