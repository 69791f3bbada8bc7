"""Worked demonstrations for the reasoning-gym recipes, written as rlvr task lines (JSONL).

    python recipes/reasoning-gym/demos.py chain_sum '{"min_terms": 2, "max_terms": 3}' \
        --n 8000 --heldout 300 --out runs/rg/chain_sum_demos.jsonl

Draws the dataset's items through rlvr's reasoning_gym source (the same distinct-question and held-out
rules as ``data: {type: reasoning_gym}``) and writes ``n`` train and ``heldout`` held-out lines with a
worked ``solution`` whose last line is the dataset's answer (what the verifier's ``auto`` extraction
scores). A dataset without a function here gets answer-only demonstrations (the dataset's ``answer``).
The demonstrations live beside the recipes, not in rlvr: they are one recipe's teaching choice.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from rlvr.data.reasoning_gym import split_entries


def chain_sum(entry: dict) -> str:
    """Running totals, one operation at a time: ``15-43=-28, -28-75=-103, ...`` then the answer."""
    expr = entry["question"].rsplit(":", 1)[1].rstrip(" =")
    tokens = re.findall(r"[+-]|\d+", expr)
    total, steps = int(tokens[0]), []
    for op, num in zip(tokens[1::2], tokens[2::2]):
        new = total + int(num) if op == "+" else total - int(num)
        steps.append(f"{total}{op}{num}={new}")
        total = new
    assert str(total) == str(entry["answer"]), (entry["question"], total, entry["answer"])
    return ", ".join(steps) + f"\n{total}"


def letter_counting(entry: dict) -> str:
    """Each word with the running count of the letter so far, then the answer."""
    letter = entry["metadata"]["target_letter"]
    total, steps = 0, []
    for word in entry["metadata"]["span"]:
        total += word.lower().count(letter)
        steps.append(f"{word} {total}")
    assert str(total) == str(entry["answer"])
    return ", ".join(steps) + f"\n{total}"


WORKED = {"chain_sum": chain_sum, "letter_counting": letter_counting}


def demo_lines(name: str, config: dict, n: int, heldout: int, seed: int, answer_only: bool = False):
    """Task lines: ``n`` train demonstrations, then ``heldout`` held-out ones (no shared question)."""
    write = (lambda e: str(e["answer"])) if answer_only or name not in WORKED else WORKED[name]
    for split, count in (("train", n), ("heldout", heldout)):
        for entry in split_entries(name, config, count, seed, split, train_n=n):
            yield {"prompt": entry["question"], "solution": write(entry), "split": split, "family": name,
                   "answer_format": "raw", "answer": str(entry["answer"])}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="reasoning-gym dataset name")
    p.add_argument("config", nargs="?", default="{}", help="generator options as JSON")
    p.add_argument("--n", type=int, default=8000, help="train demonstrations")
    p.add_argument("--heldout", type=int, default=300, help="held-out demonstrations (SFT's patience)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--answer-only", action="store_true", help="the dataset's answer alone, even where a worked form exists")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = list(demo_lines(a.name, json.loads(a.config), a.n, a.heldout, a.seed, a.answer_only))
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    print(f"{out}: {len(lines)} demonstrations of {a.name} ({a.n} train, {a.heldout} held-out)")


if __name__ == "__main__":
    main()
