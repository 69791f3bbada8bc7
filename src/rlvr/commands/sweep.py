"""``rlvr sweep``: run a recipe over a grid of config values and seeds, and compare the cells honestly.

Each cell (a grid point: one value per ``--vary`` key, times one seed) is a run of the recipe (``rlvr run`` with
``--set`` overrides) in its own run directory under ``--out``. Every cell's config is resolved and checked
(:mod:`rlvr.commands.preflight`) before any cell runs. A cell is skipped when it finished (its
``sweep_cell.json`` and ``summary.json`` are there), resumed (``rlvr run --resume``) when it started, run fresh
otherwise. The table (:mod:`rlvr.monitoring.sweep_table`) is written once the cells have run. docs/sweep.md.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import typer

from rlvr.config.load import load_recipe, overridden_dump, validate_recipe
from rlvr.config.recipe import Recipe
from rlvr.config.saved import config_diff, load_saved
from rlvr.errors import ConfigError, Interrupted, RlvrError, listing
from rlvr.monitoring.sweep_table import MARKER, METRICS, build_table, markdown, metric_label, read_run, write_table

RESERVED = ("seed", "run_dir")
"""Keys a sweep sets itself: the seed of each cell and its run directory."""


class CellsFailed(RlvrError):
    """Some cells of a sweep failed (the others ran, and the table holds them)."""

    exit_code = 1


@dataclass(frozen=True)
class Cell:
    """One run of the grid: a value per ``--vary`` key (``point``) and a seed, in ``out/name``."""

    point: tuple[str, ...]
    seed: int
    name: str
    overrides: tuple[str, ...]


def split_values(text: str) -> list[str]:
    """``grpo,dr_grpo`` -> ``["grpo", "dr_grpo"]``: split at the commas outside brackets and quotes, so a
    value may be a YAML list or mapping (``[1,2],[3,4]``); each value is then read as YAML, as ``--set`` reads it."""
    out, depth, quote, cur = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    return [*out, cur.strip()]


def parse_vary(specs: list[str]) -> tuple[list[str], list[list[str]]]:
    """``["KEY=V1,V2", ...]`` -> ``(keys, values per key)``; a malformed spec is a one-line error."""
    keys, values = [], []
    for spec in specs:
        key, eq, rest = spec.partition("=")
        key = key.strip()
        vals = split_values(rest) if eq else []
        if not key or not eq or not rest.strip() or any(v == "" for v in vals):
            raise ConfigError(f"--vary {spec!r}: expected KEY=V1,V2,... (e.g. --vary stages.grpo.loss.type=grpo,dr_grpo)")
        if key in RESERVED:
            raise ConfigError(f"--vary {key}: the sweep sets {key} itself (seeds: --seeds / --seed-list; "
                              "directories: --out)")
        if key in keys:
            raise ConfigError(f"--vary {key}: given twice; list every value in one --vary {key}=V1,V2,...")
        if len(set(vals)) < len(vals):
            raise ConfigError(f"--vary {key}: a value is listed twice ({rest}): its cells would collide")
        keys.append(key)
        values.append(vals)
    return keys, values


def seed_list(seeds: int | None, seed_list_text: str | None) -> list[int]:
    """``--seeds N`` -> 0..N-1, or ``--seed-list 3,7`` (distinct integers)."""
    if seed_list_text is not None:
        try:
            out = [int(s) for s in seed_list_text.split(",")]
        except ValueError:
            raise ConfigError(f"--seed-list {seed_list_text!r}: expected integers separated by commas") from None
        if len(set(out)) < len(out):
            raise ConfigError(f"--seed-list {seed_list_text!r}: a seed is listed twice")
        return out
    if seeds is None or seeds < 1:
        raise ConfigError(f"--seeds {seeds}: need at least 1 seed (2 or more for an interval)")
    return list(range(seeds))


def safe_name(text: str) -> str:
    """A filesystem-safe directory name: characters other than letters, digits and ``._=+-`` become ``_``; a name
    over 120 characters is cut and keeps a hash of the whole."""
    name = re.sub(r"[^A-Za-z0-9._=+-]", "_", text)
    if len(name) > 120:
        name = name[:100] + "-" + hashlib.sha1(text.encode()).hexdigest()[:12]
    return name


def stage_name_of(recipe: Recipe, key: str) -> str | None:
    """The stage a ``stages.X.…`` key names (``X`` a name or an index), else None."""
    parts = key.split(".")
    if parts[0] != "stages" or len(parts) < 2:
        return None
    if parts[1].isdigit() and int(parts[1]) < len(recipe.stages):
        return recipe.stages[int(parts[1])].name
    return parts[1] if any(s.name == parts[1] for s in recipe.stages) else None


def steps_overrides(recipe: Recipe, keys: list[str], steps: int | None, steps_stages: list[str] | None,
                    keep_time_caps: bool) -> list[str]:
    """The overrides every cell shares: ``max_steps`` = ``steps`` for ``steps_stages`` (default: the stages the
    ``--vary`` keys name, every stage when none names one), and no ``max_minutes`` time cap (unless
    ``keep_time_caps``), so every cell runs the same steps."""
    out = []
    if not keep_time_caps:
        out += [f"stages.{s.name}.max_minutes=null" for s in recipe.stages if getattr(s, "max_minutes", None) is not None]
    if steps is None:
        return out
    if steps < 1:
        raise ConfigError(f"--steps {steps}: need at least 1 step")
    names = {s.name for s in recipe.stages}
    for n in steps_stages or []:
        if n not in names:
            raise ConfigError(f"--steps-stage {n}: no stage of that name (stages: {', '.join(sorted(names))})")
    chosen = steps_stages or sorted({n for n in (stage_name_of(recipe, k) for k in keys) if n}) or \
        [s.name for s in recipe.stages]
    for s in recipe.stages:
        if s.name in chosen and "max_steps" not in type(s).model_fields:
            raise ConfigError(f"--steps: stage {s.name} ({s.type}) has no max_steps field; name the stages to set "
                              "with --steps-stage")
    return out + [f"stages.{n}.max_steps={steps}" for n in chosen]


def with_overrides(recipe: Recipe, overrides: list[str], flag: str) -> Recipe:
    """``recipe`` with each ``KEY=VALUE`` applied and validated in turn, as ``--set`` does; an error names the flag,
    the override and the key (:func:`rlvr.config.load.explain`)."""
    for ov in overrides:
        try:
            full = overridden_dump(recipe, ov)
        except ConfigError as e:
            raise ConfigError(f"{flag} {ov}: {str(e).removeprefix(f'--set {ov.partition(chr(61))[0]}: ')}") from None
        recipe = validate_recipe(full, f"{flag} {ov}")
    return recipe


def plan_cells(recipe: Recipe, keys: list[str], values: list[list[str]], seeds: list[int],
               shared: list[str], out: Path) -> tuple[list[Cell], dict[tuple[str, ...], Recipe]]:
    """The grid's cells, each checked: its config resolves (an unknown key or a refused value is an error naming
    the ``--vary`` and the key), no two cells share a directory or a grid point's config. Returns the cells and
    each grid point's recipe (at the first seed), keyed by its ``KEY=VALUE`` overrides."""
    cells, recipes, dirs, configs = [], {}, {}, {}
    recipe = with_overrides(recipe, shared, "--set")
    for point in itertools.product(*values):
        sets = [f"{k}={v}" for k, v in zip(keys, point)]
        r = with_overrides(recipe, sets, "--vary")
        dump = json.dumps({k: v for k, v in r.model_dump(mode="json").items() if k not in RESERVED}, sort_keys=True)
        if dump in configs:
            raise ConfigError(f"--vary: cells {configs[dump]} and {', '.join(sets)} have the same config (the values "
                              "mean the same thing): drop one")
        configs[dump] = recipes_key = ", ".join(sets)
        recipes[recipes_key] = r
        for seed in seeds:
            name = safe_name("__".join([*sets, f"seed={seed}"]))
            if name in dirs:
                raise ConfigError(f"--vary: cells {dirs[name]} and {', '.join(sets)} seed {seed} would share the "
                                  f"directory {out / name}; use values that differ in letters or digits")
            dirs[name] = f"{', '.join(sets)} seed {seed}"
            cells.append(Cell(point, seed, name, (*shared, *sets, f"seed={seed}")))
    return cells, recipes


