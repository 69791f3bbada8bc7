"""The method tables of docs/methods.md, from the `rlvr sweep` directories that measured them.

Each sweep's ``sweep.json`` (written by ``rlvr sweep``) becomes one markdown table (per grid point: the held-out
pass@1 (or the sweep's ``--metric``) mean and per seed, the paired difference to the reference value with its 95% t-interval, end-of-run
health, groups sampled, sequences trained and steps) with the compute the sweep spent (its cells' wall-clock seconds, each cell
on one thread: CPU-core minutes). The tables are printed; ``--json`` keeps them (paths outside the sweep
directory are written relative to it); ``--img-dir`` copies each sweep's held-out curves
(``sweep_curves.png``) as ``methods_NAME_curves.png``.

    python bench/methods_tables.py --sweep rl_mul31=runs/methods/rl_mul31 --sweep rl_spell=runs/methods/rl_spell \\
        --json bench/results/methods_tables.json --img-dir docs/img
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from rlvr.monitoring.sweep_table import metric_label


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def fmt_delta(d: dict | None) -> str:
    """``+0.5 [-1.1, +2.0]`` in percentage points, or why there is no interval."""
    if not d:
        return "(reference)"
    if d.get("half_width") is None:
        return "-" if d.get("mean") is None else f"{100 * d['mean']:+.1f} (no interval)"
    return f"{100 * d['mean']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


OPTIONAL = [("zero-var", "zero_var_frac", ".2f"), ("entropy", "entropy", ".3f"), ("cut", "truncated", ".1%"),
            ("length", "length", ".1f"), ("groups sampled", "groups_drawn", ".0f"), ("trained seqs", "sequences", ".0f")]
"""The RL health and compute columns: (header, cell key, format); a column no cell has is left out."""


def table_markdown(t: dict) -> str:
    """One row per grid point: values, mean, per seed, each key's paired difference, the RL health and compute
    columns some cell has (a preference sweep has none), steps."""
    keys = t["keys"]
    cols = [c for c in OPTIONAL if any(cell.get(c[1]) is not None for cell in t["cells"])]
    head = [*(k.split(".")[-1] if k.split(".")[-1] != "type" else ".".join(k.split(".")[-2:]) for k in keys),
            f"{metric_label(t.get('metric', 'pass_at_1'))} % (mean)", f"per seed ({', '.join(map(str, t['seeds']))})",
            *(f"Δ vs {v[0]} (pp, 95% CI)" for v in t["values"]), *(h for h, _, _ in cols), "steps"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in t["cells"]:
        num = (lambda x, f: "-" if x is None else format(x, f))
        row = [*c["values"].values(), f"**{fmt_pct(c['mean'])}**",
               " / ".join(fmt_pct(v) for v in c["per_seed"].values()),
               *(fmt_delta(c["vs_first"].get(k)) for k in keys), *(num(c.get(k), f) for _, k, f in cols),
               num(c["steps"], ".0f")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def compute(t: dict) -> dict:
    """Cells, their summed wall-clock and training seconds (one thread a cell: core seconds)."""
    cells = t["cells"]
    wall = sum((c["wall_s"] or 0) * c["runs"] for c in cells)
    train = sum((c["train_s"] or 0) * c["runs"] for c in cells)
    return {"cells": sum(c["runs"] for c in cells), "wall_core_min": round(wall / 60, 1),
            "train_core_min": round(train / 60, 1)}


def relative(t: dict, root: Path, repo: Path | None = None) -> dict:
    """The table with the sweep directory's own paths written relative to it, and the paths inside the repository
    (``repo``, default the working directory: the recipe) relative to that (no machine paths kept)."""
    text = json.dumps(t)
    for base in (root.resolve(), root, (repo or Path.cwd()).resolve()):
        text = text.replace(str(base) + "/", "")
    return json.loads(text)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", action="append", required=True, metavar="NAME=DIR",
                    help="a sweep's output directory (repeatable)")
    ap.add_argument("--json", help="write the tables and compute here")
    ap.add_argument("--img-dir", help="copy each sweep's sweep_curves.png here as methods_NAME_curves.png")
    args = ap.parse_args(argv)
    out = {}
    for spec in args.sweep:
        name, _, d = spec.partition("=")
        if not d:
            ap.error(f"--sweep {spec!r}: expected NAME=DIR")
        root = Path(d)
        if not (root / "sweep.json").exists():
            ap.error(f"--sweep {spec!r}: {root / 'sweep.json'} not found (run rlvr sweep there first)")
        t = json.loads((root / "sweep.json").read_text())
        md, cost = table_markdown(t), compute(t)
        print(f"## {name}\n\n{md}\n\ncompute: {cost['cells']} cells, {cost['wall_core_min']} core-minutes "
              f"({cost['train_core_min']} of them training)\n")
        out[name] = {"markdown": md, "compute": cost, "table": relative(t, root)}
        curves = root / "sweep_curves.png"
        if args.img_dir and curves.exists():
            shutil.copyfile(curves, Path(args.img_dir) / f"methods_{name}_curves.png")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
