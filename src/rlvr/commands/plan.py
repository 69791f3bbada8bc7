"""``rlvr plan RECIPE``: decide before spending — what the recipe's verifiers, starting checkpoint and
agent tasks say about the run, in plain words.

1. **probes**: the adversarial probe suite (``rlvr probe``) on every verifier kind the recipe's tasks use;
   a task kind without a verifier is named (use the preference path);
2. **determinism**: the same outputs (each task's worked solution, a corrupted copy, the empty string)
   verified twice by two fresh verifiers must get the same outcome and reward;
3. **screen** (:mod:`rlvr.monitoring.screen`): the starting checkpoint — or, for a finished run, each
   stage's ``final/`` — at every RL stage's G and temperature on that stage's tasks; a stage whose measured
   informative-group fraction is under one half is re-screened at higher temperatures to name one that fixes it;
4. **horizon** of agent (multi-turn) stages: turns, tool calls and tokens per trajectory of the starting
   model on the stage's environment tasks, against the loop's limits;
5. **recommendations**;
6. **decisions**: run / skip / replace for each stage, by the rules of :mod:`rlvr.monitoring.plan_rules` on the
   figures measured on the policy it would start from; printed as a table and written to ``plan.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer


def _tasks(source, n: int) -> list:
    from rlvr.data.sources import load_task_source

    return load_task_source(source)[:n]


def _sources(recipe) -> list:
    """Every task source of the recipe: each screened stage's data (RL), the preference pairs' tasks, the eval
    tasks."""
    from rlvr.stages import stage_kind

    out = [recipe.eval.tasks]
    for st in recipe.stages:
        if stage_kind(st).screened:
            out.append(st.data)
        pairs = getattr(st, "pairs", None)
        if pairs is not None and getattr(pairs, "tasks", None) is not None:
            out.append(pairs.tasks)
    return out


def probe_verifiers(kinds: set[str]) -> tuple[dict, list[str]]:
    """{kind: {"probes": N, "accepted": [probe names that earned reward > 0 or were not ok]}}, and the kinds
    with no verifier at all."""
    from rlvr.verifiers.probes.runner import KINDS, run_probes
    from rlvr.verifiers.registry import available_kinds

    res, missing = {}, sorted(k for k in kinds if k not in available_kinds())
    for k in sorted(kinds & set(KINDS)):
        rows, _ = run_probes(k)
        res[k] = {"probes": len(rows), "accepted": [r.probe for r in rows if not r.ok]}
    return res, missing


def determinism(tasks: list) -> dict:
    """Verify each task's solution, a corrupted copy and the empty string twice (two fresh routers);
    returns the number of outputs checked and those whose (outcome, reward) differed."""
    from rlvr.verifiers.registry import TaskRouter

    items = []
    for t in tasks:
        sol = t.solution or ""
        items += [(t, sol), (t, sol[:-1] + ("0" if sol[-1:] != "0" else "1")), (t, "")]
    a, b = TaskRouter(), TaskRouter()
    diff = []
    for t, c in items:
        va, vb = a.verify(t, c), b.verify(t, c)
        if (va.outcome, va.reward) != (vb.outcome, vb.reward):
            diff.append({"task": t.id, "completion": c[:60], "first": [va.outcome, va.reward],
                         "second": [vb.outcome, vb.reward]})
    return {"checked": len(items), "differ": diff}


def _checkpoints(recipe, run_dir: Path) -> list[tuple[str, str | None]]:
    """(label, folder or None for the recipe's starting model): each stage's final/ of a finished run, else
    the start."""
    done = [(st.name, str(run_dir / st.name / "final")) for st in recipe.stages
            if (run_dir / st.name / "final" / "config.json").exists()]
    return done or [("start", recipe.model.path)]


def plan_format(path: str | None, recipe, system_prompt: str | bool | None = None) -> dict:
    """The prompt format a checkpoint is screened in: ``system_prompt`` (a text, or False for none) when
    given; else the recipe's ``system_prompt`` when it sets one (the RL stage will train with it; a
    checkpoint saved with another is noted); else the checkpoint's ``prompt_format.json``."""
    from rlvr.commands.checkpoint_format import resolve_format

    fmt = resolve_format(path, system_prompt)
    if system_prompt is None and recipe.system_prompt:
        if fmt["saved"] and fmt["system_prompt"] != recipe.system_prompt:
            fmt["note"] = (f"{path} was saved with system prompt {fmt['system_prompt']!r}, the recipe sets "
                           f"{recipe.system_prompt!r}: screened with the recipe's")
        fmt.update(system_prompt=recipe.system_prompt, source="the recipe's system_prompt")
    return fmt


