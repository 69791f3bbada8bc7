"""Preference data: paired ``(prompt, chosen, rejected)`` and unpaired ``(prompt, completion, desirable)``.

Sources: JSONL (one object a line; errors name ``file:line`` and the field) or a local/cached HF
dataset. Line formats::

    {"prompt": "12*3=?", "chosen": "...", "rejected": "..."}                 # a pair
    {"prompt": "12*3=?", "completion": "...", "desirable": true}             # an unpaired label (KTO)

``prompt`` may be replaced by ``messages`` (a chat, the last turn being the user's); ``chosen`` and
``rejected`` may be chats too (HH / UltraFeedback style: the conversation *including* the answer) —
then the last assistant turn is the completion and, without ``prompt``/``messages``, the turns
before it are the prompt. Optional fields: ``id``, ``margin`` (quality margin s_w - s_l for
Uni-DPO, default 1), ``chosen_score``, ``rejected_score``, ``votes`` (annotator votes for RGPO:
+1 prefers chosen, -1 prefers rejected, 0 abstains), ``meta``.

Chat templating goes through :mod:`rlvr.data.chat`, so a pair's prompt renders exactly like the
task prompt the policy is sampled on and evaluated with.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from rlvr.data.chat import encode_completion, encode_prompt
from rlvr.data.jsonl import parse_messages, read_jsonl
from rlvr.data.types import Task
from rlvr.errors import DataError

PAIR_FIELDS = {"prompt", "messages", "chosen", "rejected", "id", "margin", "chosen_score", "rejected_score",
               "votes", "meta"}
UNPAIRED_FIELDS = {"prompt", "messages", "completion", "desirable", "label", "id", "score", "meta"}


@dataclass
class PreferencePair:
    """One preference: ``chosen`` is better than ``rejected`` as an answer to the prompt."""

    prompt: str
    chosen: str
    rejected: str
    messages: list[dict[str, str]] | None = None
    id: str = ""
    margin: float = 1.0          # quality margin s_w - s_l (verifier reward or RM score difference)
    chosen_score: float | None = None
    rejected_score: float | None = None
    votes: list[int] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = ""             # "file:line" where it came from (for error messages)

    def task(self) -> Task:
        """The prompt as a Task (so it renders through the same chat template as training tasks)."""
        return Task(id=self.id or "pair", prompt=self.prompt, messages=self.messages, source=self.source)

    def to_record(self) -> dict[str, Any]:
        optional = ("messages", "id", "chosen_score", "rejected_score", "votes", "meta")
        return {k: v for k, v in asdict(self).items()
                if k != "source" and not (k in optional and v in (None, {}, ""))}


@dataclass
class UnpairedExample:
    """One labelled completion (KTO): desirable or not."""

    prompt: str
    completion: str
    desirable: bool
    messages: list[dict[str, str]] | None = None
    id: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    def task(self) -> Task:
        return Task(id=self.id or "example", prompt=self.prompt, messages=self.messages, source=self.source)


Record = PreferencePair | UnpairedExample


@dataclass
class EncodedPair:
    """Token ids of ``prompt + chosen`` and ``prompt + rejected``; masks are 1 on completion tokens."""

    chosen_ids: list[int]
    chosen_mask: list[int]
    rejected_ids: list[int]
    rejected_mask: list[int]


# --------------------------------------------------------------------------------------------- parsing

def _messages(val: Any, where: str, key: str) -> list[dict[str, str]]:
    return parse_messages(val, where, key)


def _completion(obj: dict, key: str, where: str) -> tuple[str, list[dict[str, str]] | None]:
    """A completion field: a string, or a chat ending in an assistant turn -> (text, turns before it)."""
    if key not in obj:
        raise DataError(f"{where}: missing required field {key!r} (fields present: {sorted(obj)})")
    val = obj[key]
    if isinstance(val, str):
        return val, None
    msgs = _messages(val, where, key)
    if msgs[-1]["role"] != "assistant":
        raise DataError(f"{where}: field {key!r} is a chat whose last turn is {msgs[-1]['role']!r}, "
                        "not 'assistant'")
    return msgs[-1]["content"], msgs[:-1] or None


def _prompt(obj: dict, where: str, context: list[dict[str, str]] | None) -> tuple[str, list | None]:
    """``(prompt text, messages or None)`` from ``prompt`` / ``messages`` / the chosen chat's context."""
    if "messages" in obj:
        msgs = _messages(obj["messages"], where, "messages")
        return msgs[-1]["content"], msgs
    if "prompt" in obj:
        p = obj["prompt"]
        if isinstance(p, str):
            return p, None
        msgs = _messages(p, where, "prompt")
        return msgs[-1]["content"], msgs
    if context:
        return context[-1]["content"], context
    raise DataError(f"{where}: missing required field 'prompt' (or 'messages')")


