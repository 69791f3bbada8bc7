"""``rlvr run | validate | quickstart`` and the stage commands (``rlvr sft | grpo | dpo | rm | ppo | rft | distill``,
one per entry of the stage table :data:`rlvr.stages.STAGES` that names a command): recipe-level commands.

Each one is :func:`execute`: load the recipe (or, on ``--resume``, the run's saved config), dry-run it
(:mod:`rlvr.commands.preflight`: every problem at once, before anything is written), print the run header
(:mod:`rlvr.commands.header`), run the stages under a heartbeat (:mod:`rlvr.console`: never 10 s without a
line), print the summary and write ``report.html``. ``rlvr.run`` (the Python API) is the same function.
"""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlvr.config.load import override_recipe
from rlvr.config.recipe import Recipe
from rlvr.console import Heartbeat, make_console, note_output, phase
from rlvr.errors import ConfigError, ModelLoadError

QUICKSTART = Path(__file__).resolve().parent.parent / "recipes" / "quickstart.yaml"


def validate_command(recipe: str, overrides: list[str], allow_unprobed_judge: bool = False) -> list[str]:
    """Load + dry-run a recipe; prints ``ok`` and any warnings, raises ConfigError listing every problem."""
    from rlvr.commands.preflight import preflight
    from rlvr.commands.preflight_raw import load_recipe_listing

    r = load_recipe_listing(recipe, overrides)
    warnings = preflight(r, recipe, allow_unprobed_judge=allow_unprobed_judge)
    console = make_console()
    for w in warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", markup=True, highlight=False)
    console.print(
        f"[green]ok[/green] {recipe}: {len(r.stages)} stage(s): "
        + ", ".join(f"{s.name} ({s.type})" for s in r.stages)
    )
    return warnings


def resolve(
    recipe: str | Recipe | None,
    overrides: list[str],
    resume: bool,
    run_dir: str | None,
    allow_config_change: bool,
) -> tuple[Recipe, str | None, dict]:
    """``(recipe to run, its source file or None, config changes accepted on resume)``."""
    from rlvr.config.saved import resume_recipe

    if run_dir is not None:
        overrides = [*overrides, f"run_dir={run_dir}"]
    source = recipe if isinstance(recipe, (str, os.PathLike)) else None
    if recipe is None:
        if not resume or run_dir is None:
            raise ConfigError(
                "give a RECIPE, or --resume with --run-dir DIR to resume the run saved there "
                "(see 'rlvr run --help')"
            )
        loaded = None
    elif isinstance(recipe, Recipe):
        loaded = override_recipe(recipe, overrides)
    else:
        from rlvr.commands.preflight_raw import load_recipe_listing

        loaded = load_recipe_listing(recipe, overrides)
    if not resume:
        return loaded, source, {}
    target = run_dir if run_dir is not None else loaded.run_dir
    final, changes = resume_recipe(loaded, target, allow_config_change, overrides)
    return final, source, changes


def execute(
    recipe: str | Recipe | None,
    overrides: list[str] = (),
    resume: bool = False,
    run_dir: str | None = None,
    allow_config_change: bool = False,
    only: str | None = None,
    init_path: str | None = None,
    judge=None,
    console: Console | None = None,
    overwrite: bool = False,
    allow_unprobed_judge: bool = False,
) -> dict:
    """Resolve, dry-run and run a recipe (or its stages of type ``only``); returns the summary, with
    ``summary["report"]`` the path of report.html. A fresh run into a directory holding a different run is
    refused unless ``overwrite`` (the old run is then moved aside, see :func:`guard_run_dir`)."""
    from rlvr import omp_wait

    console = console or make_console()
    r, source, changes = resolve(recipe, list(overrides), resume, run_dir, allow_config_change)
    omp_wait.apply_for(r)  # before torch loads (the imports below load it)
    if only is not None and not any(s.type == only for s in r.stages):
        names = [f"{s.name} ({s.type})" for s in r.stages]
        raise ConfigError(f"{source or 'recipe'}: no stage of type {only!r} in this recipe (stages: {names})")
    if init_path is not None and not os.path.exists(init_path):
        raise ModelLoadError(f"--model {init_path!r} does not exist")
    main = os.environ.get("RANK", "0") == "0"  # under torchrun only rank 0 speaks
    with Heartbeat(enabled=main):  # from here on, never 10 s without a line
        with phase("loading torch and transformers"):
            from rlvr.commands.header import print_header
            from rlvr.commands.preflight import preflight
            from rlvr.pipeline import run_pipeline
            from rlvr.trainers.common import setup_threads
        with phase("checking the recipe"):
            warnings = preflight(r, source, only, init_path, allow_unprobed_judge)
        for w in warnings:
            console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
        for k, (a, b) in changes.items():
            console.print(f"[yellow]config change accepted:[/yellow] {k}: {a!r} -> {b!r}", highlight=False)
        if not resume:
            moved = guard_run_dir(r, overwrite)
            if moved is not None:
                console.print(f"[yellow]--overwrite:[/yellow] the earlier run was moved to {moved}", highlight=False)
        setup_threads(r.threads)
        if main:
            print_header(console, r, source, only, init_path, resume)
            note_output()
        summary = run_pipeline(r, resume=resume, only=only, init_path=init_path, judge=judge, changes=changes)
        if summary.get("rank", 0) == 0:  # under torchrun the other ranks only train
            print_summary(summary, console)
            with phase("writing report.html"):
                summary["report"] = str(_report(r.run_dir, summary, console))
    return summary


