"""`rlvr validate` lists every problem it can find in one pass (schema errors with a missing model folder,
missing files, tasks their verifier cannot judge, text the tokenizer cannot encode), and the commands that
read task files (verify, eval, generate) refuse an unjudgeable or unencodable task naming its line before
any work. In-process (``rlvr_cli``)."""

import json

import pytest

HEAD = "name: b\nrun_dir: {run_dir}\neval_base: false\nmodel: {{path: {model}}}\n" \
       "eval: {{tasks: {{families: [add2], n: 2, split: heldout}}, max_new_tokens: 4}}\nstages:\n"


def recipe(tmp_path, model, *stages):
    p = tmp_path / "r.yaml"
    p.write_text(HEAD.format(run_dir=tmp_path / "run", model=model) + "".join(f"  - {s}\n" for s in stages))
    return p


def jsonl(path, *rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def refused(rlvr_cli, *args):
    code, out, err = rlvr_cli(*args)
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err
    return " ".join(err.split())


def test_schema_errors_the_missing_model_and_missing_files_in_one_output(rlvr_cli, tmp_path):
    """A user fixes one list, not three in turn: the schema errors come with what needs no valid schema."""
    bad_tasks = jsonl(tmp_path / "t.jsonl", {"prompt": "1+1"})
    p = recipe(tmp_path, tmp_path / "no-model",
               f"{{type: grpo, max_stpes: 3, data: {{type: jsonl, path: {tmp_path / 'gone.jsonl'}}}}}",
               f"{{type: sft, batch_size: 8, micro_batch_size: 3, data: {{type: jsonl, path: {bad_tasks}}}}}",
               f"{{type: grpo, sampling: {{top_p: 0}}, data: {{type: jsonl, path: {bad_tasks}}}}}")
    err = refused(rlvr_cli, "validate", p)
    for needle in ("r.yaml:7: unknown key 'stages.0.rl.max_stpes'",                         # schema
                   "r.yaml:8: stages.1.sft.micro_batch_size", "does not divide batch_size 8",  # micro-batch rule
                   "stages.2.rl.sampling.top_p",                                             # sampling range
                   f"r.yaml:4: model.path: '{tmp_path / 'no-model'}' does not exist",       # model folder
                   f"stages.0.data.path: {tmp_path / 'gone.jsonl'}: file not found",        # data file
                   f"stages.2.data.path: {bad_tasks}:1: missing field 'answer'"):           # unjudgeable
        assert needle in err, (needle, err)
    assert f"stages.1.data.path: {bad_tasks}:1: missing field" not in err  # SFT data is not judged


def test_a_valid_schema_lists_model_tasks_database_and_text_problems_together(rlvr_cli, tmp_path, tiny_dir):
    tasks = jsonl(tmp_path / "t.jsonl", {"prompt": "caf\u00e9 1+1", "answer": "2"},
                  {"prompt": "q", "kind": "sql", "gold_sql": "SELECT 1", "database": "nope.sqlite"},
                  {"prompt": "write f", "kind": "code"})
    p = recipe(tmp_path, tiny_dir, f"{{type: grpo, data: {{type: jsonl, path: {tasks}}}}}",
               f"{{type: dpo, pairs: {{path: {tmp_path / 'pairs.jsonl'}}}}}")
    err = refused(rlvr_cli, "validate", p)
    for needle in ("3 problems found", f"{tasks}:2: field 'database': database file {tmp_path / 'nope.sqlite'} not found",
                   f"{tasks}:3: missing field 'tests'", f"{tasks}:1: field 'prompt': character 'é' (U+00E9)",
                   "stages.1.pairs.path", "pairs.jsonl: file not found"):
        assert needle in err, (needle, err)


def test_the_system_prompt_and_demonstrations_are_checked_against_the_tokenizer(rlvr_cli, tmp_path, tiny_dir):
    demos = jsonl(tmp_path / "d.jsonl", {"prompt": "1+1", "completion": "2\t(two)"})
    p = recipe(tmp_path, tiny_dir, f"{{type: sft, max_steps: 1, data: {{type: jsonl, path: {demos}}}}}")
    p.write_text(p.read_text() + "system_prompt: \"Réponds.\"\n")
    err = refused(rlvr_cli, "validate", p)
    assert f"{demos}:1: field 'solution': character '\\t' (U+0009)" in err, err
    assert "field 'messages[0] (system)': character 'é' (U+00E9)" in err, err


def test_a_micro_batch_that_divides_the_batch_or_exceeds_it_is_accepted(rlvr_cli, tmp_path, tiny_dir):
    for micro in (4, 8, 64):
        p = recipe(tmp_path, tiny_dir,
                   f"{{type: sft, batch_size: 8, micro_batch_size: {micro}, data: {{families: [add2], n: 4}}}}")
        code, _, err = rlvr_cli("validate", p)
        assert code == 0, err


SQL_MISSING_DB = {"id": "s1", "prompt": "q", "kind": "sql", "gold_sql": "SELECT 1", "database": "nope.sqlite"}


def test_verify_refuses_a_sql_task_whose_database_is_missing(rlvr_cli, tmp_path):
    """It used to judge every completion 'infra' and exit 0."""
    tasks = jsonl(tmp_path / "t.jsonl", {"id": "m1", "prompt": "1+1", "answer": "2"}, SQL_MISSING_DB)
    comps = jsonl(tmp_path / "c.jsonl", {"task_id": "s1", "completion": "```sql\nSELECT 1\n```"})
    err = refused(rlvr_cli, "verify", "--tasks", tasks, "--completions", comps, "--out", tmp_path / "v.jsonl")
    assert f"{tasks}:2: field 'database': database file {tmp_path / 'nope.sqlite'} not found" in err, err
    assert not (tmp_path / "v.jsonl").exists()


@pytest.mark.parametrize("cmd", ["eval", "generate"])
def test_eval_and_generate_refuse_unjudgeable_tasks_before_loading_the_model(rlvr_cli, tmp_path, cmd, monkeypatch):
    from rlvr.models import load

    monkeypatch.setattr(load, "load_pretrained", lambda *a, **k: pytest.fail("the model was loaded"))
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    tasks = jsonl(tmp_path / "t.jsonl", {"prompt": "1+1", "answer": "2"}, {"prompt": "write f", "kind": "code"})
    extra = ["--out", tmp_path / "o.jsonl"] if cmd == "generate" else []
    err = refused(rlvr_cli, cmd, "--model", model, "--tasks", tasks, *extra)
    assert f"{tasks}:2: missing field 'tests'" in err, err


@pytest.mark.parametrize("cmd", ["eval", "generate"])
def test_eval_and_generate_refuse_text_the_tokenizer_cannot_encode(rlvr_cli, tmp_path, tiny_dir, cmd):
    tasks = jsonl(tmp_path / "t.jsonl", {"prompt": "1+1", "answer": "2"}, {"prompt": "3 \u2212 1", "answer": "2"})
    extra = ["--out", tmp_path / "o.jsonl"] if cmd == "generate" else []
    err = refused(rlvr_cli, cmd, "--model", tiny_dir, "--tasks", tasks, *extra)
    assert f"{tasks}:2: field 'prompt': character '−' (U+2212)" in err, err


def test_sft_demonstrations_max_length_cuts_are_found_before_any_stage_runs(rlvr_cli, tmp_path, tiny_dir):
    """A later SFT stage whose max_length leaves its demonstrations no completion token is refused by validate
    (and so before the stages in front of it run), naming the key, its line and the length that fits; one that
    only cuts their ends is a warning."""
    p = recipe(tmp_path, tiny_dir, "{type: grpo, data: {families: [add2], n: 4}}",
               "{type: sft, max_length: 8, data: {families: [add2], n: 6}}")
    err = refused(rlvr_cli, "validate", p)
    assert "r.yaml:8: stages.1.max_length: the 6 demonstrations of stages.1.data: max_length 8: 6 of 6" in err, err
    assert "keep no completion token" in err and "raise max_length to fit" in err
    p = recipe(tmp_path, tiny_dir, "{type: sft, max_length: 12, data: {families: [add2], n: 6}}")
    code, out, err = rlvr_cli("validate", p)
    assert code == 0, (out, err)
    assert "stages.0.max_length" in " ".join((out + err).split()) and "lose the end of their completion" in out + err


def test_a_token_budget_that_cuts_or_punishes_the_worked_solutions_is_a_warning(rlvr_cli, tmp_path, tiny_dir):
    """mul31's worked solutions are 35-41 tokens with the end of turn: a 30-token budget cuts every right
    answer; DAPO's overlong term (added by the loss) at 44 tokens ramps from 36, where most of them end."""
    p = recipe(tmp_path, tiny_dir,
               "{type: grpo, name: a, sampling: {max_new_tokens: 30}, data: {families: [mul31], n: 50}}",
               "{type: dapo, name: b, sampling: {max_new_tokens: 44}, data: {families: [mul31], n: 50}}",
               "{type: grpo, name: c, sampling: {max_new_tokens: 64}, rewards: [{name: correct}, {name: overlong}], "
               "data: {families: [mul31], n: 50}}")
    code, out, err = rlvr_cli("validate", p)
    text = " ".join((out + err).split())
    assert code == 0, text
    assert "stages.0.sampling.max_new_tokens: 100% of the worked solutions of stages.0.data" in text, text
    assert "are longer than the budget of 30 tokens: their right answers are cut and score nothing" in text
    assert "stages.1.rewards.1: the overlong term's ramp starts at 36 tokens" in text, text
    assert "stages.1.sampling.max_new_tokens" not in text  # 44 holds every answer
    assert "stages.2." not in text  # a ramp from 52 tokens is beyond every answer
