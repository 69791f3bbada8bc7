"""Run a recipe's stages in order; each starts from the previous stage's final checkpoint.

Run directory layout::

    RUN_DIR/
      config.yaml            the resolved recipe (kept on --resume; see rlvr.config.saved)
      config_changes.jsonl   changes accepted with --resume --allow-config-change
      pipeline.json          stage states (done / running), written atomically
      summary.json           {"stages": [{"stage", "pass_at_1", "by_family", "wall_s", "train_s", "steps",
                              "checkpoint", "ece_answer_prob", "ece_agreement"}, ...], "control": the equal-time SFT control (rlvr.monitoring.control:
                              "source" and "rows", or "note": why there is none), "omp_wait": the OpenMP wait
                              policy the run trained with (rlvr.omp_wait)}; a stage its max_minutes cut has
                             "time_cap": {"steps_done", "steps_planned", "max_minutes"}, an SFT stage its
                             patience stopped "early_stop"; the control's rows "control_for", "budget_s" and
                             the stage read against one "gain_over_control", "gain_by_family"; with
                             plan.follow: auto, "plan" (each stage's decision and the facts it was taken on) and
                             "skipped" (each stage not run: "decision", "rule", "reason", "instead")
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
      sft-control@<stage>/   a segment of the equal-time SFT control (eval.control: sft), a stage folder like the others

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
import tempfile
import time
from pathlib import Path

from rlvr import accel, omp_wait
from rlvr.config.load import dump_recipe
from rlvr.config.recipe import Recipe, with_system_prompt
from rlvr.console import Heartbeat, detail, phase
from rlvr.data.jsonl import append_jsonl, write_json_atomic, write_text_atomic
from rlvr.models.prompt_format import checkpoint_format
from rlvr.run_lock import run_dir_lock
from rlvr.stages import stage_kind


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
                   temperature=ev.temperature, max_new_tokens=ev.max_new_tokens, seed=recipe.seed, agent=ev.agent,
                   calibration_samples=ev.calibration_samples, calibration_bins=ev.calibration_bins)
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
    accel.enable()  # rlvr.accel behind the core's hooks, unless RLVR_ACCEL=0
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
    with run_dir_lock(run_dir):  # one run at a time in a run directory
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
    stage = next((st for st in recipe.stages if any(t.name == "python" for t in getattr(st, "rewards", ()))), None)
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
    summary = {"stages": [], "omp_wait": omp_wait.in_effect()}
    prev = init_path
    produced: dict[str, str] = {}  # what earlier stages produced (rlvr.stages.StageKind.produces) -> checkpoint
    if recipe.eval_base:
        base_json = run_dir / "base" / "eval.json"
        t0 = time.time()
        with phase("held-out evaluation of the starting model"):
            res = json.loads(base_json.read_text()) if resume and base_json.exists() else \
                evaluate_checkpoint(recipe, prev, base_json, judge)
        summary["stages"].append(_row("base", res, time.time() - t0, prev or "(initial model)"))
    for index, stage in enumerate(recipe.stages):
        if only is not None and stage.type != only:
            continue
        kind = stage_kind(stage)
        st = state["stages"].get(stage.name, {})
        final = run_dir / stage.name / "final"
        if recipe.plan.follow == "auto" and not (resume and st.get("status") == "done" and final.exists()):
            dec = st["plan"] if resume and st.get("status") == "skipped" else \
                plan_decision(recipe, index, prev, summary, run_dir)
            summary.setdefault("plan", []).append(dec)
            if dec["decision"] != "run":
                _skip(stage, dec, state, state_path, summary, run_dir)
                continue
        if resume and st.get("status") == "done" and final.exists():
            res = json.loads((run_dir / stage.name / "eval.json").read_text())
            row = _row(stage.name, res, st["wall_s"], str(final), st.get("time_cap"))
            if stage.name in state.get("starts", {}):
                row["start"] = state["starts"][stage.name]
            summary["stages"].append(_label(_with_clock(row, st), stage))
            prev = st.get("next_policy", str(final))
            produced[kind.produces] = str(final)
            continue
        stage = with_inputs(stage, produced)
        start = None
        if getattr(stage, "start", "previous") == "screened":
            start = state.setdefault("starts", {}).get(stage.name) if resume else None
            start = start or screened_start(recipe, index, run_dir)
            state.setdefault("starts", {})[stage.name] = start
            prev = start.get("chosen") or prev
        result, res, next_policy = _train_stage(recipe, stage, prev, resume, judge, state, state_path, run_dir, dist)
        produced[kind.produces] = result.checkpoint
        row = _row(stage.name, res, state["stages"][stage.name]["wall_s"], result.checkpoint,
                   result.extra.get("time_cap"))
        if start is not None:
            row["start"] = start
        summary["stages"].append(_label(_with_clock(row, state["stages"][stage.name]), stage))
        prev = next_policy
        write_json_atomic(run_dir / "summary.json", summary)
    if only is None:
        skipped = {d["stage"] for d in summary.get("skipped", [])}
        ran = recipe.model_copy(update={"stages": [s for s in recipe.stages if s.name not in skipped]})
        _control(ran, resume, judge, state, state_path, run_dir, dist, summary)
    elif recipe.eval.control != "none":
        summary["control"] = {"type": recipe.eval.control, "note": f"no control: only the {only} stages ran"}
    write_json_atomic(run_dir / "summary.json", summary)
    return summary


def plan_decision(recipe: Recipe, index: int, prev: str | None, summary: dict, run_dir: Path) -> dict:
    """The plan's decision for ``recipe.stages[index]`` (:mod:`rlvr.monitoring.plan_rules`), on the figures measured
    now on the policy it would start from (``prev``): the latest held-out pass@1 in ``summary``, the screen, SFT's
    held-out curve, the model's and the plan's teacher's sizes."""
    from rlvr.models.load import load_model_and_tokenizer
    from rlvr.monitoring.plan_facts import measure, teacher_params
    from rlvr.monitoring.plan_rules import RULES, decide

    stage = recipe.stages[index]
    role = stage_kind(stage).plan_role
    if not any(role in r.roles for r in RULES):
        return decide(stage.name, role, {}, recipe.plan)
    scored = [r for r in summary["stages"] if r.get("pass_at_1") is not None]
    teacher_pass = None
    if recipe.plan.teacher and role == "reinforce":
        with phase(f"planning {stage.name}: the teacher's held-out evaluation"), tempfile.TemporaryDirectory() as tmp:
            quick = recipe.eval.model_copy(update={"k": 1, "calibration_samples": 0})
            teacher_pass = evaluate_checkpoint(recipe.model_copy(update={"eval": quick}), recipe.plan.teacher,
                                               Path(tmp) / "eval.json")["pass_at_1"]
    with phase(f"planning {stage.name}: screening the policy it would start from"):
        model, tok = load_model_and_tokenizer(recipe.model.model_copy(update={"lora": None}), prev)
        f = measure(lambda s: stage_kind(s).plan_role, recipe.stages, index, model, tok, recipe.plan, run_dir,
                    scored[-1]["pass_at_1"] if scored else None, teacher_params(recipe.plan.teacher), recipe.seed,
                    heldout_n=scored[-1].get("n_tasks") if scored else None, teacher_pass_at_1=teacher_pass)
    dec = decide(stage.name, role, f, recipe.plan)
    dec["facts"] = f
    return dec


