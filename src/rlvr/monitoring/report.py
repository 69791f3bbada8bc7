"""``report.html``: the per-stage summary table, each stage's health status table and plots of its curves
(PNG, inlined): train vs held-out pass rate, loss, entropy, KL, zero-variance groups, clip fractions, lengths
and the health status timeline with the actions taken. ``rlvr report RUN_DIR`` (re)writes it.

Needs matplotlib (the ``report`` extra); without it the report holds the table and says so.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from rlvr.data.jsonl import write_text_atomic
from rlvr.monitoring.metrics import read_metrics

# metric keys plotted per stage when present (every key of a panel that the stage logged)
PANELS = [
    ("train vs held-out pass rate", ["rollout/pass_rate", "eval/pass_at_1*"]),  # a trailing * plots every key with that prefix
    ("loss", ["train/loss", "rewards/margin"]),
    ("reward / pair accuracy", ["reward/mean", "rewards/accuracy", "heldout/accuracy"]),
    ("entropy (nats/token)", ["rollout/entropy", "policy/entropy"]),
    ("KL to the reference", ["kl/ref"]),
    ("zero-variance groups", ["rollout/zero_var_frac"]),
    ("clip fractions", ["clip/low_frac", "clip/high_frac", "clip/dual_frac", "value/clip_frac"]),
    ("lengths", ["rollout/length_mean", "rollout/truncation_rate", "eval/mean_length"]),
]


def _plot_stage(records: list[dict], title: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    present = sorted({k for r in records for k in r})
    panels = [(name, [p for k in keys for p in (present if k.endswith("*") else [k])
                      if (p.startswith(k[:-1]) if k.endswith("*") else p in present)]) for name, keys in PANELS]
    panels = [(n, ks) for n, ks in panels if ks]
    timeline = any("health/code" in r for r in records)
    if not panels and not timeline:
        return None
    cols = 4
    n = len(panels) + timeline
    fig, axes = plt.subplots(-(-n // cols), cols, figsize=(4 * cols, 3 * -(-n // cols)), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.axis("off")
    if timeline:
        _timeline(flat[len(panels)], records)
    for ax, (name, keys) in zip(flat, panels):
        for k in keys:
            pts = [(r["step"], r[k]) for r in records if isinstance(r.get(k), (int, float))]
            if pts:
                ax.plot(*zip(*pts), marker="." if len(pts) < 40 else None, label=k)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _timeline(ax, records: list[dict]) -> None:
    """The health status code over the steps (0 healthy, 1 warn, 2 critical), each action a marked line."""
    pts = [(r["step"], r["health/code"]) for r in records if isinstance(r.get("health/code"), int)]
    if pts:
        ax.step(*zip(*pts), where="post", color="tab:red")
    for r in records:
        if "health/action" in r:
            ax.axvline(r["step"], color="tab:purple", alpha=0.5, ls="--")
            ax.annotate(r["health/action"].split(":", 1)[0], (r["step"], 2.1), fontsize=6, rotation=90,
                        va="bottom", color="tab:purple")
    ax.set_yticks([0, 1, 2], ["healthy", "warn", "critical"], fontsize=7)
    ax.set_ylim(-0.2, 3.0)
    ax.set_title("health status (dashed: actions)", fontsize=9)
    ax.set_xlabel("step", fontsize=8)
    ax.grid(alpha=0.3)


def _status_html(records: list[dict]) -> str:
    from rlvr.monitoring.status_table import COLUMNS, format_row, status_rows

    rows = status_rows(records)
    if not rows:
        return ""
    head = "".join(f"<th>{name}</th>" for name, _ in COLUMNS)
    body = "".join("<tr" + (" style='color:#b00'" if r.get("health/code") == 2 else
                            " style='color:#a60'" if r.get("health/code") == 1 else "") + ">" +
                   "".join(f"<td>{html.escape(c)}</td>" for c in format_row(r)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def summary_from_run(run_dir: str | Path) -> dict:
    """``summary.json`` of a run, or (a run still going, or a single stage) one row per stage with metrics."""
    import json

    from rlvr.monitoring.status_table import stage_metrics

    p = Path(run_dir) / "summary.json"
    if p.exists():
        return json.loads(p.read_text(encoding="utf-8"))
    rows = []
    for stage, path in stage_metrics(run_dir):
        recs = [r for r in read_metrics(path) if "event" not in r]
        last = next((r for r in reversed(recs) if "eval/pass_at_1" in r), {})
        fams = {k.rsplit("/", 1)[1]: v for k, v in last.items() if k.startswith("eval/pass_at_1/")}
        rows.append({"stage": stage, "pass_at_1": last.get("eval/pass_at_1"), "by_family": fams,
                     "mean_length": last.get("eval/mean_length", 0.0),
                     "wall_s": 60 * (recs[-1].get("perf/minutes", 0.0) if recs else 0.0),
                     "checkpoint": str(Path(path).parent / "final")})
    return {"stages": rows}


def _table(summary: dict) -> str:
    from rlvr.monitoring.control import control_lines

    fams = sorted({f for row in summary["stages"] for f in row["by_family"]})
    gains = any("gain_over_control" in row for row in summary["stages"])
    head = "".join(f"<th>{h}</th>" for h in ["stage", "pass@1", *fams, "mean length", "steps", "train s", "wall s",
                                             *(["vs control (points)"] if gains else []), "checkpoint"])
    rows = []
    for r in summary["stages"]:
        cut = r.get("time_cap")
        if cut:  # a stage its max_minutes cut: steps done of planned
            r = {**r, "stage": f"{r['stage']} (time cap {cut['max_minutes']:g} min: {cut['steps_done']} of "
                               f"{cut['steps_planned']} steps)"}
        clock = [r.get("steps", "-"), f"{r['train_s']:.0f}" if "train_s" in r else "-", f"{r['wall_s']:.0f}",
                 *([f"{100 * r['gain_over_control']:+.1f}" if "gain_over_control" in r else "-"] if gains else [])]
        if r["pass_at_1"] is None:
            acc = r.get("heldout_pair_accuracy")
            cells = [r["stage"], f"RM pair accuracy {acc:.1%}" if acc is not None else "-", *["-"] * len(fams), "-",
                     *clock, r["checkpoint"]]
        else:
            cells = [r["stage"], f"{r['pass_at_1']:.1%}", *[f"{r['by_family'].get(f, 0):.1%}" for f in fams],
                     f"{r['mean_length']:.1f}", *clock, r["checkpoint"]]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    notes = "".join(f"<p>{html.escape(line)}</p>" for line in control_lines(summary))
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>{notes}"


def write_report(run_dir: str | Path, summary: dict) -> Path:
    """Write RUN_DIR/report.html and return its path."""
    run_dir = Path(run_dir)
    parts = ["<html><head><meta charset='utf-8'><title>rlvr report</title><style>"
             "body{font-family:sans-serif;margin:2em} table{border-collapse:collapse} "
             "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}</style></head><body>",
             f"<h1>rlvr run: {html.escape(str(run_dir))}</h1>", "<h2>Held-out evaluation by stage</h2>",
             _table(summary)]
    for row in summary["stages"]:
        mpath = run_dir / row["stage"] / "metrics.jsonl"
        recs = [r for r in read_metrics(mpath) if "event" not in r]
        if not recs:
            continue
        img = _plot_stage(recs, row["stage"])
        parts.append(f"<h2>{html.escape(row['stage'])}</h2>")
        parts.append(_status_html(recs))
        parts.append(f"<img src='data:image/png;base64,{img}'/>" if img else
                     "<p>(install matplotlib — pip install 'rlvr[report]' — for plots)</p>")
    parts.append("</body></html>")
    out = run_dir / "report.html"
    write_text_atomic(out, "\n".join(parts))
    return out
