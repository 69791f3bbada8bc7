"""`rlvr sweep` end to end on the tiny model: a 2x2 grid with 2 seeds runs, its table equals the cells' own
evaluations, a rerun skips finished cells and resumes an interrupted one; bad input stops before any cell."""

import json
import os

import pytest

import rlvr
from rlvr.monitoring.sweep_table import MARKER

RECIPE = """\
name: sw
run_dir: unused
threads: 1
model: {{path: {model}}}
eval: {{tasks: {{families: [add2], n: 2, split: heldout}}, max_new_tokens: 6, control: none}}
stages:
  - {{type: rl, name: grpo, max_steps: 50, max_minutes: 30, tasks_per_step: 2, save_every: 0,
     sampling: {{group_size: 2, max_new_tokens: 6}}, data: {{families: [add2], n: 8}}}}
"""
VARY = ["stages.grpo.loss.type=grpo,dr_grpo", "stages.grpo.optim.lr=0.001,0.01"]


@pytest.fixture
def recipe(tmp_path, tiny_dir):
    p = tmp_path / "r.yaml"
    p.write_text(RECIPE.format(model=tiny_dir))
    return p


def summary_pass(d):
    rows = json.loads((d / "summary.json").read_text())["stages"]
    return next(r["pass_at_1"] for r in rows if r["stage"] == "grpo")


def check_table_equals_cells(table, out, edited=None):
    """Each cell's per-seed figure is its summary.json's and (unless its summary was edited) its eval.json's."""
    for name, where in table["cells_dirs"].items():
        cell = next(c for c in table["cells"] if c["values"] == where["values"])
        got = cell["per_seed"][str(where["seed"])]
        assert got == summary_pass(out / name), name
        if name != edited:
            assert json.loads((out / name / "grpo" / "eval.json").read_text())["pass_at_1"] == got, name
    on_disk = json.loads((out / "sweep.json").read_text())
    assert [c["per_seed"] for c in on_disk["cells"]] == [c["per_seed"] for c in table["cells"]]


def test_grid_runs_resumes_and_tables_the_cells_own_evaluations(recipe, tmp_path):
    out = tmp_path / "out"
    table = rlvr.sweep(str(recipe), VARY, seeds=2, steps=1, out=str(out), quiet=True)
    names = sorted(table["cells_dirs"])
    assert len(names) == 8 and sorted(table["ran"]) == names and len(table["cells"]) == 4
    assert "stages.grpo.loss.type=dr_grpo__stages.grpo.optim.lr=0.01__seed=1" in names
    for n in names:  # equal steps: --steps set max_steps, the time cap was dropped
        cfg = (out / n / "config.yaml").read_text()
        assert "max_steps: 1\n" in cfg and "max_minutes: null" in cfg
        assert json.loads((out / n / MARKER).read_text())["alone"] is True
    assert all(c["steps"] == 1 and c["wall_comparable"] for c in table["cells"])
    check_table_equals_cells(table, out)
    assert (out / "sweep.md").read_text().count("\n| ") == 5 and (out / "sweep.png").stat().st_size > 1000

    # a finished cell whose figure differs (as a longer run's would), and a cell interrupted during its stage
    done, cut = out / names[0], out / names[5]
    s = json.loads((done / "summary.json").read_text())
    s["stages"][-1]["pass_at_1"] = 0.5
    (done / "summary.json").write_text(json.dumps(s))
    (cut / "summary.json").unlink()
    (cut / MARKER).unlink()
    state = json.loads((cut / "pipeline.json").read_text())
    state["stages"]["grpo"] = {"status": "running"}
    (cut / "pipeline.json").write_text(json.dumps(state))
    os.rename(cut / "grpo" / "final", tmp_path / "final-moved")
    mtimes = {n: (out / n / "summary.json").stat().st_mtime_ns for n in names if n != names[5]}

    table2 = rlvr.sweep(str(recipe), VARY, seeds=2, steps=1, out=str(out), quiet=True)
    assert table2["ran"] == [names[5]]  # only the interrupted cell ran again
    assert {n: (out / n / "summary.json").stat().st_mtime_ns for n in mtimes} == mtimes
    assert (cut / "grpo" / "final").exists() and not list(cut.glob("grpo.prev-*"))  # resumed, not restarted aside
    assert json.loads((cut / MARKER).read_text())["alone"] is False  # a resumed cell's wall time is partial
    check_table_equals_cells(table2, out, edited=names[0])
    patched = next(c for c in table2["cells"] if c["values"] == table2["cells_dirs"][names[0]]["values"])
    assert patched["per_seed"][str(table2["cells_dirs"][names[0]]["seed"])] == 0.5


