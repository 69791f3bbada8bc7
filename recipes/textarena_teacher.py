"""Demonstrating teachers for recipes/textarena.yaml (the ``teacher`` option of a textarena task source).

``random_in_range`` plays a number-guessing game as a careless human does: every guess is drawn uniformly
from the numbers the hints so far still allow. It uses the feedback (it never guesses outside the range)
but wastes most of what each hint is worth: it wins less often than halving the range, which wins every
game the turn limit leaves room for.
"""

import re


def allowed_range(observations, actions):
    """The numbers the hints so far allow: the range named in the introduction (its first two integers),
    narrowed by each 'higher' / 'lower' answer to a guess."""
    lo, hi = (int(x) for x in re.findall(r"\d+", observations[0])[:2])
    for action, answer in zip(actions, observations[1:]):
        guess = re.search(r"\[(\d+)\]", action)
        if guess is None:
            continue
        g = int(guess.group(1))
        if "higher" in answer:
            lo = max(lo, g + 1)
        elif "lower" in answer:
            hi = min(hi, g - 1)
    return lo, hi


def random_in_range(observations, actions, rng):
    """A uniform guess among the numbers still allowed (never one already guessed)."""
    lo, hi = allowed_range(observations, actions)
    tried = {int(g) for a in actions for g in re.findall(r"\[(\d+)\]", a)}
    left = [n for n in range(lo, hi + 1) if n not in tried] or [lo]
    return f"[{rng.choice(left)}]"


def halving(observations, actions, rng):
    """The midpoint of the numbers still allowed (the best play; for comparison)."""
    lo, hi = allowed_range(observations, actions)
    return f"[{(lo + hi) // 2}]"
