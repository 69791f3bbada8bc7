"""Draw held-out pass@1 against training minutes from one or more stages' metrics.jsonl.

    python bench/curves.py --out docs/img/sft_easy.png runs/sft_easy/sft/metrics.jsonl:SFT
    python bench/curves.py --out docs/img/rl.png runs/g/grpo/metrics.jsonl:grpo runs/d/grpo/metrics.jsonl:dapo

Prints the (minutes, pass@1) points as a Markdown table too, for docs.
"""

from __future__ import annotations

import argparse

from rlvr.monitoring.metrics import read_metrics

MINUTES = ("perf/train_minutes", "perf/minutes")


def points(path: str, key: str) -> list[tuple[float, float, int]]:
    out = []
    for r in read_metrics(path):
        if key in r:
            m = next((r[k] for k in MINUTES if k in r), 0.0)
            out.append((float(m), float(r[key]), int(r["step"])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("series", nargs="+", help="METRICS_JSONL[:LABEL]")
    ap.add_argument("--key", default="eval/pass_at_1")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for s in args.series:
        path, _, label = s.partition(":")
        pts = points(path, args.key)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label or path)
        print(f"\n{label or path}\n| step | minutes | {args.key} |\n|---:|---:|---:|")
        for m, v, st in pts:
            print(f"| {st} | {m:.2f} | {v:.3f} |")
    ax.set_xlabel("training minutes (2 CPU cores)")
    ax.set_ylabel(args.key)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