def guard_run_dir(recipe: Recipe, overwrite: bool) -> Path | None:
    """A fresh run whose ``run_dir`` holds a run with a different ``config.yaml`` is refused (the keys that
    differ are listed) unless ``overwrite``: then the whole old run is moved to ``<run_dir>.prev-<time>``
    (nothing is removed) and that path is returned. The same config rerun fresh keeps the per-stage
    archiving of :mod:`rlvr.pipeline`."""
    import time

    from rlvr.config.saved import CONFIG_FILE, config_diff, load_saved

    run_dir = Path(recipe.run_dir)
    if not (run_dir / CONFIG_FILE).exists():
        return None
    if not overwrite:
        try:
            saved = load_saved(run_dir)
            diff = config_diff(saved, recipe) if saved is not None else {}
        except ConfigError as e:  # written by another rlvr version, or edited by hand
            diff = {"config.yaml": [f"unreadable ({str(e)[:200]})", "this recipe"]}
        if not diff:
            return None
        shown = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in list(diff.items())[:6])
        more = f" (and {len(diff) - 6} more)" if len(diff) > 6 else ""
        raise ConfigError(f"{run_dir} holds a different run: its {CONFIG_FILE} differs from this recipe ({shown}"
                          f"{more}). Nothing was written. Resume that run with --resume, start this one in another "
                          f"--run-dir, or pass --overwrite to move the old run aside to {run_dir}.prev-<time> "
                          "(nothing is deleted)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest, n = run_dir.with_name(f"{run_dir.name}.prev-{stamp}"), 1
    while dest.exists():
        dest, n = run_dir.with_name(f"{run_dir.name}.prev-{stamp}-{n}"), n + 1
    run_dir.rename(dest)
    return dest


def plan_override(plan: str | None) -> list[str]:
    """``--plan auto`` (or off) as the recipe override ``plan.follow=...``; anything else is a usage error."""
    if plan is None:
        return []
    if plan not in ("auto", "off"):
        raise ConfigError(f"--plan: expected auto or off, got {plan!r}")
    return [f"plan.follow={plan}"]


def run_command(
    recipe_path: str | None,
    overrides: list[str],
    resume: bool,
    run_dir: str | None,
    allow_config_change: bool = False,
    overwrite: bool = False,
    allow_unprobed_judge: bool = False,
) -> dict:
    return execute(recipe_path, overrides, resume, run_dir, allow_config_change, overwrite=overwrite,
                   allow_unprobed_judge=allow_unprobed_judge)


def quickstart_command(out: str, overrides: list[str], resume: bool, overwrite: bool = False) -> dict:
    """The embedded default recipe (tiny model, built-in arithmetic), SFT -> DPO -> GRPO."""
    if not QUICKSTART.exists():
        raise ConfigError(f"the packaged quickstart recipe is missing at {QUICKSTART}")
    return execute(str(QUICKSTART), overrides, resume, out, overwrite=overwrite)


def stage_command(
    kind: str,
    recipe_path: str,
    overrides: list[str],
    resume: bool,
    init: str | None,
    run_dir: str | None = None,
    allow_config_change: bool = False,
    overwrite: bool = False,
    allow_unprobed_judge: bool = False,
) -> dict:
    """Run only the recipe's stages of one type (e.g. ``rlvr grpo``), from ``--model`` if given."""
    return execute(recipe_path, overrides, resume, run_dir, allow_config_change, only=kind, init_path=init,
                   overwrite=overwrite, allow_unprobed_judge=allow_unprobed_judge)


def print_summary(summary: dict, console: Console | None = None) -> None:
    """The held-out evaluation by stage (the equal-time SFT control's rows among them, each stage's gain over its
    control), then a line for each stage its time cap cut (steps done of planned) and the control's lines."""
    from rlvr.monitoring.control import control_lines

    table = Table(title="held-out evaluation by stage")
    fams = sorted({f for row in summary["stages"] for f in row["by_family"]})
    gains = any("gain_over_control" in row for row in summary["stages"])
    # the mean score beside the solved fraction where a scorer gives partial credit (they differ)
    scored = any(row.get("mean_score") not in (None, row["pass_at_1"]) for row in summary["stages"])
    cal = [m for m in ("answer_prob", "agreement") if any(f"ece_{m}" in row for row in summary["stages"])]
    cols = ["stage", "pass@1", *(["mean score"] if scored else []), *[f"pass@1 {f}" for f in fams], "pass@k",
            *[f"ECE {m.replace('_', ' ')}" for m in cal], "mean len", "steps", "train s", "wall s",
            *(["vs control"] if gains else [])]
    for col in cols:
        table.add_column(col, justify="right" if col != "stage" else "left")
    for row in summary["stages"]:
        pk = [v for k, v in row.items() if k.startswith("pass_at_") and k.endswith("_sampled")]
        clock = [str(row.get("steps", "-")), f"{row['train_s']:.0f}" if "train_s" in row else "-", f"{row['wall_s']:.0f}"]
        gain = ([f"{100 * row['gain_over_control']:+.1f}" if "gain_over_control" in row else "-"] if gains else [])
        if row["pass_at_1"] is None:  # a reward model: its held-out pair accuracy
            acc = row.get("heldout_pair_accuracy")
            table.add_row(row["stage"], f"RM pair acc {acc:.1%}" if acc is not None else "-",
                          *["-"] * (len(fams) + scored + len(cal)), "-", "-", *clock, *gain)
            continue
        table.add_row(
            row["stage"] + (" [RLAIF]" if row.get("reward_source") else "") + (" [time cap]" if row.get("time_cap") else ""),
            f"{row['pass_at_1']:.1%}",
            *([_score(row.get("mean_score"))] if scored else []),
            *[f"{row['by_family'].get(f, 0):.1%}" for f in fams],
            f"{pk[-1]:.1%}" if pk else "-",
            *[f"{row[f'ece_{m}']:.3f}" if f"ece_{m}" in row else "-" for m in cal],
            f"{row['mean_length']:.1f}",
            *clock,
            *gain,
        )
    for d in summary.get("skipped", []):
        what = f"{d['decision']}: {d['instead']}" if d.get("instead") else d["decision"]
        table.add_row(f"{d['stage']} (not run)", what, *["-"] * (len(cols) - 2))
    console = console or make_console()
    console.print(table)
    for d in summary.get("skipped", []):
        console.print(f"{d['stage']}: not run by the plan ({d['rule']}): {d['reason']}", markup=False, highlight=False)
    for row in summary["stages"]:
        if row.get("time_cap"):
            console.print(time_cap_text(row["stage"], row["time_cap"]), markup=False, highlight=False)
    for row in summary["stages"]:
        if row.get("early_stop"):
            es = row["early_stop"]
            console.print(f"{row['stage']}: stopped by held-out patience at step {es['step']} (best {es['metric']} at "
                          f"step {es['best_step']})", markup=False, highlight=False)
    for row in summary["stages"]:
        if row.get("start"):
            console.print(start_text(row["stage"], row["start"]), markup=False, highlight=False)
    for line in control_lines(summary):
        console.print(line, markup=False, highlight=False)
    note_output()


def start_text(stage: str, start: dict) -> str:
    """The line of a stage that started from the screened-best checkpoint (``start: screened``)."""
    if start.get("chosen") is None:
        return f"{stage}: {start['note']}"
    return (f"{stage}: started from {start['chosen']}, the best by {start['statistic']} ({start['value']:g}) of "
            f"{len(start['screened'])} screened checkpoints of {start['from']}")


def _score(v: float | None) -> str:
    """A mean score (the mean reward, partial credit included) as a cell."""
    return "-" if v is None else f"{v:.3f}"


def time_cap_text(stage: str, cut: dict) -> str:
    """The note of a stage its ``max_minutes`` cut: steps done of those planned."""
    return (f"{stage}: cut by its time cap (max_minutes {cut['max_minutes']:g}) after {cut['steps_done']} of "
            f"{cut['steps_planned']} planned steps; its figures are those of a shorter stage")


def _report(run_dir: str, summary: dict, console: Console) -> Path:
    from rlvr.monitoring.report import write_report

    path = write_report(run_dir, summary)
    console.print(f"report: {path}")
    return path
