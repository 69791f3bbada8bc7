"""Bad input through the CLI: each case exits 2 with one paragraph naming the culprit (file, line, key or
field) and no traceback; ``--debug`` shows the traceback instead. Run in-process (``rlvr.cli.main`` with
``sys.argv`` set): the same code path as the ``rlvr`` command, without a Python start per case."""

import json
import shutil
import sys

import pytest

from rlvr.cli import main

HEAD = "name: b\nrun_dir: {run_dir}\neval_base: false\nmodel: {{path: {model}}}\n" \
       "eval: {{tasks: {{families: [add2], n: 2, split: heldout}}, max_new_tokens: 4}}\nstages:\n"


def cli(capsys, *args):
    """Run ``rlvr ARGS`` in-process -> (exit code, stderr with whitespace collapsed)."""
    old = sys.argv
    sys.argv = ["rlvr", *map(str, args)]
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    finally:
        sys.argv = old
    err = capsys.readouterr().err
    return code, " ".join(err.split())


def recipe(tmp_path, model, stage: str, name="r.yaml"):
    p = tmp_path / name
    p.write_text(HEAD.format(run_dir=tmp_path / "run", model=model) + f"  - {stage}\n")
    return p


def data_file(tmp_path, text: str | bytes, name="tasks.jsonl"):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def grpo_on(path) -> str:
    return f"{{type: grpo, max_steps: 1, data: {{type: jsonl, path: {path}}}}}"


def refused(capsys, tmp_path, tiny_dir, stage: str, *needles: str, cmd="validate"):
    p = recipe(tmp_path, tiny_dir, stage)
    code, err = cli(capsys, cmd, p)
    assert code == 2, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)
    return err


@pytest.mark.parametrize("text, line, says", [
    ('{"prompt": "1+1", "answer": "2"}\n{"prompt": \n', 2, "malformed JSON"),
    ('{"prompt": "1+1", "answer": "2"}\n[1, 2]\n', 2, "expected a JSON object, got list"),
    ('{"answer": "2"}\n', 1, "missing required field 'prompt'"),
    ('{"prompt": 5, "answer": "2"}\n', 1, "field 'prompt' must be a string or a chat, got int"),
    ('{"prompt": "1+1", "answer": "2", "kind": "chess"}\n', 1, "field 'kind' is 'chess': no verifier"),
    ('{"prompt": "write f", "kind": "code"}\n', 1, "field 'tests': a code task needs"),
    ('{"prompt": "q", "kind": "sql", "database": "nope.sqlite", "gold_sql": "SELECT 1"}\n', 1,
     "field 'database': database file"),
    ('{"id": "a", "prompt": "1+1", "answer": "2"}\n\n{"id": "a", "prompt": "1+2", "answer": "3"}\n', 3,
     "field 'id': duplicate task id 'a' (first on line 1)"),
    ('{"prompt": "1+1", "answer": "2", "anser": "3"}\n', 1, "unknown field(s) ['anser']"),
], ids=["malformed", "not-object", "missing-field", "wrong-type", "kind-without-verifier", "code-without-tests",
        "sql-database-missing", "duplicate-id", "unknown-field"])
def test_a_bad_task_line_is_named_by_file_line_and_field(capsys, tmp_path, tiny_dir, text, line, says):
    f = data_file(tmp_path, text)
    refused(capsys, tmp_path, tiny_dir, grpo_on(f), f"{f}:{line}:", says, "stages.0.data.path", "r.yaml:7")


def test_non_utf8_file_names_the_line_and_byte(capsys, tmp_path, tiny_dir):
    f = data_file(tmp_path, b'{"prompt": "1+1", "answer": "2"}\n{"prompt": "caf\xe9 1+1", "answer": "2"}\n')
    refused(capsys, tmp_path, tiny_dir, grpo_on(f), f"{f}:2:", "not UTF-8 (byte 0xe9 at column 16)")


def test_empty_file(capsys, tmp_path, tiny_dir):
    f = data_file(tmp_path, "")
    refused(capsys, tmp_path, tiny_dir, grpo_on(f), f"{f}: no tasks: the file is empty")


