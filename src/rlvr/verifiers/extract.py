"""Final-answer extraction: explicit and configured per task (``task.answer_format``).

Formats:
  boxed        the contents of ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces (the last one is
               the answer); ``\\boxed 3`` (no braces) is accepted too
  hash         the rest of the line after ``####`` (GSM8K style)
  code_fence   the last ```lang (or ~~~lang) fence (a lang-tagged fence wins over an untagged one); with
               no fence at all, the whole completion ("bare") -- an unterminated last fence runs to the end
  last_number  the last number in the text
  raw          the whole completion, stripped

Every extractor returns an :class:`Extraction` that lists *all distinct* final answers it saw, so a
verifier can tell a hedge (``\\boxed{3} or \\boxed{4}``) from a single answer: ``ambiguous`` is True
when there are several different ones. Extraction never evaluates anything; it only slices text, and
its cost is linear in the completion (every scan is bounded by ``max_answer_chars``/``max_answers``).
"""

from __future__ import annotations

import functools
import re
import textwrap
from dataclasses import dataclass, field

ANSWER_FORMATS: tuple[str, ...] = ("boxed", "hash", "code_fence", "last_number", "raw")

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\b")
_BRACE_RE = re.compile(r"[{}]")
_WS_RE = re.compile(r"\s+")
_FENCE_RE = re.compile(r"(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[A-Za-z0-9_+.#-]*)[^\n]*(?:\n|$)")
_NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+")
_LANG_ALIASES = {"py": "python", "python3": "python", "py3": "python", "sqlite": "sql", "sqlite3": "sql",
                 "postgresql": "sql"}


@dataclass
class Extraction:
    """What was found in a completion.

    answer: the final answer (the last one found), or None when nothing is extractable;
    candidates: every distinct final answer, in order of appearance (normalised whitespace);
    ambiguous: several *different* final answers were present (a possible hedge);
    fmt: the format used; note: how it was found (e.g. "bare", "unterminated fence", "too many").
    """

    answer: str | None
    candidates: list[str] = field(default_factory=list)
    ambiguous: bool = False
    fmt: str = "raw"
    note: str = ""

    @property
    def found(self) -> bool:
        return self.answer is not None and self.answer != ""


def extract_answer(text: str, fmt: str = "boxed", *, lang: str | None = None, max_answers: int = 64,
                   max_answer_chars: int = 4000) -> Extraction:
    """Extract the final answer of ``text`` in format ``fmt`` (one of :data:`ANSWER_FORMATS`)."""
    if fmt == "boxed":
        return _from_list(extract_boxed_all(text, max_answers, max_answer_chars), fmt, max_answers)
    if fmt == "hash":
        return _from_list(_hash_all(text, max_answers), fmt, max_answers)
    if fmt == "code_fence":
        return extract_code(text, lang)
    if fmt == "last_number":
        return _last_number(text)
    if fmt == "raw":
        s = text.strip()
        return Extraction(s or None, [s] if s else [], False, fmt)
    raise ValueError(f"unknown answer_format {fmt!r}; expected one of {ANSWER_FORMATS}")


def _from_list(found: tuple[list[str], str], fmt: str, max_answers: int) -> Extraction:
    items, note = found
    distinct: list[str] = []
    for s in items:
        if s and s not in distinct:
            distinct.append(s)
    ambiguous = len(distinct) > 1 or note == "too many"
    return Extraction(distinct[-1] if distinct else None, distinct, ambiguous, fmt, note)


def normalize_answer(s: str) -> str:
    """Collapse whitespace and strip surrounding ``$``/space; nothing else (no evaluation)."""
    s = _WS_RE.sub(" ", s).strip()
    while len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s[1:-1].strip()
    return s


def extract_boxed_all(text: str, max_answers: int = 64, max_answer_chars: int = 4000) -> tuple[list[str], str]:
    """All ``\\boxed`` contents (outermost boxes only, nested wrappers removed), and a note.

    A box whose closing brace is not found within ``max_answer_chars`` is skipped (note
    "unterminated"); more than ``max_answers`` boxes stops the scan (note "too many").
    """
    out: list[str] = []
    note = ""
    end_of_last = -1
    for m in _BOX_RE.finditer(text):
        if m.start() < end_of_last:  # inside a previous box: \boxed{\boxed{3}}
            continue
        if len(out) >= max_answers:
            return out, "too many"
        content, end = _box_content(text, m.end(), max_answer_chars)
        end_of_last = end  # scans never overlap, so the whole pass is linear in len(text)
        if content is None:
            note = "unterminated"
            continue
        out.append(_unwrap_box(normalize_answer(content), max_answer_chars))
    return out, note


def _box_content(text: str, pos: int, cap: int) -> tuple[str | None, int]:
    """Content of the box starting right after ``\\boxed`` at ``pos`` (``{...}`` or ``<space>token``)
    and where the scan ended; content None when not closed within ``cap`` characters."""
    n = len(text)
    i = pos
    while i < n and text[i] in " \t":
        i += 1
    if i >= n:
        return None, i
    if text[i] != "{":
        if i == pos:  # "\boxedx" is not a box
            return None, i
        j = i
        while j < n and j - i < cap and not text[j].isspace() and text[j] not in "$}":
            j += 1
        return (text[i:j] or None), j
    depth = 0
    stop = min(n, i + cap + 2)
    for b in _BRACE_RE.finditer(text, i, stop):
        depth += 1 if b.group() == "{" else -1
        if depth == 0:
            return text[i + 1:b.start()], b.end()
    return None, stop


