"""``rlvr run | validate | quickstart | sft | grpo | dpo | rm | ppo``: recipe-level commands."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlvr.config.load import load_recipe
from rlvr.errors import ConfigError

QUICKSTART = Path(__file__).resolve().parent.parent / "recipes" / "quickstart.yaml"


def validate_command(recipe: str, overrides: list[str]) -> None:
    r = load_recipe(recipe, overrides)
    Console().print(f"[green]ok[/green] {recipe}: {len(r.stages)} stage(s): "
                    + ", ".join(f"{s.name} ({s.type})" for s in r.stages))


def _setup(recipe) -> None:
    from rlvr.trainers.common import setup_threads

    setup_threads(recipe.threads)


def run_command(recipe_path: str, overrides: list[str], resume: bool, run_dir: str | None) -> dict:
    if run_dir is not None:
        overrides = [*overrides, f"run_dir={run_dir}"]
    recipe = load_recipe(recipe_path, overrides)
    _setup(recipe)
    from rlvr.pipeline import run_pipeline

    summary = run_pipeline(recipe, resume=resume)
    print_summary(summary)
    _report(recipe.run_dir, summary)
    return summary


def quickstart_command(out: str, overrides: list[str], resume: bool) -> dict:
    """The embedded default recipe (tiny model, built-in arithmetic), SFT -> DPO -> GRPO."""
    if not QUICKSTART.exists():
        raise ConfigError(f"the packaged quickstart recipe is missing at {QUICKSTART}")
    return run_command(str(QUICKSTART), overrides, resume, out)


def stage_command(kind: str, recipe_path: str, overrides: list[str], resume: bool, init: str | None) -> dict:
    """Run only the recipe's stages of one type (e.g. ``rlvr grpo``), from ``--model`` if given."""
    recipe = load_recipe(recipe_path, overrides)
    if not any(s.type == kind for s in recipe.stages):
        names = [f"{s.name} ({s.type})" for s in recipe.stages]
        raise ConfigError(f"{recipe_path}: no stage of type {kind!r} in this recipe (stages: {names})")
    if init is not None and not os.path.exists(init):
        from rlvr.errors import ModelLoadError

        raise ModelLoadError(f"--model {init!r} does not exist")
    _setup(recipe)
    from rlvr.pipeline import run_pipeline

    summary = run_pipeline(recipe, resume=resume, only=kind, init_path=init)
    print_summary(summary)
    return summary


def print_summary(summary: dict) -> None:
    table = Table(title="held-out evaluation by stage")
    fams = sorted({f for row in summary["stages"] for f in row["by_family"]})
    for col in ["stage", "pass@1", *[f"pass@1 {f}" for f in fams], "pass@k", "mean len", "wall s"]:
        table.add_column(col, justify="right" if col != "stage" else "left")
    for row in summary["stages"]:
        pk = [v for k, v in row.items() if k.startswith("pass_at_") and k.endswith("_sampled")]
        if row["pass_at_1"] is None:  # a reward model: its held-out pair accuracy
            acc = row.get("heldout_pair_accuracy")
            table.add_row(row["stage"], f"RM pair acc {acc:.1%}" if acc is not None else "-", *["-"] * len(fams),
                          "-", "-", f"{row['wall_s']:.0f}")
            continue
        table.add_row(row["stage"], f"{row['pass_at_1']:.1%}", *[f"{row['by_family'].get(f, 0):.1%}" for f in fams],
                      f"{pk[-1]:.1%}" if pk else "-", f"{row['mean_length']:.1f}", f"{row['wall_s']:.0f}")
    Console().print(table)


def _report(run_dir: str, summary: dict) -> None:
    from rlvr.monitoring.report import write_report

    path = write_report(run_dir, summary)
    Console().print(f"report: {path}")