def saved_checkpoints(stage_dir: Path) -> list[Path]:
    """A stage's saved models, oldest first: its ``checkpoints/step-*`` then ``final`` (those holding a model)."""
    steps = sorted((stage_dir / "checkpoints").glob("step-*"))
    return [d for d in [*steps, stage_dir / "final"] if (d / "config.json").exists()]


def screened_start(recipe: Recipe, index: int, run_dir: Path) -> dict:
    """``start: screened``: screen each saved checkpoint of ``start_from`` (default the latest earlier policy stage)
    at the RL stage's G and temperature on ``start_tasks`` of its data (rlvr.monitoring.screen) and pick the best by
    ``start_statistic`` -> ``{"from", "statistic", "chosen", "value", "screened": [per checkpoint figures]}``
    (``chosen`` None, with a ``note``, when no checkpoint was saved)."""
    from rlvr.data.sources import load_task_source
    from rlvr.models.load import load_model_and_tokenizer
    from rlvr.monitoring.screen import rank_for_rl, screen_model
    from rlvr.rollout.hf_engine import HFEngine
    from rlvr.verifiers.judge import default_judge

    st = recipe.stages[index]
    src = st.start_from or next(s.name for s in reversed(recipe.stages[:index]) if stage_kind(s).produces_policy)
    stat, s = st.start_statistic, st.sampling
    out = {"from": src, "statistic": stat, "chosen": None, "value": None, "screened": []}
    dirs = saved_checkpoints(run_dir / src)
    if not dirs:
        return {**out, "note": f"{src} saved no checkpoint: started from the previous stage's model"}
    tasks, judge, rows = load_task_source(st.data)[: st.start_tasks], default_judge(), []
    for d in dirs:
        with phase(f"{st.name}: screening {d.parent.name if d.name != 'final' else src}/{d.name} for the start"):
            model, tok = load_model_and_tokenizer(recipe.model.model_copy(update={"lora": None}), str(d))
            row = screen_model(HFEngine(model, tok), tok, tasks, judge, s.group_size, s.temperature,
                               s.max_new_tokens, recipe.seed)
        rows.append({"path": str(d), **{k: row[k] for k in ("pass_at_1", "p", "entropy", "adv_var", "signal_frac",
                                                            "signal_frac_observed", "below_threshold",
                                                            "above_threshold")}})
    rank_for_rl(rows)
    best = pick_start(rows, stat, recipe.plan.no_signal)
    return {**out, "chosen": best["path"], "value": best[stat], "screened": rows}


