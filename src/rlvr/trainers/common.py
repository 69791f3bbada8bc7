"""What every stage shares: the lifecycle (``open_stage`` -> ``log_step`` per step -> ``close_stage``),
the optimiser and its schedule, the frozen reference and the thread setup.

A trainer reads top to bottom: setup (model, data, optimiser) -> ``open_stage`` -> loop {data or
rollout -> verify -> advantages -> update -> ``log_step``} -> ``close_stage``. The lifecycle owns
what is the same in every stage, written once:

* **resume**: the latest step checkpoint restores the model, optimiser, scheduler, every RNG, the
  step, the training seconds, the health monitor's history and the trainer's own state
  (``run.state``: data cursor, KL coefficient, critic, ...);
* **metrics**: ``metrics.jsonl`` is append-only; on resume the rows after the checkpoint's step are
  dropped first, so after kill + resume every step appears exactly once;
* the held-out **eval hook** (step 0 and every ``eval_every`` steps), the **health monitor** (every
  stage with a policy), the **progress bar**, **timing** (``time/step``, ``perf/minutes``) and the
  periodic resumable **checkpoint**;
* the **console**: each held-out result is printed when it is computed (:func:`eval_line`), the heartbeat
  (:mod:`rlvr.console`) learns the step reached and the phase (evaluation, saving), and a stage cut by its
  ``max_minutes`` says so when it ends (:func:`time_cap_cut`: a console line, a ``time_cap`` event in
  ``metrics.jsonl`` and ``StageResult.extra["time_cap"]``, which the run's summary carries).
"""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from rlvr import hooks
from rlvr.console import detail, phase, say
from rlvr.data.collate import micro_token_budget, pad_batch
from rlvr.data.packing import pack_rows, packed_batch
from rlvr.errors import Interrupted
from rlvr.losses.sft import sft_loss_from_nll
from rlvr.models.checkpoint import (
    copy_checkpoint_atomic,
    load_training_state,
    save_pretrained_atomic,
    save_training_checkpoint,
    seed_everything,
)
from rlvr.models.load import disable_dropout, is_peft, load_model_and_tokenizer
from rlvr.models.logprobs import position_ids_from_mask, token_nll
from rlvr.monitoring.evaluate import EvalHook
from rlvr.monitoring.health import HealthMonitor
from rlvr.monitoring.health_actions import knob_metrics, take_actions
from rlvr.monitoring.metrics import MetricsWriter, truncate_metrics_after
from rlvr.monitoring.progress import make_progress
from rlvr.trainers.guards import (
    NonFiniteError,
    SignalLatch,
    VerifierStormError,
    checked_latest,
    infra_pause_message,
    is_nonfinite,
    nonfinite_message,
    record_reward_errors,
)
from rlvr.trainers.optimizer import build_optimizer, clip_grads, lr_lambda, optimizer_step  # noqa: F401 (re-exported)
from rlvr.trainers.wall_clock import WallClockMarks


def setup_threads(threads: int | None) -> None:
    """Set torch intra-op threads (how idle ones wait is set before torch loads: ``rlvr.omp_wait``)."""
    if threads:
        torch.set_num_threads(threads)


def accumulate(micros: list[list[int]], forward, total_rows: int) -> dict:
    """Exact gradient accumulation: forward + backward each micro-batch of row indices.

    ``forward(rows) -> (loss, metrics)`` returns the micro-batch's loss ALREADY divided by the global
    denominator of the whole (mini-)batch (its tokens, rows or pairs — the loss's own aggregation), so
    the summed gradient is the full batch's whatever the cutting (1x8 == 2x4 == 8x1). Metrics are
    combined by their name: ``*_sum`` keys are summed, ``*max``/``*min`` keys take the max/min, the
    rest are row-weighted means. ``train/loss`` is the sum of the micro-batch losses. The ``memory`` hook
    (``rlvr.hooks``) wraps the micro-batches and runs between them (the accelerations: weights cast once, the
    CPU heap's free pages back to the OS).
    """
    agg: dict[str, float] = {}
    total = 0.0
    with hooks.reuse_weights():  # an acceleration's stacked / cast weights built once for all the micro-batches
        for i, rows in enumerate(micros):
            loss, met = forward(rows)
            loss.backward()
            total += float(loss.detach())
            if i + 1 < len(micros):  # the memory hook between micro-batches (the CPU heap's free pages back)
                device = loss.device.type
                del loss
                hooks.between_micro_batches(device)
            w = len(rows) / max(1, total_rows)
            for k, v in met.items():
                v = float(v)
                if k.endswith("max"):
                    agg[k] = max(agg.get(k, v), v)
                elif k.endswith("min"):
                    agg[k] = min(agg.get(k, v), v)
                elif k.endswith("_sum"):
                    agg[k] = agg.get(k, 0.0) + v
                else:
                    agg[k] = agg.get(k, 0.0) + v * w
    agg["train/loss"] = total
    return agg


