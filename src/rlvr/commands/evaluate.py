"""``rlvr eval``: greedy pass@1 and sampled pass@k of a model on held-out tasks."""

from __future__ import annotations

import json
import re

from rich.table import Table

from rlvr.console import make_console
from rlvr.errors import ConfigError, DataError, NothingJudged

TASK_SPECS = ("a tasks JSONL, an HF save_to_disk folder, humaneval, builtin:FAMILY[,FAMILY...][:N], "
              "builtin_env:ENV[:N], reasoning_gym:NAME[:N][:KEY=VALUE,...] or textarena:ENV_ID[:N]")


def parse_tasks_arg(spec: str):
    """A JSONL path, a ``save_to_disk`` folder, ``humaneval``, ``builtin:FAMILY[,FAMILY...][:N]``,
    ``builtin_env:ENV[:N]``, ``reasoning_gym:NAME[:N][:KEY=VALUE,...]`` (the generator config from the pairs,
    default the dataset's own) or ``textarena:ENV_ID[:N]`` (held-out split). A malformed
    spec, an unknown family or environment, or a path that does not exist is a DataError naming the spec and what is allowed."""
    import os

    from pydantic import ValidationError

    from rlvr.config.data import (BuiltinArithmetic, BuiltinEnvTasks, HFTasks, HumanEvalTasks, JsonlTasks,
                                  ReasoningGymTasks, TextArenaTasks)
    from rlvr.data.hf import is_saved_dataset

    head, _, rest = spec.partition(":")
    if head in ("builtin", "builtin_env", "reasoning_gym", "textarena") and not os.path.exists(spec):
        parts = rest.split(":", 2 if head == "reasoning_gym" else -1)
        example, what = {"builtin": ("builtin:add2,mul21:200", "FAMILY[,FAMILY...][:N]"),
                         "builtin_env": ("builtin_env:calculator:200", "ENV[:N]"),
                         "reasoning_gym": ("reasoning_gym:NAME:500:min_value=1,max_value=9",
                                           "NAME[:N][:KEY=VALUE,...]"),
                         "textarena": ("textarena:ENV_ID:200", "ENV_ID[:N]")}[head]
        config = gym_config(spec, parts.pop()) if head == "reasoning_gym" and "=" in parts[-1] else {}
        if len(parts) > 2 or not parts[0]:
            raise DataError(f"--tasks {spec!r}: expected {head}:{what}, e.g. {example}")
        if len(parts) == 2 and not (parts[1].strip().isdigit() and int(parts[1]) >= 1):
            raise DataError(f"--tasks {spec!r}: N must be a whole number >= 1, got {parts[1]!r}")
        n = int(parts[1]) if len(parts) == 2 else 200
        try:
            if head == "builtin":
                return BuiltinArithmetic(families=[f for f in parts[0].split(",") if f], n=n, split="heldout",
                                         seed=1234)
            if head == "reasoning_gym":
                return ReasoningGymTasks(name=parts[0], config=config, n=n, split="heldout", seed=1234)
            if head == "textarena":
                return TextArenaTasks(env=parts[0], n=n, split="heldout", seed=1234)
            return BuiltinEnvTasks(env=parts[0], n=n, split="heldout", seed=1234)
        except ValidationError as e:
            why = "; ".join(f"{'.'.join(map(str, x['loc'])) or head}: {x['msg'].removeprefix('Value error, ')}"
                            for x in e.errors())
            raise DataError(f"--tasks {spec!r}: {why}") from None
    if spec == "humaneval":
        return HumanEvalTasks()
    if is_saved_dataset(spec):
        return HFTasks(path=spec)
    if not os.path.isfile(spec):
        what = "a folder that is not an HF save_to_disk dataset" if os.path.isdir(spec) else "no such file"
        raise DataError(f"--tasks {spec!r}: {what}; expected {TASK_SPECS}")
    return JsonlTasks(path=spec)


def gym_config(spec: str, text: str) -> dict:
    """``KEY=VALUE,...`` of a ``reasoning_gym:NAME:N:...`` spec as a generator config (each value read as
    YAML: numbers, true/false, [lists]); DataError naming the spec for a malformed pair."""
    import yaml

    out = {}
    for pair in filter(None, re.split(r",(?![^\[]*\])", text)):  # commas inside [...] belong to a list
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise DataError(f"--tasks {spec!r}: expected KEY=VALUE pairs after the count, got {pair!r}")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise DataError(f"--tasks {spec!r}: value of {key.strip()!r} is not a number, word or [list]") from None
    return out


def load_tasks_arg(spec: str, judged: bool = True) -> list:
    """The tasks ``--tasks`` names; with ``judged`` (they are scored by their kind's verifier), each one that
    verifier can judge (else a DataError naming the file, line and missing field or file, before any model is
    loaded)."""
    from rlvr.data.sources import load_task_source
    from rlvr.verifiers.registry import refuse_unjudgeable

    tasks = load_task_source(parse_tasks_arg(spec))
    return refuse_unjudgeable(tasks) if judged else tasks


