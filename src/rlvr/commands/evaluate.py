"""``rlvr eval``: greedy pass@1 and sampled pass@k of a model on held-out tasks."""

from __future__ import annotations

import json

from rich.table import Table

from rlvr.console import make_console
from rlvr.errors import DataError


def parse_tasks_arg(spec: str):
    """A JSONL path, a ``save_to_disk`` folder, ``humaneval``, ``builtin:FAMILY[,FAMILY...][:N]`` or
    ``builtin_env:ENV[:N]`` (held-out split)."""
    from rlvr.config.data import BuiltinArithmetic, BuiltinEnvTasks, HFTasks, HumanEvalTasks, JsonlTasks
    from rlvr.data.hf import is_saved_dataset

    if spec.startswith("builtin_env:"):
        parts = spec.split(":")
        envs = BuiltinEnvTasks.model_fields["env"].annotation.__args__
        if parts[1] not in envs:
            raise DataError(f"--tasks {spec!r}: unknown environment {parts[1]!r}; choose from {', '.join(envs)}")
        try:
            n = int(parts[2]) if len(parts) > 2 else 200
        except ValueError:
            raise DataError(f"--tasks {spec!r}: N must be an integer") from None
        return BuiltinEnvTasks(env=parts[1], n=n, split="heldout", seed=1234)

    if spec.startswith("builtin:"):
        parts = spec.split(":")
        fams = [f for f in parts[1].split(",") if f]
        if not fams:
            raise DataError(f"--tasks {spec!r}: name at least one family, e.g. builtin:add2,mul21:200")
        try:
            n = int(parts[2]) if len(parts) > 2 else 200
        except ValueError:
            raise DataError(f"--tasks {spec!r}: N must be an integer") from None
        return BuiltinArithmetic(families=fams, n=n, split="heldout", seed=1234)
    if spec == "humaneval":
        return HumanEvalTasks()
    if is_saved_dataset(spec):
        return HFTasks(path=spec)
    return JsonlTasks(path=spec)


def eval_command(model: str, tasks: str, n: int, temperature: float, max_new_tokens: int, out: str | None,
                 workers: int, quiet: bool = False, max_turns: int = 8) -> dict:
    from rlvr.config.agent import AgentLoopConfig
    from rlvr.data.jsonl import write_json_atomic
    from rlvr.data.sources import load_task_source
    from rlvr.models.load import load_pretrained
    from rlvr.monitoring.evaluate import default_judge, evaluate
    from rlvr.rollout.hf_engine import HFEngine

    if n < 1:
        raise DataError(f"--n must be >= 1, got {n}")
    task_list = load_task_source(parse_tasks_arg(tasks))
    mdl, tok = load_pretrained(model)
    max_pos = getattr(mdl.config, "max_position_embeddings", 4096)
    loop = AgentLoopConfig(max_turns=max_turns, max_new_tokens=max_new_tokens, max_total_tokens=min(4096, max_pos))
    res = evaluate(HFEngine(mdl, tok), tok, task_list, default_judge(workers), k=n, temperature=temperature,
                   max_new_tokens=max_new_tokens, agent=loop)
    res["model"] = model
    res["tasks"] = tasks
    if out:
        write_json_atomic(out, res)
    if not quiet:
        _print(res, n)
    return res


def generate_command(model: str, tasks: str, out: str, n: int = 1, temperature: float = 0.0,
                     max_new_tokens: int = 64, seed: int = 0) -> list[dict]:
    """Write ``{"task_id", "completion", "sample"}`` lines (n per task; temperature 0 = greedy) for
    ``rlvr verify --completions``; returns the records."""
    from rlvr.data.chat import encode_prompt, stop_token_ids
    from rlvr.data.jsonl import write_jsonl_atomic
    from rlvr.data.sources import load_task_source
    from rlvr.models.load import load_pretrained
    from rlvr.rollout.engine import SamplingParams
    from rlvr.rollout.hf_engine import HFEngine

    if n < 1 or max_new_tokens < 1 or temperature < 0:
        raise DataError(f"--n and --max-new-tokens must be >= 1 and --temperature >= 0 (got {n}, "
                        f"{max_new_tokens}, {temperature})")
    if n > 1 and temperature == 0:
        raise DataError(f"--n {n} with --temperature 0 would repeat one greedy completion; set a temperature")
    task_list = load_task_source(parse_tasks_arg(tasks))
    mdl, tok = load_pretrained(model)
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
    if "turns_mean" in res:
        make_console().print(f"closed loop: {res['turns_mean']:.2f} turns, {res['tool_calls_mean']:.2f} tool calls per "
                                  f"trajectory; ends {res['ends']}; outcomes {res['outcomes']}")
    make_console().print(json.dumps({k2: v for k2, v in res.items() if k2 not in ("samples", "sampled", "by_family")})[:400])
