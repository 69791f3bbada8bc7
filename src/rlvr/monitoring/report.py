"""``report.html``: the per-stage summary table and plots of each stage's curves (PNG, inlined).

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
    ("held-out pass@1", ["eval/pass_at_1*"]),  # a trailing * plots every key with that prefix
    ("loss", ["train/loss", "rewards/margin"]),
    ("pass rate / pair accuracy", ["rollout/pass_rate", "reward/mean", "rewards/accuracy", "heldout/accuracy"]),
    ("policy entropy", ["policy/entropy"]),
    ("KL / zero-variance groups", ["kl/ref", "rollout/zero_var_frac"]),
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
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3), squeeze=False)
    for ax, (name, keys) in zip(axes[0], panels):
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


def _table(summary: dict) -> str:
    fams = sorted({f for row in summary["stages"] for f in row["by_family"]})
    head = "".join(f"<th>{h}</th>" for h in ["stage", "pass@1", *fams, "mean length", "wall s", "checkpoint"])
    rows = []
    for r in summary["stages"]:
        if r["pass_at_1"] is None:
            acc = r.get("heldout_pair_accuracy")
            cells = [r["stage"], f"RM pair accuracy {acc:.1%}" if acc is not None else "-", *["-"] * len(fams), "-",
                     f"{r['wall_s']:.0f}", r["checkpoint"]]
        else:
            cells = [r["stage"], f"{r['pass_at_1']:.1%}", *[f"{r['by_family'].get(f, 0):.1%}" for f in fams],
                     f"{r['mean_length']:.1f}", f"{r['wall_s']:.0f}", r["checkpoint"]]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


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
        parts.append(f"<img src='data:image/png;base64,{img}'/>" if img else
                     "<p>(install matplotlib — pip install 'rlvr[report]' — for plots)</p>")
    parts.append("</body></html>")
    out = run_dir / "report.html"
    write_text_atomic(out, "\n".join(parts))
    return out
