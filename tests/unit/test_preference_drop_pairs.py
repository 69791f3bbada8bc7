"""bench/preference_drop_pairs.py: chosen is the right worked solution and rejected the teacher's dropped carry
(the verifier says so), the flipped share is the asked one, held-out pairs are clean and never training problems."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rlvr.data.types import Task
from rlvr.verifiers.registry import TaskRouter

BENCH = Path(__file__).resolve().parents[2] / "bench" / "preference_drop_pairs.py"


def _passes(router, prompt, text):
    a, b = (int(x) for x in prompt.removesuffix("=?").split("*"))
    task = Task(id=prompt, prompt=prompt, kind="math", gold={"answer": str(a * b)}, answer_format="boxed")
    return router.verify(task, text).passed


def test_pairs_hold_the_right_and_the_teachers_answer_with_the_asked_share_flipped(tmp_path):
    subprocess.run([sys.executable, str(BENCH), "--flip", "0.5", "--train", "40", "--heldout", "30",
                    "--out", str(tmp_path)], check=True, capture_output=True)
    train = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    held = [json.loads(x) for x in (tmp_path / "heldout.jsonl").read_text().splitlines()]
    assert len(train) == 40 and len(held) == 30
    router = TaskRouter()
    right = [_passes(router, p["prompt"], p["chosen"]) for p in train]
    assert all(_passes(router, p["prompt"], p["chosen"]) != _passes(router, p["prompt"], p["rejected"]) for p in train)
    assert 10 <= right.count(False) <= 30  # about half flipped
    assert all(_passes(router, p["prompt"], p["chosen"]) and not _passes(router, p["prompt"], p["rejected"])
               for p in held)
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in held}
