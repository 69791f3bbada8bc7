"""The mod10 tasks of the entropy-floor benchmark (bench/entropy_floor.py): the committed files are what the
generator writes, every answer is the number mod 10, and the train and held-out numbers are disjoint."""

import importlib.util
import json
from pathlib import Path

from rlvr.data.jsonl import load_tasks
from rlvr.verifiers.math import MathVerifier

BENCH = Path(__file__).resolve().parents[2] / "bench"
spec = importlib.util.spec_from_file_location("entropy_floor_bench", BENCH / "entropy_floor.py")
ef = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ef)


def test_the_committed_files_are_the_generators_output_and_the_splits_are_disjoint(tmp_path):
    paths = ef.write_data(tmp_path)
    for split in ("train", "heldout"):
        assert paths[split].read_text() == (ef.DATA / f"{split}.jsonl").read_text()
    lines = {s: [json.loads(x) for x in (ef.DATA / f"{s}.jsonl").read_text().splitlines()] for s in paths}
    assert [len(lines["train"]), len(lines["heldout"])] == [ef.N_TRAIN, ef.N_HELDOUT]
    nums = {s: {int(t["prompt"].split("%")[0]) for t in ls} for s, ls in lines.items()}
    assert not nums["train"] & nums["heldout"] and len(nums["heldout"]) == ef.N_HELDOUT
    for s, ls in lines.items():
        assert all(t["split"] == s == ef.split_of(int(t["prompt"].split("%")[0])) for t in ls)
        assert all(t["gold"]["answer"] == str(int(t["prompt"].split("%")[0]) % 10) for t in ls)
    assert {t["gold"]["answer"] for t in lines["heldout"]} == {str(d) for d in range(10)}   # all ten answers


def test_the_verifier_passes_exactly_the_right_digit():
    task = load_tasks(ef.DATA / "heldout.jsonl")[0]         # 263%10=? -> 3
    assert task.prompt == "263%10=?" and task.answer_format == "last_number"
    v = MathVerifier()
    assert [v.verify(task, c).passed for c in ("3", "7", "x", "")] == [True, False, False, False]