def micro_batches(examples, idx: list[int], micro: int, bucketing: bool, packing: bool = False,
                  budget: int | None = None):
    """Split a step's examples into micro-batches of row indices (sorted by length first when bucketing).

    ``budget`` (padded tokens, ``rlvr.data.collate.micro_token_budget``): a micro-batch holds at most
    ``budget // longest`` rows (at least one), the longest being the step's longest example (or packed row).

    ``packing``: the examples are first packed into rows no longer than the step's longest example
    (``data.packing.pack_rows``, first-fit decreasing), and a micro-batch takes up to ``micro`` packed
    rows (so at most ``micro`` x the longest example's tokens, the unpacked bound); it is returned as the
    flat list of its examples, which :func:`sft_step` packs again into the same rows."""
    if budget is not None and idx:
        micro = max(1, min(micro, budget // max(len(examples[i][0]) for i in idx)))
    if packing and idx:
        lengths = [len(examples[i][0]) for i in idx]
        rows = [[idx[j] for j in row] for row in pack_rows(lengths, max(lengths))]
        return [[i for row in rows[s:s + micro] for i in row] for s in range(0, len(rows), micro)]
    if bucketing:
        idx = sorted(idx, key=lambda i: (len(examples[i][0]), i))
    return [idx[s:s + micro] for s in range(0, len(idx), micro)]


def packing_supported(model) -> bool:
    """Whether ``model`` keeps attention within each example of a packed row (transformers' block-diagonal
    mask from restarting ``position_ids``; remote-code or older architectures may ignore it). Probed once per
    model object: the logits of a 4-token example packed after another equal its logits alone."""
    ok = getattr(model, "_rlvr_packing_ok", None)
    if ok is None:
        probe = [5, 6, 7, 8]
        with torch.no_grad():
            ids = torch.tensor([probe + probe], device=model.device)
            pos = torch.tensor([[0, 1, 2, 3] * 2], device=model.device)
            packed = model(input_ids=ids, position_ids=pos, attention_mask=None, use_cache=False).logits[0, 4:]
            alone = model(input_ids=ids[:, :4], use_cache=False).logits[0]
        tol = 1e-3 if packed.dtype == torch.float32 else 3e-2  # half-precision weights: rounding, not leaks
        ok = bool(torch.allclose(packed.float(), alone.float(), atol=tol, rtol=tol))
        if not ok:
            import warnings

            warnings.warn(f"{type(model).__name__} attends across packed examples: SFT packing is off for it")
        with contextlib.suppress(AttributeError, TypeError):
            object.__setattr__(model, "_rlvr_packing_ok", ok)
    return ok


def sft_step(model, examples, idx, micro_batch_size: int | None, bucketing: bool, pad_id: int, bf16: bool,
             loss_kwargs: dict | None = None, packing: bool = False, micro_tokens: int | str | None = "auto") -> dict:
    """Forward/backward over micro-batches of ``examples[idx]`` (``(ids, loss_mask)`` pairs); the loss is the
    token mean over the whole step's batch (SFT, and the SFT update of rejection sampling / distillation).
    ``loss_kwargs``: the SFT variant's options for ``losses.sft.sft_loss`` (``variants.sft_loss_kwargs``).
    ``micro_batch_size`` None: the whole step, cut by the token budget ``micro_tokens`` (``model.micro_tokens``);
    a number: that many rows a micro-batch.

    ``packing`` (see :func:`micro_batches`): a micro-batch whose rows hold several examples is forwarded
    packed (``data.packing.packed_batch``: positions restart at each example, ``attention_mask=None`` so
    the model masks attention to each example's own tokens); one with one example per row takes the
    padded path. Either way the loss sums the same tokens' NLL over the same denominator (the step's
    loss-mask tokens), so packing changes neither the loss nor the gradient, only the padding computed.
    rlvr's own module (``rlvr.accel.llama``, its class says ``is_rlvr_native``) is never packed: its forward
    drops the padding of the rows it is given (the packed forward), so there is no padding left to save."""
    total_tokens = sum(sum(examples[i][1]) for i in idx)
    packing = packing and not getattr(model, "is_rlvr_native", False) and packing_supported(model)
    cap = max((len(examples[i][0]) for i in idx), default=0)

    def forward(mb):
        rows = pack_rows([len(examples[i][0]) for i in mb], cap) if packing else [[j] for j in range(len(mb))]
        if len(rows) < len(mb):  # some row holds several examples
            ids, pos, lm = packed_batch([[examples[mb[j]] for j in row] for row in rows], pad_id, model.device)
            att = None
        else:
            ids, att, lm = pad_batch([examples[i][0] for i in mb], pad_id, [examples[i][1] for i in mb], left=False,
                                     device=model.device)
            pos = position_ids_from_mask(att)
        nll_sum, _, met = sft_loss_from_nll(*token_nll(model, ids, att, lm, bf16, pos), **(loss_kwargs or {}))
        return nll_sum / max(1, total_tokens), {k: v for k, v in met.items() if k == "sft/trimmed_frac"}
    budget = micro_token_budget(model, micro_tokens) if micro_batch_size is None else None
    micros = micro_batches(examples, idx, micro_batch_size or len(idx), bucketing, packing, budget)
    met = accumulate(micros, forward, len(idx))
    return {**met, "train/tokens": total_tokens}


@dataclass
class StageResult:
    """What a stage leaves behind."""

    name: str
    checkpoint: str
    metrics_path: str
    steps: int
    train_seconds: float
    extra: dict = field(default_factory=dict)


def stage_dir(run_dir: str | Path, name: str) -> Path:
    p = Path(run_dir) / name
    p.mkdir(parents=True, exist_ok=True)
    return p


def load_policy(run_dir: str | Path, name: str, model_cfg, init_path: str | None, seed: int):
    """Stage start for a policy: its run sub-directory, global seeds, the policy (dropout off unless
    ``model.train_dropout``) and the tokenizer."""
    out = stage_dir(run_dir, name)
    seed_everything(seed)
    with phase("loading the model"):
        model, tok = load_model_and_tokenizer(model_cfg, init_path)
    hooks.model_loaded(next(model.parameters()).device.type)  # before the stage's first matmul (rlvr.hooks)
    set_train_mode(model, model_cfg)
    return out, model, tok


def set_train_mode(model, model_cfg) -> None:
    """``train()``, with every dropout switched off (``p = 0``) unless ``model.train_dropout`` asks for it:
    the log-probabilities the losses compare (policy, old, reference) come from one deterministic function."""
    model.train()
    if not model_cfg.train_dropout:
        disable_dropout(model)


def frozen_reference(model, needed: bool, bf16: bool = False):
    """The frozen reference: None when not ``needed`` or under LoRA (the base with adapters disabled is
    the reference, see :func:`reference_model`), else a frozen copy of ``model`` in eval mode. ``bf16`` (it only
    ever runs under bf16 autocast): its ``nn.Linear`` weights (an untied ``lm_head`` too) stored as the bf16 values
    autocast casts them to, embeddings and norms float32: the same logprobs in half the projections' memory."""
    if not needed or is_peft(model):
        return None
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    if bf16:
        tied = getattr(ref.get_output_embeddings(), "weight", 0) is getattr(ref.get_input_embeddings(), "weight", 1)
        for name, m in ref.named_modules():
            if type(m) is torch.nn.Linear and (name != "lm_head" or not tied):
                m.to(torch.bfloat16)
    return ref


@contextlib.contextmanager
def reference_model(policy, ref):
    """Yield the model whose forward is the reference: ``ref``, or (``ref`` None) the LoRA policy with its
    adapters disabled — in eval mode (no dropout), restored afterwards."""
    model = policy if ref is None else ref
    was = model.training
    model.eval()
    try:
        if ref is None:
            with policy.disable_adapter():
                yield policy
        else:
            yield ref
    finally:
        model.train(was)


def find_checkpoint(out: Path, resume: bool) -> Path | None:
    """The checkpoint a resumed stage continues from (None for a fresh run or nothing saved yet); a corrupt
    latest checkpoint is refused, naming the file and offering the previous one."""
    return checked_latest(out / "checkpoints") if resume else None


@dataclass
class StageRun:
    """The live bookkeeping of one stage between :func:`open_stage` and :func:`close_stage`."""

    cfg: Any                       # the stage's config section
    out: Path
    model: Any
    tok: Any
    opt: Any
    sched: Any
    n_steps: int
    writer: MetricsWriter
    step: int = 0
    seconds: float = 0.0           # training wall time so far (eval excluded), restored on resume
    state: dict = field(default_factory=dict)   # the trainer's own state restored from the checkpoint
    checkpoint: Path | None = None             # resumed from
    evaler: EvalHook | None = None
    heldout: Any = None                        # SFT's held-out loss / keep-best / patience (monitoring.heldout)
    health: HealthMonitor | None = None
    knobs: dict = field(default_factory=dict)  # the configured values of the knobs health actions may move
    crash_at_step: int | None = None
    dist: Any = None                           # the DistContext; only its main process writes anything
    last: dict = field(default_factory=dict)   # every key's latest value
    progress: Any = None
    bar: Any = None
    nonfinite: list = field(default_factory=list)  # the current streak of skipped non-finite steps
    latch: Any = None                             # SIGINT/SIGTERM -> checkpoint at the next step boundary
    shown: dict = field(default_factory=dict)     # health rule -> last step its alert was printed
    name: str = ""                                # the stage's label on the console ("grpo:grpo")
    marks: WallClockMarks | None = None           # save_every_s: the next wall-clock checkpoint
    _t0: float = 0.0

    def done(self) -> bool:
        """The stage has run its steps (or its ``max_minutes`` of training time)."""
        return self.step >= self.n_steps or time_cap_cut(self) is not None


def open_stage(cfg, out: Path, model, tok, opt, sched, n_steps: int, *, checkpoint: Path | None = None,
               eval_cfg=None, judge=None, health=None, start: dict | None = None,
               crash_at_step: int | None = None, label: str | None = None, dist=None,
               knobs: dict | None = None) -> StageRun:
    """Resume (when ``checkpoint``), truncate the metrics to its step, open the writer, the eval hook, the
    health monitor (``health``: a HealthConfig, None for stages without a policy) and the progress bar; log
    the ``start`` (or ``resume``) event and the step-0 evaluation of a fresh run. With several processes
    (``dist``, a DistContext) every one restores the checkpoint; only the main one truncates and writes
    metrics, evaluates, draws the bar and saves checkpoints. ``knobs``: the stage settings health actions may
    change, as configured (RL: ``health_actions.rl_knobs``); current values: ``run.health.knobs``."""
    if model is not None:
        hooks.stage_started(next(model.parameters()).device.type)  # an acceleration's memory settings (rlvr.hooks)
    run = StageRun(cfg, out, model, tok, opt, sched, n_steps, writer=None, crash_at_step=crash_at_step, dist=dist,
                   knobs=dict(knobs or {}))
    main = _is_main(run)
    run.health = (HealthMonitor(health, knobs=dict(run.knobs), supports=frozenset(run.knobs))
                  if health is not None else None)
    if checkpoint is not None:
        st = load_training_state(checkpoint, model, opt, sched)
        run.step, run.checkpoint = st.pop("step"), checkpoint
        run.seconds = st.pop("seconds", 0.0)
        run.nonfinite = st.pop("nonfinite", [])
        if (monitor_state := st.pop("health", None)) is not None and run.health is not None:
            run.health.load_state_dict(monitor_state)
        run.state = st
        if main:
            truncate_metrics_after(out / "metrics.jsonl", run.step)
    run.writer = MetricsWriter(out / "metrics.jsonl") if main else _NullWriter()
    event = {"event": "resume", "checkpoint": str(checkpoint)} if checkpoint is not None else {"event": "start"}
    run.writer.log(run.step, {**event, **(start or {})})
    run.name = f"{label or cfg.type}:{cfg.name}"
    run.progress = make_progress()
    run.progress.disable = not main
    run.progress.start()
    run.bar = run.progress.add_task(run.name, total=n_steps, completed=run.step, info="")
    detail(f"{run.step}/{n_steps} steps done")
    every = getattr(cfg, "eval_every", 0)
    if eval_cfg is not None and every and main:
        run.evaler = EvalHook(eval_cfg, tok, judge, every, out)
        if run.step == 0:
            with phase("held-out evaluation at step 0"):
                rec = run.evaler.run(model, 0)
            run.writer.log(0, {**rec, "perf/minutes": 0.0})
            run.last.update(rec)
            if run.health is not None:  # held-out progress is read against this baseline
                run.health.observe_heldout(0, rec.get("eval/pass_at_1"), rec.get("eval/tasks"))
            say(eval_line(run, rec), run.progress.console)
    run.latch = SignalLatch().install()
    if getattr(cfg, "save_every_s", 0) and main:
        run.marks = WallClockMarks(cfg.save_every_s)
    run._t0 = time.perf_counter()
    return run


def log_step(run: StageRun, rec: dict, state: dict | None = None, info: str = "", ids=None,
             observe: Callable[[dict], None] | None = None) -> bool:
    """Close step ``run.step + 1``: timing, lr, held-out eval when due, health, one metrics row, the
    progress bar, the periodic checkpoint (holding ``state``, the trainer's own resumable state), the
    non-finite guard (``ids``: the step's task ids, logged when its update was skipped), a stop signal,
    and the simulated crash of the resume tests. ``observe`` sees the step's record once its held-out
    evaluation is in it, before it is logged and checkpointed (it may add keys and update ``state``).
    Returns True when the health monitor asks the stage to stop."""
    run.step += 1
    dt = time.perf_counter() - run._t0
    run.seconds += dt
    rec = {**rec, "time/step": dt, "perf/minutes": run.seconds / 60}
    if "train/tokens" in rec:
        rec["perf/tokens_per_s"] = rec["train/tokens"] / max(dt, 1e-9)
    if run.sched is not None:
        rec["train/lr"] = run.sched.get_last_lr()[0]
    detail(f"{run.step}/{run.n_steps} steps done")
    if run.evaler is not None and run.evaler.due(run.step, run.n_steps):
        with phase(f"held-out evaluation at step {run.step}"):
            rec.update(run.evaler.run(run.model, run.step))
    if run.heldout is not None:  # measured here, with the eval: off the training clock, before the checkpoint
        rec.update(run.heldout.measure(run.model, run.step, run.n_steps))
        run.heldout.observe(run.model, run.tok, run.step, rec)
        state = {**(state or {}), **run.heldout.state()}
    stop = _health_step(run, rec) if run.health is not None else False
    if run.health is not None:
        info = f"{info} [{run.health.status}]".strip()
    if run.dist is not None:
        stop = _agree_with_main(run, stop)
    every = getattr(run.cfg, "log_every", 1) or 1
    if run.step % every == 0 or run.step == run.n_steps or any(k.startswith(("eval/", "heldout/")) for k in rec) or stop \
            or "health/action" in rec:
        run.writer.log(run.step, rec)
    run.last.update(rec)
    run.progress.update(run.bar, advance=1, info=info)
    if _is_main(run) and any(k in rec for k in EVAL_KEYS):
        say(eval_line(run, rec), run.progress.console)
    _guard_nonfinite(run, rec, ids)
    full = {**(state or {}), "seconds": run.seconds, "nonfinite": run.nonfinite}
    if run.health is not None:
        full["health"] = run.health.state_dict()
    save_every = getattr(run.cfg, "save_every", 0)
    saved = None
    if save_every and run.step % save_every == 0 and run.step < run.n_steps and _is_main(run):
        saved = _save(run, full)
    if run.marks is not None and run.step < run.n_steps and (age := run.marks.due()) is not None:
        saved = saved or _save(run, full)
        run.writer.log(run.step, {"event": "timed_checkpoint", "process_s": round(age, 3), "checkpoint": str(saved)})
    limit = getattr(getattr(run.cfg, "optim", None), "max_nonfinite_steps", 0)
    if limit and len(run.nonfinite) >= limit:
        kept = saved or (_save(run, full) if _is_main(run) else None)  # the weights of the last finite update
        _shut(run, {"event": "nonfinite_stop", "checkpoint": str(kept)})
        raise NonFiniteError(nonfinite_message(run.cfg.name, run.nonfinite, kept))
    if run.latch is not None and run.latch.signum is not None and run.step < run.n_steps:
        kept = saved or (_save(run, full) if _is_main(run) else None)
        _shut(run, {"event": "interrupted", "signal": run.latch.signum, "checkpoint": str(kept)})
        raise Interrupted(run.cfg.name, run.step, str(kept) if kept else None)
    if run.crash_at_step is not None and run.step == run.crash_at_step:
        run.progress.stop()
        run.writer.close()
        run.latch.restore()
        raise KeyboardInterrupt(f"simulated crash at step {run.step}")
    if stop:
        run.writer.log(run.step, {"event": "health_stop", "alerts": rec.get("health/alerts", ""),
                                  "action": rec.get("health/action", ""),
                                  "ships_step": run.health.last_healthy_step if _ships_healthy(run) else run.step})
    run._t0 = time.perf_counter()
    return stop


EVAL_KEYS = ("eval/pass_at_1", "heldout/accuracy")
"""The held-out results a step may carry (the eval hook's pass@1, a preference stage's pair accuracy)."""


def eval_line(run: StageRun, rec: dict) -> str:
    """The console line of a step's held-out results: pass@1 (per family) and/or held-out pair accuracy."""
    parts = []
    if "eval/pass_at_1" in rec:
        fams = [f"{k.rsplit('/', 1)[1]} {v:.1%}" for k, v in sorted(rec.items()) if k.startswith("eval/pass_at_1/")]
        parts.append(f"held-out pass@1 {rec['eval/pass_at_1']:.1%}" + (f" ({', '.join(fams)})" if fams else ""))
    if "heldout/accuracy" in rec:
        parts.append(f"held-out pair accuracy {rec['heldout/accuracy']:.1%}")
    return f"{run.name} step {run.step}/{run.n_steps}: " + "; ".join(parts)


def time_cap_cut(run: StageRun) -> dict | None:
    """``{"steps_done", "steps_planned", "max_minutes"}`` when the stage's ``max_minutes`` ended it before its
    planned steps, else None (it ran them all, or stopped for another reason: health, a signal)."""
    minutes = getattr(run.cfg, "max_minutes", None)
    if minutes is None or run.step >= run.n_steps or run.seconds < minutes * 60:
        return None
    return {"steps_done": run.step, "steps_planned": run.n_steps, "max_minutes": minutes}


def _agree_with_main(run: StageRun, stop: bool) -> bool:
    """Rank 0's stop decision and health knobs on every process: each rank's monitor sees its own share of
    the rollouts, so left alone their actions would move β, the entropy coefficient or the temperature
    apart and the ranks would train different losses; rank 0 (which also evaluates) decides for all."""
    knobs = dict(run.health.knobs) if run.health is not None else None
    stop, knobs = run.dist.agree((stop, knobs))
    if knobs is not None:
        run.health.knobs.clear()
        run.health.knobs.update(knobs)
    return bool(stop)


ALERT_REPEAT = 25
"""An alert that stays raised is printed when it is first raised and then only every this many steps (it is
in every metrics row as ``health/status`` / ``health/alerts`` and on the progress bar meanwhile): the quickstart's
GRPO stage printed its dead-groups warning on nearly every one of 250 steps."""


def _health_step(run: StageRun, rec: dict) -> bool:
    """Feed the health monitor: status, alerts, actions (each with its reason), moved knobs, the healthy
    snapshot a ``stop`` action ships; True when the stage must stop."""
    mon = run.health
    hm, alerts = mon.observe(rec)
    rec.update(hm)
    actions = take_actions(mon, alerts, run.step)
    rec.update(knob_metrics(mon, run.knobs))
    main = _is_main(run)
    for a in alerts if main else []:
        if run.step - run.shown.get(a.rule, -ALERT_REPEAT) >= ALERT_REPEAT:
            run.progress.console.print(f"[{'red' if a.level == 'critical' else 'yellow'}]health: {a.rule}[/] {a.message}")
            run.shown[a.rule] = run.step
    for a in actions if main else []:
        run.progress.console.print(f"[magenta]health action[/] step {run.step}: {a}")
    if alerts:
        rec["health/alerts"] = "; ".join(f"{a.rule}: {a.message}" for a in alerts)
    if actions:
        rec["health/action"] = "; ".join(actions)
    if not alerts and main and _wants_snapshot(mon) and (
            mon.last_healthy_step is None or run.step - mon.last_healthy_step >= mon.cfg.snapshot_every):
        save_pretrained_atomic(run.model, run.tok, run.out / "healthy")
        mon.last_healthy_step = run.step
    return mon.should_stop(alerts)


def _wants_snapshot(mon: HealthMonitor) -> bool:
    """A ``stop`` action is configured: keep ``healthy/`` (the model at the last healthy step) to ship."""
    return any("stop" in getattr(mon.cfg.actions, r) for r in type(mon.cfg.actions).model_fields)


def _ships_healthy(run: StageRun) -> bool:
    return (run.health is not None and run.health.stopped and run.health.last_healthy_step is not None
            and (run.out / "healthy").exists())


def close_stage(run: StageRun, model=None, extra: dict | None = None, final=None) -> StageResult:
    """Close the writer and the bar, save ``final/`` (``model``, default the stage's; or ``final()``, a
    callable that writes it and returns its path, e.g. SFT's keep-best; after a health ``stop`` action, the
    last healthy snapshot) and return the result. A stage its ``max_minutes`` cut says so (:func:`time_cap_cut`)."""
    cut = time_cap_cut(run)
    extra = dict(extra or {})
    if cut is not None:
        extra["time_cap"] = cut
    _shut(run, {"event": "time_cap", **cut} if cut is not None else None)
    if cut is not None and _is_main(run):
        say(f"{run.name} stopped by its time cap (max_minutes {cut['max_minutes']}) after step {cut['steps_done']} "
            f"of {cut['steps_planned']} planned", run.progress.console)
    path = run.out / "final"
    if _ships_healthy(run):
        final = lambda: copy_checkpoint_atomic(run.out / "healthy", path)
    if _is_main(run):
        with phase("saving the final model"):
            path = final() if final is not None else save_pretrained_atomic(
                model if model is not None else run.model, run.tok, path)
    if run.dist is not None:
        run.dist.barrier()  # the other processes return once final/ is written
    return StageResult(run.cfg.name, str(path), str(run.out / "metrics.jsonl"), run.step, run.seconds, extra)


def _save(run: StageRun, full: dict) -> Path:
    with phase(f"saving the step-{run.step} checkpoint"):
        return save_training_checkpoint(run.out / "checkpoints", run.step, run.model, run.tok, run.opt, run.sched,
                                        full, run.cfg.keep_last)


def _shut(run: StageRun, event: dict | None) -> None:
    """Stop the stage (its end, a signal, a non-finite streak): log ``event`` if any, close the writer and the bar."""
    if event:
        run.writer.log(run.step, event)
    run.writer.close()
    run.progress.stop()
    if run.latch is not None:
        run.latch.restore()


def pause_on_infra(run: StageRun, rec: dict, total: int, errors: list[dict] | None = None) -> None:
    """Record this step's infra ``errors`` (``reward_errors.jsonl``), then stop the stage (keeping its last
    checkpoint) when more than ``max_infra_frac`` of its ``total`` verifications are infra."""
    n = int(rec.get("verifier/infra", 0))
    limit = getattr(run.cfg, "max_infra_frac", 1.0)
    path = record_reward_errors(run.out, run.step + 1, errors or []) if _is_main(run) else None
    if not total or n / total <= limit:
        return
    kept = checked_latest(run.out / "checkpoints") if _is_main(run) else None
    outcomes = {k.split("/", 1)[1]: v for k, v in rec.items() if k.startswith("verifier/") and isinstance(v, int)}
    _shut(run, {"event": "paused_infra", "infra": n, "total": total, "outcomes": outcomes})
    raise VerifierStormError(infra_pause_message(run.cfg, run.step + 1, n, total, outcomes, kept, errors or [], path))


def _guard_nonfinite(run: StageRun, rec: dict, ids) -> None:
    """Track the streak of steps whose update was skipped for a non-finite loss or gradient; log each one."""
    if not is_nonfinite(rec):
        run.nonfinite = []
        return
    task_ids = [str(i) for i in (ids or [])][:64]
    run.nonfinite.append({"step": run.step, "task_ids": task_ids})
    run.writer.log(run.step, {"event": "nonfinite", "task_ids": task_ids,
                              **{k: rec[k] for k in ("train/loss", "train/grad_norm") if k in rec}})
    if _is_main(run):
        run.progress.console.print(f"[yellow]step {run.step}: non-finite loss or gradient, update skipped[/] "
                                   f"(task ids: {', '.join(task_ids[:8]) or 'not recorded'})")


def _is_main(run: StageRun) -> bool:
    return run.dist is None or run.dist.is_main


class _NullWriter:
    """The metrics writer of a process that is not the main one: writes nothing."""

    def log(self, step: int, metrics: dict) -> None:
        pass

    def close(self) -> None:
        pass