def _number(obj: dict, key: str, where: str, default=None):
    val = obj.get(key, default)
    if val is not None and (isinstance(val, bool) or not isinstance(val, (int, float))):
        raise DataError(f"{where}: field {key!r} must be a number, got {type(val).__name__}")
    return None if val is None else float(val)


def _votes(obj: dict, where: str) -> list[int] | None:
    v = obj.get("votes")
    if v is None:
        return None
    if not isinstance(v, list) or not v or any(isinstance(x, bool) or x not in (-1, 0, 1) for x in v):
        raise DataError(f"{where}: field 'votes' must be a non-empty list of +1 / -1 / 0, got {v!r}")
    return [int(x) for x in v]


def record_from_dict(obj: dict[str, Any], where: str) -> Record:
    """Parse one preference line (pair or unpaired); ``where`` ("file:line") names it in errors."""
    paired = "chosen" in obj or "rejected" in obj
    if not paired and "completion" not in obj:
        raise DataError(f"{where}: a line needs 'chosen' and 'rejected' (a pair) or 'completion' and "
                        f"'label' (an unpaired KTO example); fields present: {sorted(obj)}")
    allowed = PAIR_FIELDS if paired else UNPAIRED_FIELDS
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise DataError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(allowed)}")
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise DataError(f"{where}: field 'meta' must be an object")
    rid = obj.get("id", "")
    if not isinstance(rid, (str, int)) or isinstance(rid, bool):
        raise DataError(f"{where}: field 'id' must be a string or integer")
    if paired:
        chosen, ctx = _completion(obj, "chosen", where)
        rejected, _ = _completion(obj, "rejected", where)
        prompt, msgs = _prompt(obj, where, ctx)
        if chosen == rejected:
            raise DataError(f"{where}: fields 'chosen' and 'rejected' are the same text: the pair prefers nothing "
                            "(its loss gradient is zero); drop the line or fix the rejected completion")
        return PreferencePair(prompt, chosen, rejected, msgs, str(rid), _number(obj, "margin", where, 1.0),
                              _number(obj, "chosen_score", where), _number(obj, "rejected_score", where),
                              _votes(obj, where), meta, where)
    completion, ctx = _completion(obj, "completion", where)
    if "desirable" in obj and "label" in obj:
        raise DataError(f"{where}: give the label as 'label' (TRL) or as 'desirable', not both")
    key = "label" if "label" in obj else "desirable"
    if key not in obj:
        raise DataError(f"{where}: missing required field 'label' (TRL's KTO format; or 'desirable'): true/false")
    if not isinstance(obj[key], bool):
        raise DataError(f"{where}: field {key!r} must be true or false, got {obj[key]!r}")
    prompt, msgs = _prompt(obj, where, ctx)
    return UnpairedExample(prompt, completion, obj[key], msgs, str(rid), meta, where)


def load_preference_jsonl(path: str | os.PathLike) -> list[Record]:
    """Every record of a preference JSONL file, in order; a bad line raises DataError naming file:line."""
    out = [record_from_dict(obj, f"{path}:{lineno}") for lineno, obj in read_jsonl(path)]
    if not out:
        raise DataError(f"{path}: no preference records: the file is empty")
    return out


def load_preference_hf(path: str, split: str = "train", limit: int | None = None) -> list[Record]:
    """Records from a ``save_to_disk`` folder or a cached HF dataset whose rows use the line format's columns."""
    from rlvr.data.hf import load_hf_rows

    ds = load_hf_rows(path, split, "HF preference dataset")
    rows = ds if limit is None else ds.select(range(min(limit, len(ds))))
    return records_from_rows(rows, f"{path}[{split}]")


