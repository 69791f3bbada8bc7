"""The prompt format the commands use on a checkpoint (``rlvr eval``, ``screen``, ``generate``, ``plan``).

By default the one saved with the checkpoint (``prompt_format.json``, :mod:`rlvr.models.prompt_format`);
``--system-prompt TEXT`` / ``--no-system-prompt`` override its system prompt, and ``rlvr eval``'s
``--reward``, ``--recipe [--stage]`` and ``--verifier`` its scoring. A folder without the file is
prompted with no system message and judged by each task's verifier. Each command prints the format it uses.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.errors import ConfigError


def system_prompt_choice(text: str | None, none: bool) -> str | bool | None:
    """``--system-prompt TEXT`` / ``--no-system-prompt`` -> the text, False (none), or None (the checkpoint's)."""
    if text is not None and none:
        raise ConfigError("--system-prompt and --no-system-prompt contradict each other: give one")
    if none or text == "":
        return False
    return text


def resolve_format(model_dir: str | None, system_prompt: str | bool | None = None,
                   fallback: str | None = None) -> dict:
    """The format to use on ``model_dir``: its saved one with the override applied (``system_prompt``: a text,
    False for none, None to keep the saved one, else ``fallback``); ``source`` says where the system prompt
    came from."""
    from rlvr.models.prompt_format import FILE, make_format, read_format

    saved = read_format(model_dir) if model_dir and Path(model_dir).is_dir() else None
    fmt = {**make_format(), "chat_template": None, **(saved or {})}
    if system_prompt is False:
        fmt["system_prompt"], fmt["source"] = None, "--no-system-prompt"
    elif isinstance(system_prompt, str):
        fmt["system_prompt"], fmt["source"] = system_prompt, "--system-prompt"
    elif fallback is not None and saved is None:
        fmt["system_prompt"], fmt["source"] = fallback, "the recipe's system_prompt"
    else:
        fmt["source"] = str(Path(model_dir) / FILE) if saved else \
            f"{model_dir} has no {FILE}" if model_dir else "a model built in memory"
    fmt["saved"] = saved is not None
    return fmt


def format_line(fmt: dict, scoring: str | None = None) -> str:
    """``prompt format: system prompt '...' (from ...)[; scoring: ...]`` for the console."""
    sp = fmt["system_prompt"]
    text = f"system prompt {sp!r}" if sp else "no system prompt"
    line = f"prompt format: {text} (from {fmt['source']})"
    if fmt.get("chat_template") is not None:
        line += f"; chat template: {'yes' if fmt['chat_template'] else 'none'}"
    return line + (f"; scoring: {scoring}" if scoring else "")


def say(text: str, console=None) -> None:
    """Print a format line whole (no wrapping; a system prompt's brackets are not markup)."""
    from rich.console import Console

    (console or Console()).print(text, soft_wrap=True, markup=False, highlight=False)


def apply_format(tasks: list, fmt: dict) -> list:
    """The tasks with the format's system message before each prompt (a task with its own keeps it)."""
    from rlvr.data.sources import with_system

    return with_system(tasks, fmt["system_prompt"])


def eval_rewards(fmt: dict, rewards: list[str] | None = None, recipe: str | None = None,
                 stage: str | None = None, verifier: bool = False) -> tuple[list | None, str]:
    """The reward terms ``rlvr eval`` scores with (None: each task's verifier) and where they came from:
    ``--reward mod:fn`` (each a python term of weight 1), ``--recipe R [--stage S]`` (that RL stage's
    ``rewards``), ``--verifier`` (each task's verifier), else the checkpoint's saved scoring."""
    from rlvr.config.rl import RewardTerm
    from rlvr.monitoring.scoring import reward_terms

    given = [n for n, on in (("--reward", bool(rewards)), ("--recipe", recipe is not None),
                             ("--verifier", verifier)) if on]
    if len(given) > 1:
        raise ConfigError(f"{' and '.join(given)} each choose the scoring: give one")
    if stage is not None and recipe is None:
        raise ConfigError("--stage names a stage of --recipe: give --recipe too")
    if verifier:
        return None, "--verifier"
    if rewards:
        try:
            return [RewardTerm(name="python", function=f) for f in rewards], "--reward"
        except ValueError as e:
            raise ConfigError(f"--reward: {e.errors()[0]['msg'] if hasattr(e, 'errors') else e}") from None
    if recipe is not None:
        return _recipe_rewards(recipe, stage), f"--recipe {recipe}" + (f" --stage {stage}" if stage else "")
    if fmt.get("rewards"):
        try:
            return reward_terms(fmt["rewards"]), "the checkpoint's prompt_format.json"
        except ValueError as e:
            raise ConfigError(f"{fmt['source']}: field 'rewards' is not a list of reward terms: {e}") from None
    return None, "each task's verifier"


def _recipe_rewards(path: str, stage: str | None) -> list:
    from rlvr.config.load import load_recipe

    rec = load_recipe(path)
    rl = [st for st in rec.stages if hasattr(st, "rewards")]
    if stage is not None:
        named = [st for st in rec.stages if st.name == stage]
        if not named:
            raise ConfigError(f"--stage {stage!r}: {path} has no such stage (stages: "
                              f"{', '.join(st.name for st in rec.stages) or 'none'})")
        if not hasattr(named[0], "rewards"):
            raise ConfigError(f"--stage {stage!r} of {path} is a {named[0].type} stage: only RL stages have rewards")
        return list(named[0].rewards)
    if not rl:
        raise ConfigError(f"--recipe {path}: the recipe has no RL stage, so no rewards to score with")
    return list(rl[0].rewards)