def pick_start(rows: list[dict], statistic: str, no_signal: float) -> dict:
    """The screened checkpoint a ``start: screened`` stage starts from. ``pass_at_1``: the highest greedy pass@1
    among those RL can use (not below p*(G), a measured informative-group share of at least ``no_signal``; all of
    them when none can); ``rank``: the screen's own order; any other statistic: its largest value."""
    if statistic == "rank":
        return min(rows, key=lambda r: r["rank"])
    if statistic == "pass_at_1":
        usable = [r for r in rows if not r["below_threshold"] and r["signal_frac_observed"] >= no_signal]
        return max(usable or rows, key=lambda r: r["pass_at_1"])
    return max(rows, key=lambda r: r[statistic])


def _skip(stage, dec: dict, state: dict, state_path: Path, summary: dict, run_dir: Path) -> None:
    """Record a stage the plan does not run: in pipeline.json (``status: skipped``) and summary.json (``skipped``)."""
    state["stages"][stage.name] = {"status": "skipped", "plan": dec}
    write_json_atomic(state_path, state)
    summary.setdefault("skipped", []).append({k: dec[k] for k in ("stage", "decision", "rule", "reason", "instead")})
    write_json_atomic(run_dir / "summary.json", summary)
    _notice(f"{stage.name}: not run ({dec['decision']}{', ' + dec['instead'] if dec['instead'] else ''}): "
            f"{dec['reason']}")