def check_cells(cells: list[Cell], recipe: Recipe, recipes: dict, source: str, out: Path) -> None:
    """Before any cell runs: each grid point passes the dry run, and a cell directory that holds a run holds this
    cell's config (a changed recipe or grid would mix two experiments in one table)."""
    from rlvr.commands.preflight import preflight

    for sets, r in recipes.items():
        try:
            preflight(r, source)
        except ConfigError as e:
            raise ConfigError(f"--vary {sets or '(none)'}: {e}") from None
    for c in cells:
        saved = load_saved(out / c.name)
        if saved is None:
            continue
        diff = {k: v for k, v in config_diff(saved, with_overrides(recipe, list(c.overrides), "--vary")).items() if k != "threads"}
        if diff:
            shown = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in list(diff.items())[:4])
            raise ConfigError(f"{out / c.name} holds a run of another config ({shown}): the recipe or the grid changed "
                              "since it ran; sweep into a new --out, or remove that directory")


def check_metric(metric: str, recipes: dict) -> None:
    """``--metric`` names a figure the cells' evaluation writes: ``pass_at_K_sampled`` needs ``eval.k`` >= K at
    every grid point."""
    if not METRICS.match(metric):
        raise ConfigError(f"--metric {metric!r}: expected pass_at_1, pass_at_K_sampled (K <= eval.k) or mean_score")
    m = re.match(r"^pass_at_([0-9]+)_sampled$", metric)
    for sets, r in recipes.items():
        if m and int(m.group(1)) > r.eval.k:
            raise ConfigError(f"--metric {metric}: the evaluation draws eval.k = {r.eval.k} samples a task"
                              f"{f' at {sets}' if sets else ''}; set --set eval.k={m.group(1)} (or more)")


