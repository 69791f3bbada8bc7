"""SFT on held-out demonstrations: held-out loss, keep-best and early stopping.

``heldout/loss`` is the token-mean completion NLL of the held-out demonstrations (dropout off, no
gradient), measured at step 0 and every ``heldout_every`` steps. With ``keep_best`` the model whose
``best_metric`` (``heldout/loss``, lower is better; or ``eval/pass_at_1``, higher) was best is saved
to ``<stage>/best/`` when it is measured, and that model becomes ``final/`` — a run that peaked at step
50 and then overfit ships step 50. ``patience`` N stops the stage after N measurements in a row that
did not improve on the best (an ``early_stop`` event is logged).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence

from rlvr.data.chat import encode_demos
from rlvr.data.sources import load_task_source
from rlvr.models.checkpoint import copy_checkpoint_atomic, save_pretrained_atomic
from rlvr.models.logprobs import token_nll


def tokenize_heldout(tasks, tokenizer, max_length: int) -> list[tuple[list[int], list[int]]]:
    """``(input_ids, loss_mask)`` per held-out demonstration."""
    return encode_demos(tasks, tokenizer, max_length, "held-out SFT")


@torch.no_grad()
def heldout_loss(model, examples, pad_id: int, micro: int = 32, bf16: bool = False) -> float:
    """Token-mean completion NLL over ``examples`` (eval mode: dropout off; the training mode is restored)."""
    was = model.training
    model.eval()
    total, tokens = 0.0, 0
    try:
        for s in range(0, len(examples), micro):
            chunk = examples[s : s + micro]
            ids = pad_sequence([torch.tensor(e[0]) for e in chunk], batch_first=True, padding_value=pad_id)
            lm = pad_sequence([torch.tensor(e[1], dtype=torch.float32) for e in chunk], batch_first=True)
            att = pad_sequence([torch.ones(len(e[0]), dtype=torch.long) for e in chunk], batch_first=True)
            ids, lm, att = ids.to(model.device), lm.to(model.device), att.to(model.device)
            nll, _ = token_nll(model, ids, att, lm, bf16)
            total, tokens = total + float(nll.sum()), tokens + nll.numel()
    finally:
        model.train(was)
    return total / max(tokens, 1)


class SFTHeldout:
    """What an SFT stage does with held-out data: measure, keep the best, stop early (module docstring)."""

    def __init__(self, stage, tokenizer, out: Path, bf16: bool = False):
        self.stage, self.out, self.bf16 = stage, Path(out), bf16
        self.pad_id = tokenizer.pad_token_id
        self.examples = (
            tokenize_heldout(load_task_source(stage.heldout), tokenizer, stage.max_length)
            if stage.heldout is not None
            else None
        )
        self.every = stage.heldout_every or stage.log_every
        self.lower = stage.best_metric == "heldout/loss"
        self.best: float | None = None
        self.best_step: int | None = None
        self.bad = 0
        self.stopped = False  # patience ran out

    def state(self) -> dict:
        return {"heldout_best": self.best, "heldout_best_step": self.best_step, "heldout_bad": self.bad}

    def load(self, st: dict) -> None:
        self.best, self.best_step, self.bad = (
            st.get("heldout_best"),
            st.get("heldout_best_step"),
            st.get("heldout_bad", 0),
        )
        self.stopped = bool(self.stage.patience) and self.bad >= self.stage.patience

    def measure(self, model, step: int, max_steps: int) -> dict:
        """``{"heldout/loss": ...}`` when due at ``step`` (and at step 0 and the last step), else ``{}``."""
        if self.examples is None or not (step % self.every == 0 or step == max_steps):
            return {}
        return {
            "heldout/loss": heldout_loss(
                model, self.examples, self.pad_id, self.stage.micro_batch_size or self.stage.batch_size, self.bf16
            )
        }

    def observe(self, model, tokenizer, step: int, rec: dict) -> bool:
        """Track the best ``best_metric`` in ``rec`` (saving ``best/`` with keep_best); True = stop early."""
        v = rec.get(self.stage.best_metric)
        if v is None:
            return False
        better = self.best is None or (v < self.best if self.lower else v > self.best)
        if better:
            self.best, self.best_step, self.bad = v, step, 0
            rec["heldout/best_step"] = step
            if self.stage.keep_best:
                save_pretrained_atomic(model, tokenizer, self.out / "best")
            return False
        self.bad += 1
        self.stopped = bool(self.stage.patience) and self.bad >= self.stage.patience
        return self.stopped

    def final(self, model, tokenizer) -> Path:
        """Write ``final/``: the best model with keep_best (when one was measured), else the current one."""
        best = self.out / "best"
        if self.stage.keep_best and self.best_step is not None and best.exists():
            return copy_checkpoint_atomic(best, self.out / "final")
        return save_pretrained_atomic(model, tokenizer, self.out / "final")
