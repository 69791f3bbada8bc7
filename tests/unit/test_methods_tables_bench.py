"""bench/methods_tables.py: a sweep's table as the docs print it, its compute, and no machine paths kept."""

import json

import pytest

from rlvr.monitoring.sweep_table import build_table


def run(p, wall=60.0):
    return {"pass_at_1": p, "steps": 10, "train_s": wall / 2, "sequences": 80, "wall_s": wall, "alone": True,
            "time_cap": False, "zero_var_frac": 0.5, "entropy": 0.1, "kl": None}


def test_the_docs_table_and_its_compute_from_a_sweep_json(tmp_path, bench_import):
    mt = bench_import("methods_tables")
    runs = {(("grpo",), 0): run(0.50), (("grpo",), 1): run(0.60), (("grpo",), 2): run(0.70),
            (("dapo",), 0): run(0.55, 120.0), (("dapo",), 1): run(0.60, 120.0), (("dapo",), 2): run(0.80, 120.0)}
    t = build_table(["stages.rl.loss.type"], [["grpo", "dapo"]], [0, 1, 2], runs)
    t["cells_dirs"] = {"a": str(tmp_path / "sw" / "a")}
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "sweep.json").write_text(json.dumps(t))
    out = mt.main(["--sweep", f"rl={tmp_path / 'sw'}", "--json", str(tmp_path / "t.json")])
    md = out["rl"]["markdown"].splitlines()
    assert md[0].startswith("| loss.type | pass@1 % (mean) | per seed (0, 1, 2) | Δ vs grpo (pp, 95% CI) |")
    # dapo - grpo by seed: +5, 0, +10 -> mean +5.0, sd 5, half 4.3027 * 5 / sqrt(3) = 12.42
    # no cell logged groups_drawn: that column is left out
    assert md[3] == "| dapo | **65.0** | 55.0 / 60.0 / 80.0 | +5.0 [-7.4, +17.4] | 0.50 | 0.100 | 80 | 10 |"
    # 3 cells of 60 s and 3 of 120 s: 9 core-minutes, half of them training
    assert out["rl"]["compute"] == {"cells": 6, "wall_core_min": 9.0, "train_core_min": 4.5}
    saved = (tmp_path / "t.json").read_text()
    assert str(tmp_path) not in saved and json.loads(saved)["rl"]["table"]["cells_dirs"] == {"a": "a"}


def test_a_directory_without_a_sweep_is_named(tmp_path, bench_import, capsys):
    mt = bench_import("methods_tables")
    with pytest.raises(SystemExit):
        mt.main(["--sweep", f"x={tmp_path}"])
    assert "sweep.json not found" in capsys.readouterr().err


def test_paths_of_the_sweep_and_of_the_repository_are_written_relative(tmp_path, bench_import):
    relative = bench_import("methods_tables").relative

    sweep, repo = tmp_path / "runs" / "s", tmp_path / "repo"
    t = {"cells": [{"dir": f"{sweep.resolve()}/a__seed=0"}], "recipe": f"{repo.resolve()}/recipes/x.yaml"}
    assert relative(t, sweep, repo) == {"cells": [{"dir": "a__seed=0"}], "recipe": "recipes/x.yaml"}
