"""Checkpoints: HF format (safetensors) written atomically (temp dir + fsync + rename) with a checksum
manifest, keep-last-N, and the training state (optimizer, scheduler, RNG states, data position) needed
for exact resume.

Trust: every file of a checkpoint is listed in ``manifest.json`` with its size and sha256, each file and
the directory are fsynced before the rename, so a crash leaves either the old checkpoint or the new one.
:func:`verify_checkpoint` refuses a checkpoint whose manifest is missing or does not match (naming the
file); a resume from it is refused with the previous checkpoint offered. A full disk while saving
(``ENOSPC``) leaves the previous checkpoint in place and raises :class:`CheckpointError`. Weights holding a
NaN/inf are never written.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.data.jsonl import umask_mode
from rlvr.errors import RlvrError
from rlvr.models.merged_save import save_merged
from rlvr.models.prompt_format import write_format

STEP_PREFIX = "step-"
STATE_FILE = "trainer_state.pt"
MANIFEST = "manifest.json"


class CheckpointError(RlvrError):
    """A checkpoint could not be written (disk full) or is not what was written (corrupt, half-written)."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(root: Path) -> None:
    """``manifest.json``: every file under ``root`` with its size and sha256; every file and dir fsynced."""
    files = {}
    for dirpath, _, names in os.walk(root):
        for n in sorted(names):
            f = Path(dirpath) / n
            rel = str(f.relative_to(root))
            if rel == MANIFEST:
                continue
            _fsync(f)
            files[rel] = {"bytes": f.stat().st_size, "sha256": _sha256(f)}
    with open(root / MANIFEST, "w", encoding="utf-8") as fh:
        json.dump({"files": files}, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    for dirpath, _, _ in os.walk(root):
        _fsync(Path(dirpath))


def verify_checkpoint(path: str | Path) -> None:
    """Raise :class:`CheckpointError` naming the file when ``path`` is not the checkpoint that was written:
    no manifest (half-written, or copied without it), a listed file missing, or a size or sha256 mismatch."""
    path = Path(path)
    man = path / MANIFEST
    if not man.is_file():
        raise CheckpointError(f"{man}: missing: the checkpoint {path} is half-written or was copied without its "
                              "manifest")
    try:
        files = json.loads(man.read_text(encoding="utf-8"))["files"]
    except (ValueError, KeyError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{man}: unreadable manifest ({e}): the checkpoint {path} is damaged") from None
    for rel, want in files.items():
        f = path / rel
        if not f.is_file():
            raise CheckpointError(f"{f}: listed in {man} but missing: the checkpoint is incomplete")
        size = f.stat().st_size
        if size != want["bytes"]:
            raise CheckpointError(f"{f}: {size} bytes, the manifest says {want['bytes']}: the file is truncated "
                                  "or damaged")
        if _sha256(f) != want["sha256"]:
            raise CheckpointError(f"{f}: sha256 does not match {man}: the file is damaged")


def assert_finite_weights(model, where: Path) -> None:
    """Refuse to write weights holding a NaN or inf (a non-finite update must never reach a checkpoint)."""
    for name, p in model.named_parameters():
        if p.is_floating_point() and not bool(torch.isfinite(p.detach()).all()):
            raise CheckpointError(f"{where}: not written: parameter {name} holds NaN/inf")


def _atomic_dir(out_dir: Path, write) -> Path:
    """Write into a temp dir beside ``out_dir`` then rename over it (readers never see a partial dir)."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.tmp-"))
    try:
        write(tmp)
        _readable(tmp)
        write_manifest(tmp)
        old = None
        if out_dir.exists():
            old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        _fsync(out_dir.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise CheckpointError(f"{out_dir}: not written, the disk is full ({e.strerror}); nothing was "
                                  f"replaced: {_previous_note(out_dir)}. Free space, then resume with --resume"
                                  ) from e
        raise
    return out_dir


def _previous_note(out_dir: Path) -> str:
    if out_dir.exists():
        return f"the previous {out_dir.name} is intact"
    earlier = list_checkpoints(out_dir.parent) if out_dir.name.startswith(STEP_PREFIX) else []
    return f"the previous checkpoint {earlier[-1]} is intact" if earlier else "no earlier checkpoint exists"


ADAPTER_DIR = "adapter"


def copy_checkpoint_atomic(src: str | Path, out_dir: str | Path) -> Path:
    """Copy a saved model folder to ``out_dir`` atomically (e.g. keep-best's ``best/`` or the health
    monitor's ``healthy/`` shipped as ``final/``)."""
    return _atomic_dir(Path(out_dir), lambda tmp: shutil.copytree(src, tmp, dirs_exist_ok=True))


def _readable(root: Path) -> None:
    """Give ``root`` and everything in it the umask's modes (mkdtemp makes 0700 and safetensors 0600:
    teammates could not read the checkpoint)."""
    os.chmod(root, umask_mode(directory=True))
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            os.chmod(os.path.join(dirpath, d), umask_mode(directory=True))
        for f in files:
            os.chmod(os.path.join(dirpath, f), umask_mode())


def is_lora(model) -> bool:
    """A peft model (base + LoRA adapters)."""
    return hasattr(model, "merge_and_unload") and hasattr(model, "peft_config")


def merged_copy(model):
    """A peft model's adapters merged into a copy of its base: the weights a checkpoint of it holds (on a
    bf16 base the merge rounds W + BA to bf16, so this, not the live base + adapters, is what a saved
    checkpoint computes). The live model is left as it is.

    Only the weights the merge writes are copied: the base weights of the adapted layers (``base_layer``) and
    the adapters. Every other tensor (embeddings, the output projection, norms, buffers) is the live model's
    own, shared, so a merged checkpoint or evaluation of a 0.5B model costs the adapted layers' size, not a
    second model. Nothing writes to the shared tensors (the merge adds into ``base_layer`` weights only)."""
    import copy

    memo = {id(t): t for name, t in [*model.named_parameters(), *model.named_buffers()]
            if ".base_layer." not in name and "lora_" not in name}
    return copy.deepcopy(model, memo).merge_and_unload()


def save_pretrained_atomic(model, tokenizer, out_dir: str | Path, extra: dict[str, Any] | None = None,
                           prompt_format: dict | None = None) -> Path:
    """Save an HF-format model + tokenizer atomically. A peft model is saved merged (loads with
    ``AutoModelForCausalLM``; written one merged weight at a time where the adapters merge by addition,
    :mod:`rlvr.models.merged_save`) and its LoRA adapter beside it in ``adapter/`` (loads with peft, or as a
    starting point ``model.path: .../adapter``). ``prompt_format.json`` goes in the same write: ``prompt_format``,
    else the run's (:func:`rlvr.models.prompt_format.checkpoint_format`), else none."""
    assert_finite_weights(model, Path(out_dir))
    def write(tmp: Path) -> None:
        m = model
        if is_lora(m):
            m.save_pretrained(tmp / ADAPTER_DIR, safe_serialization=True)
            write_format(tmp / ADAPTER_DIR, tokenizer, prompt_format)  # the adapter folder alone keeps it too
            m = None if save_merged(m, tmp) else merged_copy(m)  # streamed: one merged weight at a time
        if m is not None:
            m.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
            write_format(tmp, tokenizer, prompt_format)
        if extra:
            torch.save(extra, tmp / STATE_FILE)
    return _atomic_dir(Path(out_dir), write)


def adapter_state(model) -> dict[str, torch.Tensor] | None:
    """The trainable adapter tensors of a peft model (None for a plain model)."""
    if not (hasattr(model, "peft_config") and hasattr(model, "disable_adapter")):
        return None
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def save_training_checkpoint(ckpt_root: str | Path, step: int, model, tokenizer, optimizer, scheduler,
                             state: dict[str, Any], keep_last: int = 2) -> Path:
    """Write ``ckpt_root/step-NNNNNN`` (model + trainer_state.pt) atomically, then prune to keep_last."""
    extra = {"step": step, "optimizer": optimizer.state_dict(), "adapter": adapter_state(model),
             "scheduler": scheduler.state_dict() if scheduler is not None else None,
             "rng": rng_state(), "state": state}
    path = save_pretrained_atomic(model, tokenizer, Path(ckpt_root) / f"{STEP_PREFIX}{step:06d}", extra)
    if keep_last > 0:
        for old in list_checkpoints(ckpt_root)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    return path


def list_checkpoints(ckpt_root: str | Path) -> list[Path]:
    """Complete step checkpoints, oldest first (temp dirs start with '.', so never listed)."""
    root = Path(ckpt_root)
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(STEP_PREFIX)
                  and (p / STATE_FILE).exists())


def latest_checkpoint(ckpt_root: str | Path) -> Path | None:
    cks = list_checkpoints(ckpt_root)
    return cks[-1] if cks else None


def load_training_state(ckpt: str | Path, model, optimizer, scheduler) -> dict[str, Any]:
    """Restore model weights, optimizer, scheduler and RNG from a step checkpoint; return its state."""
    from safetensors.torch import load_file

    ckpt = Path(ckpt)
    verify_checkpoint(ckpt)
    extra = torch.load(ckpt / STATE_FILE, weights_only=False)
    if extra.get("adapter") is not None:  # LoRA: the base is frozen; only the adapters were trained
        missing, unexpected = model.load_state_dict(extra["adapter"], strict=False)
        if unexpected or any("lora_" in k for k in missing):
            raise RuntimeError(f"checkpoint {ckpt}: adapters do not match the model ({unexpected[:3]})")
        return _restore_rest(extra, optimizer, scheduler)
    weights = load_file(str(ckpt / "model.safetensors"))
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    missing, unexpected = target.load_state_dict(weights, strict=False)
    real_missing = [k for k in missing if not k.endswith("lm_head.weight")]
    if real_missing or unexpected:
        raise RuntimeError(f"checkpoint {ckpt} does not match the model: missing {real_missing[:5]}, "
                           f"unexpected {unexpected[:5]}")
    if getattr(target.config, "tie_word_embeddings", False):
        target.tie_weights()
    return _restore_rest(extra, optimizer, scheduler)


def _restore_rest(extra: dict[str, Any], optimizer, scheduler) -> dict[str, Any]:
    optimizer.load_state_dict(extra["optimizer"])
    if scheduler is not None and extra["scheduler"] is not None:
        scheduler.load_state_dict(extra["scheduler"])
    set_rng_state(extra["rng"])
    return {"step": extra["step"], **extra["state"]}
