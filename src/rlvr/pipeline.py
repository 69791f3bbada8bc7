"""Run a recipe's stages in order; each starts from the previous stage's final checkpoint.

Run directory layout::

    RUN_DIR/
      config.yaml            the resolved recipe (kept on --resume; see rlvr.config.saved)
      config_changes.jsonl   changes accepted with --resume --allow-config-change
      pipeline.json          stage states (done / running), written atomically
      summary.json           {"stages": [{"stage", "pass_at_1", "by_family", "wall_s", "checkpoint"}, ...],
                              "omp_wait": the OpenMP wait policy the run trained with (rlvr.omp_wait)};
                             a stage its max_minutes cut has "time_cap": {"steps_done", "steps_planned",
                             "max_minutes"}
      report.html            plots of each stage's curves and the summary table
      base/eval.json         the starting model's held-out evaluation (when eval_base)
      <stage>/metrics.jsonl  append-only metrics
      <stage>/samples.jsonl  sample completions with their verdicts (RL; logging.samples_every)
      <stage>/tensorboard/, <stage>/wandb/   with logging.tensorboard / logging.wandb
      <stage>/checkpoints/step-NNNNNN/   resumable checkpoints (model + trainer_state.pt)
      <stage>/final/         the stage's output model (HF format; LoRA: merged, adapter in final/adapter/)
      <stage>/eval.json      held-out evaluation after the stage (per problem: completion, outcome, reward)
      <stage>/evals/step-NNNNNN.json   the in-training held-out evaluations (eval_every), same shape
      <stage>/final/prompt_format.json   (and in every checkpoint folder) the run's prompt format and scoring

Stage-level resume: a stage marked done in pipeline.json (with its final/ present) is not rerun; the
stage that was running resumes from its latest checkpoint.

A fresh run (no ``--resume``) never writes into an earlier run's stage directory: an existing
``RUN_DIR/<stage>/`` is first moved aside to ``RUN_DIR/<stage>.prev-YYYYmmdd-HHMMSS/`` (nothing written
is lost, and the new ``metrics.jsonl`` holds only the new run). A starting model inside the moved
directory is followed to its new place. Callers validate the recipe first (``rlvr.commands.preflight``:
files parsed, models found), so a run that fails on its input moves nothing aside.

Files are written with the umask's modes (0644 / 0755 under umask 022), so teammates can read a run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rlvr import omp_wait
from rlvr.config.load import dump_recipe
from rlvr.config.recipe import Recipe, with_system_prompt
from rlvr.console import Heartbeat, detail, phase
from rlvr.data.jsonl import append_jsonl, write_json_atomic, write_text_atomic
from rlvr.models.prompt_format import checkpoint_format


def stage_trainer(kind: str):
    """The training function for a stage type (imported lazily)."""
    if kind == "sft":
        from rlvr.trainers.sft import train_sft as fn
    elif kind == "rl":
        from rlvr.trainers.rl import train_rl as fn
    elif kind == "preference":
        from rlvr.trainers.preference import train_preference as fn
    elif kind == "reward_model":
        from rlvr.trainers.reward_model import train_reward_model as fn
    elif kind == "ppo":
        from rlvr.trainers.ppo import train_ppo as fn
    elif kind == "onpolicy_distill":
        from rlvr.trainers.onpolicy_distill import train_onpolicy_distill as fn
    elif kind == "rft":
        from rlvr.trainers.rft import train_rft as fn
    elif kind == "distill":
        from rlvr.trainers.distill import train_distill as fn
    else:
        raise ValueError(f"unknown stage type {kind!r}")
    return fn


def _read_state(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"stages": {}}


def evaluate_checkpoint(recipe: Recipe, model_path: str | None, out_json: Path, judge=None) -> dict:
    """Held-out evaluation of a checkpoint (or the recipe's starting model when ``model_path`` is None)."""
    from rlvr.data.sources import load_task_source
    from rlvr.models.load import load_model_and_tokenizer
    from rlvr.monitoring.evaluate import evaluate
    from rlvr.monitoring.scoring import eval_judge
    from rlvr.rollout.hf_engine import HFEngine

    model, tok = load_model_and_tokenizer(recipe.model.model_copy(update={"lora": None}), model_path)
    ev = recipe.eval
    engine = HFEngine(model, tok, batch_size=ev.batch_size)
    judge = judge or eval_judge(ev.rewards, ev.workers, tok, ev.max_new_tokens)
    res = evaluate(engine, tok, load_task_source(ev.tasks), judge, k=ev.k,
                   temperature=ev.temperature, max_new_tokens=ev.max_new_tokens, seed=recipe.seed, agent=ev.agent)
    write_json_atomic(out_json, res)
    return res


def archive_stage_dir(stage_dir: Path, init_path: str | None) -> tuple[Path | None, str | None]:
    """Move an earlier run's ``stage_dir`` aside -> ``(new place or None, init_path followed there)``."""
    if not stage_dir.exists() or not any(stage_dir.iterdir()):
        return None, init_path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest = stage_dir.with_name(f"{stage_dir.name}.prev-{stamp}")
    n = 1
    while dest.exists():
        dest, n = stage_dir.with_name(f"{stage_dir.name}.prev-{stamp}-{n}"), n + 1
    stage_dir.rename(dest)
    if init_path is not None:
        try:
            init_path = str(dest / Path(init_path).resolve().relative_to(stage_dir.resolve()))
        except ValueError:
            pass
    return dest, init_path


def save_config(run_dir: Path, recipe: Recipe, resume: bool, changes: dict | None) -> None:
    """Write config.yaml for a fresh run; on resume keep it, unless a change was accepted (then log it)."""
    if changes:
        append_jsonl(run_dir / "config_changes.jsonl", {"time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                                        "changes": changes})
    if not resume or changes or not (run_dir / "config.yaml").exists():
        write_text_atomic(run_dir / "config.yaml", dump_recipe(recipe))


def run_pipeline(recipe: Recipe, resume: bool = False, judge=None, only: str | None = None,
                 init_path: str | None = None, changes: dict | None = None, dist=None) -> dict:
    """Run all stages (or only those of type ``only``); returns the summary dict. ``changes``: config
    changes accepted on resume (logged in the run). RL stages run in
    ``dist`` (default: built from ``recipe.distributed`` — this process, Ray actors, or this torchrun rank;
    under torchrun only rank 0 writes and evaluates, see :func:`_follow`)."""
    own = dist is None
    if own:
        from rlvr.distributed import make_context

        dist = make_context(recipe.distributed)
    try:
        with Heartbeat(enabled=getattr(dist, "is_main", True)):  # never 10 s without a line (rlvr.console)
            return _run_stages(recipe, resume, judge, only, init_path, changes, dist)
    finally:
        if own:
            dist.close()


def _run_stages(recipe: Recipe, resume: bool, judge, only: str | None, init_path: str | None,
                changes: dict | None, dist) -> dict:
    run_dir = Path(recipe.run_dir)
    state_path = run_dir / "pipeline.json"
    state = _read_state(state_path) if resume else {"stages": {}}
    if dist.world_size > 1:
        _check_torchrun_stages(recipe, only)
        dist.barrier()  # every rank has read the state before rank 0 writes it
        if not dist.is_main:
            return _follow(recipe, resume, only, init_path, state, dist)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(run_dir, recipe, resume, changes)
    recipe = with_eval_scoring(with_system_prompt(recipe))
    with checkpoint_format(run_format(recipe)):  # every checkpoint of the run carries prompt_format.json
        return _stages_in_order(recipe, resume, judge, only, init_path, state, state_path, run_dir, dist)


def run_format(recipe: Recipe) -> dict:
    """The run's prompt format (:mod:`rlvr.models.prompt_format`): the system prompt and the scoring its
    held-out evaluation uses, the weights' dtype and the evaluation's batch size and budget."""
    from rlvr.models.prompt_format import make_format

    ev = recipe.eval
    rewards = [t.model_dump(exclude_defaults=True) for t in ev.rewards] if ev.rewards else None
    return make_format(getattr(ev.tasks, "system_prompt", None), rewards, recipe.model.dtype, ev.batch_size,
                       ev.max_new_tokens)


def with_eval_scoring(recipe: Recipe) -> Recipe:
    """The recipe with ``eval.rewards`` decided: as set; else, when the recipe has an RL stage with a python
    reward and an evaluation task is one its verifier cannot judge (no verifier for its kind, or no gold
    payload: a math task without ``answer``, a code task without tests; only the user's reward can score it),
    that stage's rewards; else None: each task's own verifier (the built-in tasks' behaviour)."""
    if recipe.eval.rewards is not None:
        return recipe
    stage = next((st for st in recipe.stages if st.type == "rl" and any(t.name == "python" for t in st.rewards)),
                 None)
    if stage is None:
        return recipe
    from rlvr.data.sources import load_task_source

    if not any(unjudgeable(t) for t in load_task_source(recipe.eval.tasks)):
        return recipe
    return recipe.model_copy(update={"eval": recipe.eval.model_copy(update={"rewards": list(stage.rewards)})})


def unjudgeable(task) -> bool:
    """The task's kind has no verifier, or the task lacks the gold payload its verifier needs
    (:func:`rlvr.verifiers.registry.task_problem`; environment tasks are judged by their goal predicate)."""
    from rlvr.verifiers.registry import task_problem

    return task.kind != "env" and task_problem(task) is not None


def _stages_in_order(recipe: Recipe, resume: bool, judge, only: str | None, init_path: str | None, state: dict,
                     state_path: Path, run_dir: Path, dist) -> dict:
    from rlvr.monitoring.sinks import stage_logging

    summary = {"stages": [], "omp_wait": omp_wait.in_effect()}
    prev = init_path
    reward_model: str | None = None
    if recipe.eval_base:
        base_json = run_dir / "base" / "eval.json"
        t0 = time.time()
        with phase("held-out evaluation of the starting model"):
            res = json.loads(base_json.read_text()) if resume and base_json.exists() else \
                evaluate_checkpoint(recipe, prev, base_json, judge)
        summary["stages"].append(_row("base", res, time.time() - t0, prev or "(initial model)"))
    for stage in recipe.stages:
        if only is not None and stage.type != only:
            continue
        st = state["stages"].get(stage.name, {})
        final = run_dir / stage.name / "final"
        if resume and st.get("status") == "done" and final.exists():
            res = json.loads((run_dir / stage.name / "eval.json").read_text())
            row = _row(stage.name, res, st["wall_s"], str(final), st.get("time_cap"))
            summary["stages"].append(_label(row, stage))
            prev = st.get("next_policy", str(final))
            if stage.type == "reward_model":
                reward_model = str(final)
            continue
        if not resume:
            moved, prev = archive_stage_dir(run_dir / stage.name, prev)
            if moved is not None:
                _notice(f"{run_dir / stage.name} held an earlier run: moved to {moved}")
        state["stages"][stage.name] = {"status": "running"}
        write_json_atomic(state_path, state)
        if stage.type == "ppo" and stage.reward_model_path is None and reward_model is not None:
            stage = stage.model_copy(update={"reward_model_path": reward_model})
        t0 = time.time()
        with stage_logging(recipe.logging, run_dir / stage.name, stage.name, recipe.name), phase(stage.name):
            detail("setting up (model, data, optimiser)")  # until the stage's own phases and steps say more
            result = stage_trainer(stage.type)(stage, recipe.model, run_dir, recipe.seed, init_path=prev,
                                               resume=resume, eval_cfg=recipe.eval, judge=judge,
                                               **({"dist": dist} if stage.type == "rl" else {}))
        train_wall = time.time() - t0
        if stage.type == "reward_model":  # not a policy: report its pair accuracy, pass the policy on
            reward_model, res = result.checkpoint, _rm_eval(result)
            write_json_atomic(run_dir / stage.name / "eval.json", res)
            next_policy = result.extra.get("policy") or prev
        else:
            with phase(f"{stage.name}: held-out evaluation of its final model"):
                res = evaluate_checkpoint(recipe, result.checkpoint, run_dir / stage.name / "eval.json", judge)
            next_policy = result.checkpoint
        cut = result.extra.get("time_cap")
        state["stages"][stage.name] = {"status": "done", "wall_s": round(train_wall, 2),
                                       "checkpoint": result.checkpoint, "next_policy": next_policy,
                                       **({"time_cap": cut} if cut else {})}
        write_json_atomic(state_path, state)
        summary["stages"].append(_label(_row(stage.name, res, train_wall, result.checkpoint, cut), stage))
        prev = next_policy
        write_json_atomic(run_dir / "summary.json", summary)
    write_json_atomic(run_dir / "summary.json", summary)
    return summary


def _check_torchrun_stages(recipe: Recipe, only: str | None) -> None:
    other = [f"{s.name} ({s.type})" for s in recipe.stages if (only is None or s.type == only) and s.type != "rl"]
    if other:
        raise ValueError(f"under torchrun only RL stages run data-parallel; this run also has {other}: run those "
                         "first in one process, then the RL stages with torchrun (rlvr grpo --model ...)")


def _follow(recipe: Recipe, resume: bool, only: str | None, init_path: str | None, state: dict, dist) -> dict:
    """A torchrun rank other than 0: train the same RL stages from the same starting points (rank 0 alone
    writes pipeline state, evaluates and summarises)."""
    prev = init_path
    for stage in recipe.stages:
        if only is not None and stage.type != only:
            continue
        st = state["stages"].get(stage.name, {})
        final = Path(recipe.run_dir) / stage.name / "final"
        if resume and st.get("status") == "done" and final.exists():
            prev = st.get("next_policy", str(final))
            continue
        result = stage_trainer(stage.type)(stage, recipe.model, recipe.run_dir, recipe.seed, init_path=prev,
                                           resume=resume, eval_cfg=recipe.eval, dist=dist)
        prev = result.checkpoint
    return {"stages": [], "rank": dist.rank}


def _notice(text: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[yellow]{text}[/yellow]")


def _rm_eval(result) -> dict:
    """A reward model's row: held-out pair accuracy instead of a policy's pass@1."""
    return {"pass_at_1": None, "by_family": {}, "mean_length": None,
            "heldout_pair_accuracy": result.extra.get("heldout/accuracy")}


def _label(row: dict, stage) -> dict:
    """Mark a stage trained on a model-judged reward: ``"reward_source": "RLAIF (model-judged)"``."""
    if any(getattr(t, "model_judged", False) for t in getattr(stage, "rewards", [])):
        row["reward_source"] = "RLAIF (model-judged)"
    return row


def _row(name: str, res: dict, wall: float, ckpt: str, time_cap: dict | None = None) -> dict:
    """A stage's row of summary.json (``time_cap``: the steps done of those planned when ``max_minutes`` cut it)."""
    row = {"stage": name, "pass_at_1": res["pass_at_1"], "by_family": res["by_family"],
           "mean_length": res["mean_length"], "wall_s": round(wall, 2), "checkpoint": ckpt}
    if time_cap:
        row["time_cap"] = time_cap
    for k, v in res.items():
        if (k.startswith("pass_at_") and k.endswith("_sampled")) or k in ("heldout_pair_accuracy", "mean_score"):
            row[k] = v
    return row
