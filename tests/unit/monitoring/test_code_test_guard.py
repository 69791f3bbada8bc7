"""Held-out tests and verifier rotation for code tasks, on a small synthetic code task set: a policy that
memorises the asserts it is shown passes the training tests and fails the held-out ones, and the health
monitor names it verifier overfit (the embedded model cannot learn code, so the 'policy' is scripted)."""

import re
from types import SimpleNamespace

import pytest
import torch

from rlvr.config.health import CodeTestSplit, HealthConfig
from rlvr.data.types import Task
from rlvr.monitoring.health import HealthMonitor
from rlvr.monitoring.heldout_guard import TestGuard, heldout_guard
from rlvr.verifiers.heldout_split import heldout_task, split_tests, training_task
from rlvr.verifiers.judge import default_judge

FUNCS = {"double": "x * 2", "square": "x * x", "inc": "x + 1"}


def code_tasks():
    return [Task(id=name, prompt=f"def f(x): # {name}", kind="code",
                 gold={"entry_point": "f", "tests": [f"assert f({x}) == {eval(body)}" for x in range(1, 7)]})
            for name, body in FUNCS.items()]


def general(task):
    return f"def f(x):\n    return {FUNCS[task.id]}\n"


def memoriser(task_seen):
    """Return-table of exactly the asserts the training verifier showed: right there, wrong elsewhere."""
    pairs = [tuple(map(int, re.findall(r"-?\d+", t))) for t in task_seen.gold["tests"]]
    table = ", ".join(f"{a}: {b}" for a, b in pairs)
    return f"def f(x):\n    return {{{table}}}.get(x, 0)\n"


def test_split_is_deterministic_disjoint_and_keeps_both_sides_nonempty():
    t = code_tasks()[0]
    train, held, key = split_tests(t, 0.34, seed=3)
    assert key == "tests" and len(held) == 3 and len(train) == 3            # ceil(0.34 * 6)
    assert sorted(train + held) == sorted(t.gold["tests"]) and split_tests(t, 0.34, seed=3) == (train, held, key)
    assert len(split_tests(t, 0.99, seed=3)[0]) == 1                        # never all held out
    assert training_task(t, 0.34, 3).gold["tests"] == train and heldout_task(t, 0.34, 3).gold["tests"] == held
    humaneval = Task(id="h", prompt="", kind="code", gold={"tests": "def check(c): assert c(1) == 2"})
    assert split_tests(humaneval, 0.3) is None and training_task(humaneval, 0.3) is humaneval
    with_hidden = Task(id="w", prompt="", kind="code", gold={**t.gold, "hidden_tests": ["assert f(9) == 18"]})
    assert "hidden_tests" not in training_task(with_hidden, 0.3).gold
    assert heldout_task(with_hidden, 0.3).gold["hidden_tests"] == ["assert f(9) == 18"]


def test_rotation_changes_the_subset_every_round_within_the_training_pool():
    t = code_tasks()[1]
    pool = set(split_tests(t, 0.34, 0)[0])
    seen = [tuple(training_task(t, 0.34, 0, step, rotate_every=2, rotate_frac=0.67).gold["tests"]) for step in range(12)]
    assert all(seen[2 * r] == seen[2 * r + 1] for r in range(6))            # fixed within a round
    assert len(set(seen)) > 1 and all(set(s) <= pool and len(s) == 2 for s in seen)


def rollouts(tasks, texts, passed, G):
    return SimpleNamespace(tasks=tasks, group_size=G, texts=texts, passed=torch.tensor(passed).view(len(tasks), G))


@pytest.fixture(scope="module")
def judge():
    return default_judge()


def step_metrics(guard, judge, step, n_memo, G=2):
    """One step: G samples per task, ``n_memo`` of them memorise the training asserts, the rest are general."""
    tasks = code_tasks()
    seen = guard.training(tasks, step)
    texts = [memoriser(s) if g < n_memo else general(t) for t, s in zip(tasks, seen) for g in range(G)]
    passed = [v.passed for v in judge([s for s in seen for _ in range(G)], texts)]
    return guard.measure(rollouts(seen, texts, passed, G), judge)


