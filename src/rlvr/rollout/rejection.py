"""Rejection sampling: K samples per task from a sampler (the policy or a teacher), verified, filtered.

Kept: completions the verifier passes, that ended on their own (a completion cut at ``max_new_tokens``
is never kept), deduplicated per task by their text (whitespace-stripped), optionally only the shortest
(``keep: shortest``) and at most ``max_per_task`` per task (shortest first). The kept examples are the
sampled token ids themselves (prompt | completion incl. its end-of-turn token), loss on the completion.
``infra`` verdicts are counted, never kept.
"""

from __future__ import annotations

from collections import defaultdict

from rlvr.rollout.collector import collect
from rlvr.config.rl import RewardTerm
from rlvr.verifiers.base import INFRA_OUTCOMES


def select_verified(groups: list[int], texts: list[str], lengths: list[int], passed: list[bool],
                    finished: list[bool], keep: str = "all", max_per_task: int | None = None) -> list[int]:
    """Row indices to keep, in row order within each task.

    Per task (``groups[i]``): the rows that passed and finished, first occurrence of each distinct
    stripped text; ``keep="shortest"``: only the shortest of those (first on ties); ``max_per_task``: the
    ``max_per_task`` shortest (stable).
    """
    by_task: dict[int, list[int]] = defaultdict(list)
    seen: dict[int, set] = defaultdict(set)
    for i, g in enumerate(groups):
        key = texts[i].strip()
        if passed[i] and finished[i] and key not in seen[g]:
            seen[g].add(key)
            by_task[g].append(i)
    out: list[int] = []
    for g in sorted(by_task):
        rows = by_task[g]
        cap = 1 if keep == "shortest" else max_per_task
        if cap is not None:
            rows = sorted(sorted(rows, key=lambda i: lengths[i])[:cap])
        out.extend(rows)
    return out


def rejection_sample(engine, tokenizer, tasks, judge, sampling, keep: str, max_per_task: int | None,
                     max_length: int, seed: int) -> tuple[list[tuple[list[int], list[int]]], dict]:
    """Sample ``sampling.group_size`` completions per task with ``engine``, verify, filter -> ``(examples,
    metrics)``; examples are ``(ids, loss_mask)`` cut to ``max_length`` (``data.chat.cut_demos``)."""
    ro = collect(engine, tokenizer, tasks, judge, sampling, [RewardTerm()], seed=seed)
    G = ro.group_size
    n = len(ro.texts)
    groups = [i // G for i in range(n)]
    passed = ro.passed.reshape(-1).tolist()
    finished = [r != "length" for r in ro.finish_reason]
    rows = select_verified(groups, ro.texts, [len(c) for c in ro.completion_ids], passed, finished, keep,
                           max_per_task)
    from rlvr.data.chat import cut_demos

    full = [(ro.prompt_ids[i] + ro.completion_ids[i], [0] * len(ro.prompt_ids[i]) + [1] * len(ro.completion_ids[i]))
            for i in rows]
    examples = cut_demos(full, [tasks[groups[i]] for i in rows], max_length, "rejection-sampled SFT")
    solved = len({groups[i] for i in rows})
    distinct = len({(groups[i], ro.texts[i].strip()) for i in range(n) if passed[i] and finished[i]})
    met = {"sample/pass_rate": sum(passed) / max(1, n), "sample/tasks_solved": solved / max(1, len(tasks)),
           "sample/kept": len(rows), "sample/distinct_passed": distinct,
           "sample/truncated": sum(not f for f in finished),
           "sample/length_mean": sum(len(c) for c in ro.completion_ids) / max(1, n),
           "verifier/infra": sum(o in INFRA_OUTCOMES for o in ro.outcomes),
           "time/generate": ro.seconds.get("generate", 0.0), "time/verify": ro.seconds.get("verify", 0.0)}
    return examples, met
