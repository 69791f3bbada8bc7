"""The ``rlvr`` command line. No logic of its own: each command calls a library function.

Idle OpenMP threads sleep (OMP_WAIT_POLICY=PASSIVE) unless a recipe's run has the cores to itself, when they
spin briefly first (``rlvr.omp_wait``): set before torch is imported.

Errors: a user error (:class:`rlvr.errors.RlvrError`) or a usage error (unknown command or option,
missing argument, bad value) is printed as one paragraph with exit status 2; ``--debug`` shows the
traceback instead. typer (pinned in pyproject.toml) vendors its own click, whose exceptions derive
from ``typer.TyperException``: that is the class caught here.

Exit status: 0 done; 2 a usage or input error (nothing was run); 3 nothing was judged (every verdict
``infra``: ``rlvr verify``, ``rlvr eval``, ``rlvr screen``); 130 interrupted (SIGINT/SIGTERM: the stage
wrote a checkpoint and the resume command is printed).
"""

from __future__ import annotations

import inspect
import os
import sys

from rlvr import omp_wait  # torch-free; notes whether the user chose the wait policy

omp_wait.default_wait()  # passive until a recipe's run chooses (rlvr.commands.run.execute)
from rlvr.commands import use_accelerations

use_accelerations()  # rlvr.accel behind the core's hooks, unless RLVR_ACCEL=0
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import typer

from rlvr.stages import StageKind, stage_commands

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Post-train language models: SFT -> preference alignment -> RL with verifiable rewards.")
STATE = {"debug": False}

SetOpt = typer.Option(None, "--set", help="Override a recipe key: --set stages.sft.max_steps=100 (repeatable).")


def flag(name: str, help: str) -> bool:
    """A boolean switch (no value) shown without a type placeholder in --help."""
    return typer.Option(False, name, help=help, metavar="")


def _version(value: bool) -> None:
    if value:
        from rlvr import __version__

        typer.echo(f"rlvr {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(debug: bool = flag("--debug", "Show full tracebacks."),
          version: bool = typer.Option(False, "--version", help="Print the version and exit.", metavar="",
                                       callback=_version, is_eager=True)) -> None:
    STATE["debug"] = debug


def _overrides(sets: list[str] | None) -> list[str]:
    return list(sets or [])


ResumeOpt = flag("--resume", "Skip finished stages, resume the current one from its latest checkpoint.")
RunDirOpt = typer.Option(None, "--run-dir", help="Override the recipe's run_dir.")
AllowChangeOpt = flag("--allow-config-change", "With --resume: accept a recipe that differs from the run's "
                                               "saved config.yaml (the change is logged in the run).")
InitOpt = typer.Option(None, "--model", help="Start from this checkpoint (overrides model.path).")
OverwriteOpt = flag("--overwrite", "The run directory holds a different run: move it aside to "
                                   "<dir>.prev-<time> (nothing is deleted) and start fresh.")
AllowJudgeOpt = flag("--allow-unprobed-judge", "Allow a model-judged reward (RLAIF) whose judge checkpoint and "
                                               "rubric have no passing `rlvr probe judge` report.")


@app.command()
def validate(recipe: str = typer.Argument(..., help="Recipe YAML."), set_: list[str] | None = SetOpt,
             allow_unprobed_judge: bool = AllowJudgeOpt) -> None:
    """Dry run: resolve every file, model, family and batch size a run would touch; list every problem."""
    from rlvr.commands.run import validate_command

    validate_command(recipe, _overrides(set_), allow_unprobed_judge)


