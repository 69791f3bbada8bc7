"""Held-out wins of checkpoints, of a teacher and of the blind bound on a recipe's TextArena evaluation games,
with the feedback ablation (every observation after the first replaced by a constant).

    python bench/textarena_measure.py recipes/textarena.yaml --model runs/textarena/sft/final \
        --model runs/textarena/grpo/final --teacher recipes/textarena_teacher.py:random_in_range --ablate

A win is the game's reward 1 (TextArena's partial rewards do not count). For every checkpoint: greedy wins in
the closed loop (the recipe's ``eval.agent`` limits), the share of its first guesses at each value (is greedy
decoding already at the midpoint?), and with ``--ablate`` the same with the feedback replaced by a constant: each
``--constant`` in turn (a text the policy never saw, or one of the game's own messages held fixed, which a policy
that reads the feedback follows as it would the real message, without the information).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter


def first_guesses(trajs) -> dict[str, int]:
    return dict(Counter(t.turns[0].text.strip() for t in trajs if t.turns).most_common(4))


def wins(trajs) -> float:
    return sum(t.passed for t in trajs) / max(1, len(trajs))


def play(model_dir: str, tasks, loop):
    from rlvr.models.load import load_pretrained
    from rlvr.rollout.hf_engine import HFEngine
    from rlvr.rollout.multiturn import MultiTurnCollector

    model, tok = load_pretrained(model_dir, "float32")
    return MultiTurnCollector(HFEngine(model.eval(), tok, batch_size=512), tok, loop).collect(tasks, 1, greedy=True)


def teacher_wins(tasks, spec: str) -> float:
    from rlvr.envs.registry import make_env
    from rlvr.envs.textarena import load_teacher, play_teacher

    teacher, won = load_teacher(spec), 0
    for t in tasks:
        env = make_env(t)
        env.reset(t)
        for action in play_teacher(t, teacher):
            if not env.done:
                env.step(action)
        won += env.goal_result().met
    return won / len(tasks)


def blind_bound(tasks) -> float:
    """Distinct guesses without feedback: the game's guesses over the size of its range (a number game's
    ``min_number``/``max_number``/``max_turns``; None for other games)."""
    kw = tasks[0].gold["init"]["kwargs"]
    if not {"min_number", "max_number", "max_turns"} <= set(kw):
        return float("nan")
    return min(1.0, (kw["max_turns"] + 1) / (kw["max_number"] - kw["min_number"] + 1))


def main() -> None:
    import rlvr  # noqa: F401 - registers the environments and the textarena source
    from rlvr.config.load import load_recipe
    from rlvr.data.sources import load_task_source

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe")
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--teacher", action="append", default=[])
    ap.add_argument("--ablate", action="store_true", help="also with the feedback replaced by a constant")
    ap.add_argument("--constant", action="append", default=[],
                    help="the constant that replaces the feedback (repeatable; default 'Noted.'): a text the policy "
                         "never saw, or one of the game's own messages held fixed for the whole game")
    ap.add_argument("--out")
    args = ap.parse_args()
    recipe = load_recipe(args.recipe)
    src, loop = recipe.eval.tasks, recipe.eval.agent
    tasks = load_task_source(src)
    constants = (args.constant or ["Noted."]) if args.ablate else []
    blind = {c: load_task_source(src.model_copy(update={"feedback": c})) for c in constants}
    rows = {"games": len(tasks), "blind_bound": blind_bound(tasks)}
    for spec in args.teacher:
        rows[f"teacher {spec.rsplit(':', 1)[-1]}"] = teacher_wins(tasks, spec)
    for m in args.model:
        trajs = play(m, tasks, loop)
        row = {"wins": wins(trajs), "turns": sum(len(t.turns) for t in trajs) / len(trajs),
               "first_guesses": first_guesses(trajs),
               "outcomes": dict(Counter(t.verdict.outcome for t in trajs))}
        if blind:
            row["wins_constant_feedback"] = {c: wins(play(m, games, loop)) for c, games in blind.items()}
        rows[m] = row
        print(m, json.dumps(row), flush=True)
    print(json.dumps(rows, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
