"""Which scoring a run's held-out evaluation uses (pipeline.with_eval_scoring), and the prompt format its
checkpoints carry (pipeline.run_format)."""

import json

from rlvr.config.load import load_recipe
from rlvr.config.recipe import with_system_prompt
from rlvr.pipeline import run_format, with_eval_scoring

RECIPE = """\
system_prompt: "Be brief."
eval: {{tasks: {tasks}}}
stages:
  - {{type: rl, name: rl, rewards: [{{name: python, function: "m:score", weight: 2}}], data: {{families: [add2], n: 4}}}}
"""


def _recipe(tmp_path, tasks):
    p = tmp_path / "r.yaml"
    p.write_text(RECIPE.format(tasks=tasks))
    return with_eval_scoring(with_system_prompt(load_recipe(p)))


def test_builtin_tasks_keep_their_verifier(tmp_path):
    r = _recipe(tmp_path, "{families: [add2], n: 4, split: heldout}")
    assert r.eval.rewards is None
    fmt = run_format(r)
    assert fmt["system_prompt"] == "Be brief." and fmt["rewards"] is None and fmt["dtype"] == "float32"


def test_tasks_only_the_python_reward_can_judge_are_scored_by_it(tmp_path):
    (tmp_path / "t.jsonl").write_text(json.dumps({"prompt": "Name a colour."}) + "\n")  # no answer: no verifier
    r = _recipe(tmp_path, f"{{type: jsonl, path: {tmp_path / 't.jsonl'}}}")
    assert [(t.name, t.function, t.weight) for t in r.eval.rewards] == [("python", "m:score", 2.0)]
    assert run_format(r)["rewards"] == [{"name": "python", "function": "m:score", "weight": 2.0}]


def test_an_explicit_eval_rewards_wins(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text(RECIPE.format(tasks="{families: [add2], n: 4, split: heldout}"))
    r = load_recipe(p, ["eval.rewards=[{name: correct}, {name: length, weight: 0.1}]"])
    assert [t.name for t in with_eval_scoring(r).eval.rewards] == ["correct", "length"]
