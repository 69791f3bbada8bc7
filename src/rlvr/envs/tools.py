"""Tool-call markup: how a policy calls a tool, and how tool output is written back.

The format (strict, documented; every rule here is enforced by :func:`parse_turn`)::

    <tool>{"name": "write", "args": {"path": "total.txt", "content": "42"}}</tool>

* A call is the exact opening tag ``<tool>``, one JSON object, and the exact closing tag ``</tool>``.
  The tags are case-sensitive and carry no attributes; whitespace around the JSON is allowed.
* The JSON object has the key ``"name"`` (a tool name, ``[a-z_]{1,32}``) and optionally ``"args"``
  (an object; missing means ``{}``). No other key. Duplicate keys, ``NaN``/``Infinity`` and bodies
  longer than ``max_call_chars`` are rejected.
* The body must not contain the literal text ``<tool>``, ``</tool>`` or ``<tool_output>`` (not even
  inside a JSON string): write ``<`` as ``\\u003c`` there (``ToolCall.render`` always does).
* Argument values are plain JSON scalars: strings, integers (|v| <= 10**12) and booleans/null where a
  tool says so. Floats, lists and objects are rejected by the tool's argument check.
* One assistant turn may hold several calls; they run in order. A turn with no call ends the episode
  (it is the final answer). Text outside the tags is free-form (reasoning) and has no effect.
* A malformed call (bad JSON, unknown key, an opening tag without a closing one, a stray closing
  tag, a nested ``<tool>``) is a *format error*: it is not executed, the environment answers with an
  error message, and the verifier may report outcome ``format``.

Tool output goes back to the policy wrapped as ``<tool_output>...</tool_output>``. Inside it, every
``<tool`` / ``</tool`` is neutralised to ``&lt;tool`` / ``&lt;/tool``, so tool output (which can echo
file contents the policy wrote) can never contain tool-call markup or close its own block. This is
what lets :func:`split_transcript` turn a flat transcript back into assistant turns.

Tool output is environment text: the trainer appends it with ``loss_mask`` 0 (never trained on).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool>", "</tool>"
OUT_OPEN, OUT_CLOSE = "<tool_output>", "</tool_output>"
MAX_INT = 10**12
_NAME_RE = re.compile(r"[a-z_]{1,32}")
# "<tool" followed by ">" only: "<tool_output>" is not a call tag.
_TAG_RE = re.compile(r"<tool>|</tool>")
_OUTPUT_BLOCK_RE = re.compile(re.escape(OUT_OPEN) + r"(.*?)" + re.escape(OUT_CLOSE), re.DOTALL)


class ToolCallError(ValueError):
    """A tool call that cannot be parsed or whose arguments do not fit the tool (outcome ``format``)."""


@dataclass(frozen=True)
class ToolCall:
    """One well-formed call: a tool name and its JSON arguments."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        """The call in the documented markup (what a policy should emit); ``<`` is written ``\\u003c``."""
        body = json.dumps({"name": self.name, "args": self.args}, ensure_ascii=False)
        return OPEN + body.replace("<", "\\u003c") + CLOSE


@dataclass(frozen=True)
class CallError:
    """One malformed call, kept in turn order so it is counted and answered like a call."""

    message: str


@dataclass
class ParsedTurn:
    """Calls and malformed calls of one assistant turn, in order; ``turn_errors`` hold no call."""

    items: list[ToolCall | CallError]
    turn_errors: list[str] = field(default_factory=list)

    @property
    def calls(self) -> list[ToolCall]:
        return [i for i in self.items if isinstance(i, ToolCall)]

    @property
    def has_tool_markup(self) -> bool:
        return bool(self.items) or bool(self.turn_errors)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ToolCallError(f"duplicate JSON key {k!r}")
        out[k] = v
    return out


def _reject_constant(name: str) -> Any:
    raise ToolCallError(f"non-finite number {name} is not allowed")


def parse_call(body: str, max_call_chars: int = 8192) -> ToolCall:
    """Parse the JSON body of one ``<tool>`` block; raises ToolCallError with a short reason."""
    if len(body) > max_call_chars:
        raise ToolCallError(f"tool call is {len(body)} characters; the limit is {max_call_chars}")
    try:
        obj = json.loads(body, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except ToolCallError:
        raise
    except (ValueError, RecursionError) as e:
        raise ToolCallError(f"tool call is not valid JSON ({str(e)[:80]})") from None
    if not isinstance(obj, dict):
        raise ToolCallError("tool call must be a JSON object with 'name' and 'args'")
    extra = set(obj) - {"name", "args"}
    if extra:
        raise ToolCallError(f"unknown key(s) in tool call: {sorted(extra)}; allowed: name, args")
    name, args = obj.get("name"), obj.get("args", {})
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ToolCallError("'name' must be a tool name of 1-32 lowercase letters or underscores")
    if not isinstance(args, dict):
        raise ToolCallError("'args' must be a JSON object")
    return ToolCall(name, args)


def strip_outputs(text: str) -> tuple[str, bool]:
    """Remove ``<tool_output>`` blocks from policy text; True when an unclosed one was cut off."""
    text = _OUTPUT_BLOCK_RE.sub(" ", text)
    cut = text.find(OUT_OPEN)
    return (text, False) if cut < 0 else (text[:cut], True)


def parse_turn(text: str, max_calls: int = 4, max_call_chars: int = 8192) -> ParsedTurn:
    """Find every ``<tool>...</tool>`` block of one assistant turn, in order.

    ``<tool_output>`` blocks the policy wrote itself are inert (removed first), so a turn parses the
    same live and inside a transcript. Items beyond ``max_calls`` are dropped with one turn error.
    Tag errors (an unclosed ``<tool>``, a stray ``</tool>``, a ``<tool>`` inside a call) become
    CallErrors in place.
    """
    text, cut = strip_outputs(text)
    items: list[ToolCall | CallError] = []
    turn_errors = ["'<tool_output>' without a closing '</tool_output>'"] if cut else []
    overflow = 0

    def add(item: ToolCall | CallError) -> None:
        nonlocal overflow
        if len(items) >= max_calls:
            overflow += 1
        else:
            items.append(item)

    open_at: int | None = None
    for m in _TAG_RE.finditer(text):
        if m.group(0) == OPEN:
            if open_at is not None:
                add(CallError("'<tool>' opened inside another tool call"))
            open_at = m.end()
        elif open_at is None:
            add(CallError("'</tool>' without a matching '<tool>'"))
        else:
            body, open_at = text[open_at:m.start()], None
            try:
                add(parse_call(body.strip(), max_call_chars))
            except ToolCallError as e:
                add(CallError(str(e)))
    if open_at is not None:
        add(CallError("'<tool>' without a closing '</tool>'"))
    if overflow:
        turn_errors.append(f"{overflow} tool call(s) beyond the {max_calls} allowed per turn were ignored")
    return ParsedTurn(items, turn_errors)


def neutralise(text: str) -> str:
    """Make tool output unable to contain tool-call markup (``<tool`` -> ``&lt;tool``)."""
    return text.replace("</tool", "&lt;/tool").replace("<tool", "&lt;tool")


def render_output(text: str) -> str:
    """Wrap one tool's output for the policy (loss_mask 0 when appended to the context)."""
    return OUT_OPEN + neutralise(text) + OUT_CLOSE


def split_transcript(text: str) -> list[str]:
    """Split a flat transcript into assistant turns: the text between ``<tool_output>`` blocks.

    Tool-output blocks are dropped (the verifier re-executes every call; it never trusts recorded
    output), whitespace-only segments are skipped. An unclosed ``<tool_output>`` raises
    ToolCallError: the transcript is ambiguous.
    """
    turns: list[str] = []
    pos = 0
    for m in _OUTPUT_BLOCK_RE.finditer(text):
        turns.append(text[pos:m.start()])
        pos = m.end()
    rest = text[pos:]
    if OUT_OPEN in rest:
        raise ToolCallError("'<tool_output>' without a closing '</tool_output>' in the transcript")
    turns.append(rest)
    return [t for t in turns if t.strip()]
