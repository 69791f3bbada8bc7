"""A model as the judge (RLAIF — not RLVR): a local causal LM scores a completion against a rubric.

The judge reads ``RUBRIC / Task: PROMPT / Response: COMPLETION / Score (0-9):`` and its next-token
distribution over the ten digit tokens gives the score: ``E[digit] / 9`` in [0, 1], renormalised over
the digits. When the digits hold less than ``min_mass`` of the probability (the judge would not answer
with a score) the score is None — the caller's ``infra`` outcome, never a reward. Scores are batched
and cached by the (prompt, completion) text. The judge is identified by the hash of its checkpoint
files and the rubric by the hash of its text: a probe report (``rlvr probe judge``) is valid for exactly
that pair.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from rlvr.errors import ConfigError

DIGITS = "0123456789"
PROBE_PREFIX = "judge_probe_"


def judge_prompt(rubric: str, prompt: str, completion: str) -> str:
    return f"{rubric.strip()}\nTask: {prompt.strip()}\nResponse: {completion.strip()}\nScore (0-9):"


def checkpoint_hash(path: str | Path) -> str:
    """sha256 over the checkpoint folder's files (names and bytes, sorted), probe reports excluded."""
    root = Path(path)
    if not root.is_dir():
        raise ConfigError(f"judge model {str(root)!r} is not a local checkpoint folder")
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(PROBE_PREFIX)):
        h.update(str(f.relative_to(root)).encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def rubric_hash(rubric: str) -> str:
    return hashlib.sha256(rubric.strip().encode()).hexdigest()


def probe_report_path(judge_path: str | Path, rubric: str) -> Path:
    """Where ``rlvr probe judge`` writes (and an RL stage looks up) the report of this judge and rubric."""
    return Path(judge_path) / f"{PROBE_PREFIX}{rubric_hash(rubric)[:16]}.json"


class ModelJudge:
    """Scores ``(prompt, completion)`` pairs in [0, 1] (None: no usable score) with a local checkpoint."""

    def __init__(self, path: str | Path, rubric: str, batch_size: int = 16, min_mass: float = 0.5,
                 max_chars: int = 4000, device: str = "cpu"):
        from rlvr.models.load import load_pretrained

        self.path, self.rubric = str(path), rubric
        self.model, self.tok = load_pretrained(path, "float32")
        self.model = self.model.to(device).eval()
        self.batch_size, self.min_mass, self.max_chars = batch_size, min_mass, max_chars
        ids = [self.tok(d, add_special_tokens=False)["input_ids"] for d in DIGITS]
        if any(len(i) != 1 for i in ids):
            raise ConfigError(f"judge {self.path!r}: its tokenizer does not encode each digit 0-9 as one token")
        self.digit_ids = torch.tensor([i[0] for i in ids])
        self.cache: dict[str, float | None] = {}
        self.calls = 0

    def score(self, prompts: list[str], completions: list[str]) -> list[float | None]:
        texts = [judge_prompt(self.rubric, p, c[: self.max_chars]) for p, c in zip(prompts, completions)]
        todo = list(dict.fromkeys(t for t in texts if t not in self.cache))
        for s in range(0, len(todo), self.batch_size):
            chunk = todo[s:s + self.batch_size]
            for t, v in zip(chunk, self._score_batch(chunk)):
                self.cache[t] = v
        return [self.cache[t] for t in texts]

    @torch.no_grad()
    def _score_batch(self, texts: list[str]) -> list[float | None]:
        self.calls += 1
        enc = [self.tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        max_pos = getattr(self.model.config, "max_position_embeddings", None) or 10**9
        enc = [e[-max_pos:] for e in enc]  # keep the end: the score request
        width = max(len(e) for e in enc)
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        ids = torch.full((len(enc), width), pad, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, e in enumerate(enc):  # left padding: the last position is every row's next token
            ids[i, width - len(e):] = torch.tensor(e)
            att[i, width - len(e):] = 1
        pos = (att.cumsum(-1) - 1).clamp_min(0)
        dev = self.model.device
        logits = self.model(input_ids=ids.to(dev), attention_mask=att.to(dev), position_ids=pos.to(dev),
                            use_cache=False).logits[:, -1].float()
        probs = torch.softmax(logits, -1)[:, self.digit_ids.to(dev)].cpu()
        mass = probs.sum(-1)
        values = (probs * torch.arange(10.0)).sum(-1) / mass.clamp_min(1e-12) / 9.0
        return [float(v) if float(m) >= self.min_mass else None for v, m in zip(values, mass)]