def records_from_rows(rows, name: str) -> list[Record]:
    """Parse dataset rows (dicts); extra columns are ignored, errors name ``name#row``."""
    out = []
    for i, row in enumerate(rows):
        keep = {k: v for k, v in dict(row).items() if k in PAIR_FIELDS | UNPAIRED_FIELDS and v is not None}
        out.append(record_from_dict(keep, f"{name}#{i}"))
    return out


def load_preferences(path: str, system_prompt: str | None = None) -> list[Record]:
    """JSONL when the path ends in .jsonl (or is a file), an HF dataset otherwise; ``system_prompt`` is put
    before each record's prompt (unless it starts with a system turn)."""
    recs = _load_preferences(path)
    if system_prompt:
        for r in recs:
            msgs = r.task().policy_messages()
            if msgs[0]["role"] != "system":
                r.messages = [{"role": "system", "content": system_prompt}, *msgs]
    return recs


def _load_preferences(path: str) -> list[Record]:
    if path.endswith(".jsonl") or os.path.isfile(path):
        return load_preference_jsonl(path)
    return load_preference_hf(path)


def write_pairs_jsonl(path: str | os.PathLike, pairs: list[PreferencePair]) -> None:
    """Write pairs in the JSONL line format (atomically)."""
    from rlvr.data.jsonl import write_jsonl_atomic

    write_jsonl_atomic(path, [p.to_record() for p in pairs])


# ----------------------------------------------------------------------------------- pairs / unpaired

def as_pairs(records: list[Record], what: str) -> list[PreferencePair]:
    """The records as pairs; an unpaired line is an error naming it (``what`` says who needs pairs)."""
    for r in records:
        if not isinstance(r, PreferencePair):
            raise DataError(f"{r.source}: {what} needs paired lines {{prompt, chosen, rejected}}; "
                            "this line is an unpaired label (use loss: kto for unpaired data)")
    return list(records)  # type: ignore[arg-type]


def as_unpaired(records: list[Record]) -> list[UnpairedExample]:
    """Unpaired examples for KTO: a pair becomes its chosen (desirable) and its rejected (undesirable)."""
    out: list[UnpairedExample] = []
    for r in records:
        if isinstance(r, UnpairedExample):
            out.append(r)
        else:
            out.append(UnpairedExample(r.prompt, r.chosen, True, r.messages, r.id, r.meta, r.source))
            out.append(UnpairedExample(r.prompt, r.rejected, False, r.messages, r.id, r.meta, r.source))
    return out


# ---------------------------------------------------------------------------------------- tokenising

def fit_length(prompt: list[int], completions: list[list[int]], max_length: int):
    """Truncate to ``max_length``: completions keep at least half the budget, the prompt loses its start.

    Returns ``(prompt, completions)``; the same prompt cut is applied to every completion so a pair's
    two sequences share their prompt exactly.
    """
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    longest = max(len(c) for c in completions)
    if len(prompt) + longest <= max_length:
        return prompt, completions
    budget = max(max_length - len(prompt), max_length // 2)
    completions = [c[:budget] for c in completions]
    keep = max_length - max(len(c) for c in completions)
    return prompt[len(prompt) - keep:] if keep > 0 else [], completions


def encode_pair(tokenizer, pair: PreferencePair, max_length: int) -> EncodedPair:
    """Chat-template the prompt, append each completion (+ end-of-turn), truncate to ``max_length``."""
    p = encode_prompt(tokenizer, pair.task())
    cw = encode_completion(tokenizer, pair.chosen)
    cl = encode_completion(tokenizer, pair.rejected)
    p, (cw, cl) = fit_length(p, [cw, cl], max_length)
    return EncodedPair(p + cw, [0] * len(p) + [1] * len(cw), p + cl, [0] * len(p) + [1] * len(cl))


def encode_unpaired(tokenizer, ex: UnpairedExample, max_length: int) -> tuple[list[int], list[int]]:
    """``(ids, loss_mask)`` of prompt + completion."""
    p = encode_prompt(tokenizer, ex.task())
    c = encode_completion(tokenizer, ex.completion)
    p, (c,) = fit_length(p, [c], max_length)
    return p + c, [0] * len(p) + [1] * len(c)
