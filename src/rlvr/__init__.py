"""rlvr: SFT -> preference alignment -> RL with verifiable rewards.

The Python API (docs/api.md) does what the CLI does, with the same outputs::

    import rlvr
    summary = rlvr.run("recipe.yaml", stages__sft__max_steps=100)   # = rlvr run recipe.yaml --set ...
    result = rlvr.eval("runs/x/grpo/final", "heldout.jsonl", n=4)    # = rlvr eval
    rlvr.generate("runs/x/grpo/final", "tasks.jsonl", "c.jsonl")     # = rlvr generate
    verdicts = rlvr.verify("tasks.jsonl", "c.jsonl", "v.jsonl")      # = rlvr verify
    table = rlvr.sweep("recipe.yaml", {"stages.grpo.loss.type": ["grpo", "dr_grpo"]}, seeds=3, out="sw")  # = rlvr sweep
"""

from __future__ import annotations

import os
from typing import Any

__version__ = "0.1.0"
__all__ = ["run", "eval", "generate", "verify", "sweep", "__version__"]


def _env() -> None:
    from rlvr import omp_wait

    omp_wait.default_wait()
    for k, v in (("TOKENIZERS_PARALLELISM", "false"), ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_VERBOSITY", "error")):
        os.environ.setdefault(k, v)
    from rlvr.commands import quiet_hf, use_accelerations

    use_accelerations()  # rlvr.accel behind the core's hooks, unless RLVR_ACCEL=0
    quiet_hf()


def _sets(set_: list[str] | None, overrides: dict[str, Any]) -> list[str]:
    """``stages__sft__max_steps=3`` -> ``stages.sft.max_steps=3`` (values as YAML, like --set)."""
    import json

    out = list(set_ or [])
    for k, v in overrides.items():
        out.append(f"{k.replace('__', '.')}={json.dumps(v) if not isinstance(v, str) else v}")
    return out


def run(recipe: Any = None, *, resume: bool = False, run_dir: str | None = None, set: list[str] | None = None,  # noqa: A002
        allow_config_change: bool = False, stage_type: str | None = None, model: str | None = None,
        overwrite: bool = False, **overrides: Any) -> dict:
    """Run a recipe like ``rlvr run``: dry-run it first, write the run directory and report.html.

    recipe: a YAML path, a :class:`rlvr.config.recipe.Recipe`, or None with ``resume=True`` and
    ``run_dir`` (the saved config). Overrides: ``set=["stages.sft.max_steps=10"]`` and/or keyword
    arguments with ``__`` for dots (``stages__sft__max_steps=10``). ``stage_type`` (sft, rl,
    preference, reward_model, ppo) runs only those stages, like ``rlvr sft`` / ``rlvr grpo``; ``model``
    is then the starting checkpoint (``--model``). Returns the summary (``summary["stages"]``, one row
    per stage, and ``summary["report"]``, the report's path). ``overwrite``: the run directory holds a
    different run (another config): move it aside to ``<run_dir>.prev-<time>`` instead of refusing.
    """
    _env()
    from rlvr.commands.run import execute

    return execute(recipe, _sets(set, overrides), resume, run_dir, allow_config_change, only=stage_type,
                   init_path=model, overwrite=overwrite)


def eval(model: str, tasks: str, *, n: int = 1, temperature: float = 1.0, max_new_tokens: int = 64,  # noqa: A001
         out: str | None = None, workers: int = 0, quiet: bool = True, max_turns: int = 8,
         batch_size: int | None = None, system_prompt: str | bool | None = None, rewards: list[str] | None = None,
         recipe: str | None = None, stage: str | None = None, verifier: bool = False) -> dict:
    """Held-out evaluation like ``rlvr eval``: greedy pass@1 (+ sampled pass@k when n > 1) on ``tasks``
    (a JSONL path, a save_to_disk folder, ``humaneval``, ``builtin:add2,mul31:200`` or, in the closed
    loop with at most ``max_turns`` turns, ``builtin_env:calculator:500``), in the checkpoint's prompt format
    (``system_prompt``: a text, False for none, None for the one in its prompt_format.json) and scoring
    (``rewards``: ``module:function`` rewards, or ``recipe`` [+ ``stage``]: an RL stage's rewards — a pass is
    then a summed reward >= 1; ``verifier``: each task's verifier). Returns the result dict written to
    ``out`` (every completion in ``samples``; ``outcomes`` counts the verdicts, all ``infra`` when the
    verifier failed on every one). Bad arguments and tasks no verifier can judge raise RlvrError."""
    _env()
    from rlvr.commands.evaluate import eval_command

    return eval_command(model, tasks, n, temperature, max_new_tokens, out, workers, quiet=quiet, max_turns=max_turns,
                        batch_size=batch_size, system_prompt=system_prompt, rewards=rewards, recipe=recipe,
                        stage=stage, verifier=verifier, fail_unjudged=False)


def generate(model: str, tasks: str, out: str, *, n: int = 1, temperature: float = 0.0, max_new_tokens: int = 64,
             seed: int = 0, system_prompt: str | bool | None = None) -> list[dict]:
    """Completions like ``rlvr generate``: writes ``{task_id, completion, sample}`` lines to ``out``, prompted
    in the checkpoint's format (``system_prompt``: a text, False for none, None for the checkpoint's)."""
    _env()
    from rlvr.commands.evaluate import generate_command

    return generate_command(model, tasks, out, n, temperature, max_new_tokens, seed, system_prompt)


def verify(tasks: str, completions: str, out: str, *, workers: int = 2, timeout_s: float = 60.0,
           details: bool = False, rewards: list[str] | None = None) -> dict:
    """Judge a completions file like ``rlvr verify``; writes one verdict line per completion to ``out``
    and returns the summary (``n``, ``counts`` per outcome, ``pass_rate``, ``seconds``). ``rewards``:
    ``module:function`` python rewards (and ``correct``), like ``--reward``."""
    _env()
    from rlvr.commands.verify import run_verify

    return run_verify(tasks, completions, out, workers=workers, timeout_s=timeout_s, details=details,
                      rewards=rewards)


def sweep(recipe: str, vary: dict[str, list] | list[str] | None = None, *, seeds: int = 1, out: str,
          steps: int | None = None, steps_stage: list[str] | None = None, parallel: int = 1,
          seed_list: list[int] | None = None, set: list[str] | None = None,  # noqa: A002
          keep_time_caps: bool = False, metric: str = "pass_at_1", quiet: bool = False) -> dict:
    """Run a recipe over a grid like ``rlvr sweep`` (docs/sweep.md): ``vary`` maps each dotted key (as in
    ``--set``) to its values (or is a list of ``"KEY=V1,V2"`` texts); seeds 0..seeds-1 (or ``seed_list``);
    ``metric`` the held-out figure tabled (``pass_at_1``, ``pass_at_K_sampled`` or ``mean_score``).
    Writes ``out/sweep.json``, ``sweep.md``, ``sweep.png`` and returns the table (``cells``: per grid point
    ``per_seed``, ``mean``, ``vs_first`` intervals, health and compute; ``ran``: the cells this call ran).
    Bad input raises :class:`rlvr.errors.ConfigError` before any cell runs."""
    import json

    _env()
    from rlvr.commands.sweep import sweep as _sweep

    if isinstance(vary, dict):
        vary = [f"{k}=" + ",".join(v if isinstance(v, str) else json.dumps(v) for v in vals) for k, vals in vary.items()]
    return _sweep(recipe, list(vary or []), seeds, out=out, steps=steps, steps_stage=steps_stage, parallel=parallel,
                  seed_list_text=",".join(map(str, seed_list)) if seed_list is not None else None, sets=set,
                  keep_time_caps=keep_time_caps, metric=metric, say=(lambda _: None) if quiet else print)


import rlvr.envs  # noqa: E402,F401  (registers the built-in environments' task generators with rlvr.data)