def cell_status(d: Path) -> str:
    """``done`` (its run finished: marker and summary.json), ``resume`` (a run started there) or ``fresh``."""
    if (d / MARKER).exists() and (d / "summary.json").exists():
        return "done"
    return "resume" if (d / "config.yaml").exists() else "fresh"


def _mark(d: Path, cell: Cell, keys: list[str], wall: float, alone: bool, status: str) -> None:
    from rlvr.data.jsonl import write_json_atomic

    write_json_atomic(d / MARKER, {"values": dict(zip(keys, cell.point)), "seed": cell.seed,
                                   "process_wall_s": round(wall, 2), "alone": alone, "started_as": status})


def run_in_process(recipe_path: str, cell: Cell, d: Path, status: str) -> None:
    """One cell in this process: ``rlvr run RECIPE --set ... --run-dir d [--resume]``."""
    from rlvr.commands.run import execute

    execute(recipe_path, list(cell.overrides), resume=status == "resume", run_dir=str(d), allow_config_change=True)


def _subprocess(recipe_path: str, cell: Cell, d: Path, status: str) -> subprocess.Popen:
    """One cell as ``python -m rlvr.cli run`` with one thread, its output in ``d/sweep.log``."""
    args = [sys.executable, "-m", "rlvr.cli", "run", recipe_path, "--run-dir", str(d), "--set", "threads=1"]
    for o in cell.overrides:
        args += ["--set", o]
    if status == "resume":
        args += ["--resume", "--allow-config-change"]
    d.mkdir(parents=True, exist_ok=True)
    log = open(d / "sweep.log", "a")  # noqa: SIM115 (closed with the process)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RLVR_HEARTBEAT_S": os.environ.get("RLVR_HEARTBEAT_S", "30")}
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def run_cells(recipe_path: str, todo: list[tuple[Cell, str]], keys: list[str], out: Path, parallel: int,
              say) -> list[str]:
    """Run the cells not done: one after another in this process (``parallel`` 1), else ``parallel`` processes at
    once. Returns the failed cells' lines (the others are marked done)."""
    failed = []
    if parallel == 1:
        for i, (cell, status) in enumerate(todo):
            say(f"sweep: cell {i + 1}/{len(todo)}: {cell.name} ({status})")
            t0 = time.time()
            try:
                run_in_process(recipe_path, cell, out / cell.name, status)
            except (Interrupted, KeyboardInterrupt):
                raise
            except Exception as e:  # noqa: BLE001 (one cell's failure is reported; the others still run)
                what = str(e).splitlines()[0] if str(e) else ""
                failed.append(f"{cell.name}: {what if isinstance(e, RlvrError) else f'{type(e).__name__}: {what}'}")
                continue
            _mark(out / cell.name, cell, keys, time.time() - t0, status == "fresh", status)
        return failed
    pending, running = list(todo), {}
    try:
        _pool(recipe_path, pending, running, keys, out, parallel, say, failed)
    except BaseException as e:  # stopped: each running cell checkpoints at its next step (SIGINT), then exits
        if not isinstance(e, KeyboardInterrupt):  # Ctrl-C reached the cells already (one process group)
            for proc, _, _ in running.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
        raise
    finally:
        for proc, _, _ in running.values():
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
            proc.log.close()
    return failed


