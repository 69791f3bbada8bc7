"""Exit status of the CLI: 3 when nothing was judged, 130 when interrupted, 2 with one line (no traceback)
for every usage error. Run in-process (``rlvr_cli``: the command's own code path, no Python start)."""

import json

import pytest

# Every verdict is infra: the gold query fails on the database the task builds (the task itself looks judgeable).
INFRA_TASK = {"id": "q1", "kind": "sql", "prompt": "List the names.", "gold_sql": "SELECT nope FROM t",
              "schema_sql": "CREATE TABLE t (name TEXT); INSERT INTO t VALUES ('a');"}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_eval_exits_3_when_every_verdict_is_infra_and_still_writes_the_results(rlvr_cli, tmp_path, tiny_dir,
                                                                              monkeypatch):
    """A verifier that fails on every completion (its worker cannot start, say): the tiny model's text never
    reaches a real verifier's infra path before its format check, so the judge itself is replaced."""
    import rlvr.monitoring.scoring as scoring
    from rlvr.verifiers.base import Verdict

    monkeypatch.setattr(scoring, "default_judge", lambda workers=0: lambda tasks, texts: [Verdict.infra("down")
                                                                                      for _ in texts])
    out = tmp_path / "res.json"
    code, _, err = rlvr_cli("eval", "--model", tiny_dir, "--tasks", "builtin:add2:3", "--max-new-tokens", 2,
                            "--out", out)
    assert code == 3, err
    assert "every verdict (3)" in err and "'infra'" in err and "Traceback" not in err
    assert json.loads(out.read_text())["outcomes"] == {"infra": 3}


def test_eval_exits_0_when_something_was_judged(rlvr_cli, tiny_dir):
    code, _, err = rlvr_cli("eval", "--model", tiny_dir, "--tasks", "builtin:add2:2", "--max-new-tokens", 2)
    assert code == 0, err


def test_verify_exits_3_when_every_verdict_is_infra(rlvr_cli, tmp_path):
    tasks = write_jsonl(tmp_path / "t.jsonl", [INFRA_TASK])
    comps = write_jsonl(tmp_path / "c.jsonl", [{"task_id": "q1", "completion": "```sql\nSELECT name FROM t\n```"}])
    code, _, err = rlvr_cli("verify", "--tasks", tasks, "--completions", comps, "--out", tmp_path / "v.jsonl",
                            "--workers", 0)
    assert code == 3, err
    assert (tmp_path / "v.jsonl").exists()


def test_an_interrupted_stage_exits_130_and_prints_the_resume_command(rlvr_cli, tmp_path, monkeypatch):
    """The lifecycle raises Interrupted after writing its checkpoint (tests/integration/test_signals.py sends a
    real SIGTERM to a real process); the CLI turns it into exit 130 and the resume command."""
    import rlvr.commands.run as run_mod
    from rlvr.errors import Interrupted

    def stopped(*a, **k):
        raise Interrupted("sft", 3, str(tmp_path / "ckpt"))

    monkeypatch.setattr(run_mod, "run_command", stopped)
    monkeypatch.setattr(run_mod, "stage_command", stopped)
    for args in (["run", "r.yaml"], ["sft", "r.yaml"]):
        code, _, err = rlvr_cli(*args)
        assert code == 130, err
        assert "stopped: stage sft at step 3" in err
        assert f"resume with: rlvr {' '.join(args)} --resume" in err


def _missing_model(tmp_path):
    return str(tmp_path / "no-such-model")


TASKS = ["--tasks", "builtin:add2:2"]