def require_model_dir(path: str, flag: str = "--model") -> None:
    """ModelLoadError naming ``flag`` unless ``path`` is a model folder (config.json or adapter_config.json)."""
    from pathlib import Path

    from rlvr.errors import ModelLoadError

    p = Path(path)
    if not p.is_dir():
        raise ModelLoadError(f"{flag} {path!r} does not exist (models load from local folders only)")
    if not (p / "config.json").exists() and not (p / "adapter_config.json").exists():
        raise ModelLoadError(f"{flag} {path!r}: no config.json nor adapter_config.json: not a model folder")


def refuse_greedy_repeats(n: int, temperature: float) -> None:
    """``--n`` > 1 samples at temperature 0 would be one greedy completion repeated: refused where it is set."""
    if n > 1 and temperature == 0:
        raise DataError(f"--n {n} with --temperature 0 would repeat one greedy completion; set a temperature")


def require_judged(outcomes: dict[str, int], what: str) -> None:
    """NothingJudged (exit 3) when every one of the verdicts counted in ``outcomes`` is ``infra``."""
    n = sum(outcomes.values())
    if n and outcomes.get("infra", 0) == n:
        raise NothingJudged(f"every verdict ({n}) of {what} is 'infra': the verifier itself failed on every "
                            "completion, so nothing was judged and the scores above mean nothing; see the "
                            "samples' outcomes (--out) or run 'rlvr verify --details' on them")


def eval_command(model: str, tasks: str, n: int, temperature: float, max_new_tokens: int, out: str | None,
                 workers: int, quiet: bool = False, max_turns: int = 8, *, batch_size: int | None = None,
                 system_prompt: str | bool | None = None, rewards: list[str] | None = None,
                 recipe: str | None = None, stage: str | None = None, verifier: bool = False,
                 fail_unjudged: bool = True) -> dict:
    """Evaluate ``model`` on ``tasks`` in its prompt format (:mod:`rlvr.commands.checkpoint_format`:
    ``system_prompt`` a text, False for none, None for the checkpoint's) with its scoring (``rewards`` /
    ``recipe`` + ``stage`` / ``verifier`` override it), at ``batch_size`` (default: the run's evaluation
    batch size, else 512) in the dtype the run evaluated with. With ``fail_unjudged`` (the CLI),
    NothingJudged (exit 3) after the results are written and printed when every verdict is ``infra``."""
    from rlvr.commands.checkpoint_format import apply_format, eval_rewards, format_line, resolve_format, say
    from rlvr.config.agent import AgentLoopConfig
    from rlvr.config.limits import BatchSize, Count, NewTokens, Samples, Temperature, Workers, check_flags
    from rlvr.data.encodable import refuse_unencodable
    from rlvr.data.jsonl import write_json_atomic
    from rlvr.models.load import load_pretrained
    from rlvr.monitoring.evaluate import evaluate
    from rlvr.monitoring.scoring import describe_scoring, eval_judge, verifier_scores
    from rlvr.rollout.hf_engine import HFEngine

    check_flags(("--n", n, Samples), ("--temperature", temperature, Temperature),
                ("--max-new-tokens", max_new_tokens, NewTokens), ("--workers", workers, Workers),
                ("--max-turns", max_turns, Count), ("--batch-size", 1 if batch_size is None else batch_size, BatchSize))
    refuse_greedy_repeats(n, temperature)
    require_model_dir(model)
    fallback = None
    if recipe is not None and system_prompt is None:
        from rlvr.config.load import load_recipe

        fallback = load_recipe(recipe).system_prompt
    fmt = resolve_format(model, system_prompt, fallback)
    terms, scoring_source = eval_rewards(fmt, rewards, recipe, stage, verifier)
    judged = verifier_scores(terms)
    task_list = apply_format(load_tasks_arg(tasks, judged), fmt)
    mdl, tok = load_pretrained(model, fmt["dtype"])
    refuse_unencodable(tok, task_list)
    max_pos = getattr(mdl.config, "max_position_embeddings", 4096)
    loop = AgentLoopConfig(max_turns=max_turns, max_new_tokens=max_new_tokens, max_total_tokens=min(4096, max_pos))
    bs = batch_size or fmt.get("eval_batch_size") or 512
    scoring = describe_scoring(terms)
    scoring += f" (from {scoring_source})" if scoring_source != scoring else ""
    try:
        judge = eval_judge(terms, workers, tok, max_new_tokens)
    except ConfigError as e:
        if scoring_source != "the checkpoint's prompt_format.json":
            raise
        raise ConfigError(f"{e} (the scoring saved in {fmt['source']}; run from the folder that holds the module, "
                          "or pass --verifier to score with each task's verifier)") from None
    if not quiet:
        say(format_line(fmt, scoring) + f"; batch size {bs}; dtype {fmt['dtype']}")
        run_budget = fmt.get("eval_max_new_tokens")
        if run_budget and run_budget != max_new_tokens:
            say(f"note: the run evaluated this checkpoint with --max-new-tokens {run_budget} (this "
                f"evaluation: {max_new_tokens}); verdicts can differ")
    res = evaluate(HFEngine(mdl, tok, batch_size=bs), tok, task_list, judge, k=n, temperature=temperature,
                   max_new_tokens=max_new_tokens, agent=loop)
    res["model"] = model
    res["tasks"] = tasks
    res["prompt_format"] = {k: fmt[k] for k in ("system_prompt", "chat_template", "dtype", "source")}
    res["batch_size"] = bs
    res["scoring"] = scoring
    if out:
        write_json_atomic(out, res)
    if not quiet:
        _print(res, n)
    if fail_unjudged:
        require_judged(res.get("outcomes", {}), f"{model} on {tasks}")
    return res


