"""`rlvr eval` scoring with rewards of your own: --reward mod:fn and --recipe [--stage] (a pass is a summed
reward >= 1, said in the output); contradictory flags are one-line usage errors."""

import json

from test_cli_sft import rlvr

REWARDS = """\
def partial(task, completion):
    return 0.5          # partial credit everywhere: never a pass
def full(task, completion):
    return 1.0
"""

RECIPE = """\
model: {{path: {model}}}
stages:
  - {{type: sft, name: warm, data: {{families: [add2], n: 8}}}}
  - {{type: rl, name: rl, rewards: [{{name: python, function: "my_rewards:full"}}], data: {{families: [add2], n: 8}}}}
"""


def test_eval_scores_with_a_reward_or_a_recipes_stage(tiny_dir, tmp_path):
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    (tmp_path / "r.yaml").write_text(RECIPE.format(model=tiny_dir))
    args = ["eval", "--model", tiny_dir, "--tasks", "builtin:add2:4", "--max-new-tokens", "4"]
    p = rlvr(*args, "--reward", "my_rewards:partial", "--out", "a.json", cwd=tmp_path)
    a = json.loads((tmp_path / "a.json").read_text())
    assert a["pass_at_1"] == 0.0 and all(s["reward"] == 0.5 for s in a["samples"])
    assert "a pass is a summed reward >= 1" in p.stdout.replace("\n", "")
    rlvr(*args, "--recipe", "r.yaml", "--out", "b.json", cwd=tmp_path)
    b = json.loads((tmp_path / "b.json").read_text())
    assert b["pass_at_1"] == 1.0 and "my_rewards:full" in b["scoring"]
    bad = rlvr(*args, "--recipe", "r.yaml", "--stage", "warm", cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "only RL stages have rewards" in bad.stderr and "Traceback" not in bad.stderr
    both = rlvr(*args, "--system-prompt", "x", "--no-system-prompt", cwd=tmp_path, check=False)
    assert both.returncode == 2 and "contradict" in both.stderr and "Traceback" not in both.stderr


def test_a_saved_reward_that_cannot_be_imported_names_the_file_and_the_way_out(tiny_dir, tmp_path):
    import pytest

    from rlvr.commands.evaluate import eval_command
    from rlvr.errors import ConfigError
    from rlvr.models.checkpoint import save_pretrained_atomic
    from rlvr.models.load import load_pretrained
    from rlvr.models.prompt_format import make_format

    model, tok = load_pretrained(tiny_dir)
    save_pretrained_atomic(model, tok, tmp_path / "m",
                           prompt_format=make_format(rewards=[{"name": "python", "function": "gone_module:f"}]))
    with pytest.raises(ConfigError) as e:
        eval_command(str(tmp_path / "m"), "builtin:add2:2", 1, 1.0, 4, None, 0, quiet=True)
    assert "gone_module" in str(e.value) and "prompt_format.json" in str(e.value) and "--verifier" in str(e.value)
    res = eval_command(str(tmp_path / "m"), "builtin:add2:2", 1, 1.0, 4, None, 0, quiet=True, verifier=True)
    assert res["scoring"].startswith("each task's verifier")
