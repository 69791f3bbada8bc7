"""kvchain: the oracle's 31 dependent turns pass, each turn needs the previous observation, the
checklist climbs one link at a time, bad gold is a clear error, and the tiny context fits a demo."""

import json

import pytest

from rlvr.config.data import BuiltinEnvTasks
from rlvr.data.sources import load_task_source
from rlvr.envs.kvchain import KVChainEnv, generate_kvchain_tasks
from rlvr.errors import DataError
from rlvr.verifiers.env import EnvPredicateVerifier


def test_oracle_passes_in_31_dependent_turns():
    task = generate_kvchain_tasks(1, seed=0)[0]
    turns = json.loads(task.solution)
    assert len(turns) == 31
    env = KVChainEnv()
    env.reset(task)
    scores, obs = [env.progress()], []
    for t in turns:
        res = env.step(t)
        obs.append(res.observation)
        scores.append(env.progress())
    assert res.done and KVChainEnv.check_goal(env.end_state(), task.gold["goal"]).met
    chain = task.gold["init"]["chain"]
    # each observation names the key the next turn reads (terse: the bare value), the 30th the answer
    for k in range(29):
        assert obs[k] == chain[k + 1] == turns[k + 1]
    assert obs[29] == task.gold["goal"]["answer"]
    assert scores == [i / 31 for i in range(32)]
    assert EnvPredicateVerifier().verify(task, task.solution).passed  # the replaying verifier agrees


def test_skipping_a_link_fails_and_stalls_the_checklist():
    task = generate_kvchain_tasks(1, seed=1)[0]
    turns = json.loads(task.solution)
    env = KVChainEnv()
    env.reset(task)
    for t in turns[:3] + turns[4:]:  # skip the 4th link: the chain position stays at 3
        env.step(t)
    assert env.end_state()["reached"] == 3
    assert env.progress() == pytest.approx((3 + 1) / 31)  # the answer was still right (read at the end)


def test_the_tool_markup_works_too_and_a_demo_fits_the_tiny_context():
    from rlvr.envs.calculator import compact_call
    from rlvr.models.tiny import build_tiny
    from rlvr.rollout.multiturn import demo_example

    task = generate_kvchain_tasks(1, seed=2)[0]
    env = KVChainEnv()
    env.reset(task)
    first = task.gold["init"]["chain"][0]
    assert env.step(compact_call("get", key=first)).observation == task.gold["init"]["store"][first]
    _, tok = build_tiny(size="test")
    ids, mask = demo_example(tok, task, "tool", 4096)
    assert len(ids) < 512 and sum(mask) > 31  # 31 turns in the default context


def test_source_options_and_bad_gold():
    tasks = load_task_source(BuiltinEnvTasks(env="kvchain", n=3, hops=5, split="heldout"))
    assert all(len(json.loads(t.solution)) == 6 and t.split == "heldout" for t in tasks)
    with pytest.raises(DataError, match="not in the store"):
        KVChainEnv.validate_gold({"init": {"store": {"a1": "5"}, "chain": ["b2"]}, "goal": {"answer": "5"}})
    with pytest.raises(DataError, match="hops"):
        generate_kvchain_tasks(1, hops=0)