def generate_command(model: str, tasks: str, out: str, n: int = 1, temperature: float = 0.0,
                     max_new_tokens: int = 64, seed: int = 0, system_prompt: str | bool | None = None) -> list[dict]:
    """Write ``{"task_id", "completion", "sample"}`` lines (n per task; temperature 0 = greedy) for
    ``rlvr verify --completions``, prompted in the checkpoint's format (``system_prompt``: a text, False for
    none, None for the checkpoint's); returns the records."""
    from rlvr.commands.checkpoint_format import apply_format, format_line, resolve_format, say
    from rlvr.config.limits import NewTokens, Samples, Temperature, check_flags
    from rlvr.data.chat import encode_prompt, stop_token_ids
    from rlvr.data.encodable import refuse_unencodable
    from rlvr.data.jsonl import write_jsonl_atomic
    from rlvr.models.load import load_pretrained
    from rlvr.rollout.engine import SamplingParams
    from rlvr.rollout.hf_engine import HFEngine

    check_flags(("--n", n, Samples), ("--temperature", temperature, Temperature),
                ("--max-new-tokens", max_new_tokens, NewTokens))
    refuse_greedy_repeats(n, temperature)
    require_model_dir(model)
    fmt = resolve_format(model, system_prompt)
    task_list = apply_format(load_tasks_arg(tasks), fmt)
    mdl, tok = load_pretrained(model, fmt["dtype"])
    refuse_unencodable(tok, task_list)
    say(format_line(fmt))
    params = SamplingParams(n=n, greedy=temperature == 0, temperature=temperature or 1.0,
                            max_new_tokens=max_new_tokens, stop_token_ids=stop_token_ids(tok), seed=seed)
    gen = HFEngine(mdl, tok).generate([encode_prompt(tok, t) for t in task_list], params)
    seen: dict[int, int] = {}
    recs = []
    for i, text in zip(gen.prompt_index, gen.texts):
        seen[i] = seen.get(i, -1) + 1
        recs.append({"task_id": task_list[i].id, "completion": text, "sample": seen[i]})
    write_jsonl_atomic(out, recs)
    make_console().print(f"wrote {len(recs)} completions ({len(task_list)} tasks x {n}) -> {out}")
    return recs


def _print(res: dict, k: int) -> None:
    t = Table(title=f"{res['model']} on {res['tasks']} ({res['n_tasks']} tasks)")
    t.add_column("family")
    t.add_column("greedy pass@1", justify="right")
    if k > 1:
        t.add_column(f"pass@{k}", justify="right")
    for fam, v in res["by_family"].items():
        row = [fam, f"{v:.1%}"]
        if k > 1:
            row.append(f"{res[f'by_family_pass_at_{k}'][fam]:.1%}")
        t.add_row(*row)
    row = ["all", f"{res['pass_at_1']:.1%}"]
    if k > 1:
        row.append(f"{res[f'pass_at_{k}_sampled']:.1%}")
    t.add_row(*row)
    make_console().print(t)
    if res.get("mean_score") not in (None, res["pass_at_1"]):  # a scorer with partial credit
        make_console().print(f"solved (score 1.0) {res['pass_at_1']:.1%}; mean score {res['mean_score']:.3f} "
                             "(greedy; partial credit included)")
    if "turns_mean" in res:
        make_console().print(f"closed loop: {res['turns_mean']:.2f} turns, {res['tool_calls_mean']:.2f} tool calls per "
                              f"trajectory; ends {res['ends']}; outcomes {res['outcomes']}")
    make_console().print(json.dumps({k2: v for k2, v in res.items()
                                      if k2 not in ("samples", "sampled", "by_family", "prompt_format", "scoring")})[:400])
