"""The ``rlvr`` command line. No logic of its own: each command calls a library function.

OMP_WAIT_POLICY=PASSIVE is set before torch is imported (idle OpenMP threads otherwise spin and slow
training 5-8x whenever verifier processes hold a core).
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import typer  # noqa: E402

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Post-train language models: SFT -> preference alignment -> RL with verifiable rewards.")
STATE = {"debug": False}

SetOpt = typer.Option(None, "--set", help="Override a recipe key: --set stages.sft.max_steps=100 (repeatable).")


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks.")) -> None:
    STATE["debug"] = debug


def _overrides(sets: Optional[List[str]]) -> list[str]:
    return list(sets or [])


@app.command()
def validate(recipe: str = typer.Argument(..., help="Recipe YAML."), set_: Optional[List[str]] = SetOpt) -> None:
    """Check a recipe without running it."""
    from rlvr.commands.run import validate_command

    validate_command(recipe, _overrides(set_))


@app.command()
def run(recipe: str = typer.Argument(..., help="Recipe YAML."), set_: Optional[List[str]] = SetOpt,
        resume: bool = typer.Option(False, "--resume", help="Skip finished stages, resume the current one."),
        run_dir: Optional[str] = typer.Option(None, "--run-dir", help="Override the recipe's run_dir.")) -> None:
    """Run every stage of a recipe in order (each starts from the previous stage's checkpoint)."""
    from rlvr.commands.run import run_command

    run_command(recipe, _overrides(set_), resume, run_dir)


@app.command()
def quickstart(out: str = typer.Option("runs/quickstart", "--out", help="Run directory."),
               set_: Optional[List[str]] = SetOpt,
               resume: bool = typer.Option(False, "--resume", help="Resume an interrupted quickstart.")) -> None:
    """The embedded default: tiny model, built-in arithmetic, SFT -> DPO -> GRPO on the CPU."""
    from rlvr.commands.run import quickstart_command

    quickstart_command(out, _overrides(set_), resume)


def _stage_command(kind: str, recipe: str, sets, resume: bool, init: Optional[str]) -> None:
    from rlvr.commands.run import stage_command

    stage_command(kind, recipe, _overrides(sets), resume, init)


InitOpt = typer.Option(None, "--model", help="Start from this checkpoint (overrides model.path).")
ResumeOpt = typer.Option(False, "--resume", help="Resume from the stage's latest checkpoint.")


@app.command()
def sft(recipe: str, set_: Optional[List[str]] = SetOpt, resume: bool = ResumeOpt,
        model: Optional[str] = InitOpt) -> None:
    """Run the recipe's SFT stage(s)."""
    _stage_command("sft", recipe, set_, resume, model)


@app.command()
def grpo(recipe: str, set_: Optional[List[str]] = SetOpt, resume: bool = ResumeOpt,
         model: Optional[str] = InitOpt) -> None:
    """Run the recipe's RL stage(s) (GRPO, DAPO, GSPO, Dr.GRPO, RLOO, REINFORCE++)."""
    _stage_command("rl", recipe, set_, resume, model)


@app.command()
def dpo(recipe: str, set_: Optional[List[str]] = SetOpt, resume: bool = ResumeOpt,
        model: Optional[str] = InitOpt) -> None:
    """Run the recipe's preference stage(s) (dpo, ipo, simpo, kto, orpo, cpo)."""
    _stage_command("preference", recipe, set_, resume, model)


@app.command()
def rm(recipe: str, set_: Optional[List[str]] = SetOpt, resume: bool = ResumeOpt,
       model: Optional[str] = InitOpt) -> None:
    """Train the recipe's reward model stage."""
    _stage_command("reward_model", recipe, set_, resume, model)


@app.command()
def ppo(recipe: str, set_: Optional[List[str]] = SetOpt, resume: bool = ResumeOpt,
        model: Optional[str] = InitOpt) -> None:
    """Run the recipe's PPO stage."""
    _stage_command("ppo", recipe, set_, resume, model)


@app.command("eval")
def eval_(model: str = typer.Option(..., "--model", help="Model folder (HF format)."),
          tasks: str = typer.Option(..., "--tasks", help="Tasks JSONL, builtin:FAMILY[,FAMILY][:N], or "
                                                          "builtin_env:ENV[:N] (closed loop)."),
          n: int = typer.Option(1, "--n", help="Samples per task for pass@k."),
          temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature."),
          max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Generation budget."),
          out: Optional[str] = typer.Option(None, "--out", help="Write the result JSON here."),
          workers: int = typer.Option(0, "--workers", help="Verifier worker processes."),
          max_turns: int = typer.Option(8, "--max-turns", help="Environment tasks: turns per trajectory.")) -> None:
    """Greedy pass@1 and sampled pass@k (unbiased estimator) on held-out tasks."""
    from rlvr.commands.evaluate import eval_command

    eval_command(model, tasks, n, temperature, max_new_tokens, out, workers, max_turns)


@app.command("build-tiny")
def build_tiny(out: str = typer.Argument(..., help="Output folder."),
               size: str = typer.Option("1m", "--size", help="test, 0.5m, 1m, 2m, 5m, 20m."),
               seed: int = typer.Option(0, "--seed")) -> None:
    """Write the tiny from-scratch model + tokenizer in HF format."""
    from rlvr.models.tiny import build_tiny as _build, num_params

    model, _ = _build(out, size=size, seed=seed)
    typer.echo(f"wrote {out} ({num_params(model):,} parameters)")


def _register_commands() -> None:
    """Commands whose options live with their implementation in rlvr.commands.* (verify, probe)."""
    from rlvr.commands.probe import register as reg_probe
    from rlvr.commands.verify import register as reg_verify

    reg_verify(app)
    reg_probe(app)


def main() -> None:
    from rlvr.errors import RlvrError

    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    except ImportError:
        pass

    _register_commands()
    try:
        app(standalone_mode=False)
    except RlvrError as e:
        if STATE["debug"]:
            raise
        typer.secho(f"error: {e}", fg="red", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.secho("interrupted", fg="yellow", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:  # click usage errors etc.
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Exit):
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Abort):
            sys.exit(1)
        raise


if __name__ == "__main__":
    main()