@pytest.mark.parametrize("args, needle", [
    (["eval", *TASKS, "--max-new-tokens", "0"], "--max-new-tokens 0: must be >= 1"),
    (["eval", *TASKS, "--n", "0"], "--n 0: must be >= 1"),
    (["eval", *TASKS, "--temperature", "-1"], "--temperature -1.0: must be >= 0"),
    (["eval", *TASKS, "--workers", "-2"], "--workers -2: must be >= 0"),
    (["eval", *TASKS, "--max-turns", "0"], "--max-turns 0: must be >= 1"),
    (["eval", *TASKS, "--n", "4", "--temperature", "0"], "--n 4 with --temperature 0 would repeat"),
    (["eval", "--tasks", "builtin:nosuchfamily"], "unknown arithmetic family ['nosuchfamily']; choose from"),
    (["eval", "--tasks", "builtin:add2,nope:5"], "unknown arithmetic family ['nope']"),
    (["eval", "--tasks", "builtin:add2:0"], "N must be a whole number >= 1"),
    (["eval", "--tasks", "builtin:add2:many"], "N must be a whole number >= 1"),
    (["eval", "--tasks", "builtin:add2:3:4"], "expected builtin:FAMILY"),
    (["eval", "--tasks", "builtin:"], "expected builtin:FAMILY"),
    (["eval", "--tasks", "builtin_env:chess"], "'files', 'kvstore'"),
    (["eval", "--tasks", "builtin_env:"], "expected builtin_env:ENV"),
    (["eval", "--tasks", "no/such/tasks.jsonl"], "no such file; expected a tasks JSONL"),
    (["generate", *TASKS, "--out", "o.jsonl", "--n", "0"], "--n 0: must be >= 1"),
    (["generate", *TASKS, "--out", "o.jsonl", "--temperature", "-0.5"], "--temperature -0.5: must be >= 0"),
    (["generate", *TASKS, "--out", "o.jsonl", "--max-new-tokens", "0"], "--max-new-tokens 0: must be >= 1"),
    (["generate", "--tasks", "builtin:zzz", "--out", "o.jsonl"], "unknown arithmetic family ['zzz']"),
    (["screen", "MODEL", *TASKS, "--max-new-tokens", "0"], "--max-new-tokens 0: must be >= 1"),
    (["screen", "MODEL", *TASKS, "--group-size", "1"], "--group-size must be >= 2"),
    (["screen", "MODEL", *TASKS, "--temperature", "0"], "--temperature must be > 0"),
    (["verify", "--tasks", "t.jsonl", "--completions", "c.jsonl", "--out", "v.jsonl", "--workers", "-1"],
     "--workers -1: must be >= 0"),
    (["verify", "--tasks", "t.jsonl", "--completions", "c.jsonl", "--out", "v.jsonl", "--timeout", "0"],
     "--timeout 0.0: must be > 0"),
])
def test_each_usage_error_is_one_line_naming_the_flag(rlvr_cli, tiny_dir, args, needle):
    args = [tiny_dir if a == "MODEL" else a for a in args]
    if args[0] in ("eval", "generate"):
        args[1:1] = ["--model", tiny_dir]
    code, out, err = rlvr_cli(*args)
    assert code == 2, (code, err)
    assert "Traceback" not in err + out
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and needle in lines[0], (needle, err)


@pytest.mark.parametrize("cmd", ["eval", "generate", "screen"])
def test_a_missing_model_folder_is_one_line_naming_it(rlvr_cli, tmp_path, cmd):
    missing = tmp_path / "no-such-model"
    args = {"eval": ["eval", "--model", missing, *TASKS], "screen": ["screen", missing, *TASKS],
            "generate": ["generate", "--model", missing, *TASKS, "--out", tmp_path / "o.jsonl"]}[cmd]
    code, out, err = rlvr_cli(*args)
    assert code == 2 and "Traceback" not in err + out
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(missing) in lines[0], err


def test_a_validation_error_no_command_checked_is_still_one_line(rlvr_cli, monkeypatch, tiny_dir):
    """The safety net under the flag checks: a config value built from arguments and refused by pydantic."""
    import rlvr.commands.evaluate as ev
    from rlvr.config.agent import AgentLoopConfig

    monkeypatch.setattr(ev, "eval_command", lambda *a, **k: AgentLoopConfig(max_turns=0))
    code, out, err = rlvr_cli("eval", "--model", tiny_dir, *TASKS)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in out + err and len(lines) == 1, err
    assert lines[0].startswith("error: AgentLoopConfig: max_turns must be >= 1"), err