@app.command()
def run(recipe: str | None = typer.Argument(None, help="Recipe YAML (optional with --resume: the run's "
                                                          "saved config.yaml is used)."),
        set_: list[str] | None = SetOpt, resume: bool = ResumeOpt, run_dir: str | None = RunDirOpt,
        allow_config_change: bool = AllowChangeOpt, overwrite: bool = OverwriteOpt,
        allow_unprobed_judge: bool = AllowJudgeOpt,
        plan: str | None = typer.Option(None, "--plan", help="auto: decide each stage before it with rlvr plan's "
                                        "rules and run only what the plan keeps (sets plan.follow).")) -> None:
    """Run every stage of a recipe in order (each starts from the previous stage's checkpoint)."""
    from rlvr.commands.run import plan_override, run_command

    run_command(recipe, [*_overrides(set_), *plan_override(plan)], resume, run_dir,
                allow_config_change=allow_config_change, overwrite=overwrite, allow_unprobed_judge=allow_unprobed_judge)


@app.command()
def quickstart(out: str = typer.Option("runs/quickstart", "--out", help="Run directory."),
               set_: list[str] | None = SetOpt,
               resume: bool = flag("--resume", "Resume an interrupted quickstart."),
               overwrite: bool = OverwriteOpt) -> None:
    """The embedded default: tiny model, built-in arithmetic, SFT -> DPO -> GRPO on the CPU."""
    from rlvr.commands.run import quickstart_command

    quickstart_command(out, _overrides(set_), resume, overwrite)


def _stage_command(kind: StageKind) -> None:
    """Add ``rlvr <kind.command>`` (:class:`rlvr.stages.StageKind`): run only the recipe's stages of that type,
    from ``--model`` if given; ``--allow-unprobed-judge`` where the type's rewards may be model-judged."""
    opt = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("recipe", opt, annotation=str),
              *(inspect.Parameter(name, opt, default=default, annotation=ann) for name, ann, default in (
                  ("set_", list[str] | None, SetOpt), ("resume", bool, ResumeOpt), ("model", str | None, InitOpt),
                  ("run_dir", str | None, RunDirOpt), ("allow_config_change", bool, AllowChangeOpt),
                  ("overwrite", bool, OverwriteOpt),
                  *([("allow_unprobed_judge", bool, AllowJudgeOpt)] if kind.judge_option else [])))]

    def command(**kw) -> None:
        from rlvr.commands.run import stage_command

        stage_command(kind.type, kw["recipe"], _overrides(kw["set_"]), kw["resume"], kw["model"],
                      run_dir=kw["run_dir"], allow_config_change=kw["allow_config_change"],
                      overwrite=kw["overwrite"], allow_unprobed_judge=kw.get("allow_unprobed_judge", False))

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # what typer reads
    command.__name__, command.__doc__ = kind.command, kind.help
    app.command(kind.command, help=kind.help)(command)


for _kind in stage_commands():  # rlvr sft, grpo, dpo, rm, ppo, rft, distill: one per stage table entry
    _stage_command(_kind)


TasksOpt = typer.Option(..., "--tasks", help="Tasks JSONL, an HF dataset folder (save_to_disk), 'humaneval', "
                                             "builtin:FAMILY[,FAMILY][:N], builtin_env:ENV[:N] (held-out "
                                             "environment tasks, run in the closed loop), "
                                             "reasoning_gym:NAME[:N][:KEY=VALUE,...] (held-out reasoning-gym tasks, "
                                             "generator options as pairs; extra 'gym'), or "
                                             "textarena:ENV_ID[:N] (held-out games of a single-player TextArena "
                                             "game, run in the closed loop; extra 'gym').")

SystemPromptOpt = typer.Option(None, "--system-prompt", metavar="TEXT", help="Put this system message before every prompt "
                                                            "(default: the checkpoint's, from prompt_format.json).")
NoSystemPromptOpt = flag("--no-system-prompt", "No system message, whatever the checkpoint's prompt_format.json says.")