def _pool(recipe_path: str, pending: list, running: dict, keys: list[str], out: Path, parallel: int, say,
          failed: list[str]) -> None:
    """Keep ``parallel`` cell processes running until every pending cell ran; mark those that finished."""
    while pending or running:
        while pending and len(running) < parallel:
            cell, status = pending.pop(0)
            say(f"sweep: starting {cell.name} ({status}); log {out / cell.name / 'sweep.log'}")
            running[cell] = (_subprocess(recipe_path, cell, out / cell.name, status), time.time(), status)
        time.sleep(0.5)
        for cell, (proc, t0, status) in list(running.items()):
            if proc.poll() is None:
                continue
            proc.log.close()
            del running[cell]
            if proc.returncode == 0:
                _mark(out / cell.name, cell, keys, time.time() - t0, False, status)
                say(f"sweep: {cell.name} done")
            else:
                failed.append(f"{cell.name}: exit {proc.returncode} (see {out / cell.name / 'sweep.log'})")


def sweep(recipe: str, vary: list[str] | None = None, seeds: int | None = 1, *, out: str,
          steps: int | None = None, steps_stage: list[str] | None = None, parallel: int = 1,
          seed_list_text: str | None = None, sets: list[str] | None = None, keep_time_caps: bool = False,
          metric: str = "pass_at_1", say=print) -> dict:
    """Run the grid and write ``out/sweep.json``, ``sweep.md``, ``sweep.png`` (and ``sweep_curves.png``, the
    held-out curves, when the stages log them); returns the table (with ``"ran"``: the cells run by this call, and
    ``"files"``). Bad input raises ConfigError before any cell runs."""
    if parallel < 1:
        raise ConfigError(f"--parallel {parallel}: need at least 1")
    keys, values = parse_vary(list(vary or []))
    seed_values = seed_list(seeds, seed_list_text)
    base = load_recipe(recipe)
    shared = [*(sets or []), *steps_overrides(base, keys, steps, steps_stage, keep_time_caps)]
    outp = Path(out)
    cells, recipes = plan_cells(base, keys, values, seed_values, shared, outp)
    check_metric(metric, recipes)
    check_cells(cells, base, recipes, recipe, outp)
    todo = [(c, cell_status(outp / c.name)) for c in cells]
    for c, st in todo:
        if st == "done":
            say(f"sweep: {c.name} finished earlier: skipped")
    todo = [(c, st) for c, st in todo if st != "done"]
    failed = run_cells(recipe, todo, keys, outp, parallel, say)
    stage_names = [s.name for s in base.stages]
    runs = {(c.point, c.seed): read_run(outp / c.name, stage_names) for c in cells
            if cell_status(outp / c.name) == "done"}
    table = build_table(keys, values, seed_values, runs, metric)
    table.update(recipe=recipe, parallel=parallel, shared_overrides=shared,
                 cells_dirs={c.name: {"values": dict(zip(keys, c.point)), "seed": c.seed} for c in cells})
    head = (f"# sweep of {Path(recipe).name}\n\nHeld-out {metric_label(metric)} of each cell's last stage (its own evaluation); "
            f"Δ: paired difference to the key's first value over seeds {seed_values}, 95% t-interval (n-1 df). "
            "Wall time marked * is not comparable (the cell ran beside others, or was resumed).")
    table["files"] = write_table(outp, table, head)
    table["ran"] = [c.name for c, _ in todo]
    say(markdown(table))
    if failed:
        raise CellsFailed(listing(failed, "cells failed") + f"; rerun the same command to retry them (table: {outp})")
    return table


