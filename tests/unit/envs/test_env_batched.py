"""BatchedEnv: N envs stepped together, finished ones skipped, one failure isolated."""

import json

import pytest

from rlvr.envs import BatchedEnv, FilesEnv, generate_files_tasks, generate_kvstore_tasks, make_env
from rlvr.errors import DataError


def test_batch_runs_mixed_envs_to_completion_skipping_finished_ones():
    tasks = generate_files_tasks(2, seed=9) + generate_kvstore_tasks(2, seed=9)
    plans = [json.loads(t.solution) for t in tasks]
    batch = BatchedEnv()
    obs = batch.reset(tasks)
    assert len(obs) == 4 and all(o.text.startswith(t.prompt) for o, t in zip(obs, tasks))
    step = 0
    while not batch.all_done:
        before = batch.done
        actions = [None if d else plan[step] for d, plan in zip(before, plans)]
        results = batch.step(actions)
        assert [r is None for r in results] == before  # finished slots are skipped
        step += 1
    assert step == max(len(p) for p in plans)
    assert all(g.met for g in batch.goal_results())
    assert [s.keys() for s in batch.end_states()] == [{"files"}, {"files"}, {"store"}, {"store"}]


def test_action_count_must_match_and_live_envs_need_an_action():
    batch = BatchedEnv()
    batch.reset(generate_files_tasks(2, seed=1))
    with pytest.raises(ValueError, match="got 1 actions for 2"):
        batch.step(["x"])
    with pytest.raises(ValueError, match="environment 1 is not done"):
        batch.step(["done", None])


def test_one_breaking_env_does_not_stop_the_batch():
    class Broken(FilesEnv):
        def step(self, action_text):
            raise RuntimeError("disk on fire")

    def factory(task, limits):
        return Broken(limits) if task.id.endswith("-0") else make_env(task, limits)

    tasks = generate_files_tasks(2, seed=1)
    batch = BatchedEnv(factory=factory)
    batch.reset(tasks)
    r = batch.step(['<tool>{"name": "list"}</tool>'] * 2)
    assert r[0].done and "disk on fire" in r[0].info["error"] and not r[1].done
    assert batch.done == [True, False]


def test_a_raising_tool_is_an_error_observation_not_a_broken_env():
    class Raising(FilesEnv):
        def tool_list(self, dir):
            raise RuntimeError("disk on fire")

    batch = BatchedEnv(factory=lambda task, limits: Raising(limits))
    batch.reset(generate_files_tasks(1, seed=1))
    (r,) = batch.step(['<tool>{"name": "list"}</tool>'])
    assert not r.done and "error" not in r.info
    assert r.observation == "<tool_output>error: tool list failed (RuntimeError)</tool_output>"
    assert r.info["calls"] == [{"tool": "list", "ok": False, "error": "crash"}]
    assert batch.envs[0].tool_errors == 1 and batch.done == [False]


def test_unknown_env_name_is_a_data_error():
    t = generate_files_tasks(1)[0]
    t.gold["env"] = "casino"
    with pytest.raises(DataError, match="unknown environment 'casino'"):
        BatchedEnv().reset([t])