@pytest.mark.parametrize("args, needle", [
    (["--vary", "stages.grpo.loss.tipe=grpo,dr_grpo"], "unknown key 'stages.0.rl.loss.grpo.tipe'"),
    (["--vary", "stages.grpo.sampling.group_size=2,0"],
     "group_size=0: stages.0.rl.sampling.group_size: Input should be greater than or equal to 1 (got 0)"),
    (["--vary", "stages.grpo.loss.type=grpo,bogus"], "unknown loss type 'bogus'"),
    (["--vary", "stages.grpo.optim.lr=0.001,1e-3"], "have the same config"),
    (["--vary", "name=a b,a_b"], "would share the directory"),
    (["--vary", "stages.grpo.loss.type=grpo,grpo"], "listed twice"),
    (["--vary", "seed=1,2"], "the sweep sets seed itself"),
    (["--vary", "stages.grpo.loss.type"], "expected KEY=V1,V2"),
    (["--vary", "stages.grpo.loss.type=grpo,dr_grpo", "--seeds", "0"], "--seeds 0: need at least 1 seed"),
    (["--vary", "stages.grpo.loss.type=grpo,dr_grpo", "--steps-stage", "sft", "--steps", "3"], "--steps-stage sft"),
    (["--vary", "stages.grpo.loss.type=grpo,dr_grpo", "--metric", "pass_at_4_sampled"], "set --set eval.k=4"),
    (["--vary", "stages.grpo.loss.type=grpo,dr_grpo", "--metric", "pass@4"], "expected pass_at_1, pass_at_K_sampled"),
])
def test_bad_input_is_one_line_before_any_cell(recipe, tmp_path, rlvr_cli, args, needle):
    out = tmp_path / "out"
    code, _, err = rlvr_cli("sweep", recipe, "--out", out, *args)
    assert code == 2 and needle in err, err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1 and "Traceback" not in err
    assert not out.exists()


def test_missing_recipe_file(tmp_path, rlvr_cli):
    code, _, err = rlvr_cli("sweep", tmp_path / "nope.yaml", "--vary", "stages.grpo.loss.type=grpo", "--out",
                         tmp_path / "o")
    assert code == 2 and "nope.yaml: recipe file not found" in err


@pytest.mark.slow  # two cells as processes (~30 s of imports on a busy machine)
def test_parallel_cells_run_as_processes_and_flag_wall_time(recipe, tmp_path):
    out = tmp_path / "out"
    table = rlvr.sweep(str(recipe), ["stages.grpo.loss.type=grpo,dr_grpo"], seeds=1, steps=1, parallel=2,
                       out=str(out), quiet=True)
    assert len(table["ran"]) == 2 and all(not c["wall_comparable"] for c in table["cells"])
    for n in table["ran"]:
        assert "threads: 1" in (out / n / "config.yaml").read_text() and (out / n / "sweep.log").exists()
        assert json.loads((out / n / MARKER).read_text())["alone"] is False
    check_table_equals_cells(table, out)
    assert "*" in (out / "sweep.md").read_text().splitlines()[-1]


def test_a_failed_cell_is_named_after_the_others_ran(recipe, tmp_path, monkeypatch):
    from rlvr.commands import sweep as sweep_mod

    real = sweep_mod.run_in_process

    def flaky(recipe_path, cell, d, status):
        if "dr_grpo" in cell.name:
            raise RuntimeError("disk full")
        real(recipe_path, cell, d, status)

    monkeypatch.setattr(sweep_mod, "run_in_process", flaky)
    out = tmp_path / "out"
    with pytest.raises(sweep_mod.CellsFailed, match=r"loss.type=dr_grpo__seed=0: RuntimeError: disk full"):
        rlvr.sweep(str(recipe), ["stages.grpo.loss.type=grpo,dr_grpo"], seeds=1, steps=1, out=str(out), quiet=True)
    table = json.loads((out / "sweep.json").read_text())
    assert table["cells"][0]["runs"] == 1 and table["cells"][1]["runs"] == 0 and table["cells"][1]["mean"] is None
    assert not (out / "stages.grpo.loss.type=dr_grpo__seed=0" / MARKER).exists()