@app.command("eval")
def eval_(model: str = typer.Option(..., "--model", help="Model folder (HF format, or a LoRA adapter folder)."),
          tasks: str = TasksOpt,
          n: int = typer.Option(1, "--n", help="Samples per task for pass@k."),
          temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature."),
          max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Generation budget."),
          out: str | None = typer.Option(None, "--out", help="Write the result JSON here."),
          workers: int = typer.Option(0, "--workers", help="Verifier worker processes."),
          max_turns: int = typer.Option(8, "--max-turns", help="Environment tasks: turns per trajectory."),
          batch_size: int | None = typer.Option(None, "--batch-size", help="Prompts decoded together (default: the "
                                                "run's eval.batch_size from prompt_format.json, else 512)."),
          system_prompt: str | None = SystemPromptOpt, no_system_prompt: bool = NoSystemPromptOpt,
          reward: list[str] | None = typer.Option(None, "--reward", metavar="MOD:FN", help="Score with this python "
                                                  "reward (repeatable; summed): a pass is a reward >= 1."),
          recipe: str | None = typer.Option(None, "--recipe", help="Score with the rewards of this recipe's first "
                                            "RL stage (or --stage): a pass is a summed reward >= 1."),
          stage: str | None = typer.Option(None, "--stage", help="With --recipe: the RL stage whose rewards score."),
          verifier: bool = flag("--verifier", "Score with each task's verifier, whatever the checkpoint saved.")
          ) -> None:
    """Greedy pass@1 and sampled pass@k (unbiased estimator) on held-out tasks, in the checkpoint's prompt format.

    Exit status: 3 when every verdict is 'infra' (nothing was judged; the results are still written),
    2 on bad input (a flag out of range, tasks their verifier cannot judge)."""
    from rlvr.commands.checkpoint_format import system_prompt_choice
    from rlvr.commands.evaluate import eval_command

    eval_command(model, tasks, n, temperature, max_new_tokens, out, workers, max_turns=max_turns,
                 batch_size=batch_size, system_prompt=system_prompt_choice(system_prompt, no_system_prompt),
                 rewards=reward, recipe=recipe, stage=stage, verifier=verifier)


@app.command()
def generate(model: str = typer.Option(..., "--model", help="Model folder (HF format, or a LoRA adapter folder)."),
             tasks: str = TasksOpt,
             out: str = typer.Option(..., "--out", help="Completions JSONL to write: {task_id, completion, sample}."),
             n: int = typer.Option(1, "--n", help="Completions per task."),
             temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
             max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Generation budget."),
             seed: int = typer.Option(0, "--seed", help="Sampling seed."),
             system_prompt: str | None = SystemPromptOpt, no_system_prompt: bool = NoSystemPromptOpt) -> None:
    """Write completions for `rlvr verify --completions` (in the checkpoint's prompt format)."""
    from rlvr.commands.checkpoint_format import system_prompt_choice
    from rlvr.commands.evaluate import generate_command

    generate_command(model, tasks, out, n, temperature, max_new_tokens, seed,
                     system_prompt_choice(system_prompt, no_system_prompt))


@app.command("build-tiny")
def build_tiny(out: str = typer.Argument(..., help="Output folder."),
               size: str = typer.Option("1m", "--size", help="test, 0.5m, 1m, 2m, 5m, 20m."),
               seed: int = typer.Option(0, "--seed"),
               tokenizer: str = typer.Option("char", "--tokenizer", help="char (printable ASCII) or bytes "
                                             "(any text, byte fallback).")) -> None:
    """Write the tiny from-scratch model + tokenizer in HF format."""
    from rlvr.errors import ConfigError
    from rlvr.models.tiny import SIZES, num_params
    from rlvr.models.tiny import build_tiny as _build

    if size not in SIZES:
        raise ConfigError(f"--size {size!r}: unknown tiny size; choose one of {', '.join(SIZES)}")
    from rlvr.models.tokenizer import TOKENIZER_KINDS

    if tokenizer not in TOKENIZER_KINDS:
        raise ConfigError(f"--tokenizer {tokenizer!r}: choose one of {', '.join(TOKENIZER_KINDS)}")
    model, _ = _build(out, size=size, seed=seed, tokenizer=tokenizer)
    typer.echo(f"wrote {out} ({num_params(model):,} parameters)")