@pytest.fixture(scope="module")
def by_memo(judge):
    """The guard's metrics of a step with 0, 1 or 2 memorisers out of G = 2 samples per task."""
    guard = TestGuard(CodeTestSplit(heldout_frac=0.34), seed=0)
    return {n: step_metrics(guard, judge, n, n) for n in (0, 1, 2)}


def test_memorising_the_training_tests_shows_as_overfit(by_memo):
    m = by_memo[1]
    # every sample passes the tests it was shown; the memorisers (half) fail the held-out ones
    assert m["verifier/train_tests_pass"] == 1.0 and m["verifier/heldout_tests_pass"] == pytest.approx(0.5)
    assert m["verifier/overfit_frac"] == pytest.approx(0.5)
    assert by_memo[0]["verifier/overfit_frac"] == 0.0 and by_memo[2]["verifier/heldout_tests_pass"] == 0.0


def test_the_monitor_flags_verifier_overfit_as_memorisers_spread(by_memo):
    mon = HealthMonitor(HealthConfig(window=2))
    statuses = [mon.observe({"rollout/pass_rate": 1.0, **by_memo[n]})[0]["health/status"] for n in [0, 0, 0, 1, 2, 2]]
    assert statuses == ["healthy"] * 3 + ["VERIFIER OVERFIT"] * 3
    calm = HealthMonitor(HealthConfig(window=2))
    assert all(calm.observe({"rollout/pass_rate": 1.0, **by_memo[0]})[0]["health/status"] == "healthy"
               for _ in range(8))


# ------------------------------------------------------------------ on by default, and SQL database variants

GOLD_SQL = "SELECT count(*) FROM emp WHERE salary > 100"


def sql_variant(n: int) -> str:
    """A database of n + 1 employees, the first n // 2 + 1 of them paid over 100 (each variant: its own answer)."""
    rows = ",".join(f"({i}, {150 if i <= n // 2 else 50})" for i in range(n + 1))
    return f"CREATE TABLE emp (id INTEGER PRIMARY KEY, salary REAL); INSERT INTO emp VALUES {rows};"


def sql_tasks():
    return [Task(id=f"sql{k}", prompt="How many employees earn over 100?", kind="sql", answer_format="code_fence",
                 gold={"gold_sql": GOLD_SQL, "schema_sql": [sql_variant(n) for n in range(k, k + 5)]})
            for k in range(3)]


def sql_answer(script: str, sql: str):
    import sqlite3

    db = sqlite3.connect(":memory:")
    db.executescript(script)
    return db.execute(sql).fetchone()[0]


def sql_memoriser(task_seen):
    """A lookup of the answer on exactly the databases the training verifier showed, keyed by their size."""
    cases = " ".join(f"WHEN {sql_answer(s, 'SELECT count(*) FROM emp')} THEN {sql_answer(s, GOLD_SQL)}"
                     for s in task_seen.gold["schema_sql"])
    return f"```sql\nSELECT CASE (SELECT count(*) FROM emp) {cases} ELSE -1 END\n```"


def test_sql_database_variants_split_like_tests():
    t = sql_tasks()[0]
    train, held, key = split_tests(t, 0.3, seed=0)
    assert key == "schema_sql" and len(held) == 2 and len(train) == 3          # ceil(0.3 * 5)
    assert sorted(train + held) == sorted(t.gold["schema_sql"])
    assert heldout_task(t, 0.3, 0).gold["schema_sql"] == held and training_task(t, 0.3, 0).gold["gold_sql"] == GOLD_SQL
    one = Task(id="one", kind="sql", gold={"gold_sql": GOLD_SQL, "schema_sql": sql_variant(2)})
    assert split_tests(one, 0.3) is None and training_task(one, 0.3) is one     # a single database: left whole