def _train_stage(recipe: Recipe, stage, prev: str | None, resume: bool, judge, state: dict, state_path: Path,
                 run_dir: Path, dist, **kwargs) -> tuple:
    """Train one stage not yet done from ``prev`` and evaluate its model; records it in ``state`` (status, wall
    and training seconds, steps) -> ``(StageResult, its evaluation, the policy the next stage starts from)``."""
    from rlvr.monitoring.sinks import stage_logging

    if not resume:
        moved, prev = archive_stage_dir(run_dir / stage.name, prev)
        if moved is not None:
            _notice(f"{run_dir / stage.name} held an earlier run: moved to {moved}")
    state["stages"][stage.name] = {"status": "running"}
    write_json_atomic(state_path, state)
    t0 = time.time()
    with stage_logging(recipe.logging, run_dir / stage.name, stage.name, recipe.name), phase(stage.name):
        detail("setting up (model, data, optimiser)")  # until the stage's own phases and steps say more
        result = train(stage, recipe, run_dir, prev, resume, judge, dist, **kwargs)
    train_wall = time.time() - t0
    if not stage_kind(stage).produces_policy:  # e.g. a reward model: report its pair accuracy, pass the policy on
        res = _rm_eval(result)
        write_json_atomic(run_dir / stage.name / "eval.json", res)
        next_policy = result.extra.get("policy") or prev
    else:
        with phase(f"{stage.name}: held-out evaluation of its final model"):
            res = evaluate_checkpoint(recipe, result.checkpoint, run_dir / stage.name / "eval.json", judge)
        next_policy = result.checkpoint
    cut = result.extra.get("time_cap")
    state["stages"][stage.name] = {"status": "done", "wall_s": round(train_wall, 2),
                                   "train_s": round(result.train_seconds + result.extra.get("prep_seconds", 0.0), 2), "steps": result.steps,
                                   "checkpoint": result.checkpoint, "next_policy": next_policy,
                                   **({"time_cap": cut} if cut else {}),
                                   **({"early_stop": result.extra["early_stop"]} if "early_stop" in result.extra else {})}
    write_json_atomic(state_path, state)
    return result, res, next_policy


def _with_clock(row: dict, st: dict) -> dict:
    """A summary row with the stage's optimizer steps, training seconds (held-out evaluations excluded) and, for
    an SFT stage its held-out patience stopped, ``early_stop`` (``step``, ``best_step``)."""
    for k in ("steps", "train_s", "early_stop"):
        if k in st:
            row[k] = st[k]
    return row


def _control(recipe: Recipe, resume: bool, judge, state: dict, state_path: Path, run_dir: Path, dist,
             summary: dict) -> None:
    """The equal-time SFT control (rlvr.monitoring.control): continue the SFT stage segment by segment, one per
    later stage, and add its rows and each stage's gain over it to ``summary``."""
    from rlvr.monitoring.control import add_gains, plan_segments, segment_stage, source_and_later

    if recipe.eval.control == "none":
        summary["control"] = {"type": "none", "note": "no control (eval.control: none)"}
        return
    sft, later, note = source_and_later(recipe.stages, stage_kind)
    if note is None and dist.world_size > 1:
        note = "no control: not run under torchrun (run the recipe in one process for it)"
    if note is not None:
        summary["control"] = {"type": "sft", "note": note}
        write_json_atomic(run_dir / "summary.json", summary)
        return
    done = {k: v for k, v in state["stages"].items() if v.get("status") == "done"}
    src = done[sft.name]
    segments = plan_segments(later, {k: v.get("train_s", v["wall_s"]) for k, v in done.items()}, stage_kind)
    per_step = src.get("train_s", src["wall_s"]) / max(1, src.get("steps", sft.max_steps))
    prev, offset, steps, seconds = src.get("next_policy", src["checkpoint"]), src.get("steps", sft.max_steps), 0, 0.0
    summary["control"] = {"type": "sft", "source": sft.name, "rows": [s.name for s in segments]}
    for seg in segments:
        (stage, lr_over), st = segment_stage(sft, seg, per_step), state["stages"].get(seg.name, {})
        final = run_dir / seg.name / "final"
        if resume and st.get("status") == "done" and final.exists():
            res = json.loads((run_dir / seg.name / "eval.json").read_text())
        else:
            _, res, _ = _train_stage(recipe, stage, prev, resume, judge, state, state_path, run_dir, dist,
                                     data_offset=offset, lr_over=lr_over)
            st = state["stages"][seg.name]
        steps, seconds, offset, prev = steps + st["steps"], seconds + st["train_s"], offset + st["steps"], st["checkpoint"]
        row = _row(seg.name, res, st["wall_s"], st["checkpoint"])
        row.update(control_for=seg.stage, steps=steps, train_s=round(seconds, 2), budget_s=round(seg.total_s, 2))
        summary["stages"].append(row)
        add_gains(summary)
        write_json_atomic(run_dir / "summary.json", summary)