def test_every_task_filtered_out(capsys, tmp_path, tiny_dir):
    f = data_file(tmp_path, '{"prompt": "1+1", "answer": "2", "split": "heldout"}\n')
    stage = f"{{type: grpo, max_steps: 1, data: {{type: jsonl, path: {f}, split: train}}}}"
    refused(capsys, tmp_path, tiny_dir, stage, f"{f}: no line has \"split\": 'train'", "splits present: ['heldout']")


def test_unknown_key_suggests_the_nearest(capsys, tmp_path, tiny_dir):
    stage = "{type: grpo, max_stpes: 3, data: {families: [add2], n: 4}}"
    refused(capsys, tmp_path, tiny_dir, stage, "r.yaml:7", "unknown key 'stages.0.rl.max_stpes'",
            "did you mean 'max_steps'?")


@pytest.mark.parametrize("stage, needles", [
    ("{type: grpo, sampling: {group_size: 1}, data: {families: [add2], n: 4}}",
     ["r.yaml:7", "stages.0.sampling.group_size", "a group of 1 has zero advantage"]),
    ("{type: rl, loss: {type: dapo, eps_low: 0.3, eps_high: 0.1}, data: {families: [add2], n: 4}}",
     ["r.yaml:7", "eps_high 0.1 < eps_low 0.3"]),
    ("{type: grpo, kl: {beta: -0.1}, data: {families: [add2], n: 4}}",
     ["r.yaml:7", "stages.0.rl.kl.beta", "greater than or equal to 0"]),
    ("{type: dpo, loss: {type: dpo, beta: -0.1}, pairs: {path: p.jsonl}}",
     ["r.yaml:7", "loss.dpo.beta", "greater than 0"]),
    ("{type: grpo, rewards: [], data: {families: [add2], n: 4}}",
     ["r.yaml:7", "stages.0.rl.rewards", "at least 1 item"]),
    ("{type: grpo, rewards: [{name: correct, weight: 0}], data: {families: [add2], n: 4}}",
     ["r.yaml:7", "at least one reward term needs a non-zero weight"]),
    ("{type: ppo, reward: reward_model, sampling: {group_size: 1}, data: {families: [add2], n: 4}}",
     ["r.yaml:7", "stages.0.reward_model_path", "an earlier stage of type reward_model"]),
], ids=["grpo-group-of-1", "eps-high-below-eps-low", "rl-beta-negative", "dpo-beta-negative", "no-reward-terms",
        "all-reward-weights-zero", "needs-a-reward-model-nobody-trains"])
def test_values_out_of_range_and_missing_stage_outputs(capsys, tmp_path, tiny_dir, stage, needles):
    refused(capsys, tmp_path, tiny_dir, stage, *needles)


def test_ppo_group_of_one_is_its_own_and_accepted(capsys, tmp_path, tiny_dir):
    p = recipe(tmp_path, tiny_dir, "{type: ppo, sampling: {group_size: 1}, data: {families: [add2], n: 4}}")
    code, err = cli(capsys, "validate", p)
    assert code == 0, err


def test_missing_model_path(capsys, tmp_path):
    refused(capsys, tmp_path, tmp_path / "nope", "{type: grpo, data: {families: [add2], n: 4}}",
            "r.yaml:4", "model.path", f"'{tmp_path / 'nope'}' does not exist")


def test_tokenizer_without_chat_template(capsys, tmp_path, tiny_dir):
    m = tmp_path / "m"
    shutil.copytree(tiny_dir, m)
    (m / "chat_template.jinja").unlink()
    refused(capsys, tmp_path, m, "{type: grpo, data: {families: [add2], n: 4}}", "r.yaml:4", "model.path",
            "the tokenizer has no chat template", "model.chat_template: plain")
    p = recipe(tmp_path, m, "{type: grpo, data: {families: [add2], n: 4}}")
    assert cli(capsys, "validate", p, "--set", "model.chat_template=plain")[0] == 0


