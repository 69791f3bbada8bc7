"""``--tasks reasoning_gym:NAME:N`` through ``rlvr eval`` on the tiny model, and no file in src/ names a
specific reasoning-gym dataset (the path is generic)."""

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

SRC = Path(__file__).resolve().parents[3] / "src"


def test_eval_on_reasoning_gym_tasks(tiny_dir, tmp_path, rlvr_cli):
    out = tmp_path / "e.json"
    code, _, err = rlvr_cli("eval", "--model", tiny_dir, "--tasks", "reasoning_gym:chain_sum:3", "--n", "1",
                            "--max-new-tokens", "4", "--out", out)
    assert code in (0, None), err
    res = json.loads(out.read_text())
    assert res["n_tasks"] == 3 and set(res["by_family"]) == {"chain_sum"}
    code, _, err = rlvr_cli("eval", "--model", tiny_dir, "--tasks", "reasoning_gym:no_such_set:3")
    assert code not in (0, None) and "unknown dataset 'no_such_set'" in err and "Traceback" not in err


def test_no_file_in_src_names_a_dataset():
    from reasoning_gym.factory import DATASETS

    tasks = sorted(set(DATASETS) - {"composite"})  # reasoning-gym's mixer, not a task; rlvr has its own "composite"
    names = re.compile(r"""["'`](%s)["'`]""" % "|".join(map(re.escape, tasks)))
    hits = [f"{p.relative_to(SRC)}: {m.group(0)}" for p in SRC.rglob("*") if p.suffix in (".py", ".yaml", ".json", ".md")
            for m in names.finditer(p.read_text(errors="replace"))]
    assert not hits, hits
