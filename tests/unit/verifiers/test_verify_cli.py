"""`rlvr verify` and `rlvr probe` end to end, through the real CLI entry point in a subprocess."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rlvr
from rlvr.verifiers.sql import build_database

SRC = str(Path(rlvr.__file__).resolve().parents[1])


def rlvr_cli(*args, cwd=None, timeout=120):
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "rlvr.cli", *args], capture_output=True, text=True, cwd=cwd, check=False,
                          env=env, timeout=timeout)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "dbs").mkdir()
    build_database("CREATE TABLE t(a INT, n TEXT); INSERT INTO t VALUES (1,'x'),(2,'y'),(3,'z');",
                   str(tmp_path / "dbs" / "t.sqlite"))
    tasks = [
        {"id": "m1", "kind": "math", "prompt": "1+1?", "answer": "2"},
        {"id": "m2", "kind": "math", "prompt": "half?", "answer": "\\frac{1}{2}"},
        {"id": "s1", "kind": "sql", "prompt": "names > 1", "database": "dbs/t.sqlite",  # relative to the file
         "gold_sql": "SELECT n FROM t WHERE a > 1"},
        {"id": "s2", "kind": "sql", "prompt": "count", "schema_sql": "CREATE TABLE u(x); INSERT INTO u VALUES (5);",
         "gold_sql": "SELECT x FROM u"},
        {"id": "c1", "kind": "code", "prompt": "def add(a, b):\n", "entry_point": "add",
         "tests": "def check(candidate):\n    assert candidate(2, 3) == 5\n"},
    ]
    completions = [
        {"task_id": "m1", "completion": "so \\boxed{2}"},
        {"task_id": "m2", "completion": "\\boxed{0.5}"},
        {"task_id": "m1", "completion": "\\boxed{2} or \\boxed{3}"},
        {"task_id": "s1", "completion": "```sql\nSELECT n FROM t WHERE a >= 2\n```"},
        {"task_id": "s1", "completion": "DELETE FROM t"},
        {"task_id": "s2", "completion": "SELECT 5"},
        {"task_id": "c1", "completion": "```python\ndef add(a, b):\n    return a + b\n```"},
        {"task_id": "c1", "completion": "def add(a, b):\n    return a - b"},
        {"task_id": "m2", "completion": "no idea"},
    ]
    write_jsonl(tmp_path / "tasks.jsonl", tasks)
    write_jsonl(tmp_path / "comps.jsonl", completions)
    return tmp_path


def test_verify_writes_verdicts_in_input_order(files):
    out = files / "out" / "verdicts.jsonl"
    r = rlvr_cli("verify", "--tasks", str(files / "tasks.jsonl"), "--completions", str(files / "comps.jsonl"),
                 "--out", str(out), "--workers", "2", "--timeout", "60")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(x["task_id"], x["outcome"]) for x in rows] == [
        ("m1", "pass"), ("m2", "pass"), ("m1", "wrong"), ("s1", "pass"), ("s1", "violation"), ("s2", "pass"),
        ("c1", "pass"), ("c1", "wrong"), ("m2", "format")]
    assert all(set(x) == {"task_id", "reward", "passed", "outcome", "seconds"} for x in rows)
    assert [x["reward"] for x in rows] == [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert "verified 9 completions" in r.stdout and "pass 5" in r.stdout
    assert [p.name for p in out.parent.iterdir()] == ["verdicts.jsonl"]  # atomic: no temp file left


def test_verify_inline_with_details(files):
    out = files / "v.jsonl"
    r = rlvr_cli("verify", "--tasks", str(files / "tasks.jsonl"), "--completions", str(files / "comps.jsonl"),
                 "--out", str(out), "--workers", "0", "--details")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[2]["details"]["reason"].startswith("hedge") and rows[4]["details"]["reason"].startswith("only SELECT")


BAD_LINES = [
    ({"task_id": "nope", "completion": "x"}, "comps.jsonl:2: unknown task_id 'nope'"),
    ({"task_id": "m1"}, "comps.jsonl:2: missing required field 'completion'"),
    ({"completion": "x"}, "comps.jsonl:2: missing required field 'task_id'"),
    ({"task_id": "m1", "completion": 3}, "comps.jsonl:2: field 'completion' must be"),
    ("{not json", "comps.jsonl:2: malformed JSON"),
]


def _write_bad(files, bad_line):
    comps = files / "comps.jsonl"
    good = json.dumps({"task_id": "m1", "completion": "\\boxed{2}"})
    comps.write_text(good + "\n" + (bad_line if isinstance(bad_line, str) else json.dumps(bad_line)) + "\n")
    return comps


@pytest.mark.parametrize("bad_line,message", BAD_LINES, ids=["unknown-id", "no-completion", "no-task-id",
                                                             "not-text", "bad-json"])
def test_bad_completion_lines_name_file_and_line(files, bad_line, message):
    from rlvr.commands.verify import run_verify
    from rlvr.errors import DataError

    comps = _write_bad(files, bad_line)
    with pytest.raises(DataError) as e:
        run_verify(str(files / "tasks.jsonl"), str(comps), str(files / "v.jsonl"), workers=0)
    assert message in str(e.value)
    assert not (files / "v.jsonl").exists()


def test_cli_prints_the_error_as_one_paragraph(files):
    comps = _write_bad(files, BAD_LINES[0][0])
    r = rlvr_cli("verify", "--tasks", str(files / "tasks.jsonl"), "--completions", str(comps),
                 "--out", str(files / "v.jsonl"))
    assert r.returncode == 2
    assert BAD_LINES[0][1] in " ".join(r.stderr.split()) and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3


def test_bad_task_line_names_file_and_line(files):
    from rlvr.commands.verify import run_verify
    from rlvr.errors import DataError

    (files / "tasks.jsonl").write_text(json.dumps({"id": "m1", "kind": "math", "prompt": "?", "answer": "2"}) + "\n"
                                       + json.dumps({"id": "m2", "kind": "poetry", "prompt": "?"}) + "\n")
    with pytest.raises(DataError, match=r"tasks.jsonl:2: field 'kind'"):
        run_verify(str(files / "tasks.jsonl"), str(files / "comps.jsonl"), str(files / "v.jsonl"), workers=0)


def test_probe_sql_prints_the_table_and_exits_zero(tmp_path):
    r = rlvr_cli("probe", "sql", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "drop_table" in r.stdout and "violation" in r.stdout and "probes ok" in r.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran


def test_probe_unknown_kind(tmp_path):
    r = rlvr_cli("probe", "chess", cwd=tmp_path)
    assert r.returncode == 2 and "unknown probe kind 'chess'" in r.stderr


def test_verify_option_sets_the_math_tolerance(tmp_path):
    """--option math.rel_tol=1e-4 reaches the verifier: 1.00005 for 1 passes with it, not without;
    an out-of-range tolerance or a malformed option is refused before any work, naming the option."""
    write_jsonl(tmp_path / "tasks.jsonl", [{"id": "m", "kind": "math", "prompt": "one?", "answer": "1"}])
    write_jsonl(tmp_path / "comps.jsonl", [{"task_id": "m", "completion": "\\boxed{1.00005}"}])
    base = ["verify", "--tasks", str(tmp_path / "tasks.jsonl"), "--completions", str(tmp_path / "comps.jsonl"),
            "--out", str(tmp_path / "v.jsonl"), "--workers", "0"]
    outcomes = []
    for extra in ([], ["--option", "math.rel_tol=1e-4"]):
        r = rlvr_cli(*base, *extra)
        assert r.returncode == 0, r.stderr
        outcomes.append(json.loads((tmp_path / "v.jsonl").read_text())["outcome"])
    assert outcomes == ["wrong", "pass"]
    r = rlvr_cli(*base, "--option", "math.rel_tol=0.01")
    assert r.returncode != 0 and "math.rel_tol" in r.stderr and "1e-4" in r.stderr, r.stderr
    r = rlvr_cli(*base, "--option", "rel_tol=1e-6")
    assert r.returncode != 0 and "KIND.NAME=VALUE" in r.stderr, r.stderr
