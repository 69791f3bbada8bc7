"""The virtual filesystem env: path rules, tools, goal predicate, generator, and no host access."""

import builtins
import io
import json
import os

import pytest

from rlvr.data.types import Task
from rlvr.envs import FilesEnv, generate_files_tasks
from rlvr.envs.base import PolicyViolation, ToolError
from rlvr.envs.files import normalise_path
from rlvr.envs.tools import ToolCall


def call(name, **args):
    return ToolCall(name, args).render()


def env_with(files, readonly=(), goal=None, budget=20):
    gold = {"env": "files", "budget": budget, "init": {"files": files, "readonly": list(readonly)},
            "goal": goal or {"files": {"x.txt": None}}}
    env = FilesEnv()
    env.reset(Task(id="f", prompt="p", kind="env", gold=gold))
    return env


@pytest.mark.parametrize("path, want", [
    ("a.txt", "a.txt"), ("./a.txt", "a.txt"), ("dir//sub/./f.md", "dir/sub/f.md"), ("a-b_c.d", "a-b_c.d"),
])
def test_normalise_accepts_relative_paths(path, want):
    assert normalise_path(path) == want


@pytest.mark.parametrize("path, kind", [
    ("../x", "path_traversal"), ("a/../../etc/passwd", "path_traversal"), ("a/..", "path_traversal"),
    ("/etc/passwd", "path_traversal"), ("~/.ssh/id_rsa", "path_traversal"), ("C:/Windows", "path_traversal"),
    ("..\\..\\x", "path_traversal"), ("a.txt\x00../../etc", "path_traversal"), ("a\nb", "path_traversal"),
    (".done", "reserved"), ("status/.goal", "reserved"), (".rlvr/gold.json", "reserved"),
])
def test_normalise_refuses_traversal_and_reserved_names(path, kind):
    with pytest.raises(PolicyViolation) as e:
        normalise_path(path)
    assert e.value.kind == kind


@pytest.mark.parametrize("path", ["", "a b.txt", "a%2f..", "x" * 300, "/".join("d" * 9), "é.txt"])
def test_normalise_malformed_paths_are_ordinary_errors(path):
    with pytest.raises(ToolError):
        normalise_path(path)


def test_tools_list_read_write_move():
    env = env_with({"a.txt": "A", "docs/b.txt": "B", "docs/deep/c.txt": "C"})
    out = env.step(call("list") + call("list", dir="docs") + call("read", path="docs/b.txt")).observation
    assert out == ("<tool_output>a.txt\ndocs/</tool_output><tool_output>b.txt\ndeep/</tool_output>"
                   "<tool_output>B</tool_output>")
    env.step(call("write", path="new/n.txt", content="N") + call("move", src="a.txt", dst="docs/a2.txt"))
    assert env.end_state() == {"files": {"docs/a2.txt": "A", "docs/b.txt": "B", "docs/deep/c.txt": "C",
                                         "new/n.txt": "N"}}


@pytest.mark.parametrize("action, message", [
    (call("read", path="nope.txt"), "error: no such file: nope.txt"),
    (call("read", path="docs"), "(it is a folder)"),
    (call("list", dir="nope"), "error: no such folder: nope"),
    (call("write", path="docs", content="x"), "error: docs is a folder"),
    (call("write", path="a.txt/x", content="x"), "error: a.txt is a file, not a folder"),
    (call("move", src="a.txt", dst="docs/b.txt"), "error: destination exists"),
    (call("move", src="zz", dst="yy"), "error: no such file: zz"),
])
def test_tool_errors_are_shown_and_are_not_violations(action, message):
    env = env_with({"a.txt": "A", "docs/b.txt": "B"})
    r = env.step(action)
    assert message in r.observation and not r.done and not env.violations and not env.format_errors


def test_readonly_files_cannot_be_written_or_moved():
    for action in (call("write", path="a.txt", content="0"), call("move", src="a.txt", dst="b.txt")):
        env = env_with({"a.txt": "A"}, readonly=["a.txt"])
        r = env.step(action)
        assert r.done and env.violations[0].kind == "protected" and env.end_state()["files"] == {"a.txt": "A"}


def test_quota_limits_files_and_size():
    env = env_with({f"f{i}.txt": "x" * 3000 for i in range(63)}, budget=100)
    r = env.step(call("write", path="g.txt", content="y") + call("write", path="h.txt", content="y"))
    assert "too many files" in r.observation
    env = env_with({f"f{i}.txt": "x" * 3300 for i in range(60)}, budget=100)  # 198,000 of 200,000 chars
    r = env.step(call("write", path="f0.txt", content="z" * 5400))  # +2,100 -> over the cap
    assert "the filesystem is full" in r.observation and env.end_state()["files"]["f0.txt"] == "x" * 3300


def test_goal_predicate_strips_whitespace_and_reports_without_values():
    goal = {"files": {"t.txt": "42", "gone.txt": None, "m.txt": "x"}}
    res = FilesEnv.check_goal({"files": {"t.txt": " 42\n", "gone.txt": "", "m.txt": "y"}}, goal)
    assert not res.met and res.failures == ("gone.txt: should not exist", "m.txt: content differs")
    assert "42" not in " ".join(res.failures)
    assert FilesEnv.check_goal({"files": {"t.txt": "42", "m.txt": "x"}}, goal).met


def test_traversal_never_touches_the_host_filesystem(monkeypatch):
    env = env_with({"a.txt": "A"}, budget=50)
    env.limits = type(env.limits)(end_on_violation=False)

    def boom(*a, **k):
        raise AssertionError(f"host filesystem touched: {a!r}")

    for mod, name in [(builtins, "open"), (io, "open"), (os, "open"), (os, "listdir"), (os, "scandir"),
                      (os, "stat"), (os, "remove"), (os, "rename"), (os, "replace"), (os, "mkdir")]:
        monkeypatch.setattr(mod, name, boom)
    turn = (call("read", path="../../../../etc/passwd") + call("write", path="/tmp/escape.txt", content="x")
            + call("move", src="a.txt", dst="../../a.txt") + call("list", dir="/"))
    r = env.step(turn)
    monkeypatch.undo()
    assert [v.kind for v in env.violations] == ["path_traversal"] * 4
    assert r.observation.count("refused:") == 4 and env.end_state() == {"files": {"a.txt": "A"}}


def test_generator_is_deterministic_and_its_solutions_pass():
    a, b = generate_files_tasks(6, seed=3), generate_files_tasks(6, seed=3)
    c = generate_files_tasks(6, seed=4)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    assert [t.gold for t in a] != [t.gold for t in c]
    assert {t.family for t in a} == {"files/rename_sum", "files/merge"}
    for t in a + c:
        assert t.kind == "env" and t.gold["env"] == "files"
        assert set(t.gold) == {"env", "init", "goal", "budget"}
        env = FilesEnv()
        obs = [env.reset(t).text]
        for turn in json.loads(t.solution):
            obs.append(env.step(turn).observation)
        assert env.goal_result().met and not env.violations and not env.leaks
        secrets = FilesEnv.secret_values(t.gold)
        assert secrets and all(len(s) >= 3 for s in secrets)
        assert not any(s in o for s in secrets for o in obs[:1] + [t.prompt])
