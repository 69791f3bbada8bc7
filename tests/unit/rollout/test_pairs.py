"""The pair builder: self-sampling + rule verification, pairs per task, votes, held-out split by prompt."""

import numpy as np
import pytest

from rlvr.config.data import BuiltinArithmetic
from rlvr.config.preference import PairBuilder
from rlvr.rollout.pairs import Scored, build_pairs, is_heldout, pairs_for_task, stage_pairs
from rlvr.data.types import Task
from rlvr.errors import DataError
from rlvr.models.tiny import build_tiny
from rlvr.verifiers.base import Verdict


def even_judge(tasks, completions):
    """A rule verifier for tests: an even-length completion passes; 'X' in it is an infra failure."""
    out = []
    for c in completions:
        if "X" in c:
            out.append(Verdict(0.0, False, "infra", {}, 0.0))
        else:
            ok = len(c) % 2 == 0
            out.append(Verdict(float(ok), ok, "pass" if ok else "wrong", {"answer": c[-1:]}, 0.0))
    return out


def s(text, good, answer="a", score=None):
    return Scored(text, float(good) if score is None else score, good, not good, answer)


def test_pairs_for_task_correct_vs_incorrect_distinct_and_capped():
    task = Task(id="t", prompt="p", family="f")
    samples = [s("c1", True, "7"), s("c1", True, "7"), s("c2", True, "7"), s("w1", False, "5"), s("w2", False, "9"),
               s("w2", False, "9")]
    pairs = pairs_for_task(task, samples, k=10, rng=np.random.default_rng(0), min_margin=0.0, ranked=False)
    # distinct texts: 2 correct x 2 wrong = 4 combinations, fewer than k
    assert sorted((p.chosen, p.rejected) for p in pairs) == [("c1", "w1"), ("c1", "w2"), ("c2", "w1"), ("c2", "w2")]
    assert all(p.margin == 1.0 and p.chosen_score == 1.0 and p.rejected_score == 0.0 for p in pairs)
    # votes: verifier +1; self-consistency: answer 7 appears 3 times, 9 twice -> +1, 5 once -> +1
    assert all(p.votes == [1, 1] for p in pairs)
    # capped at k; the modal correct text (c1, produced twice) is the chosen of the first pairs
    three = pairs_for_task(task, samples, 3, np.random.default_rng(0), 0.0, False)
    assert [p.chosen for p in three] == ["c1", "c1", "c2"]


def test_pairs_for_task_self_consistency_vote_against_rare_correct_answer():
    task = Task(id="t", prompt="p")
    samples = [s("c", True, "7"), s("w1", False, "5"), s("w2", False, "5")]   # wrong answer 5 is the majority
    (a, b) = pairs_for_task(task, samples, 5, np.random.default_rng(0), 0.0, False)
    assert a.votes == [1, -1] and b.votes == [1, -1]


def test_all_pass_or_all_fail_gives_no_pair_and_ranked_mode_uses_scores():
    task = Task(id="t", prompt="p")
    assert pairs_for_task(task, [s("a", True), s("b", True)], 4, np.random.default_rng(0), 0.0, False) == []
    ranked = [Scored(t, sc, True, True, t) for t, sc in [("a", 0.1), ("b", 2.0), ("c", -1.0), ("d", 0.5)]]
    pairs = pairs_for_task(task, ranked, 4, np.random.default_rng(0), 0.0, True)
    # best vs worst first (b vs c, margin 3), then the next ones (d vs a, margin 0.4)
    assert [(p.chosen, p.rejected) for p in pairs] == [("b", "c"), ("d", "a")]
    assert pairs[0].margin == pytest.approx(3.0)
    assert [(p.chosen, p.rejected) for p in pairs_for_task(task, ranked, 4, np.random.default_rng(0), 1.0, True)] \
        == [("b", "c")]


def test_heldout_split_is_a_pure_function_of_the_prompt():
    keys = [f"{a}*{b}=?" for a in range(10, 60) for b in range(10)]
    flags = [is_heldout(k, 0.2) for k in keys]
    assert flags == [is_heldout(k, 0.2) for k in keys]
    assert 0.1 < np.mean(flags) < 0.3
    assert not any(is_heldout(k, 0.0) for k in keys) and all(is_heldout(k, 1.0) for k in keys)


