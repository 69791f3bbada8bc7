"""bench/scaling.py's pure parts: the factor grid (one factor changed at a time from the base), the parameter count
of a point, the fitted slopes and the JSON assembled from point results; and _trl_search's setting search."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def scaling(bench_import):
    return bench_import("scaling")  # the driver's top level imports neither torch nor rlvr


@pytest.fixture(scope="module")
def trl_search(bench_import):
    return bench_import("_trl_search")


def _diff(a: dict, b: dict) -> set:
    keys = set(a) | set(b)
    return {k for k in keys if a.get(k) != b.get(k)}


@pytest.mark.parametrize("quick", [False, True])
def test_grid_changes_one_factor_at_a_time(scaling, quick):
    base = scaling.QUICK_BASE if quick else scaling.BASE
    g = scaling.grid(quick)
    assert set(g) == {"group", "max_new", "vocab", "model", "training"}
    assert [(spec["lora"], _diff(spec, base) <= {"lora"}) for _, spec in g["training"]] == [(16, True), (0, True)]
    for v, spec in g["group"]:
        assert _diff(spec, base) <= {"group"} and spec["group"] == v
    for v, spec in g["max_new"]:
        assert _diff(spec, base) <= {"max_new"} and spec["max_new"] == v
    for v, spec in g["vocab"]:  # only the model's config changes: its vocabulary (and, full run, 4 layers)
        assert _diff(spec, base) <= {"set"} and spec["set"]["vocab_size"] == v
        assert _diff(spec["set"], base["set"]) <= {"vocab_size", "num_hidden_layers"}
    if not quick:  # the ranges and stated base
        groups, lengths = [v for v, _ in g["group"]], [v for v, _ in g["max_new"]]
        assert (groups[0], groups[-1], lengths[0], lengths[-1]) == (4, 64, 64, 1024)
        assert [v for v, _ in g["vocab"]][-1] == 151936 and all(s["set"]["num_hidden_layers"] == 4 for _, s in g["vocab"])
        assert (base["shape"], base["lora"], base["group"], base["max_new"]) == ("qwen2.5-0.5b", 16, 8, 128)
        last = g["model"][-1][1]
        assert last == {**base, "set": {}}  # the model curve ends at the 0.5B shape itself
    assert scaling.grid(quick, ["group"]).keys() == {"group"}
    with pytest.raises(ValueError, match="unknown factor"):
        scaling.grid(quick, ["depth"])


def test_model_points_grow_from_about_1m_to_the_05b_shape(scaling):
    qwen = {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
            "intermediate_size": 4864, "vocab_size": 151936}
    assert scaling.params_of(qwen) == 494_032_768  # Qwen2.5-0.5B's count, tied embeddings
    sizes = [scaling.params_of({**qwen, **scaling.MODEL_POINTS[k]}) for k in scaling.MODEL_POINTS]
    assert sizes == sorted(sizes) and 0.8e6 <= sizes[0] <= 1.3e6
    keys = {scaling.folder_key(s) for _, s in scaling.grid()["group"]}
    assert len(keys) == 1  # the group curve reuses one built folder


def test_fit_reads_linear_and_quadratic_growth(scaling):
    xs = [64, 128, 256, 512]
    lin = [{"step_s": 0.01 * x, "peak_mb": 500 + 2.0 * (x - 64)} for x in xs]
    f = scaling.fit(xs, lin)
    assert f["time_exponent"] == pytest.approx(1.0) and f["memory_exponent"] == pytest.approx(1.0)
    assert f["memory_mb_per_unit"] == pytest.approx(2.0)
    quad = [{"step_s": 1e-4 * x * x, "peak_mb": 500 + 1e-3 * (x - 64) ** 2} for x in xs]
    f = scaling.fit(xs, quad)
    assert f["time_exponent"] == pytest.approx(2.0) and f["memory_exponent"] == pytest.approx(2.0)
    # a failed point is left out of the fit; fewer than two measured points: no slope
    assert scaling.fit(xs, [lin[0], {"error": "killed"}, lin[2], lin[3]])["points"] == 3
    assert scaling.fit(xs[:2], [lin[0], {"error": "over the limit"}]) == {"points": 1}


def test_fit_separates_the_weights_from_what_grows_with_the_work(scaling):
    # a vocabulary curve whose peak is the float32 weights plus a constant: linear in V, nothing beyond the weights
    vs = [1024, 8192, 65536]
    pts = [{"params": 1_000_000 + 896 * v, "step_s": 1.0, "peak_mb": 300.0 + (1_000_000 + 896 * v) * 4 / 2**20}
           for v in vs]
    f = scaling.fit(vs, pts)
    assert f["memory_mb_per_unit"] == pytest.approx(896 * 4 / 2**20, rel=1e-2)  # rounded to 5 places
    assert f["beyond_weights_mb_per_unit"] == pytest.approx(0.0, abs=1e-9)
    assert scaling.weights_mb({"params": 2**18}) == 1.0 and scaling.weights_mb({"error": "x"}) == 0.0


def test_merge_puts_curves_of_one_base_together_and_refuses_two_bases(scaling):
    a = scaling.assemble(scaling.BASE, False, {"group": [(4, {"params": 1, "step_s": 1.0, "peak_mb": 1.0})]},
                         {"command": "a", "steps": 1, "seconds": 10})
    b = scaling.assemble(scaling.BASE, False, {"vocab": [(1024, {"params": 1, "step_s": 1.0, "peak_mb": 1.0})]},
                         {"command": "b", "steps": 2, "seconds": 5})
    m = scaling.merge([a, b])
    assert list(m["factors"]) == ["group", "vocab"] and m["seconds"] == 15
    assert [r["steps"] for r in m["runs"]] == [1, 2] and m["runs"][1]["factors"] == ["vocab"]
    with pytest.raises(SystemExit, match="different bases"):
        scaling.merge([a, {**b, "base": scaling.QUICK_BASE}])


def test_assemble_keeps_every_point_and_uses_parameters_as_the_model_curves_x(scaling):
    curves = {"group": [(4, {"params": 10, "step_s": 1.0, "peak_mb": 100.0}),
                        (8, {"params": 10, "step_s": 2.0, "peak_mb": 110.0}),
                        (16, {"error": "over the point limit of 600 s"})],
              "model": [("1m", {"params": 1_000_000, "step_s": 1.0, "peak_mb": 100.0}),
                        ("0.5b", {"params": 494_032_768, "step_s": 9.0, "peak_mb": 4000.0})]}
    res = scaling.assemble(scaling.BASE, False, curves, {"command": "x"})
    g = res["factors"]["group"]
    assert g["values"] == [4, 8, 16] and g["points"][2] == {"value": 16, "error": "over the point limit of 600 s"}
    assert g["fit"]["points"] == 2 and g["fit"]["time_exponent"] == pytest.approx(1.0)
    assert res["factors"]["model"]["x"] == [1_000_000, 494_032_768]
    assert res["base"] == scaling.BASE and res["command"] == "x" and res["quick"] is False


def test_setting_search_never_picks_an_out_of_memory_or_over_the_cap(trl_search):
    assert trl_search.micro_candidates(64) == [64, 32, 16]
    assert trl_search.micro_candidates(6) == [6, 3, 1]  # 6 // 4 = 1 divides too
    assert trl_search.micro_candidates(2) == [2, 1]
    grid = trl_search.settings_grid(64)
    assert len(grid) == 6 and grid[0] == {"precision": "fp32", "micro": 64}

    def probe(s):
        if s["micro"] == 64:  # the fastest would be the whole step, but it does not fit
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 GB")
        if s["micro"] == 32:
            return {"median_step_s": 1.0, "peak_mb": 30_000}  # faster, but over the RAM cap
        if s["precision"] == "bf16":
            raise RuntimeError("worker failed: ValueError: something else")
        return {"median_step_s": 2.0, "peak_mb": 10_000}
    best, tried = trl_search.search(grid, probe, ram_cap_mb=24 * 1024)
    assert best == {"precision": "fp32", "micro": 16}
    status = {(t["precision"], t["micro"]): t["status"] for t in tried}
    assert status[("fp32", 64)] == "oom" and status[("fp32", 32)] == "over_ram_cap"
    assert status[("bf16", 16)] == "error" and status[("fp32", 16)] == "ok" and len(tried) == 6
    assert trl_search.is_oom("bf16 worker died, exit code -9 (killed: out of memory?)")
    assert not trl_search.is_oom("timed out after 600 s")
    none, tried = trl_search.search(grid[:1], lambda s: (_ for _ in ()).throw(MemoryError()))
    assert none is None and tried[0]["status"] == "oom"


def test_base_set_changes_the_base_model_of_every_point(scaling):
    g = scaling.grid(False, ["max_new", "group"], {"num_hidden_layers": 4})
    assert list(g) == ["max_new", "group"]  # the order asked for
    for _, spec in g["max_new"] + g["group"]:
        assert spec["set"] == {"num_hidden_layers": 4}
    assert scaling.base_of(False, {"num_hidden_layers": 4})["set"] == {"num_hidden_layers": 4}
    assert scaling.base_of(False) is scaling.BASE
    a = scaling.parse_args(["--only", "max_new", "--base-set", "num_hidden_layers=4", "--steps", "1"])
    assert a.base_set == {"num_hidden_layers": 4} and a.steps == 1


def test_values_pick_points_of_a_curve_and_a_value_no_curve_has_is_refused(scaling):
    g = scaling.grid(False, ["max_new"], None, ["128", "1024"])
    assert [v for v, _ in g["max_new"]] == [128, 1024]
    assert [spec["max_new"] for _, spec in g["max_new"]] == [128, 1024]
    with pytest.raises(ValueError, match="--values 7"):
        scaling.grid(False, ["max_new"], None, ["7"])
    with pytest.raises(SystemExit):
        scaling.parse_args(["--only", "group", "--values", "3"])