def test_model_vocabulary_smaller_than_the_tokenizer(capsys, tmp_path, tiny_dir):
    m = tmp_path / "m"
    shutil.copytree(tiny_dir, m)
    cfg = json.loads((m / "config.json").read_text())
    cfg["vocab_size"] = 10
    (m / "config.json").write_text(json.dumps(cfg))
    refused(capsys, tmp_path, m, "{type: grpo, data: {families: [add2], n: 4}}", f"{m / 'config.json'}",
            "vocab_size 10 is smaller than the tokenizer's")


def test_preference_row_with_chosen_equal_to_rejected(capsys, tmp_path, tiny_dir):
    f = data_file(tmp_path, '{"prompt": "1+1", "chosen": "2", "rejected": "3"}\n'
                            '{"prompt": "1+2", "chosen": "3", "rejected": "3"}\n', "pairs.jsonl")
    refused(capsys, tmp_path, tiny_dir, f"{{type: dpo, pairs: {{path: {f}}}}}", f"{f}:2:",
            "'chosen' and 'rejected' are the same text", "stages.0.pairs.path")


def test_traceback_only_with_debug(capsys, tmp_path, tiny_dir):
    from rlvr.errors import ConfigError

    f = data_file(tmp_path, '{"prompt": \n')
    p = recipe(tmp_path, tiny_dir, grpo_on(f))
    old = sys.argv
    sys.argv = ["rlvr", "--debug", "validate", str(p)]
    try:
        with pytest.raises(ConfigError, match="malformed JSON"):
            main()
    finally:
        sys.argv = old


def test_a_run_dir_holding_another_run_is_refused_then_moved_aside_with_overwrite(capsys, tmp_path, tiny_dir):
    from rlvr.config.load import dump_recipe, load_recipe

    stage = "{type: sft, max_steps: 1, batch_size: 2, micro_batch_size: 2, save_every: 0, data: {families: [add2], n: 4}}"
    p = recipe(tmp_path, tiny_dir, stage)
    run = tmp_path / "run"
    run.mkdir()
    earlier = load_recipe(str(p), ["stages.sft.max_steps=7"])
    (run / "config.yaml").write_text(dump_recipe(earlier))
    (run / "sft").mkdir()
    (run / "sft" / "metrics.jsonl").write_text('{"step": 1}\n')
    code, err = cli(capsys, "run", p)
    assert code == 2 and "Traceback" not in err
    assert f"{run} holds a different run" in err and "stages.0.max_steps: 7 -> 1" in err
    assert "--resume" in err and "--overwrite" in err
    assert (run / "sft" / "metrics.jsonl").read_text() == '{"step": 1}\n'  # nothing touched
    code, err = cli(capsys, "run", p, "--overwrite")
    assert code == 0, err
    moved = list(tmp_path.glob("run.prev-*"))
    assert len(moved) == 1 and (moved[0] / "sft" / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert "max_steps: 7" in (moved[0] / "config.yaml").read_text()
    assert (run / "sft" / "final").exists() and "max_steps: 1" in (run / "config.yaml").read_text()
    code, err = cli(capsys, "run", p)  # the same config again: allowed (the stage dir is archived per stage)
    assert code == 0, err


@pytest.mark.parametrize("command", ["run", "sft", "grpo", "dpo", "rm", "ppo", "rft", "distill", "quickstart"])
def test_every_run_command_takes_overwrite(command):
    import typer

    import rlvr.cli

    cmd = typer.main.get_command(rlvr.cli.app).commands[command]  # the stage commands come from rlvr.stages
    assert "--overwrite" in {o for p in cmd.params for o in getattr(p, "opts", [])}


def test_math_tasks_without_an_answer_under_the_correct_reward(capsys, tmp_path, tiny_dir):
    """Demonstrations only ({prompt, completion}) as GRPO data: every verification would be infra (the
    tutorial shipped that way until the infra pause stopped its GRPO stage at step 1)."""
    p = data_file(tmp_path, '{"prompt": "1+1=?", "completion": "\\\\boxed{2}"}\n')
    refused(capsys, tmp_path, tiny_dir, grpo_on(p), "r.yaml:", "stages.0.data.path", f"{p}:1: missing field 'answer'")
