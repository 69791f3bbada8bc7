"""Worked demonstrations for the reasoning-gym recipes, written as rlvr task lines (JSONL).

    python recipes/reasoning-gym/demos.py chain_sum '{"min_terms": 2, "max_terms": 3}' \
        --n 8000 --heldout 300 --out runs/rg/chain_sum_demos.jsonl

Draws the dataset's items through rlvr's reasoning_gym source (the same distinct-question and held-out
rules as ``data: {type: reasoning_gym}``) and writes ``n`` train and ``heldout`` held-out lines with a
worked ``solution`` whose last line is the dataset's answer (what the verifier's ``auto`` extraction
scores). A dataset without a function here gets answer-only demonstrations (the dataset's ``answer``).
The demonstrations live beside the recipes, not in rlvr: they are one recipe's teaching choice.

``--slip-rate Q`` writes them as an imperfect teacher would: each worked form names the teacher's misconception
(a minus sign dropped where a running total crosses zero, the last two letters of a long word or words of a long
list left in reading order, the last word of a long span not read) and where it applies the teacher falls for it on a fraction ``Q`` of the questions
(chosen by a hash of the question, so the same question always gets the same demonstration). With ``Q`` above
one half the slip is the demonstrations' majority where it applies -- what a model imitating them writes
greedily -- and the questions it does not touch are demonstrated right. The held-out demonstrations come from
the same teacher: SFT's patience reads how well the model imitates it, not how often it is right.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from pathlib import Path

from rlvr.data.reasoning_gym import split_entries


def chain_sum(entry: dict, slip: bool = False) -> str:
    """Running totals, one operation at a time: ``15-43=-28, -28-75=-103, ...`` then the answer. The teacher's
    misconception: where a subtraction takes the running total from zero or above to below zero, it writes the
    difference without its minus sign (``3-7=4``) and carries on from there."""
    expr = entry["question"].rsplit(":", 1)[1].rstrip(" =")
    tokens = re.findall(r"[+-]|\d+", expr)
    total, steps = int(tokens[0]), []
    for op, num in zip(tokens[1::2], tokens[2::2]):
        new = total + int(num) if op == "+" else total - int(num)
        if slip and op == "-" and total >= 0 > new:
            new = -new
        steps.append(f"{total}{op}{num}={new}")
        total = new
    assert slip or str(total) == str(entry["answer"]), (entry["question"], total, entry["answer"])
    return ", ".join(steps) + f"\n{total}"


def spell_backward(entry: dict, slip: bool = False) -> str:
    """The word's letters from last to first. The teacher's misconception: on words of six letters or more it
    leaves the last two letters in their reading order (``ammonia`` -> ``ianomma``)."""
    letters = list(entry["metadata"]["word"])[::-1]
    if slip and len(letters) >= 6:
        letters[0], letters[1] = letters[1], letters[0]
    return "".join(letters)


def word_sequence_reversal(entry: dict, slip: bool = False) -> str:
    """The words from last to first, comma-separated. The teacher's misconception: on lists of five words or
    more it leaves the first two words in their reading order at the end (``e, d, c, a, b``)."""
    words = [w.strip() for w in entry["answer"].split(",")]
    if slip and len(words) >= 5:
        words[-2], words[-1] = words[-1], words[-2]
    return ", ".join(words)


def letter_counting(entry: dict, slip: bool = False) -> str:
    """Each word with the running count of the letter so far, then the answer. The teacher's misconception: it
    stops reading one word early on spans of four words or more (the last word's letters are not counted)."""
    letter = entry["metadata"]["target_letter"]
    words = entry["metadata"]["span"]
    total, steps = 0, []
    for word in (words[:-1] if slip and len(words) >= 4 else words):
        total += word.lower().count(letter)
        steps.append(f"{word} {total}")
    assert slip or str(total) == str(entry["answer"])
    return ", ".join(steps) + f"\n{total}"


WORKED = {"chain_sum": chain_sum, "letter_counting": letter_counting, "spell_backward": spell_backward,
          "word_sequence_reversal": word_sequence_reversal}


def teacher_slips(entry: dict, rate: float) -> bool:
    """Whether the teacher falls for its misconception on this question, at ``rate`` (a hash: the same question,
    the same demonstration, whichever draw it comes from)."""
    h = hashlib.blake2b(("teacher:" + entry["question"]).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64 < rate


def demo_lines(name: str, config: dict, n: int, heldout: int, seed: int, answer_only: bool = False,
               slip_rate: float = 0.0):
    """Task lines: ``n`` train demonstrations, then ``heldout`` held-out ones (no shared question), from a
    teacher that falls for its misconception on a fraction ``slip_rate`` of the questions it applies to."""
    if slip_rate > 0.0 and (answer_only or name not in WORKED):
        raise SystemExit(f"--slip-rate needs a worked form for {name} (demos.py has: {', '.join(WORKED)})")
    for split, count in (("train", n), ("heldout", heldout)):
        for entry in split_entries(name, config, count, seed, split, train_n=n):
            if answer_only or name not in WORKED:
                solution = str(entry["answer"])
            else:
                solution = WORKED[name](entry, slip=slip_rate > 0.0 and teacher_slips(entry, slip_rate))
            yield {"prompt": entry["question"], "solution": solution, "split": split, "family": name,
                   "answer_format": "raw", "answer": str(entry["answer"])}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="reasoning-gym dataset name")
    p.add_argument("config", nargs="?", default="{}", help="generator options as JSON")
    p.add_argument("--n", type=int, default=8000, help="train demonstrations")
    p.add_argument("--heldout", type=int, default=300, help="held-out demonstrations (SFT's patience)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--answer-only", action="store_true", help="the dataset's answer alone, even where a worked form exists")
    p.add_argument("--slip-rate", type=float, default=0.0,
                   help="where its misconception applies, the teacher falls for it on this fraction (module doc)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if not 0.0 <= a.slip_rate <= 1.0:
        p.error(f"--slip-rate {a.slip_rate} is not in [0, 1]")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = list(demo_lines(a.name, json.loads(a.config), a.n, a.heldout, a.seed, a.answer_only, a.slip_rate))
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    right = sum(line["solution"].rsplit("\n", 1)[-1].strip() == line["answer"] for line in lines)
    print(f"{out}: {len(lines)} demonstrations of {a.name} ({a.n} train, {a.heldout} held-out), "
          f"{right / len(lines):.1%} ending on the dataset's answer")


if __name__ == "__main__":
    main()
