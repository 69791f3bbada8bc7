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
  - {{type: rl, name: rl, rewards: [{{name: python, function: "eval_cli_rewards:full"}}], data: {{families: [add2], n: 8}}}}
"""


def test_eval_scores_with_a_reward_or_a_recipes_stage(tiny_dir, tmp_path, monkeypatch):
    import pytest

    from rlvr.commands.checkpoint_format import system_prompt_choice
    from rlvr.commands.evaluate import eval_command
    from rlvr.errors import ConfigError

    (tmp_path / "eval_cli_rewards.py").write_text(REWARDS)
    (tmp_path / "r.yaml").write_text(RECIPE.format(model=tiny_dir))
    p = rlvr("eval", "--model", tiny_dir, "--tasks", "builtin:add2:4", "--max-new-tokens", "4",
             "--reward", "eval_cli_rewards:partial", "--out", "a.json", cwd=tmp_path)
    a = json.loads((tmp_path / "a.json").read_text())
    assert a["pass_at_1"] == 0.0 and all(s["reward"] == 0.5 for s in a["samples"])
    assert "a pass is a summed reward >= 1" in p.stdout.replace("\n", "")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    b = eval_command(tiny_dir, "builtin:add2:4", 1, 1.0, 4, None, 0, quiet=True, recipe="r.yaml")
    assert b["pass_at_1"] == 1.0 and "eval_cli_rewards:full" in b["scoring"]
    with pytest.raises(ConfigError, match="only RL stages have rewards"):
        eval_command(tiny_dir, "builtin:add2:4", 1, 1.0, 4, None, 0, quiet=True, recipe="r.yaml", stage="warm")
    with pytest.raises(ConfigError, match="each choose the scoring"):
        eval_command(tiny_dir, "builtin:add2:4", 1, 1.0, 4, None, 0, quiet=True, recipe="r.yaml",
                     rewards=["eval_cli_rewards:full"])
    with pytest.raises(ConfigError, match="contradict"):
        system_prompt_choice("x", True)


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
