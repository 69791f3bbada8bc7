"""``rlvr screen CKPT [CKPT ...]``: which checkpoint to start RL from (see :mod:`rlvr.monitoring.screen`).

Per checkpoint: greedy pass@1; at the RL sampling temperature with G samples per task, the pass rate p, the
sampled tokens' mean entropy, the expected advantage variance p(1-p)(G-1)/G, the expected and the
measured fraction of informative groups, ``below_threshold`` (p < p*(G)), the G that would make it
usable, and the rank for RL. ``--tasks`` defaults to the held-out tasks (``eval.tasks``) of the run that
produced the checkpoint.
"""

from __future__ import annotations

import json
from typing import List, Optional

import typer

from rlvr.errors import ConfigError


def default_tasks(checkpoint: str):
    """``eval.tasks`` and ``eval.max_new_tokens`` of the run that saved ``checkpoint``."""
    from rlvr.config.saved import load_saved
    from rlvr.monitoring.screen import producing_run

    run = producing_run(checkpoint)
    recipe = load_saved(run) if run is not None else None
    if recipe is None:
        raise ConfigError(f"{checkpoint}: not inside a run directory with a config.yaml, so its held-out tasks "
                          "are unknown; pass --tasks (e.g. --tasks builtin:add2,mul31:400)")
    return recipe.eval.tasks, recipe.eval.max_new_tokens


def screen_checkpoints(checkpoints: list[str], tasks: str | None, group_size: int, temperature: float,
                       max_new_tokens: int | None = None, seed: int = 0, workers: int = 0,
                       system_prompt: str | bool | None = None) -> list[dict]:
    """Screen each checkpoint in its own prompt format (``prompt_format.json``: system prompt, scoring, dtype;
    ``system_prompt`` a text or False overrides its system prompt); returns the rows (ranked for RL), each
    with the ``prompt_format`` line it was screened in."""
    from rlvr.commands.checkpoint_format import apply_format, format_line, resolve_format
    from rlvr.commands.evaluate import parse_tasks_arg
    from rlvr.config.limits import NewTokens, check_flags
    from rlvr.data.encodable import refuse_unencodable
    from rlvr.data.sources import load_task_source
    from rlvr.models.load import load_pretrained
    from rlvr.monitoring.scoring import describe_scoring, eval_judge, reward_terms, verifier_scores
    from rlvr.monitoring.screen import rank_for_rl, screen_model
    from rlvr.rollout.hf_engine import HFEngine
    from rlvr.verifiers.registry import refuse_unjudgeable

    check_flags(("--max-new-tokens", max_new_tokens, NewTokens))
    if not checkpoints:
        raise ConfigError("rlvr screen needs at least one checkpoint folder")
    if group_size < 2:
        raise ConfigError(f"--group-size must be >= 2 (a group of 1 has no within-group variance), got {group_size}")
    if not temperature > 0:
        raise ConfigError(f"--temperature must be > 0 (the RL sampling temperature), got {temperature}")
    from pathlib import Path

    bad = [c for c in checkpoints if not (Path(c) / "config.json").exists() and not (Path(c) / "adapter_config.json").exists()]
    if bad:
        raise ConfigError(f"not a model folder (no config.json or adapter_config.json): {', '.join(bad)}")
    rows, cache = [], {}
    for ckpt in checkpoints:
        fmt = resolve_format(ckpt, system_prompt)
        if tasks is not None:
            source, budget = parse_tasks_arg(tasks), 64
        else:
            source, budget = default_tasks(ckpt)
        key = source.model_dump_json()
        terms = reward_terms(fmt["rewards"])
        if key not in cache:
            loaded = load_task_source(source)
            judged = verifier_scores(terms)
            cache[key] = refuse_unjudgeable(loaded) if judged else loaded
        task_list = apply_format(cache[key], fmt)
        model, tok = load_pretrained(ckpt, fmt["dtype"])
        refuse_unencodable(tok, task_list)
        judge = eval_judge(terms, workers, tok, max_new_tokens or budget)
        row = screen_model(HFEngine(model, tok), tok, task_list, judge, group_size, temperature,
                           max_new_tokens or budget, seed)
        rows.append({"path": ckpt, **row, "prompt_format": format_line(fmt, describe_scoring(terms))})
    return rank_for_rl(rows)


def print_screen(rows: list[dict], console=None) -> None:
    from rich.table import Table

    from rlvr.commands.checkpoint_format import say
    from rlvr.console import make_console

    console = console or make_console()
    g, t = rows[0]["group_size"], rows[0]["temperature"]
    tab = Table(title=f"RL screen: G = {g}, temperature {t:g}, p*(G) = {rows[0]['p_star']:.3f}")
    for c in ("rank", "checkpoint", "pass@1", "p", "entropy", "adv_var", "signal", "measured", "status", "usable G"):
        tab.add_column(c, justify="left" if c in ("checkpoint", "status") else "right")
    for r in sorted(rows, key=lambda r: r["rank"]):
        status = ("below p*(G): most groups all fail" if r["below_threshold"] else
                  "above 1-p*(G): most groups all pass" if r["above_threshold"] else "usable")
        tab.add_row(str(r["rank"]), r["path"], f"{r['pass_at_1']:.1%}", f"{r['p']:.3f}", f"{r['entropy']:.3f}",
                    f"{r['adv_var']:.3f}", f"{r['signal_frac']:.2f}", f"{r['signal_frac_observed']:.2f}", status,
                    str(r["usable_group_size"]) if r["usable_group_size"] else "none")
    console.print(tab)
    for r in sorted(rows, key=lambda r: r["rank"]):
        if "prompt_format" in r:
            say(f"{r['path']}: {r['prompt_format']}", console)
    console.print("signal = 1 - p^G - (1-p)^G (expected informative groups); measured = groups of G samples with "
                  "mixed outcomes; ranked by measured signal, then entropy")


def screen_command(
    checkpoints: List[str] = typer.Argument(..., help="Checkpoint folders (HF format)."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="Tasks (as in rlvr eval); default: the held-out "
                                        "tasks of the run that produced each checkpoint."),
    group_size: int = typer.Option(8, "--group-size", help="G, samples per task in RL."),
    temperature: float = typer.Option(1.0, "--temperature", help="The RL sampling temperature."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Generation budget (default: the "
                                                 "run's eval budget, or 64)."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of the table.", metavar=""),
    system_prompt: str | None = typer.Option(None, "--system-prompt", help="Put this system message before "
                                                "every prompt (default: each checkpoint's, from prompt_format.json)."),
    no_system_prompt: bool = typer.Option(False, "--no-system-prompt", help="No system message, whatever each "
                                          "checkpoint's prompt_format.json says.", metavar=""),
) -> None:
    """Screen checkpoints for RL: pass@1, sampled p and entropy, group signal vs p*(G), rank, usable G (each
    checkpoint in its own prompt format).

    Exit status: 3 when every verdict on a checkpoint is 'infra' (nothing was judged: its row means nothing),
    2 on bad input (a flag out of range, tasks their verifier cannot judge)."""
    from rlvr.commands.checkpoint_format import system_prompt_choice
    from rlvr.commands.evaluate import require_judged

    rows = screen_checkpoints(checkpoints, tasks, group_size, temperature, max_new_tokens, seed,
                              system_prompt=system_prompt_choice(system_prompt, no_system_prompt))
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
    else:
        print_screen(rows)
    for r in rows:
        require_judged(r.get("outcomes", {}), r["path"])


def register(app: typer.Typer) -> None:
    """Add ``rlvr screen`` to the CLI app."""
    app.command("screen")(screen_command)
