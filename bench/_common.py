"""Shared pieces of the side-by-side benchmarks: thread setup, the tiny model folder, timing summaries.

Import this module first: it sets how idle OpenMP threads wait (``WAIT``) and the thread count before torch
loads.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path

THREADS = int(os.environ.get("BENCH_THREADS", "2"))
# How idle OpenMP threads wait, the same for every side (spawned children inherit it): what rlvr's CLI picks
# for this workload, one local process with the cores to itself -- a bounded spin (rlvr.omp_wait);
# BENCH_OMP_WAIT=passive for OMP_WAIT_POLICY=PASSIVE (every side sleeps at once).
WAIT = os.environ.get("BENCH_OMP_WAIT", "spin")
try:
    from rlvr.omp_wait import in_effect, set_env

    set_env(WAIT)
except ValueError as e:
    raise SystemExit(f"BENCH_OMP_WAIT: {e}") from None
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

import warnings

warnings.filterwarnings("ignore", category=FutureWarning)

from rlvr import accel  # noqa: E402

accel.enable()  # rlvr's CPU accelerations, as `rlvr run` has them (RLVR_ACCEL=0: the plain PyTorch path)

import torch  # noqa: E402

torch.set_num_threads(THREADS)


def peak_rss_mb() -> dict:
    """This process's peak resident set size, MiB: ``ru_maxrss`` (KiB on Linux), /proc's ``VmHWM``, and
    ``peak_mb``, the figure to compare: ``VmHWM`` where /proc has it. A spawned worker's ``ru_maxrss``
    carries its PARENT's RSS at spawn time (Linux keeps the forked copy's high-water mark across the
    exec: a parent holding 1.5 GB spawns a child reading ru_maxrss 1515 MB, VmHWM 15 MB), so in a
    benchmark whose driver has imported TRL and built models it is the driver's figure, not the side's.

    Call it at the end of a worker: each side of a comparison runs in its own spawned process, so the
    figure is that side's own peak (imports, models, optimizer state, activations), nothing else's.
    """
    import resource

    out = {"ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                out["vmhwm_mb"] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    out["peak_mb"] = out.get("vmhwm_mb", out["ru_maxrss_mb"])
    return out


def driver_imports_transformers() -> None:
    """Import transformers in the driver with ``accelerate`` visible, before anything of rlvr's imports it.

    rlvr's first transformers import hides accelerate (``rlvr.models.hf.import_transformers``: -16 MB per
    trainer process), and transformers caches that answer for the process; TRL's trainers (built in the
    driver for the loss checks) refuse to start without accelerate. Call it first in a driver; the spawned
    sides are fresh processes and import as their library does."""
    import transformers  # noqa: F401


def micro_tokens_arg(value: str):
    """``--rlvr-micro-tokens``: ``auto``, ``none`` or a token count -> rlvr's ``model.micro_tokens``."""
    if value in ("auto", "none"):
        return None if value == "none" else "auto"
    return int(value)


def heavy_modules() -> list[str]:
    """Which of the big optional packages this process has imported (what its RSS pays for)."""
    names = ("sympy", "math_verify", "latex2sympy2_extended", "datasets", "pandas", "pyarrow", "trl", "accelerate",
             "rich", "scipy", "sklearn", "numba", "matplotlib", "peft", "deepspeed", "vllm")
    return [n for n in names if n in sys.modules]


def pin_threads() -> None:
    """Re-assert the thread count (a trainer's setup must not change it between blocks)."""
    torch.set_num_threads(THREADS)


def summarize(times: list[float]) -> dict:
    """Median / mean / min / max / n of a list of step times (seconds)."""
    if not times:
        return {"n": 0}
    return {"n": len(times), "median": statistics.median(times), "mean": statistics.fmean(times),
            "min": min(times), "max": max(times)}


def machine() -> dict:
    """What the numbers were measured on."""
    import transformers

    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "python": sys.version.split()[0],
            "torch": torch.__version__, "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "platform": platform.platform(), "load_avg_start": os.getloadavg(),
            "omp_wait": in_effect()}
    try:
        import trl

        info["trl"] = trl.__version__
    except ImportError:
        pass
    return info