def _unwrap_box(s: str, cap: int) -> str:
    while _BOX_RE.match(s):
        inner, end = _box_content(s, _BOX_RE.match(s).end(), cap)  # type: ignore[union-attr]
        if inner is None or end != len(s):
            break
        s = normalize_answer(inner)
    return s


def _hash_all(text: str, max_answers: int) -> tuple[list[str], str]:
    out: list[str] = []
    start = 0
    while True:
        i = text.find("####", start)
        if i < 0:
            return out, ""
        if len(out) >= max_answers:
            return out, "too many"
        j = i + 4
        while j < len(text) and text[j] == "#":
            j += 1
        nl = text.find("\n", j)
        line = text[j:] if nl < 0 else text[j:nl]
        out.append(normalize_answer(line))
        start = j if nl < 0 else nl


def _canon_lang(lang: str | None) -> str:
    lang = (lang or "").lower()
    return _LANG_ALIASES.get(lang, lang)


@dataclass
class Fence:
    """One fenced block: its language tag (canonical, lower case, "" when untagged), its body
    (dedented) and whether a closing fence was found."""

    lang: str
    body: str
    closed: bool = True
    start: int = 0  # where the opening fence starts in the text


@functools.lru_cache(maxsize=64)
def _closer(fence: str) -> re.Pattern:
    return re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$", re.MULTILINE)


def fenced_blocks(text: str) -> list[Fence]:
    """Every ```` ``` ```` or ``~~~`` fenced block, in order (linear in ``text``).

    An opening fence of N backticks (tildes) is closed by a line holding only N or more of the same
    character, else by the next run of N of them anywhere (``return x```), else the block runs to the
    end (a truncated generation). The body is dedented, so a fence inside an indented list item works.
    """
    out: list[Fence] = []
    pos = 0
    while True:
        m = _FENCE_RE.search(text, pos)
        if m is None:
            return out
        fence, start = m.group("fence"), m.end()
        c = _closer(fence).search(text, start)
        if c is None:
            i = text.find(fence, start)
            c_start, c_end = (i, i + len(fence)) if i >= 0 else (-1, len(text))
        else:
            c_start, c_end = c.start(), c.end()
        body = text[start:] if c_start < 0 else text[start:c_start]
        if body.lstrip("\r\n")[:1] in (" ", "\t"):  # dedent is slow: only when the first code line is indented
            body = textwrap.dedent(body)
        out.append(Fence(_canon_lang(m.group("lang")), body, c_start >= 0, m.start()))
        pos = max(c_end, start)
        if c_start < 0:
            return out


def extract_code(text: str, lang: str | None = None) -> Extraction:
    """The last fenced block (preferring ``lang``-tagged fences), else the bare text.

    ``ambiguous`` is True when several different blocks of the chosen kind are present.
    """
    want = _canon_lang(lang)
    tagged: list[str] = []
    untagged: list[str] = []
    note = ""
    for block in fenced_blocks(text):
        if not block.closed:
            note = "unterminated fence"
        body = block.body.strip("\n").rstrip()
        if body.strip():
            if want and block.lang == want:
                tagged.append(body)
            elif not want or not block.lang:  # with no wanted language any fence counts
                untagged.append(body)
    blocks = tagged or untagged
    if not blocks:
        if "```" in text or "~~~" in text:
            return Extraction(None, [], False, "code_fence", "empty fence")
        s = text.strip()
        return Extraction(s or None, [s] if s else [], False, "code_fence", "bare")
    distinct = list(dict.fromkeys(blocks))
    return Extraction(blocks[-1], distinct, len(distinct) > 1, "code_fence", note)


_LAST_DIGIT_RE = re.compile(r"\d(?!.*\d)", re.DOTALL)
_NUM_CHARS = frozenset("0123456789,.")


def _last_number(text: str, window: int = 400) -> Extraction:
    end = len(text)
    while end > 0 and not text[end - 1].isdigit():  # cheap for the usual "... is 42." ending
        end -= 1
        if len(text) - end > window:
            m = _LAST_DIGIT_RE.search(text)
            end = m.end() if m else 0
            break
    if end == 0:
        return Extraction(None, [], False, "last_number")
    i = end
    while i > 0 and end - i < 100 and text[i - 1] in _NUM_CHARS:
        i -= 1
    if i > 0 and text[i - 1] in "+-":
        i -= 1
    parts = [m.group().replace(",", "") for m in _NUMBER_RE.finditer(text, i, end)]  # "1,234.5"; "3,4"
    answer = parts[-1]
    if len(set(parts)) > 1:
        return Extraction(answer, list(dict.fromkeys(parts)), True, "last_number", "a list of numbers")
    # a hedge on the final line: "it is 3 or 4"
    line_start = max(text.rfind("\n", max(0, i - window), i) + 1, i - window, 0)
    line = text[line_start:end]
    if " or " not in line:
        return Extraction(answer, [answer], False, "last_number")
    nums = list(dict.fromkeys(m.group().replace(",", "") for m in _NUMBER_RE.finditer(line)))
    if len(nums) > 1 and re.search(r"\bor\b", line):
        return Extraction(answer, nums, True, "last_number", "alternatives on the final line")
    return Extraction(answer, [answer], False, "last_number")
