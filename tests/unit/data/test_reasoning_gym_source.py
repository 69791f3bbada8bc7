"""The reasoning-gym task source: held-out never shares a question with training, small configurations
are refused with the count they have, mixes follow their weights, and the --tasks form works."""

import pytest

pytest.importorskip("reasoning_gym")

from rlvr.commands.evaluate import parse_tasks_arg  # noqa: E402
from rlvr.config.data import ReasoningGymTasks  # noqa: E402
from rlvr.data.sources import load_task_source  # noqa: E402
from rlvr.errors import DataError  # noqa: E402
from rlvr.verifiers.registry import refuse_unjudgeable  # noqa: E402


def _src(**kw):
    return ReasoningGymTasks(**{"name": "chain_sum", "n": 200, "seed": 3, **kw})


def test_heldout_shares_no_question_with_training_even_with_a_nearby_training_seed():
    train = load_task_source(_src(split="train"))
    held = load_task_source(_src(split="heldout"))
    nearby = load_task_source(_src(split="train", seed=4))  # item i of seed 4 == item i+1 of seed 3
    q_train, q_held = {t.prompt for t in train}, {t.prompt for t in held}
    assert len(q_train) == len(train) == 200 and len(q_held) == len(held) == 200
    assert not q_train & q_held
    assert len(q_train & {t.prompt for t in nearby}) > 150  # why the held-out split needs a distant seed
    assert {t.split for t in held} == {"heldout"} and all(t.kind == "reasoning_gym" for t in held)
    refuse_unjudgeable(held)


def test_heldout_drops_the_questions_of_a_larger_training_draw():
    small = {"min_value": 1, "max_value": 40}  # 1600 pairs: two draws of a few hundred share some by chance
    train = {t.prompt for t in load_task_source(ReasoningGymTasks(name="gcd", config=small, n=300))}
    held = load_task_source(ReasoningGymTasks(name="gcd", config=small, n=40, split="heldout", train_n=300))
    assert len(held) == 40 and not train & {t.prompt for t in held}
    unguarded = load_task_source(ReasoningGymTasks(name="gcd", config=small, n=40, split="heldout"))
    assert train & {t.prompt for t in unguarded}  # why train_n exists: the default drops only 40 training questions


def test_a_configuration_too_small_for_the_split_is_refused_with_its_count():
    small = {"min_value": 1, "max_value": 6}  # gcd of two numbers <= 6: at most 36 questions
    with pytest.raises(DataError, match=r"'gcd'.*max_value.*found \d+ in"):
        load_task_source(ReasoningGymTasks(name="gcd", config=small, n=100))
    assert len(load_task_source(ReasoningGymTasks(name="gcd", config=small, n=10))) == 10


def test_an_empty_side_is_empty_not_refused():
    from rlvr.data.reasoning_gym import split_entries

    assert split_entries("chain_sum", {}, 0, 3, "heldout", train_n=50) == []
    assert split_entries("chain_sum", {}, 0, 3, "train") == []


def test_the_generator_config_is_passed_through_and_bad_ones_are_named():
    tasks = load_task_source(_src(config={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}, n=20))
    assert all(t.prompt.count("+") + t.prompt.count("-") == 1 for t in tasks)
    with pytest.raises(DataError, match="unknown dataset 'no_such_set'"):
        load_task_source(_src(name="no_such_set"))
    with pytest.raises(DataError, match="'chain_sum'.*refused"):
        load_task_source(_src(config={"no_such_option": 1}))
    with pytest.raises(ValueError, match="set by rlvr"):
        _src(config={"seed": 1})
    with pytest.raises(ValueError, match="exactly one"):
        ReasoningGymTasks(n=3)


def test_a_weighted_mix_draws_each_dataset_by_weight():
    src = ReasoningGymTasks(datasets=[{"name": "chain_sum", "weight": 3}, {"name": "gcd", "weight": 1}], n=40)
    tasks = load_task_source(src)
    fam = [t.family for t in tasks]
    assert fam.count("chain_sum") == 30 and fam.count("gcd") == 10


def test_tasks_spec_form():
    src = parse_tasks_arg("reasoning_gym:chain_sum:7")
    assert isinstance(src, ReasoningGymTasks) and src.n == 7 and src.split == "heldout"
    for bad in ("reasoning_gym:", "reasoning_gym:chain_sum:0", "reasoning_gym:a:b:c"):
        with pytest.raises(DataError, match="reasoning_gym"):
            parse_tasks_arg(bad)


def test_tasks_spec_passes_a_generator_config_as_pairs():
    src = parse_tasks_arg("reasoning_gym:chain_sum:6:min_terms=4,max_terms=5,allow_negation=true")
    assert src.n == 6 and src.config == {"min_terms": 4, "max_terms": 5, "allow_negation": True}
    tasks = load_task_source(src)
    assert all(t.prompt.count(" + ") + t.prompt.count(" - ") >= 3 for t in tasks)  # 4-5 terms: 3-4 operators
    assert parse_tasks_arg("reasoning_gym:chain_sum:min_terms=3").config == {"min_terms": 3}  # N optional
    for bad, why in (("reasoning_gym:chain_sum:5:min_terms", "KEY=VALUE"), ("reasoning_gym:chain_sum:5:seed=3", "seed"),
                     ("reasoning_gym:chain_sum:5:min_terms=[1", "min_terms")):
        with pytest.raises(DataError, match=why):
            parse_tasks_arg(bad)


def test_tasks_written_to_a_task_file_load_back_and_score_the_same(tmp_path):
    import json
    from dataclasses import replace

    from rlvr.data.jsonl import load_tasks, write_jsonl_atomic
    from rlvr.data.sources import with_system
    from rlvr.verifiers.reasoning_gym import ReasoningGymVerifier

    plain = load_task_source(_src(n=3, split="heldout"))
    chats = [replace(t, id=t.id + "-chat") for t in with_system(plain, "Answer with the number.")]
    tasks = plain + chats  # a prompt, and a chat (system + user)
    write_jsonl_atomic(tmp_path / "t.jsonl", [t.to_line() for t in tasks])
    back = load_tasks(tmp_path / "t.jsonl")  # `rlvr eval --tasks FILE` reads these lines
    as_json = lambda ts: json.loads(json.dumps([t.to_line() for t in ts]))  # the entries' tuples are lists in a file
    assert as_json(back) == as_json(tasks)
    v = ReasoningGymVerifier()
    for t, b in zip(tasks, back):
        for answer in (t.gold["answer"], str(int(t.gold["answer"]) + 1)):
            assert v.verify(b, answer).reward == v.verify(t, answer).reward