class Baton:
    """Step-level interleaving of two trainer processes: only the holder runs a step.

    ``mine`` is acquired before each step and ``theirs`` released after it; a barrier makes the first
    step wait until every process has finished its setup (model load, trainer construction). Once a
    side has finished (``free`` is set) the others run on without turns.
    """

    def __init__(self, mine, theirs, barrier, free=None):
        self.mine, self.theirs, self.barrier, self.free = mine, theirs, barrier, free
        self.started = False
        self.interleaved = True
        self.begins: list[float] = []
        self.ends: list[float] = []
        self.waits: list[float] = []

    def begin(self) -> None:
        if len(self.begins) > len(self.ends):  # already holding it (a fetch after the last step)
            return
        t0 = time.perf_counter()
        if not self.started:
            self.barrier.wait()
            self.started = True
        while not self.mine.acquire(timeout=0.05):
            if self.free is not None and self.free.is_set():  # a side has finished: no more turns
                self.interleaved = False
                break
        self.begins.append(time.perf_counter())
        self.waits.append(self.begins[-1] - t0)

    def end(self) -> None:
        self.ends.append(time.perf_counter())
        self.theirs.release()

    def steps(self) -> list[float]:
        return [e - b for b, e in zip(self.begins, self.ends)]


def hold_baton_from_batch_fetch(trainer, baton) -> None:
    """A transformers Trainer's step starts at its batch fetch (the collator's padding counts too)."""
    inner = trainer.get_batch_samples

    def fetch(*args, **kw):
        baton.begin()
        return inner(*args, **kw)
    trainer.get_batch_samples = fetch


def end_rlvr_steps_at_metrics_line(baton) -> None:
    """rlvr: pass the baton on when a step's metrics line is written (the end of ``log_step``'s work that
    matters: the row is written after the update, the held-out monitors and the health checks)."""
    from rlvr.trainers import common

    class Writer(common.MetricsWriter):
        def log(self, step, metrics):
            super().log(step, metrics)
            if "time/step" in metrics:
                baton.end()
    common.MetricsWriter = Writer


def _step_end_callback():
    from transformers import TrainerCallback

    class StepEnd(TrainerCallback):
        """Passes the baton on at ``on_step_end`` (after the optimizer step)."""

        def __init__(self, baton):
            self.baton = baton

        def on_step_end(self, args, state, control, **kw):
            self.baton.end()
    return StepEnd


def step_end_callback(baton):
    """A TrainerCallback that ends the baton's step at on_step_end."""
    return _step_end_callback()(baton)


def interleave(workers: dict, args: tuple, alt_args: dict | None = None, timeout: float = 1800.0,
               sequential: bool = False) -> dict:
    """Run ``workers`` {side: fn(baton, *args) -> dict} in spawned processes, steps alternating.

    ``alt_args`` {side: args} replaces ``args`` for that side. ``sequential``: one side after the other, each alone
    (``interleaved`` false in its result), for a shape where the two sides' processes do not fit in memory together
    (full fine-tuning at 0.5B: weights, gradients, AdamW state and a reference copy on each side); the times are then
    not taken under the same load, so the machine must be quiet.
    """
    import multiprocessing as mp

    if sequential and len(workers) > 1:
        return {s: {**interleave({s: fn}, (alt_args or {}).get(s, args), timeout=timeout)[s], "interleaved": False}
                for s, fn in workers.items()}
    from queue import Empty

    ctx = mp.get_context("spawn")
    sides = list(workers)
    sems = {s: ctx.Semaphore(1 if i == 0 else 0) for i, s in enumerate(sides)}
    barrier, queue, free = ctx.Barrier(len(sides)), ctx.Queue(), ctx.Event()
    procs = []
    for i, s in enumerate(sides):
        other = sides[(i + 1) % len(sides)]
        a = (alt_args or {}).get(s, args)
        p = ctx.Process(target=_child, args=(workers[s], s, sems[s], sems[other], barrier, free, queue, a))
        p.start()
        procs.append(p)
    out = {}
    deadline = time.time() + timeout
    while len(out) < len(sides):
        try:
            side, ok, res = queue.get(timeout=min(5.0, max(1.0, deadline - time.time())))
        except Empty:
            dead = [(s, p.exitcode) for s, p in zip(sides, procs) if s not in out and p.exitcode not in (None, 0)]
            if dead or time.time() > deadline:  # killed (out of memory: the kernel's SIGKILL) or out of time
                for p in procs:
                    p.kill()
                why = (f"{dead[0][0]} worker died, exit code {dead[0][1]}" + (" (killed: out of memory?)"
                       if dead[0][1] == -9 else "")) if dead else f"timed out after {timeout:.0f} s"
                raise RuntimeError(why) from None
            continue
        if not ok:
            for p in procs:
                p.kill()
            raise RuntimeError(f"{side} worker failed:\n{res}")
        out[side] = res
    for p in procs:
        p.join()
    return out


def _child(fn, side, mine, theirs, barrier, free, queue, args):
    import traceback

    try:
        res = fn(Baton(mine, theirs, barrier, free), *args)
        free.set()
        queue.put((side, True, res))
    except BaseException:  # noqa: BLE001 - sent to the parent, which stops the other side
        free.set()
        barrier.abort()
        queue.put((side, False, traceback.format_exc()))


