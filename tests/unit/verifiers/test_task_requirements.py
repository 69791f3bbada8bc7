"""What each task kind's verifier needs from a task (``check_task`` beside each verifier), and the refusal
where a task file is read: every kind in the registry, a task missing a field or naming a missing file is
named by its file and line before anything is judged."""

import json

import pytest

from rlvr.data.jsonl import load_tasks, task_from_record
from rlvr.data.types import Task
from rlvr.errors import DataError
from rlvr.verifiers.registry import BUILTIN, refuse_unjudgeable, task_problem, verifier_class

FILES_GOLD = {"env": "files", "init": {"files": {"a.txt": "x"}}, "goal": {"files": {"b.txt": "x"}}}
GOOD = {
    "math": {"prompt": "1+1?", "answer": "2"},
    "code": {"prompt": "write f", "kind": "code", "tests": ["assert f(1) == 2"]},
    "sql": {"prompt": "q", "kind": "sql", "gold_sql": "SELECT 1", "schema_sql": "CREATE TABLE t (a INT)"},
    "env": {"prompt": "copy a to b", "kind": "env", "gold": FILES_GOLD},
}
BAD = [  # (kind, task line, what the message names)
    ("math", {"prompt": "1+1?"}, "missing field 'answer'"),
    ("math", {"prompt": "1+1?", "answer": "  "}, "field 'answer' is '  '"),
    ("code", {"prompt": "write f", "kind": "code"}, "missing field 'tests'"),
    ("code", {"prompt": "write f", "kind": "code", "tests": "x = f(1)"}, "field 'tests': the tests hold no assert"),
    ("code", {"prompt": "write f", "kind": "code", "io_tests": [{"input": "1"}]}, "field 'io_tests': gold['io_tests']"),
    ("sql", {"prompt": "q", "kind": "sql", "database": "x.sqlite"}, "field 'gold_sql'"),
    ("sql", {"prompt": "q", "kind": "sql", "gold_sql": "SELECT 1"}, "field 'database': no database"),
    ("sql", {"prompt": "q", "kind": "sql", "gold_sql": "SELECT 1", "database": "missing.sqlite"},
     "missing.sqlite not found"),
    ("sql", {"prompt": "q", "kind": "sql", "gold_sql": "SELECT 1", "databases": ["ok.sqlite", "gone.sqlite"]},
     "field 'databases': database file"),
    ("env", {"prompt": "p", "kind": "env"}, "an env task needs gold {'env', 'init', 'goal'}"),
    ("env", {"prompt": "p", "kind": "env", "gold": {**FILES_GOLD, "env": "chess"}}, "got env 'chess'"),
    ("env", {"prompt": "p", "kind": "env", "gold": {**FILES_GOLD, "goal": {}}}, "gold['goal']"),
    ("env", {"prompt": "p", "kind": "env", "gold": {**FILES_GOLD, "budget": -1}}, "gold['budget']"),
]


def test_every_registered_kind_declares_what_its_tasks_need():
    for kind in BUILTIN:
        assert callable(getattr(verifier_class(kind), "check_task", None)), kind
    # reasoning_gym tasks come from their task source, not from task lines: its own test below
    assert {k for k, _, _ in BAD} == set(BUILTIN) - {"reasoning_gym"} == set(GOOD)


def test_a_reasoning_gym_task_needs_its_dataset_and_entry():
    check = verifier_class("reasoning_gym").check_task  # pure Python: no reasoning-gym import
    entry = {"question": "1+1?", "answer": "2", "metadata": {}}
    assert check(Task(id="t", kind="reasoning_gym", gold={"dataset": "d", "entry": entry})) is None
    assert "gold.dataset" in check(Task(id="t", kind="reasoning_gym", gold={"entry": entry}))
    assert "gold.entry" in check(Task(id="t", kind="reasoning_gym", gold={"dataset": "d", "entry": {"q": 1}}))
    assert "gold.extract" in check(Task(id="t", kind="reasoning_gym",
                                        gold={"dataset": "d", "entry": entry, "extract": "first_word"}))


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_a_complete_task_of_each_kind_passes(kind):
    assert task_problem(task_from_record(GOOD[kind], "good.jsonl:1")) is None


def test_a_kind_no_verifier_judges_is_named():
    assert "unknown verifier 'chess'" in task_problem(Task(id="t", kind="chess"))


@pytest.mark.parametrize("kind, rec, says", BAD, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(BAD)])
def test_a_task_its_verifier_cannot_judge_is_refused_naming_file_line_and_field(tmp_path, kind, rec, says):
    (tmp_path / "ok.sqlite").write_bytes(b"")
    f = tmp_path / "tasks.jsonl"
    f.write_text(json.dumps(GOOD[kind]) + "\n" + json.dumps(rec) + "\n")
    tasks = load_tasks(f)  # reading alone accepts it: the data layer does not know the verifiers
    with pytest.raises(DataError) as e:
        refuse_unjudgeable(tasks)
    msg = str(e.value)
    assert msg.startswith(f"{f}:2: ") and says in msg, msg
    assert f"{f}:1:" not in msg


def test_every_unjudgeable_line_is_counted_and_the_first_ones_named(tmp_path):
    f = tmp_path / "tasks.jsonl"
    f.write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(8)))
    with pytest.raises(DataError) as e:
        refuse_unjudgeable(load_tasks(f))
    msg = str(e.value)
    assert msg.startswith("8 tasks cannot be judged") and f"{f}:5:" in msg and f"{f}:6:" not in msg
    assert "(and 3 more)" in msg