def test_by_default_a_run_that_memorises_its_verifier_is_flagged_verifier_overfit(judge):
    # the default health settings: held-out checks on, so the guard exists and the rule reads its share
    cfg = HealthConfig()
    guard = heldout_guard(cfg.code_tests, seed=0)
    assert guard is not None
    mon, statuses, G = HealthMonitor(cfg), [], 2
    for step in range(14):
        memorise = step >= 11                                            # the policy learns to memorise
        tasks = code_tasks() + sql_tasks()
        seen = guard.training(tasks, step)
        texts = [(memoriser(s) if t.kind == "code" else sql_memoriser(s)) if memorise else
                 (general(t) if t.kind == "code" else f"```sql\n{GOLD_SQL}\n```") for t, s in zip(tasks, seen)
                 for _ in range(G)]
        passed = [v.passed for v in judge([s for s in seen for _ in range(G)], texts)]
        met = guard.measure(rollouts(seen, texts, passed, G), judge)
        assert met["verifier/train_tests_pass"] == 1.0                   # the training verifier is fooled
        statuses.append(mon.observe({"rollout/pass_rate": 1.0, **met})[0]["health/status"])
    assert statuses[:11] == ["healthy"] * 11 and "VERIFIER OVERFIT" in statuses[11:], statuses
    assert met["verifier/overfit_frac"] == 1.0


def test_math_twins_are_the_same_problem_with_other_numbers_and_a_memoriser_is_flagged():
    from rlvr.data.arithmetic import generate, regenerate, split_of

    tasks = generate(["add2", "mul31"], 8, split="train", seed=0)
    twins = [regenerate(t, seed=0) for t in tasks]
    for t, tw in zip(tasks, twins):
        a, op, b = tw.prompt[:-2].partition("+" if "+" in tw.prompt else "*")
        assert tw.family == t.family and tw.prompt != t.prompt and op in "+*"
        assert split_of(tw.family, int(a), int(b)) == "heldout"      # never a training problem
        assert tw.gold["answer"] == str(eval(tw.prompt[:-2]))
    assert [regenerate(t, 0) for t in tasks] == twins                  # deterministic by (seed, task id)
    assert regenerate(Task(id="x", prompt="Solve x^2 = 4", family="default"), 0) is None

    # a memoriser: every training problem right (the table it learned), every twin wrong once it memorises
    cfg = HealthConfig()
    guard, mon, statuses = heldout_guard(cfg.code_tests, seed=0), HealthMonitor(cfg), []
    every = cfg.code_tests.twin_every
    for step in range(0, 15 * every, every):
        seen = guard.training(tasks, step)
        ro = SimpleNamespace(tasks=seen, group_size=2, passed=torch.ones(len(seen), 2, dtype=torch.bool))
        idx, tw = guard.twin_tasks(ro, step)
        assert len(idx) == len(tasks) and guard.twin_tasks(ro, step + 1) == ([], [])
        memorising = step >= 11 * every
        met = guard.twin_metrics(ro, idx, [not memorising and i % 2 == 0 for i in range(len(tw))])
        assert met["verifier/twin_gap"] == (1.0 if memorising else 0.5)
        statuses.append(mon.observe({"rollout/pass_rate": 1.0, **met})[0]["health/status"])
    assert statuses[:11] == ["healthy"] * 11 and statuses[-1] == "VERIFIER OVERFIT", statuses


def test_twin_noise_alone_raises_no_overfit_alarm():
    # a policy that does not memorise: its twins pass at random (p 0.5) beside an always-passing training set;
    # 16 twins a measurement, 80 measurements: the single-measurement gap swings by +-0.25, the rule holds still
    import random

    rnd, mon = random.Random(0), HealthMonitor(HealthConfig())
    ro = SimpleNamespace(passed=torch.ones(16, 2, dtype=torch.bool))
    statuses = []
    for _ in range(80):
        met = TestGuard.twin_metrics(ro, list(range(16)), [rnd.random() < 0.5 for _ in range(16)])
        statuses.append(mon.observe({"rollout/pass_rate": 1.0, **met})[0]["health/status"])
    assert not any("VERIFIER OVERFIT" in st for st in statuses), statuses