def paired_ratios(a: list[float], b: list[float]) -> list[float]:
    """a[i] / b[i] for steps run back to back (same machine load)."""
    return [x / y for x, y in zip(a, b) if y]


def fmt_row(cells: list, widths: list[int]) -> str:
    return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))


def precision_name(setting, train_bf16: bool, decode_bf16: bool = False) -> str:
    """What rlvr's side ran in: ``model.autocast_bf16``'s setting and (``auto``) what it resolved to."""
    name = {False: "fp32", "train": "bf16 autocast (training forwards)", True: "bf16 (training forwards and generation)"}
    if setting == "auto":
        return f"auto: {name[True if decode_bf16 else 'train' if train_bf16 else False]}"
    return name[setting]


# ---------------------------------------------------------------- the model both sides load

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
"""LoRA's modules on both sides (rlvr's default ``model.lora.target_modules``)."""


def add_model_args(ap) -> None:
    """``--model-dir`` (an HF folder instead of the tiny model of ``--size``), ``--lora`` (rank; 0: full) and
    ``--timeout`` (of :func:`interleave`)."""
    ap.add_argument("--model-dir", default=None,
                    help="an HF folder both sides load (e.g. `rlvr build-model --shape qwen2.5-0.5b`) instead of the "
                         "tiny model of --size")
    ap.add_argument("--lora", type=int, default=0,
                    help="LoRA rank on both sides (alpha 2r, the attention and MLP projections); 0: full fine-tuning")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds the interleaved sides may take together (a real shape needs hours)")


def bench_model(a, work: Path) -> tuple[str, int]:
    """``(model_dir, parameters)``: ``a.model_dir`` as it is, else the tiny model of ``a.size`` written into ``work``."""
    if getattr(a, "model_dir", None):
        from safetensors import safe_open

        n = 0
        for f in Path(a.model_dir).glob("*.safetensors"):
            with safe_open(str(f), "pt") as st:
                n += sum(_numel(st.get_slice(k).get_shape()) for k in st.keys())  # noqa: SIM118 (safe_open has no __iter__)
        return a.model_dir, n
    from rlvr.models.tiny import build_tiny, num_params

    model_dir = str(work / "model")
    model, _ = build_tiny(model_dir, size=a.size, seed=0)
    return model_dir, num_params(model)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def rlvr_lora(a):
    """rlvr's ``model.lora`` for ``--lora`` (None: full fine-tuning)."""
    from rlvr.config.model import LoraConfig

    return LoraConfig(r=a.lora, alpha=2 * a.lora, target_modules=LORA_TARGETS) if getattr(a, "lora", 0) else None


def trl_peft(a):
    """TRL's ``peft_config`` for ``--lora`` (the same adapters as :func:`rlvr_lora`; None: full fine-tuning)."""
    if not getattr(a, "lora", 0):
        return None
    from peft import LoraConfig

    return LoraConfig(r=a.lora, lora_alpha=2 * a.lora, lora_dropout=0.0, target_modules=LORA_TARGETS,
                      task_type="CAUSAL_LM")


# ---------------------------------------------------------------- TRL's setting (the search's probe)

def add_trl_setting_args(ap, precision: bool = True) -> None:
    """``--trl-micro`` (TRL's rows a forward, gradient accumulation to the step), ``--trl-precision`` (unless the
    script has its own) and ``--trl-probe`` (TRL alone, the steps given: one probe of ``_trl_search.search``)."""
    ap.add_argument("--sequential", action="store_true",
                    help="run the sides one after the other instead of alternating steps (two real-shape full "
                         "fine-tuning processes do not fit in memory together)")
    ap.add_argument("--loss-check-only", action="store_true",
                    help="only the fixed-batch loss check (float32 and bf16), no steps: {'loss_check': ...}")
    ap.add_argument("--trl-micro", type=int, default=None,
                    help="TRL per_device_train_batch_size (gradient accumulation makes up the step; default: the "
                         "whole step in one forward)")
    if precision:
        ap.add_argument("--trl-precision", choices=("fp32", "bf16"), default="fp32",
                        help="TRL's precision (bf16: accelerate's bf16 autocast)")
    ap.add_argument("--trl-probe", action="store_true",
                    help="run TRL alone (no rlvr side, no loss check): one probe of the setting search")


def probe_record(side: dict, skip: int) -> dict:
    """A probe's result: its median step (the first ``skip`` dropped) and its peak RSS."""
    from _trl_search import step_median

    return {"median_step_s": round(step_median(side["step"], skip), 4),
            "steps_s": [round(x, 4) for x in side["step"]], "peak_mb": side["rss"]["peak_mb"]}


