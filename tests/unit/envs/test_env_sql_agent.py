"""The SQL agent environment: read-only query tool, final query compared by rows, in the closed loop."""

import json
import os
import sys

import pytest

from rlvr.config.agent import AgentLoopConfig
from rlvr.envs import SqlAgentEnv, generate_sql_tasks
from rlvr.envs.calculator import compact_call
from rlvr.envs.sql_agent import answer_sql
from rlvr.errors import DataError
from rlvr.models.tiny import build_tiny
from rlvr.rollout.multiturn import MultiTurnCollector
from rlvr.verifiers.env import EnvPredicateVerifier

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "rollout"))
from agent_fakes import ScriptedEngine

TASKS = generate_sql_tasks(6, seed=1)
V = EnvPredicateVerifier()


def query(sql):
    return compact_call("query", sql=sql)


def test_demonstrations_pass_and_a_wrong_or_broken_final_query_fails():
    for t in TASKS:
        assert V.verify(t, t.solution).outcome == "pass"
    t = TASKS[0]  # a count question
    assert V.verify(t, ["SELECT COUNT(*) FROM emp"]).details["goal_failures"] == ["rows differ"]
    assert V.verify(t, ["SELECT nope FROM emp"]).details["goal_failures"] == ["the final query failed"]


@pytest.mark.parametrize("sql, why", [
    ("DROP TABLE emp", "not allowed"), ("SELECT * FROM sqlite_master", "reading sqlite_master"),
    ("SELECT 1; SELECT 2", "one statement"), ("ATTACH ':memory:' AS x", "not allowed"),
    ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c", "interrupted"),
])
def test_the_query_tool_is_read_only_and_bounded(sql, why):
    env = SqlAgentEnv()
    env.reset(TASKS[0])
    out = env.step(query(sql))
    assert why in out.observation and not out.done and env.tool_errors == 1
    assert env.conn.execute("SELECT COUNT(*) FROM emp").fetchone()[0] > 0  # the table is still there


def test_the_answer_is_the_fenced_sql_or_the_whole_turn():
    assert answer_sql("Here:\n```sql\nSELECT 1;\n```\nthanks") == "SELECT 1"
    assert answer_sql(" SELECT 2 ") == "SELECT 2"


def test_bad_gold_is_a_data_error():
    bad = type(TASKS[0]).from_dict({**TASKS[0].to_dict(), "gold": {**TASKS[0].gold, "goal": {"rows": 3}}})
    with pytest.raises(DataError, match="rows"):
        SqlAgentEnv().reset(bad)


def test_sql_tasks_run_in_the_closed_loop_with_replay_agreement():
    _, tok = build_tiny(size="test")
    script = {t.prompt: json.loads(t.solution) for t in TASKS[:3]}
    script.update({t.prompt: [query("SELECT name FROM emp"), "```sql\nSELECT 0\n```"] for t in TASKS[3:]})
    loop = AgentLoopConfig(max_turns=3, max_new_tokens=120, max_total_tokens=1500)
    trajs = MultiTurnCollector(ScriptedEngine(tok, script), tok, loop).collect(TASKS, 1)
    assert [t.verdict.outcome for t in trajs] == ["pass"] * 3 + ["wrong"] * 3
    assert all(t.end == "final" and not t.verdict.details.get("replay_disagrees") for t in trajs)
    assert "id | name | dept | salary" in tok.decode(trajs[0].ids)  # the tool's rows came back to the policy