def sweep_command(
    recipe: str = typer.Argument(..., help="Recipe YAML."),
    vary: list[str] | None = typer.Option(None, "--vary", help="KEY=V1,V2,...: a grid dimension, KEY as in --set "
                                          "(e.g. stages.grpo.loss.type=grpo,dr_grpo); repeatable."),
    seeds: int = typer.Option(1, "--seeds", help="Seeds 0..N-1 per grid point (the recipe's seed)."),
    seed_list_text: str | None = typer.Option(None, "--seed-list", help="These seeds instead (e.g. 3,7,11)."),
    steps: int | None = typer.Option(None, "--steps", help="max_steps of the stages the --vary keys name (every stage "
                                     "when none names one; or --steps-stage)."),
    steps_stage: list[str] | None = typer.Option(None, "--steps-stage", help="The stage --steps sets (repeatable)."),
    parallel: int = typer.Option(1, "--parallel", help="Cells run at once, as processes of one thread each "
                                 "(1: one after another in this process; only then is wall time comparable)."),
    out: str = typer.Option(..., "--out", help="Sweep directory: one run directory per cell, and the table."),
    set_: list[str] | None = typer.Option(None, "--set", help="An override every cell shares (repeatable)."),
    metric: str = typer.Option("pass_at_1", "--metric", help="The held-out figure tabled: pass_at_1 (greedy), "
                               "pass_at_K_sampled (K of eval.k samples at eval.temperature) or mean_score."),
    keep_time_caps: bool = typer.Option(False, "--keep-time-caps", metavar="", help="Keep the stages' max_minutes "
                                        "(default: removed, so every cell runs the same steps)."),
) -> None:
    """Run a recipe over a grid of values x seeds, each cell its own run; table of means, per-seed values and
    paired 95% intervals (sweep.md, sweep.json, sweep.png; sweep_curves.png: the held-out curves). Rerun the same
    command to resume."""
    try:
        sweep(recipe, vary, seeds, out=out, steps=steps, steps_stage=steps_stage, parallel=parallel,
              seed_list_text=seed_list_text, sets=set_, keep_time_caps=keep_time_caps, metric=metric,
              say=typer.echo)
    except Interrupted as e:
        typer.secho(f"stopped: {e}; rerun the same command to resume the sweep", fg="yellow", err=True)
        raise typer.Exit(130) from None


def register(app: typer.Typer) -> None:
    """Add ``rlvr sweep`` to the CLI app."""
    app.command("sweep")(sweep_command)