def per_step(values: list, calls_per_step: int) -> list:
    """Per-micro-batch counts summed per optimizer step (TRL calls its loss once a micro-batch)."""
    return [sum(values[i:i + calls_per_step]) for i in range(0, len(values), calls_per_step)]


LOSS_TOL = {"fp32": 1e-5, "bf16": 1e-2}
"""Tolerance of the fixed-batch loss check, relative to TRL's loss (absolute below 1): float32, and bf16
autocast on both sides."""
GRAD_TOL = {"fp32": 1e-4, "bf16": 1e-1}
"""Relative tolerance of the gradients (the norm of the difference over TRL's gradient norm)."""


def fixed_batch_check(model, ours, theirs, bf16: bool = False) -> dict:
    """rlvr's and TRL's loss and gradient on one fixed batch of ``model``.

    ``ours(bf16)`` runs rlvr's step (its own forward and backward) and returns its loss; ``theirs()`` returns TRL's
    loss tensor, backwarded here. With ``bf16`` rlvr runs its bf16 path and TRL's forward runs under the bf16
    autocast accelerate gives it (``bf16=True``): both keep float32 weights. Returns both losses, their absolute
    and relative difference, the gradients' relative difference and ``agree``: the losses within
    :data:`LOSS_TOL` of the precision (relative to TRL's loss; absolute below a loss of 1) and the gradients
    within :data:`GRAD_TOL`."""
    grads = lambda: torch.cat([q.grad.flatten() for q in model.parameters() if q.grad is not None])
    model.zero_grad(set_to_none=True)
    mine = float(ours(bf16))
    g_ours = grads()
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = theirs()
    loss = loss[0] if isinstance(loss, tuple) else loss
    loss.backward()
    g_theirs = grads()
    model.zero_grad(set_to_none=True)
    other = float(loss.detach())
    gdiff = float((g_ours - g_theirs).norm() / g_theirs.norm().clamp(min=1e-12)) \
        if g_ours.shape == g_theirs.shape else float("inf")
    prec = "bf16" if bf16 else "fp32"
    diff = abs(mine - other)
    return {"precision": prec, "rlvr_loss": mine, "trl_loss": other, "abs_diff": diff,
            "rel_diff": diff / max(abs(other), 1e-12), "grad_rel_diff": gdiff,
            "agree": diff <= LOSS_TOL[prec] * max(1.0, abs(other)) and gdiff <= GRAD_TOL[prec]}


def loss_checks(model, ours, theirs) -> dict:
    """:func:`fixed_batch_check` in float32 (its fields at the top level, as the records always had them) with the
    bf16 check under ``bf16``."""
    return {**fixed_batch_check(model, ours, theirs), "bf16": fixed_batch_check(model, ours, theirs, bf16=True)}


def print_bf16_check(lc: dict) -> None:
    """The bf16 line under a bench's float32 loss-check line."""
    b = lc.get("bf16")
    if b:
        print(f"  bf16 autocast, both sides: rlvr {b['rlvr_loss']:.7g}  TRL {b['trl_loss']:.7g}  rel diff "
              f"{b['rel_diff']:.1e}; gradients rel diff {b['grad_rel_diff']:.1e}  "
              f"{'agree' if b['agree'] else 'DISAGREE'} (tolerance {LOSS_TOL['bf16']:g})")


def in_child(fn, *args):
    """``fn(*args)`` in a spawned process, its result returned (its exception re-raised here as a RuntimeError with
    the child's traceback): the memory a step check takes (a TRL trainer and a model at a real shape) is the
    child's and is gone with it, instead of staying in the driver's heap beside the measured workers."""
    import multiprocessing as mp
    from queue import Empty

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_call_child, args=(fn, args, queue))
    p.start()
    try:
        while True:
            try:
                ok, res = queue.get(timeout=5.0)
                break
            except Empty:
                if p.exitcode is not None:  # died without a word: killed (out of memory) or crashed
                    raise RuntimeError(f"{getattr(fn, '__name__', fn)}: its process died, exit code {p.exitcode}"
                                       + (" (killed: out of memory?)" if p.exitcode == -9 else "")) from None
    finally:
        p.join()
    if not ok:
        raise RuntimeError(f"{getattr(fn, '__name__', fn)} failed in its process:\n{res}")
    return res


def _call_child(fn, args, queue):
    import traceback

    try:
        queue.put((True, fn(*args)))
    except BaseException:  # noqa: BLE001 - sent to the parent
        queue.put((False, traceback.format_exc()))
