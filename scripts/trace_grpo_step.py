"""Follow one GRPO step of the quickstart through rlvr's files, as a new contributor reading the code would.

Runs ``rlvr run`` in this process on the quickstart recipe cut to its GRPO stage (one step, the 1m model
built from scratch, no held-out evaluation) under ``sys.settrace``, watching rlvr's own frames only (the
main thread), and reports for two windows — from the CLI to the end of the first optimizer step, and the
step alone (from drawing its tasks to the end of its first optimizer step):

- the files visited in order, read as a contributor reads code: each call edge (caller function -> callee
  function) is followed the first time only (a loop over tokens or micro-batches is read once), and a
  return goes back to the caller's file; generator and comprehension frames are iteration, not calls;
- the file switches, the distinct files, the returns to a file already left;
- how often the path climbs back up a layer (the next file's layer is higher than the current one's, in the
  layer order of ``tests/unit/architecture``: mostly returns), and how many of those climbs are calls (a
  callback handed down, such as a lambda);
- every module that appears twice on one call stack with another module between (A -> B -> A), except
  ``losses/`` and ``advantages/`` (pure functions called from anywhere).

    python scripts/trace_grpo_step.py [--json OUT] [--files]

``PYTHONPATH`` decides which tree is traced. Exit status 1 when an A -> B -> A stack is found.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ORDER = ["errors", "config", "native", "console", "omp_wait", "data", "envs", "verifiers", "models", "rollout",
         "monitoring", "trainers", "distributed", "pipeline", "commands", "cli"]
RANK = {name: i for i, name in enumerate(ORDER)}
for low in ("config", "native", "console", "omp_wait"):
    RANK[low] = RANK["errors"]
EXEMPT = ("losses", "advantages")
START_STEP = ("data/order.py", "take")           # the step draws its tasks
END = ("trainers/optimizer.py", "optimizer_step")  # ... and ends with the optimizer step


ITERATION = 0x20 | 0x200 | 0x80  # CO_GENERATOR, CO_ASYNC_GENERATOR, CO_COROUTINE


class Tracer:
    def __init__(self, root: Path):
        self.root = str(root) + os.sep
        self.runs: list[str] = []          # files in order, consecutive duplicates collapsed
        self.calls: list[tuple[str, str]] = []  # (caller file, callee file) of each followed call
        self.edges: set = set()
        self.step_start: int | None = None  # index into runs where the step began
        self.recursions: dict[str, int] = {}
        self.done = False

    def rel(self, frame) -> str | None:
        code = frame.f_code
        f = code.co_filename
        if not f.startswith(self.root) or code.co_flags & ITERATION or code.co_name.endswith("comp>"):
            return None
        return f[len(self.root):]

    def caller(self, frame):
        back = frame.f_back
        while back is not None and self.rel(back) is None:
            back = back.f_back
        return back

    def rlvr_stack(self, frame) -> list[str]:
        out = []
        while frame is not None:
            r = self.rel(frame)
            if r is not None and (not out or out[-1] != r):
                out.append(r)
            frame = frame.f_back
        return out[::-1]  # outermost first, consecutive duplicates collapsed

    def visit(self, rel: str) -> None:
        if not self.runs or self.runs[-1] != rel:
            self.runs.append(rel)

    def on_call(self, frame, event, arg):
        if self.done:
            return None
        rel = self.rel(frame)
        if rel is None:
            return None
        if self.step_start is None and (rel, frame.f_code.co_name) == START_STEP:
            self.step_start, self.step_calls = len(self.runs), len(self.calls)
        parent = self.caller(frame)
        edge = (parent.f_code if parent is not None else None, frame.f_code)
        frame.f_trace_lines = False
        if edge in self.edges:
            return self.on_local_unread
        self.edges.add(edge)
        if parent is not None:
            self.calls.append((self.rel(parent), rel))
        if self.runs and self.runs[-1] != rel:
            stack = self.rlvr_stack(frame)
            mod = stack[-1]
            if mod.split("/")[0] not in EXEMPT and mod in stack[:-1]:
                i = len(stack) - 2 - stack[-2::-1].index(mod)
                chain = " -> ".join(stack[i:])
                self.recursions[chain] = self.recursions.get(chain, 0) + 1
        self.visit(rel)
        return self.on_local

    def finished(self, frame) -> bool:
        if (self.rel(frame), frame.f_code.co_name) == END and self.step_start is not None:
            self.done = True
            sys.settrace(None)
        return self.done

    def on_local_unread(self, frame, event, arg):
        if event == "return":
            self.finished(frame)
        return None

    def on_local(self, frame, event, arg):
        if event != "return" or self.finished(frame):
            return None
        back = self.caller(frame)
        if back is not None:
            self.visit(self.rel(back))
        return None


def layer(rel: str) -> str:
    return rel.split("/")[0].removesuffix(".py")


def summary(runs: list[str], calls: list[tuple[str, str]]) -> dict:
    seen, returns = set(), 0
    for f in runs:
        if f in seen:
            returns += 1
        seen.add(f)
    up = lambda a, b: RANK.get(layer(b), -1) > RANK.get(layer(a), -1)  # noqa: E731
    return {"stays": len(runs), "file_switches": max(0, len(runs) - 1), "files": len(seen),
            "returns_to_a_file_left": returns,
            "climbs_up_a_layer": sum(up(a, b) for a, b in zip(runs, runs[1:])),
            "calls_up_a_layer": sum(up(a, b) for a, b in calls)}


def quickstart_grpo_recipe(root: Path, work: Path) -> Path:
    import yaml

    recipe = yaml.safe_load((root / "recipes" / "quickstart.yaml").read_text())
    grpo = next(s for s in recipe["stages"] if s["type"] == "rl")
    grpo.update(max_steps=1, save_every=0, eval_every=0)
    recipe["stages"] = [grpo]
    recipe.pop("eval", None)
    recipe["run_dir"] = str(work / "run")
    path = work / "grpo_step.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the counts and the files in order to this file")
    ap.add_argument("--files", action="store_true", help="print the step's files in order")
    a = ap.parse_args()
    import rlvr
    from rlvr import cli

    root = Path(rlvr.__file__).resolve().parent
    with tempfile.TemporaryDirectory() as tmp:
        recipe = quickstart_grpo_recipe(root, Path(tmp))
        tracer = Tracer(root)
        sys.argv = ["rlvr", "run", str(recipe)]
        sys.settrace(tracer.on_call)
        try:
            cli.main()
        except SystemExit as e:
            if e.code:
                raise
        finally:
            sys.settrace(None)
    if tracer.step_start is None or not tracer.done:
        print("the traced run did not reach a GRPO step's optimizer step", file=sys.stderr)
        return 2
    step = tracer.runs[tracer.step_start:]
    report = {"tree": str(root), "cli_to_first_optimizer_step": summary(tracer.runs, tracer.calls),
              "step": summary(step, tracer.calls[tracer.step_calls:]),
              "climbs": sorted({f"{a} -> {b}" for a, b in tracer.calls[tracer.step_calls:]
                                if RANK.get(layer(b), -1) > RANK.get(layer(a), -1)}),
              "recursions": tracer.recursions, "step_files_in_order": step}
    for name in ("cli_to_first_optimizer_step", "step"):
        s = report[name]
        print(f"{name}: {s['stays']} stays in {s['files']} files, {s['file_switches']} file switches, "
              f"{s['climbs_up_a_layer']} climbs up a layer ({s['calls_up_a_layer']} of them calls), "
              f"{s['returns_to_a_file_left']} returns to a file left")
    if a.files:
        print("\n".join(step))
        print("climbs (step):", *report["climbs"], sep="\n  ")
    for chain, n in sorted(tracer.recursions.items()):
        print(f"A -> B -> A: {chain} ({n}x)")
    if not tracer.recursions:
        print("no module twice on one call stack (losses/, advantages/ exempt)")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 1 if tracer.recursions else 0


if __name__ == "__main__":
    sys.exit(main())
