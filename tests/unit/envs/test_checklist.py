"""Step scores (process checklists) of the built-in environments, on oracle trajectories by hand."""

import json

from rlvr.envs.calculator import CalculatorEnv, generate_calculator_tasks
from rlvr.envs.kvstore import KVStoreEnv, generate_kvstore_tasks


def replay(env_cls, task):
    env = env_cls()
    env.reset(task)
    scores = [env.progress()]
    for turn in json.loads(task.solution):
        if env.done:
            break
        env.step(turn)
        scores.append(env.progress())
    return scores


def test_kvstore_checklist_rises_to_one_on_the_oracle():
    task = next(t for t in generate_kvstore_tasks(20, seed=3) if t.family.endswith("transfer"))
    scores = replay(KVStoreEnv, task)
    # transfer: 3 goal keys; the untouched third account is right from the start: 1/3; each set adds 1/3
    assert scores[0] == 1 / 3 and scores[-1] == 1.0
    assert all(b >= a for a, b in zip(scores, scores[1:]))


def test_calculator_checklist_counts_plan_results_and_the_answer():
    task = next(t for t in generate_calculator_tasks(40, seed=0, shortcut_rate=0.0) if t.family.endswith("mul_add"))
    scores = replay(CalculatorEnv, task)
    # plan mul, add + the answer: 3 checks -> 0, 1/3 (r1 = x*y), 2/3 (r2 = r1+z), 1 (answered r2)
    assert scores == [0.0, 1 / 3, 2 / 3, 1.0]