def plan(recipe_path: str, overrides: list[str], n_tasks: int = 64, run_dir: str | None = None,
         system_prompt: str | bool | None = None) -> dict:
    from rlvr.commands.checkpoint_format import apply_format, format_line
    from rlvr.config.load import load_recipe
    from rlvr.models.load import load_model_and_tokenizer, load_pretrained
    from rlvr.monitoring.screen import screen_model
    from rlvr.rollout.hf_engine import HFEngine
    from rlvr.stages import stage_kind
    from rlvr.verifiers.judge import default_judge

    recipe = load_recipe(recipe_path, overrides)
    run = Path(run_dir or recipe.run_dir)
    kinds = {t.kind for s in _sources(recipe) for t in _tasks(s, n_tasks) if t.kind != "env"}
    report: dict = {"recipe": recipe_path, "kinds": sorted(kinds), "recommendations": []}
    rec = report["recommendations"]
    report["probes"], missing = probe_verifiers(kinds)
    for k in missing:
        rec.append(f"no verifier for task kind {k!r}: use the preference path (pairs scored by a probed model judge: pairs.scorer: judge, RLAIF) or register one")
    for k, p in report["probes"].items():
        if p["accepted"]:
            rec.append(f"the {k} verifier accepts {len(p['accepted'])} of {p['probes']} probes "
                       f"({', '.join(p['accepted'][:4])}): harden it first")
    det_tasks = [t for s in _sources(recipe) for t in _tasks(s, 8) if t.kind != "env" and t.kind not in missing]
    report["determinism"] = determinism(det_tasks)
    if report["determinism"]["differ"]:
        rec.append(f"the verifier is not deterministic: {len(report['determinism']['differ'])} of "
                   f"{report['determinism']['checked']} outputs got a different verdict the second time; fix it "
                   "before RL (rewards would be noise)")
    judge, screens, horizons = default_judge(), [], []
    report["prompt_formats"] = {}
    rl_stages = [st for st in recipe.stages if stage_kind(st).screened]
    for label, path in _checkpoints(recipe, run):
        fmt = plan_format(path, recipe, system_prompt)
        report["prompt_formats"][label] = format_line(fmt)
        if "note" in fmt:
            rec.append(fmt["note"])
        model, tok = load_pretrained(path, fmt["dtype"]) if path else load_model_and_tokenizer(recipe.model)
        engine = HFEngine(model, tok)
        for st in rl_stages:
            if st.rollout.closed_loop:
                horizons.append(_horizon(engine, tok, st, label, n_tasks, fmt))
                continue
            tasks = apply_format(_tasks(st.data, n_tasks), fmt)
            s = screen_model(engine, tok, tasks, judge, st.sampling.group_size, st.sampling.temperature,
                             st.sampling.max_new_tokens)
            s.update({"checkpoint": label, "stage": st.name})
            if s["signal_frac_observed"] < 0.5 and not s["below_threshold"]:
                s["temperature_fix"] = _temperature_fix(engine, tok, tasks[: max(8, n_tasks // 2)], judge, st)
            screens.append(s)
            rec.append(_screen_advice(s, recipe, st, label))
    report["screen"], report["horizon"] = screens, horizons
    for h in horizons:
        if h["turns_mean"] >= 0.9 * h["max_turns"]:
            rec.append(f"agent stage {h['stage']}: trajectories use {h['turns_mean']:.1f} of {h['max_turns']} turns "
                       "(the horizon is the limit): raise rollout.loop.max_turns or add demonstrations first")
        if h["pass_at_1"] == 0:
            rec.append(f"agent stage {h['stage']}: the {h['checkpoint']} model solves none of the environment tasks "
                       "(no signal for RL): SFT on demonstrations first")
    if not rec:
        rec.append("nothing stands in the way: run it")
    report["decisions"] = decisions(recipe, run)
    return report


def decisions(recipe, run: Path) -> list[dict]:
    """Each stage's decision (:mod:`rlvr.monitoring.plan_rules`): ``done`` for a stage finished in ``run``; for the
    others, the rules on the figures measured on the policy the first of them would start from (the latest
    finished stage's model, else the recipe's) — later ones are ``provisional``: ``rlvr run --plan auto``
    decides each again just before it, on the figures measured then."""
    import tempfile

    from rlvr.config.recipe import with_system_prompt
    from rlvr.pipeline import evaluate_checkpoint, plan_decision

    recipe = with_system_prompt(recipe)
    done = [st.name for st in recipe.stages if (run / st.name / "final" / "config.json").exists()]
    prev = str(run / done[-1] / "final") if done else recipe.model.path
    with tempfile.TemporaryDirectory() as tmp:
        res = evaluate_checkpoint(recipe, prev, Path(tmp) / "eval.json")
    summary, out = {"stages": [{"pass_at_1": res["pass_at_1"], "n_tasks": res.get("n_tasks")}]}, []
    for i, st in enumerate(recipe.stages):
        if st.name in done:
            out.append({"stage": st.name, "decision": "done", "rule": None, "reason": "finished in the run",
                        "instead": None})
            continue
        d = plan_decision(recipe, i, prev, summary, run)
        d["provisional"] = any(o["decision"] != "done" for o in out)
        out.append(d)
    return out


def write_plan(rep: dict, path: Path) -> Path:
    """``plan.json``: the whole report (decisions, screens, probes)."""
    from rlvr.data.jsonl import write_text_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(rep, indent=1, default=str))
    return path


def _horizon(engine, tok, st, label: str, n: int, fmt: dict) -> dict:
    from rlvr.commands.checkpoint_format import apply_format
    from rlvr.monitoring.agent_eval import evaluate_agent

    res = evaluate_agent(engine, tok, apply_format(_tasks(st.data, min(n, 16)), fmt), st.rollout.loop)
    return {"checkpoint": label, "stage": st.name, "turns_mean": res["turns_mean"], "max_turns": st.rollout.loop.max_turns,
            "tool_calls_mean": res["tool_calls_mean"], "tokens_mean": res["mean_length"], "pass_at_1": res["pass_at_1"],
            "horizon": res["horizon"]}


def _temperature_fix(engine, tok, tasks, judge, st) -> float | None:
    """The first of 1.25x, 1.5x, 2x the stage's temperature at which most groups carry signal, or None."""
    from rlvr.monitoring.screen import screen_model

    for f in (1.25, 1.5, 2.0):
        t = round(st.sampling.temperature * f, 3)
        s = screen_model(engine, tok, tasks, judge, st.sampling.group_size, t, st.sampling.max_new_tokens)
        if s["signal_frac_observed"] >= 0.5:
            return t
    return None


SKIP_BELOW = 0.1  # share of informative groups under which plan suggests skipping an RL stage


def _screen_advice(s: dict, recipe, st, label: str) -> str:
    from rlvr.stages import stage_kind

    g, start = st.sampling.group_size, label == "start"
    demonstrated = any(stage_kind(x).demonstrations for x in recipe.stages[: recipe.stages.index(st)])
    head = f"{st.name} (G = {g}, T = {st.sampling.temperature:g}) from {label}: p = {s['p']:.3f}, entropy " \
           f"{s['entropy']:.3f} nats/token, {s['signal_frac_observed']:.0%} of groups informative"
    if s["below_threshold"]:
        fix = f"G >= {s['usable_group_size']}" if s["usable_group_size"] else "no G helps at p = 0"
        if start and demonstrated:
            return f"{head}: p below p*(G) = {s['p_star']:.3f} at the start, so the SFT stage before it must lift p " \
                   f"above that (check with rlvr plan after the SFT stage, or rlvr screen)"
        return f"{head}: p below p*(G) = {s['p_star']:.3f}: more SFT or {fix}"
    if s["signal_frac_observed"] < 0.5:
        t = s.get("temperature_fix")
        what = f"raise the temperature to {t:g}" if t else "no temperature up to 2x fixes it"
        easy = " (most groups all pass: harder tasks or dynamic sampling)" if s["above_threshold"] else ""
        # a stage whose informative groups are a minority still learns from them (dead groups add no gradient):
        # only one with almost none is worth skipping
        skip = " or skip the stage" if s["signal_frac_observed"] < SKIP_BELOW else \
            f"; the {s['signal_frac_observed']:.0%} informative groups still carry signal"
        return f"{head}: entropy after this stage is {s['entropy']:.3f}: expect dead groups{easy}; {what}{skip}"
    return f"{head}: usable for RL"


def print_plan(rep: dict, console=None) -> None:
    from rlvr.console import make_console

    from rlvr.commands.checkpoint_format import say

    c = console or make_console()
    c.print(f"[bold]plan for {rep['recipe']}[/]  task kinds: {', '.join(rep['kinds']) or 'none'}")
    for k, p in rep["probes"].items():
        c.print(f"  probes {k}: {p['probes'] - len(p['accepted'])}/{p['probes']} held")
    d = rep["determinism"]
    c.print(f"  determinism: {d['checked'] - len(d['differ'])}/{d['checked']} outputs got the same verdict twice")
    for label, line in rep.get("prompt_formats", {}).items():
        say(f"  {label}: {line}", c)
    for s in rep["screen"]:
        c.print(f"  screen {s['checkpoint']} for {s['stage']}: pass@1 {s['pass_at_1']:.1%}, p {s['p']:.3f}, entropy "
                f"{s['entropy']:.3f}, signal {s['signal_frac']:.2f} (measured {s['signal_frac_observed']:.2f}), "
                f"p*(G) {s['p_star']:.3f}")
    for h in rep["horizon"]:
        c.print(f"  horizon {h['checkpoint']} for {h['stage']}: {h['turns_mean']:.1f}/{h['max_turns']} turns, "
                f"{h['tool_calls_mean']:.1f} tool calls, {h['tokens_mean']:.0f} tokens, pass@1 {h['pass_at_1']:.1%}")
    c.print("[bold]recommendations[/]")
    for r in rep["recommendations"]:
        c.print(f"  - {r}")
    print_decisions(rep.get("decisions", []), c)


def print_decisions(decs: list[dict], console) -> None:
    """The plan's decisions as a table: stage, decision (and what replaces it), rule, measured reason."""
    from rich.table import Table
    from rich.text import Text

    if not decs:
        return
    tab = Table(title="the plan: each stage run, skipped or replaced, and why")
    for col in ("stage", "decision", "instead", "rule", "reason"):
        tab.add_column(col)
    for d in decs:
        cells = (d["stage"], d["decision"] + (" (provisional)" if d.get("provisional") else ""),
                 d.get("instead") or "-", d.get("rule") or "-", d["reason"])
        tab.add_row(*(Text(c) for c in cells))
    console.print(tab)


def plan_command(
    recipe: str = typer.Argument(..., help="Recipe YAML."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a recipe key (repeatable)."),
    n_tasks: int = typer.Option(64, "--n-tasks", help="Tasks per screen."),
    run_dir: Optional[str] = typer.Option(None, "--run-dir", help="The run to read stage checkpoints from "
                                          "(default: the recipe's run_dir)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.", metavar=""),
    system_prompt: str | None = typer.Option(None, "--system-prompt", help="Screen with this system message "
                                                "(default: the recipe's system_prompt, else each checkpoint's "
                                                "prompt_format.json)."),
    no_system_prompt: bool = typer.Option(False, "--no-system-prompt", help="Screen with no system message.",
                                          metavar=""),
    out: Optional[str] = typer.Option(None, "--out", help="Where plan.json goes (default: RUN_DIR/plan.json)."),
) -> None:
    """Before spending: probe the verifiers, check they are deterministic, screen the starting checkpoint (or
    each finished stage's), estimate agent horizons, and say what to do."""
    from rlvr.commands.checkpoint_format import system_prompt_choice
    from rlvr.config.limits import Count, check_flags

    check_flags(("--n-tasks", n_tasks, Count))
    rep = plan(recipe, list(set_ or []), n_tasks, run_dir, system_prompt_choice(system_prompt, no_system_prompt))
    from rlvr.config.load import load_recipe

    where = write_plan(rep, Path(out) if out else Path(run_dir or load_recipe(recipe, list(set_ or [])).run_dir)
                       / "plan.json")
    rep["plan_json"] = str(where)
    if as_json:
        typer.echo(json.dumps(rep, indent=1, default=str))
    else:
        print_plan(rep)
        typer.echo(f"plan.json: {where}")


def register(app: typer.Typer) -> None:
    """Add ``rlvr plan`` to the CLI app."""
    app.command("plan")(plan_command)