def test_build_pairs_end_to_end_with_a_rule_verifier(tmp_path):
    model, tok = build_tiny(size="test", seed=0)
    cfg = PairBuilder(tasks=BuiltinArithmetic(families=["add2"], n=30, seed=3), samples_per_task=4, pairs_per_task=2,
                      max_new_tokens=6, heldout_frac=0.3)
    a = build_pairs(model, tok, cfg, even_judge, seed=0)
    b = build_pairs(model, tok, cfg, even_judge, seed=0)
    assert [p.to_record() for p in a.train] == [p.to_record() for p in b.train]      # deterministic by seed
    assert a.train and a.heldout
    for p in a.train + a.heldout:
        assert len(p.chosen) % 2 == 0 and len(p.rejected) % 2 == 1 and "X" not in p.rejected
    per_task = {}
    for p in a.train + a.heldout:
        per_task[p.meta["task_id"]] = per_task.get(p.meta["task_id"], 0) + 1
    assert max(per_task.values()) <= 2
    assert not {p.prompt for p in a.train} & {p.prompt for p in a.heldout}             # split by prompt
    st = a.stats
    assert st["pairs_train"] == len(a.train) and st["tasks"] <= 30 and st["samples"] == 4 * st["tasks"]
    # stage_pairs writes the pairs, and a resumed run reads them back instead of resampling
    tr, he, stats = stage_pairs(cfg, model, tok, even_judge, tmp_path, seed=0)
    assert (tmp_path / "pairs" / "train.jsonl").exists() and stats["pairs_train"] == len(tr)
    tr2, he2, _ = stage_pairs(cfg, None, tok, None, tmp_path, seed=0, reuse=True)
    assert [p.to_record() for p in tr2] == [p.to_record() for p in tr] and len(he2) == len(he)


def test_no_pairs_is_a_clear_error(tmp_path):
    model, tok = build_tiny(size="test", seed=0)
    cfg = PairBuilder(tasks=BuiltinArithmetic(families=["add2"], n=4), samples_per_task=2, max_new_tokens=4)

    def always_wrong(tasks, comps):
        return [Verdict(0.0, False, "wrong", {}, 0.0) for _ in comps]
    with pytest.raises(DataError, match="found no \\(chosen, rejected\\) pair on 4 tasks"):
        stage_pairs(cfg, model, tok, always_wrong, tmp_path)


def test_label_noise_flips_exactly_that_fraction_of_training_pairs_only(tmp_path):
    """A controlled label-noise study: round(frac x train pairs) swapped, seeded, held-out pairs kept true."""
    from rlvr.config.preference import PairsFile
    from rlvr.data.preference import PreferencePair, write_pairs_jsonl
    from rlvr.rollout.pairs import flip_labels

    pairs = [PreferencePair("p", f"good{i}", f"bad{i}", id=str(i), margin=1.0, chosen_score=1.0,
                            rejected_score=0.0, votes=[1, 1 if i % 2 else -1]) for i in range(10)]
    out, n = flip_labels(pairs, 0.3, seed=4)
    assert n == 3 and len(out) == 10
    flipped = [p for p in out if p.chosen.startswith("bad")]
    assert len(flipped) == 3 and all(p.meta["label_flipped"] for p in flipped)
    for p in flipped:   # the annotator believes its wrong label: scores swap, the margin stays its margin
        i = int(p.id)
        assert (p.chosen, p.rejected) == (f"bad{i}", f"good{i}")
        assert (p.chosen_score, p.rejected_score, p.margin) == (0.0, 1.0, 1.0)
        assert p.votes == [1, -pairs[i].votes[1]]
    assert [p.chosen for p in pairs] == [f"good{i}" for i in range(10)]        # the input is not mutated
    assert [p.id for p in flip_labels(pairs, 0.3, seed=4)[0] if p.chosen.startswith("bad")] \
        == [p.id for p in flipped]                                            # deterministic by seed
    assert flip_labels(pairs, 0.0, seed=4)[1] == 0 and flip_labels(pairs, 1.0, seed=4)[1] == 10
    # from a pairs file: the training pairs flip, the held-out ones (which measure the truth) do not
    write_pairs_jsonl(tmp_path / "train.jsonl", pairs)
    write_pairs_jsonl(tmp_path / "held.jsonl", pairs[:4])
    cfg = PairsFile(path=str(tmp_path / "train.jsonl"), heldout_path=str(tmp_path / "held.jsonl"), label_noise=0.5)
    tr, he, stats = stage_pairs(cfg, None, None, None, tmp_path / "run", seed=1)
    assert sum(p.chosen.startswith("bad") for p in tr) == 5 == stats["pairs_label_flipped"]
    assert not any(p.chosen.startswith("bad") for p in he)


def test_label_noise_outside_0_1_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="label_noise"):
        PairBuilder(label_noise=1.5)
