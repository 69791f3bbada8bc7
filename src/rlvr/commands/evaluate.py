"""``rlvr eval``: greedy pass@1 and sampled pass@k of a model on held-out tasks."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from rlvr.errors import DataError


def parse_tasks_arg(spec: str):
    """A JSONL path, ``humaneval``, ``builtin:FAMILY[,FAMILY...][:N]`` or ``builtin_env:ENV[:N]``
    (held-out split)."""
    from rlvr.config.data import BuiltinArithmetic, BuiltinEnvTasks, HumanEvalTasks, JsonlTasks

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
    return JsonlTasks(path=spec)


def eval_command(model: str, tasks: str, n: int, temperature: float, max_new_tokens: int, out: str | None,
                 workers: int, max_turns: int = 8) -> dict:
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
    _print(res, n)
    return res


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
    Console().print(t)
    if "turns_mean" in res:
        Console().print(f"closed loop: {res['turns_mean']:.2f} turns, {res['tool_calls_mean']:.2f} tool calls per "
                        f"trajectory; ends {res['ends']}; outcomes {res['outcomes']}")
    Console().print(json.dumps({k2: v for k2, v in res.items() if k2 not in ("samples", "by_family")})[:400])