@app.command("build-model")
def build_model(out: str = typer.Argument(..., help="Output folder."),
                shape: str = typer.Option(..., "--shape", help="qwen2.5-0.5b, llama-3.2-1b, or a config.json path."),
                seed: int = typer.Option(0, "--seed"),
                set_: list[str] = typer.Option([], "--set", help="KEY=VALUE: a config field replaced "
                                               "(e.g. num_hidden_layers=4); repeatable.")) -> None:
    """Write a random-init model of a real shape (and a tokenizer of its vocabulary) in HF format."""
    from rlvr.models.shapes import build_shape, parse_overrides
    from rlvr.models.tiny import num_params

    model, _ = build_shape(out, shape, seed=seed, overrides=parse_overrides(set_))
    typer.echo(f"wrote {out} ({num_params(model):,} parameters, vocabulary {model.config.vocab_size:,})")


def _register_commands() -> None:
    """Commands whose options live with their implementation in rlvr.commands.* (verify, probe, screen, plan, report, watch, sweep)."""
    from rlvr.commands.plan import register as reg_plan
    from rlvr.commands.probe import register as reg_probe
    from rlvr.commands.report import register as reg_report
    from rlvr.commands.screen import register as reg_screen
    from rlvr.commands.sweep import register as reg_sweep
    from rlvr.commands.verify import register as reg_verify

    reg_verify(app)
    reg_probe(app)
    reg_screen(app)
    reg_plan(app)
    reg_report(app)
    reg_sweep(app)


def _usage_error(e: typer.TyperException) -> None:
    """A click/typer usage error as one paragraph: what is wrong, and where the help is."""
    ctx = getattr(e, "ctx", None)
    path = ctx.command_path if ctx is not None else "rlvr"
    typer.secho(f"error: {e.format_message()} (see '{path} --help')", fg="red", err=True)


def resume_hint(argv: list[str]) -> str:
    """The command that resumes this one: the same arguments with ``--resume`` (once)."""
    import shlex

    args = [a for a in argv if a != "--debug"]
    if "--resume" not in args:
        args.append("--resume")
    return "rlvr " + " ".join(shlex.quote(a) for a in args)


def main() -> None:
    from rlvr.commands import quiet_hf
    from rlvr.errors import Interrupted, RlvrError

    quiet_hf()
    _register_commands()
    STATE["debug"] = "--debug" in sys.argv[1:]  # before parsing: a usage error may come first
    try:
        app(standalone_mode=False, prog_name="rlvr")
    except RlvrError as e:
        if STATE["debug"]:
            raise
        typer.secho(f"error: {e}", fg="red", err=True)
        sys.exit(e.exit_code)
    except Interrupted as e:  # SIGINT/SIGTERM: a checkpoint was written at the step boundary
        typer.secho(f"stopped: stage {e.stage} at step {e.step}, checkpoint {e.checkpoint}\n"
                    f"resume with: {resume_hint(sys.argv[1:])}", fg="yellow", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        typer.secho("interrupted", fg="yellow", err=True)
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except ValueError as e:  # a pydantic ValidationError from a value no command checked: still one paragraph
        if STATE["debug"] or type(e).__name__ != "ValidationError":
            raise
        first = e.errors()[0]  # type: ignore[attr-defined]
        where = ".".join(map(str, first["loc"])) or e.title  # type: ignore[attr-defined]
        msg = first["msg"].removeprefix("Value error, ")
        typer.secho(f"error: {where}: {msg} (got {first.get('input')!r}); run with --debug for the traceback",
                    fg="red", err=True)
        sys.exit(2)
    except typer.Abort:
        sys.exit(1)
    except typer.TyperException as e:  # usage errors (vendored click): one paragraph, exit 2
        from typer._click.exceptions import NoArgsIsHelpError

        if STATE["debug"]:
            raise
        if isinstance(e, NoArgsIsHelpError):
            typer.echo(e.ctx.get_help() if e.ctx is not None else str(e))
            sys.exit(0)
        _usage_error(e)
        sys.exit(2)


if __name__ == "__main__":
    main()
