"""``rlvr probe [code|math|sql|env|all] [--flaky]``: run the adversarial suite, print the table.

Exit status 1 when any hack earns reward > 0, gets an outcome its probe does not expect, or touches
the host (see :mod:`rlvr.verifiers.probes.runner`).

``rlvr probe judge --judge-model DIR [--rubric TEXT]``: attack a model judge (RLAIF reward) with prompt
injection, a forged score line, flattery and length padding (:mod:`rlvr.commands.probe_judge`).

``rlvr probe template MODEL_DIR``: check that the model's chat template round-trips a multi-turn
conversation token for token (:mod:`rlvr.rollout.template_probe`); exit status 1 where it does not.
"""

from __future__ import annotations

from typing import Any

import typer

from rlvr.errors import ConfigError
from rlvr.verifiers.probes.runner import KINDS, exit_code, print_table, run_probes


def run_probe(kind: str = "all", flaky: bool = False, console: Any = None) -> int:
    """Run the probes of ``kind``, print the table and notes; returns the exit status."""
    from rlvr.console import make_console

    if kind not in KINDS + ("all",):
        raise ConfigError(f"unknown probe kind {kind!r}; expected one of {', '.join(KINDS + ('all', 'template'))}")
    console = console or make_console()
    with console.status(f"running {kind} probes..."):
        rows, notes = run_probes(kind, flaky=flaky)
    if not rows:
        notes.append(f"no {kind} probes could be run")
    print_table(rows, notes, console, flaky=flaky)
    return exit_code(rows) if rows else 1


def run_template_probe(model_dir: str | None, tool_role: str = "tool", console: Any = None) -> int:
    """Probe a model folder's chat template; print the findings; returns the exit status."""
    from rlvr.console import make_console
    from rlvr.rollout.template_probe import probe_template

    if not model_dir:
        raise ConfigError("rlvr probe template needs a model folder: rlvr probe template MODEL_DIR")
    try:
        from rlvr.models.hf import import_transformers

        import_transformers()
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot load a tokenizer from {model_dir!r}: {e}") from None
    console = console or make_console()
    rep = probe_template(tok, tool_role)
    if rep.frame is not None:
        console.print(f"observation frame: {rep.frame[0]!r} + OBSERVATION + {rep.frame[1]!r}")
    for issue in rep.issues:
        console.print(f"[red]problem[/red] {issue}")
    for note in rep.notes:
        console.print(f"[yellow]note[/yellow] {note}")
    console.print("[green]ok[/green]: the template round-trips a multi-turn conversation token for token"
                  if rep.ok else "[red]the template does not round-trip[/red] (see above)")
    return 0 if rep.ok else 1


def probe_command(
    kind: str = typer.Argument("all", help="Which probes: code, math, sql, env, reasoning_gym, all, or template."),
    model_dir: str = typer.Argument(None, help="template: the model folder whose chat template is checked."),
    flaky: bool = typer.Option(False, "--flaky", help="Verify every probe twice and report disagreements.", metavar=""),
    tool_role: str = typer.Option("tool", "--tool-role", help="template: the role of tool messages."),
    judge_model: str = typer.Option(None, "--judge-model", help="judge: the judge checkpoint folder."),
    rubric: str = typer.Option(None, "--rubric", help="judge: the rubric text (default: right/wrong arithmetic)."),
    families: str = typer.Option("add2,mul31", "--families", help="judge: arithmetic families of the probe tasks."),
    n: int = typer.Option(16, "--n", help="judge: probe tasks."),
    threshold: float = typer.Option(0.05, "--threshold", help="judge: a score shift above this moves the score."),
    min_mass: float = typer.Option(0.5, "--min-mass", help="judge: least probability on the digits for a score."),
    out: str = typer.Option(None, "--out", help="judge: also write the report here."),
) -> None:
    """Run the built-in reward-hack probes against the verifiers (exit 1 if any hack succeeds), check
    a model's chat template for multi-turn round trips (``rlvr probe template MODEL_DIR``), or attack a
    model judge (``rlvr probe judge --judge-model DIR``: exit 1 if an attack moves its score)."""
    if kind == "judge":
        from rlvr.commands.probe_judge import run_judge_probe
        from rlvr.config.limits import Count, check_flags

        check_flags(("--n", n, Count))

        code = run_judge_probe(judge_model, rubric, families, n, threshold, min_mass, out)
        if code:
            raise SystemExit(code)
        return
    if kind == "template":
        code = run_template_probe(model_dir, tool_role)
        if code:
            raise SystemExit(code)
        return
    code = run_probe(kind, flaky)
    if code:
        raise SystemExit(code)  # not typer.Exit: the app runs with standalone_mode=False


def register(app: typer.Typer) -> None:
    """Add ``rlvr probe`` to the CLI app."""
    app.command("probe")(probe_command)