def train(stage, recipe: Recipe, run_dir, init_path: str | None, resume: bool, judge, dist, **kwargs):
    """Run ``stage``'s trainer (:attr:`rlvr.stages.StageKind.trainer`) from ``init_path``; a data-parallel
    stage type gets the distributed context ``dist``; ``kwargs`` go to the trainer. Returns its ``StageResult``."""
    kind = stage_kind(stage)
    extra = {"dist": dist} if kind.distributed == "data_parallel" else {}
    return kind.trainer()(stage, recipe.model, run_dir, recipe.seed, init_path=init_path, resume=resume,
                          eval_cfg=recipe.eval, judge=judge, **extra, **kwargs)


def with_inputs(stage, produced: dict[str, str]):
    """``stage`` with each field its type ``consumes`` that the recipe leaves unset filled from ``produced``
    (e.g. a PPO stage's ``reward_model_path`` from an earlier reward-model stage)."""
    fill = {f: produced[what] for f, what in stage_kind(stage).consumes.items()
            if getattr(stage, f) is None and what in produced}
    return stage.model_copy(update=fill) if fill else stage


def _check_torchrun_stages(recipe: Recipe, only: str | None) -> None:
    if recipe.plan.follow == "auto":
        raise ValueError("plan.follow: auto (rlvr run --plan auto) runs in one process: every rank would have to "
                         "take the same decisions; run rlvr plan, then the stages it keeps with torchrun")
    other = [f"{s.name} ({s.type})" for s in recipe.stages
             if (only is None or s.type == only) and stage_kind(s).distributed != "data_parallel"]
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
        result = train(stage, recipe, recipe.run_dir, prev, resume, None, dist)
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
    """Mark a stage trained on a model-judged reward or model-judged pairs: ``"reward_source": "RLAIF (model-judged)"``."""
    if any(getattr(t, "model_judged", False) for t in getattr(stage, "rewards", [])) or \
            getattr(getattr(stage, "pairs", None), "model_judged", False):
        row["reward_source"] = "RLAIF (model-judged)"
    return row


def _row(name: str, res: dict, wall: float, ckpt: str, time_cap: dict | None = None) -> dict:
    """A stage's row of summary.json (``time_cap``: the steps done of those planned when ``max_minutes`` cut it)."""
    row = {"stage": name, "pass_at_1": res["pass_at_1"], "by_family": res["by_family"],
           "mean_length": res["mean_length"], "wall_s": round(wall, 2), "checkpoint": ckpt}
    if res.get("n_tasks") is not None:
        row["n_tasks"] = res["n_tasks"]
    if time_cap:
        row["time_cap"] = time_cap
    for k, v in res.items():
        if (k.startswith("pass_at_") and k.endswith("_sampled")) or k in ("heldout_pair_accuracy", "mean_score"):
            row[k] = v
    cal = res.get("calibration") or {}
    for measure in ("answer_prob", "agreement"):
        if (cal.get(measure) or {}).get("ece") is not None:
            row[f"ece_{measure}"] = cal[measure]["ece"]
    return row
