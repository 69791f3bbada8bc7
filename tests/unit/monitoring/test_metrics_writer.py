"""metrics.jsonl: append-only, NaN written as a string, a torn last line skipped, truncation on resume."""

import json

from rlvr.monitoring.metrics import MetricsWriter, read_metrics, truncate_metrics_after


def test_append_only_and_nan_as_text(tmp_path):
    p = tmp_path / "m.jsonl"
    w = MetricsWriter(p)
    w.log(1, {"train/loss": 0.5, "health/status": "healthy"})
    w.close()
    w = MetricsWriter(p)                       # a second writer appends, never rewrites
    w.log(2, {"train/loss": float("nan"), "x": float("inf")})
    w.close()
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["health/status"] == "healthy"
    assert rows[1]["train/loss"] == "nan" and rows[1]["x"] == "inf"   # strict JSON, no bare NaN


def test_torn_last_line_is_skipped_and_truncation_keeps_earlier_steps(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1, "a": 1}\n{"step": 2, "a": 2}\n{"step": 3, "a": 3}\n{"step": 4, "a"')
    assert [r["step"] for r in read_metrics(p)] == [1, 2, 3]
    truncate_metrics_after(p, 2)
    assert [r["step"] for r in read_metrics(p)] == [1, 2]
    assert p.read_text().endswith("\n")
