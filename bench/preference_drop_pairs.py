"""Preference pairs on which DPO's loss falls while the policy's held-out preference falls (the health rule
``preference_drop``): mul31 problems where the quickstart's imperfect teacher drops a carry, chosen = the right
worked solution, rejected = the teacher's; a fraction of the training pairs' labels flipped; held-out pairs clean.

    python bench/preference_drop_pairs.py --flip 0.4 --out runs/pdrop      # train.jsonl, heldout.jsonl

docs/preference.md ("Constrained PO where the rule fires") runs DPO and constrained_po on them.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from rlvr.data.arithmetic import generate, make_task


def carry_pairs(split: str, n: int, seed: int) -> list[dict]:
    """``n`` pairs (right, teacher's) from the mul31 problems of ``split`` on which the teacher errs."""
    out = []
    for t in generate(["mul31"], 4 * n, split=split, seed=seed):
        a, b = (int(x) for x in t.prompt.removesuffix("=?").split("*"))
        good, bad = make_task("mul31", a, b).solution, make_task("mul31", a, b, teacher_rate=1.0).solution
        if good != bad:
            out.append({"prompt": t.prompt, "chosen": good, "rejected": bad})
        if len(out) == n:
            return out
    raise SystemExit(f"only {len(out)} of {n} {split} problems with a carry to drop")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flip", type=float, default=0.4, help="share of training pairs whose labels are swapped")
    ap.add_argument("--train", type=int, default=96)
    ap.add_argument("--heldout", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0, help="which training labels are flipped")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not 0.0 <= a.flip <= 1.0:
        raise SystemExit(f"--flip must be in [0, 1], got {a.flip}")
    rng, train = random.Random(a.seed), carry_pairs("train", a.train, 5)
    for p in train:
        if rng.random() < a.flip:
            p["chosen"], p["rejected"] = p["rejected"], p["chosen"]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("heldout", carry_pairs("heldout", a.heldout, 6))):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {out}/train.jsonl ({len(train)} pairs, {a.flip:.0%} flipped) and {out}/heldout.jsonl ({a.heldout})")


if __name__ == "__main__":
    main()
