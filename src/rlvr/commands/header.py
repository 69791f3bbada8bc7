"""The run header: what a run is about to do, printed before its first stage (``rlvr run``, ``rlvr quickstart``
and the stage commands)::

    run dir   runs/quickstart
    recipe    .../recipes/quickstart.yaml
    model     tiny 1m (seed 0), 0.87M parameters
    stages    sft (sft): 450 steps, eval every 150; dpo (preference): 4 epochs of its pairs; grpo (rl): 160 steps,
              time cap 4.5 min, eval every 25
    control   sft continued for the training seconds of dpo, grpo (sft-control@dpo, sft-control@grpo)
    compute   cpu, 2 threads (OpenMP wait: passive), float32 weights, autocast_bf16 auto -> bf16 training forwards

Nothing here loads a model: a tiny model's parameters are counted on the meta device, a checkpoint's from its
safetensors headers.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from rlvr.config.model import AUTO_BF16_DECODE_PARAMS, AUTO_BF16_PARAMS, ModelConfig, cpu_bf16_units
from rlvr.config.recipe import Recipe
from rlvr.stages import stage_kind


def header_lines(recipe: Recipe, source: str | None, only: str | None = None, init_path: str | None = None,
                 resume: bool = False) -> list[tuple[str, str]]:
    """``(label, text)`` rows of the header (see the module docstring)."""
    import torch

    from rlvr import omp_wait

    n_params = model_params(recipe.model, init_path)
    stages = [s for s in recipe.stages if only is None or s.type == only]
    rows = [("run dir", str(recipe.run_dir) + (" (resumed)" if resume else "")),
            ("recipe", str(source) if source is not None else
             f"{Path(recipe.run_dir) / 'config.yaml'} (the run's saved config)" if resume else "a Recipe object"),
            ("model", model_text(recipe.model, init_path, n_params)),
            ("stages", "; ".join(stage_text(s) for s in stages) or "none")]
    if recipe.eval.control != "none" and only is None:
        rows.append(("control", control_text(recipe.stages)))
    device = device_name(recipe.model.device)
    threads = torch.get_num_threads()
    rows.append(("compute", f"{device}, {threads} thread{'s' if threads != 1 else ''} "
                            f"(OpenMP wait: {omp_wait.in_effect()}), "
                            f"{precision_text(recipe.model, n_params, device)}"))
    return rows


def print_header(console, recipe: Recipe, source: str | None, only: str | None = None,
                 init_path: str | None = None, resume: bool = False) -> None:
    """Print :func:`header_lines`, one plain line each."""
    for label, text in header_lines(recipe, source, only, init_path, resume):
        console.print(f"{label:<9} {text}", markup=False, highlight=False, soft_wrap=True)


def control_text(stages) -> str:
    """The equal-time SFT control the run ends with (docs/evaluation.md), or why there is none."""
    from rlvr.monitoring.control import control_name, source_and_later

    sft, later, note = source_and_later(stages, stage_kind)
    if note is not None:
        return note
    rows = ", ".join(control_name(s.name) for s in later if stage_kind(s).produces_policy)
    return f"{sft.name} continued for the training seconds of {', '.join(s.name for s in later)} ({rows})"


def stage_text(stage) -> str:
    """``name (type): N steps[, time cap M min][, eval every K]`` (epochs where the data decides the steps)."""
    steps = getattr(stage, "max_steps", None)
    if steps is None and hasattr(stage, "epochs"):
        what = stage_kind(stage).data_noun
        text = f"{stage.epochs} epoch{'s' if stage.epochs != 1 else ''} of its {what}"
    else:
        text = f"{steps} steps"
    minutes = getattr(stage, "max_minutes", None)
    if minutes is not None:
        text += f", time cap {minutes:g} min"
    every = getattr(stage, "eval_every", 0)
    if every:
        text += f", eval every {every}"
    patience = getattr(stage, "patience", 0)
    if patience:
        text += f", stops after {patience} held-out measurements without a better {stage.best_metric}"
    return f"{stage.name} ({stage.type}): {text}{teacher_text(stage)}"


TEACHER_SAMPLE = 1000  # demonstrations the header verifies to say how many of an imperfect teacher's fail


def teacher_text(stage) -> str:
    """``, demonstrations from an imperfect teacher (mul31): 43% of them fail the verifier`` for a stage that
    trains on demonstrations (the stage table's ``demonstrations``) whose source names a teacher (measured on its
    first demonstrations); else empty. A built-in imperfect teacher is named by its families, any other teacher
    (a ``FILE.py:FUNCTION`` that plays the source's games, ...) by what the source calls it."""
    data = getattr(stage, "data", None)
    teacher = getattr(data, "teacher", None)
    if not stage_kind(stage).demonstrations or teacher is None:
        return ""
    families = getattr(teacher, "families", False)
    who = (f"an imperfect teacher ({', '.join(families or ['all families'])})" if families is not False
           else f"a teacher ({teacher})")
    return f", demonstrations from {who}: {failing_share(data):.0%} of them fail the verifier"


def failing_share(source, sample: int = TEACHER_SAMPLE) -> float:
    """Share of the first ``sample`` demonstrations of ``source`` that their task's verifier does not pass."""
    from rlvr.data.sources import load_task_source
    from rlvr.verifiers.registry import TaskRouter

    tasks = load_task_source(source.model_copy(update={"n": min(source.n, sample)}))
    router = TaskRouter()
    return sum(router.verify(t, t.solution or "").reward < 1 for t in tasks) / max(len(tasks), 1)


def model_text(cfg: ModelConfig, init_path: str | None, n_params: int | None) -> str:
    """Where the starting model comes from and its size."""
    if init_path is not None or cfg.path is not None:
        what = str(init_path or cfg.path)
    elif cfg.tiny is not None:
        what = f"tiny {cfg.tiny.size} (seed {cfg.tiny.seed})"
    else:
        what = "none set"
    size = f", {n_params / 1e6:.2f}M parameters" if n_params else ""
    lora = f", LoRA r={cfg.lora.r}" if cfg.lora is not None else ""
    return what + size + lora


def model_params(cfg: ModelConfig, init_path: str | None = None) -> int | None:
    """The starting model's parameter count (None when it cannot be read without loading the model)."""
    path = init_path or cfg.path
    if path is not None:
        return safetensors_params(Path(path))
    if cfg.tiny is None:
        return None
    import torch

    from rlvr.models.tiny import LlamaForCausalLM, build_tokenizer, num_params, tiny_config

    tok = build_tokenizer(cfg.tiny.tokenizer)
    with torch.device("meta"):
        model = LlamaForCausalLM(tiny_config(cfg.tiny.size, vocab_size=len(tok), max_positions=cfg.tiny.max_positions))
    return num_params(model)


def safetensors_params(folder: Path) -> int | None:
    """Parameters of a checkpoint folder, summed from its ``*.safetensors`` headers (None without any)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    try:
        for f in files:
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                head = json.loads(fh.read(n))
            for k, v in head.items():
                if k != "__metadata__":
                    count = 1
                    for d in v["shape"]:
                        count *= d
                    total += count
    except (OSError, ValueError, KeyError, struct.error):
        return None
    return total


def device_name(setting: str) -> str:
    """The device ``model.device`` resolves to (the setting itself when it cannot be resolved here)."""
    from rlvr.errors import ModelLoadError
    from rlvr.models.load import resolve_device

    try:
        return str(resolve_device(setting))
    except ModelLoadError:
        return setting


def precision_text(cfg: ModelConfig, n_params: int | None, device: str) -> str:
    """Weights' dtype and what bf16 autocast does (``auto`` decided as the model's load will decide it)."""
    text = f"{cfg.dtype} weights"
    mode = cfg.autocast_bf16
    if mode == "auto":
        units = cpu_bf16_units() if device == "cpu" else None
        if n_params is None or units is None or n_params < AUTO_BF16_PARAMS:
            why = "no CPU bf16 units" if device == "cpu" and units is None else \
                "not a CPU" if device != "cpu" else "model too small" if n_params else "decided at load"
            return f"{text}, autocast_bf16 auto -> float32 compute ({why})"
        what = "bf16 training forwards and generation" if n_params >= AUTO_BF16_DECODE_PARAMS else \
            "bf16 training forwards"
        return f"{text}, autocast_bf16 auto -> {what} (CPU bf16 units: {units})"
    if mode is True:
        return f"{text}, bf16 autocast (training and generation)"
    if mode == "train":
        return f"{text}, bf16 autocast for training forwards"
    return f"{text}, float32 compute"
