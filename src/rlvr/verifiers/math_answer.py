r"""A final math answer as a list of items: LaTeX normalisation, connectives, exact plain numbers.

Text only (stdlib, no sympy, nothing evaluated): the math verifier splits the gold and every boxed
answer into *items* here, compares plain numbers exactly in-process and sends the rest to the
math-verify worker item by item.

Normalisation (the same for gold and answer):
  * ``$``, ``\(``/``\)``, ``\displaystyle``, ``\left``/``\right``, ``\!``, a final period dropped;
    ``\dfrac``/``\tfrac`` -> ``\frac``; LaTeX spacing (``\,`` ``\;`` ``\:`` ``\ `` ``~``
    ``\enspace`` ...) is a space, never a connective; ``{,}`` and digit groups ``1,000`` /
    ``1\,000`` are thousands separators; ``\varnothing``/``\{\}``/``∅`` -> ``\emptyset``;
  * connectives at the top level (outside brackets) split items: ``,`` ``;`` ``or`` ``and``
    ``\lor`` ``\land`` ``\vee`` ``\wedge`` ``\quad`` (between two values), and numbers separated
    only by spaces; ``\pm``/``\mp`` makes two items; ``\{a, b\}`` is its items;
  * in each item: ``x =`` / ``x \in`` in front is remembered and dropped; ``\%``/``percent``,
    ``^\circ``/``°``/``\degree`` are flags (each comparison tries the value with and without them:
    ``25\%`` is 25 and 0.25, ``30°`` is 30 and pi/6); units in ``\text{}``/``\mathrm{}`` and plain
    unit words after a number, and currency signs, are dropped; ``3e8`` -> ``3\times10^{8}``;
    ``0.\overline{3}`` -> ``\frac{1}{3}``.

An item is a *plain number* when it is an integer, a decimal, ``a\times10^{k}``, ``a\cdot10^{k}``,
``10^{k}`` or an integer fraction (``\frac{p}{q}``, ``p/q``, mixed ``2\frac{1}{2}``): its exact
value is a :class:`~fractions.Fraction`, and it is *inexact* when written with a decimal point.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction

from rlvr.verifiers.math_units import COMMA_GROUPS_RE as _COMMA_GROUPS_RE
from rlvr.verifiers.math_units import UNIT_TEXT_RE, number_notations, split_degrees, split_percent, strip_units

_SPACING_RE = re.compile(r"(\\\\)|\\(?:[,;:> ]|enspace|thinspace|medspace|thickspace|hfill)|\\h?space\s*\{[^{}]*\}|~")
_QUAD_RE = re.compile(r"\\q?quad\b")
_WRAPPERS_RE = re.compile(r"\\(?:displaystyle|textstyle|left|right|bigl|bigr|Bigl|Bigr|big|Big|!)(?![A-Za-z])")
_TEXT_CONNECTIVE_RE = re.compile(r"\\(?:text|mbox|textrm|mathrm)\s*\{((?:\s|,|;|\bor\b|\band\b)*(?:or|and|,|;)(?:\s|,|;|\bor\b|\band\b)*)\}", re.IGNORECASE)
_EMPTY_RE = re.compile(r"\\varnothing\b|\\emptyset\b|∅|\\O\b|\\\{\s*\\\}|\{\s*\}")
_THOUSANDS_BRACE_RE = re.compile(r"(?<=\d)\{,\}(?=\d{3})")
_SPACE_GROUPS_RE = re.compile(r"(?<![\d.])\d{1,3}(?: \d{3})+(?:\.\d+)?(?![\d.])")
_ASSIGN_RE = re.compile(r"^\s*((?:m\s*)?\\angle\s*[A-Za-z]{1,3}|[A-Z]{2,3}(?![A-Za-z(])|\\frac\s*\{\s*d[A-Za-z]?\s*\}\s*\{\s*d[A-Za-z]\s*\}"
                        r"|[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?(?:\^\{?-1\}?|'{1,2})?(?:\s*\(\s*[A-Za-z]\s*\))?"
                        r"|\\[A-Za-z]+)\s*(=|\\in\b)\s*(?=\S)")
_CHOICE_RE = re.compile(r"^(?:\\text\s*\{\s*)?(?:\(([A-E])\)|([A-E]))\s*\}?\s*(?:(?<=[)}])\s*(?!\(?[A-E]\))(\S.*))?$")
_LEAD_IN_RE = re.compile(r"^(?:\\text\s*\{\s*)?(?:the\s+)?(?:final\s+)?answer\s*(?:is\b|:)\s*\}?\s*(?=\S)", re.IGNORECASE)
_TEXT_DIGITS_RE = re.compile(r"^\\(?:text|textrm|mbox)\s*\{([^{}]*\d[^{}]*)\}$")
_REMARK_RE = re.compile(r"\\text\s*\{\s*\(?\s*(?:since|because|as|where|when|if|for|rejected|reject|discard|discarded|"
                        r"discarding|excluded|extraneous)\b", re.IGNORECASE)
_STYLE_RE = re.compile(r"\\(?:mathbf|textbf|boldsymbol|bm|pmb|emph|underline|textit|mathit|textnormal)\s*\{")
_IMAG_RE = re.compile(r"\\(?:mathrm|text|mathit|textrm)\s*\{\s*i\s*\}")
_IMAG_SPACE_RE = re.compile(r"(?<=[\d}])\s*(?:\\cdot\s*)?i(?![A-Za-z])")
_CHOOSE_RE = re.compile(r"\{\s*(\w+)\s*\\choose\s*(\w+)\s*\}|^(\w+)\s*\\choose\s*(\w+)$")
_SET_BUILDER_RE = re.compile(r"^\\\{\s*[A-Za-z]\s*(?:\\in\s*\\mathbb\s*\{?R\}?\s*)?(?:\\mid|\||:)\s*(.+)\\\}$")
_SET_ASSIGN_RE = re.compile(r"^[A-Za-z]\s*(?:=|\\in)\s*(?=\\\{)")
_TUPLE_ASSIGN_RE = re.compile(r"^\(\s*([A-Za-z](?:\s*,\s*[A-Za-z])+)\s*\)\s*=\s*(\(.*\))$")
_NUMBER_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_TIMES_POW_RE = re.compile(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?:\\times|\\cdot|\*|x|×)\s*10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?$")
_POW10_RE = re.compile(r"^([-+]?)10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?$")
_FRAC_RE = re.compile(r"^([-+]?)\s*(?:(\d+)\s*)?\\frac\s*\{\s*([-+]?\d+)\s*\}\s*\{\s*([-+]?\d+)\s*\}$"
                      r"|^([-+]?\d+)\s*/\s*([-+]?\d+)$")
_MIXED_SLASH_RE = re.compile(r"^([-+]?)(\d+)\s+(\d+)\s*/\s*(\d+)$")
_ANGLE_BRACKETS_RE = re.compile(r"\\langle\s*(.*?)\s*\\rangle")
_CHAIN_SIDE_RE = re.compile(r"\\[A-Za-z]+")
_NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
_PHRASES = {"all real numbers": r"(-\infty, \infty)", "all reals": r"(-\infty, \infty)",
            "no solution": r"\emptyset", "no solutions": r"\emptyset", "no real solution": r"\emptyset",
            "no real solutions": r"\emptyset", **_NUMBER_WORDS}
_PHRASE_RE = re.compile(r"^(?:\\(?:text|mathrm|textrm|mbox)\s*\{\s*)?([A-Za-z ]+?)\s*\}?\.?$")
_RELATION_RE = re.compile(r"<|>|\\le|\\ge|\\lt|\\gt|\\leq|\\geq|≤|≥")
_WORD_SEPS = {"or": "or", "and": "and", "lor": "or", "vee": "or", "land": "and", "wedge": "and"}
_SEP_RE = re.compile(r",|;|\\(?:lor|vee|land|wedge)(?![A-Za-z])|(?<![A-Za-z\\])(?:or|and)(?![A-Za-z])|\\q?quad(?![A-Za-z])")
_JUXTAPOSED_RE = re.compile(r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)(?:\s+[-+]?(?:\d+(?:\.\d+)?|\.\d+))+")
_OPEN, _CLOSE = "([{", ")]}"
MAX_ITEMS = 32
MAX_PLAIN_CHARS = 400  # longer numbers, and powers of ten beyond MAX_PLAIN_EXPONENT, go to the worker's
MAX_PLAIN_EXPONENT = 400  # size guard (``10^{999999999}`` must not be computed here)


@dataclass
class Item:
    """One value of an answer: normalised LaTeX, and its exact value when it is a plain number."""

    text: str
    value: Fraction | None = None
    inexact: bool = False
    percent: bool = False
    radians: str = ""  # with a degree sign: the text with each N° as (N*pi/180)
    var: str = ""
    equation: str = ""  # "y = 2x + 1" as written, when ``var`` was split off
    def wire(self) -> dict:
        """What the math worker needs (texts only: it parses them itself)."""
        return {"text": self.text, "pct": self.percent, "rad": self.radians}


@dataclass
class Answer:
    """An answer split at its top-level connectives; ``joiner`` is "single", "list", "or" or "and"
    (the last two when the connectives were only that word), ``delims`` the brackets of a single
    bracketed tuple/interval, ``alt`` the reading with ambiguous digit-group commas as separators."""

    items: list[Item]
    joiner: str = "single"
    delims: str = ""
    alt: Answer | None = field(default=None, repr=False)
    choice: str = ""  # a multiple-choice letter: "B", "(B)", "\\textbf{(B)} 12" (then the items are 12)

    @property
    def relations(self) -> bool:
        return bool(self.items) and all(_RELATION_RE.search(i.text) for i in self.items)


# --- normalisation -----------------------------------------------------------------------------------


_UNICODE = {"\u2212": "-", "\u2013": "-", "\u00d7": "\\times ", "\u22c5": "\\cdot ", "\u00b7": "\\cdot ",
            "\u03c0": "\\pi ", "\u221e": "\\infty ", "\u2264": "\\le ", "\u2265": "\\ge ", "\u2260": "\\ne ",
            "\u221a": "\\sqrt ", "\u00bd": "\\frac{1}{2}", "\u00bc": "\\frac{1}{4}", "\u00be": "\\frac{3}{4}",
            "\u2009": " ", "\u202f": " ", "\u00a0": " "}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE)))


def clean(s: str) -> str:
    """Surface normalisation of a whole answer (see the module docstring); no splitting."""
    s = _UNICODE_RE.sub(lambda m: _UNICODE[m.group()], s.strip())
    for a, b in (("\\(", "\\)"), ("\\[", "\\]"), ("$", "$")):
        while s.startswith(a) and s.endswith(b) and len(s) >= len(a) + len(b):
            s = s[len(a):len(s) - len(b)].strip()
    s = _WRAPPERS_RE.sub("", s)
    s = _unwrap_styles(s)
    s = _IMAG_RE.sub("i", s)
    s = re.sub(r"\\[dt]frac(?![A-Za-z])", r"\\frac", s)
    s = _TEXT_CONNECTIVE_RE.sub(lambda m: f" {m.group(1).strip().lower()} ", s)
    s = _THOUSANDS_BRACE_RE.sub("", s).replace("{:}", ":")
    s = re.sub(r"\(([0-9A-Fa-f]+)\)_", r"\1_", s)  # (1011)_2 is 1011_2
    s = _SPACING_RE.sub(lambda m: m.group(1) or " ", s)  # a matrix's row break \\\\ stays
    s = _EMPTY_RE.sub(r"\\emptyset", s)
    s = _ANGLE_BRACKETS_RE.sub(r"(\1)", s)  # \langle 1, 2 \rangle: a vector
    m = _PHRASE_RE.match(s)
    if m and m.group(1).strip().lower() in _PHRASES:  # \text{two}, \text{all real numbers}, "no solution"
        s = _PHRASES[m.group(1).strip().lower()]
    s = _IMAG_SPACE_RE.sub("i", s)  # 3 + 4\,i, 2\cdot i: the imaginary unit
    s = _CHOOSE_RE.sub(lambda m: rf"\binom{{{m.group(1) or m.group(3)}}}{{{m.group(2) or m.group(4)}}}", s)
    s = re.sub(r"(?<![A-Za-z\\])pi(?![A-Za-z])", r"\\pi ", s)  # a plain-text pi
    s = re.sub(r"\s+", " ", s).strip()
    while len(s) > 2 and s[0] == "{" and s[-1] == "}" and _balanced_inside(s):  # plain grouping braces
        s = s[1:-1].strip()
    s = _SPACE_GROUPS_RE.sub(lambda m: m.group().replace(" ", ""), s)
    return s[:-1].rstrip() if s.endswith(".") else s


def _unwrap_styles(s: str) -> str:
    """``\\mathbf{5}``, ``\\textbf{5}``, ``\\boldsymbol{x}`` ... -> their content (balanced braces)."""
    for _ in range(8):
        m = _STYLE_RE.search(s)
        if m is None:
            return s
        depth, j = 1, m.end()
        while j < len(s) and depth:
            depth += {"{": 1, "}": -1}.get(s[j], 0)
            j += 1
        if depth:
            return s
        s = s[:m.start()] + s[m.end():j - 1] + s[j:]
    return s


def _top_level_spans(s: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of every connective at bracket depth 0."""
    out, depth, i = [], 0, 0
    while i < len(s):
        ch = s[i]
        if s.startswith("\\{", i) or s.startswith("\\}", i):
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)
        elif depth == 0:
            m = _SEP_RE.match(s, i)
            if m:
                word = m.group().lstrip("\\")
                out.append((m.start(), m.end(), _WORD_SEPS.get(word, "quad" if "quad" in word else ",")))
                i = m.end()
                continue
        i += 1
    return out


def _split(s: str, commas_split_numbers: bool) -> tuple[list[str], set[str]]:
    protected = s
    if not commas_split_numbers:  # digit groups: 1,000 is one number here
        protected = _COMMA_GROUPS_RE.sub(lambda m: m.group().replace(",", "\0"), s)
    parts, kinds, start = [], set(), 0
    for a, b, kind in _top_level_spans(protected):
        left, right = protected[start:a].strip(), protected[b:].strip()
        if kind == "quad" and (not left or not right or UNIT_TEXT_RE.fullmatch(" " + right)):
            continue  # \quad before a unit or at an end is spacing
        parts.append(protected[start:a])
        kinds.add(kind)
        start = b
    parts.append(protected[start:])
    parts = [_QUAD_RE.sub(" ", p.replace("\0", "")).strip() for p in parts]
    out = []
    for p in parts:
        if _JUXTAPOSED_RE.fullmatch(p):  # "2 3": two numbers side by side are two values
            out += p.split()
            kinds.add("space")
        elif p:
            out.append(p)
    return out, kinds


def _expand_pm(text: str) -> list[str]:
    """``a \\pm b`` -> [a + b, a - b] (at most two signs expanded; more are left as written)."""
    n = len(re.findall(r"\\pm|\\mp|±|∓", text))
    if n == 0 or n > 2:
        return [text]
    out = [text]
    for _ in range(n):
        nxt = []
        for t in out:
            m = re.search(r"\\pm|\\mp|±|∓", t)
            plus, minus = ("+", "-") if m.group() in ("\\pm", "±") else ("-", "+")  # type: ignore[union-attr]
            lead = t[:m.start()].strip() in ("", "=") or t[:m.start()].rstrip().endswith(("=", "(", "{"))  # type: ignore[union-attr]
            for sign in (plus, minus):
                nxt.append(t[:m.start()] + ("" if lead and sign == "+" else sign) + t[m.end():])  # type: ignore[union-attr]
        out = nxt
    return out


def make_item(text: str) -> Item:
    """One item: flags, assignment, units and number forms normalised (see the module docstring)."""
    t = text.strip()
    if "\\approx" in t:  # "\sqrt{2} \approx 1.414": the value before it (after it when alone or "x")
        left, _, right = t.partition("\\approx")
        t = right.strip() if re.fullmatch(r"\s*[A-Za-z]?\s*", left) else left.strip()
    t = _last_of_chain(t)
    raw = t
    var = ""
    m = _ASSIGN_RE.match(t)
    if m and "=" in t[m.end():]:  # x = 4/2 = 2
        t = t[:m.end()] + _last_of_chain(t[m.end():])
    if m and "=" not in t[m.end():]:
        var, t = re.sub(r"\s+", "", m.group(1)), t[m.end():].strip()
    t = strip_units(t)
    t, percent = split_percent(t)
    t, radians = split_degrees(t)
    t = strip_units(t)
    t = number_notations(t)
    value, inexact = plain_value(t)
    if value is not None and (_MIXED_SLASH_RE.match(t) or re.match(r"^[-+]?\s*\d+\s*\\frac", t)):
        # a mixed number (2 1/2, 2\frac12) as the fraction it means: math-verify would read a product
        t = rf"{'-' if value < 0 else ''}\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"
    return Item(t, value, inexact, percent, radians, var, raw if var else "")


def _last_of_chain(t: str) -> str:
    """``\\frac{6}{8} = \\frac{3}{4}``, ``3 \\times 4 = 12``: a computation whose first side holds no
    variable, ending in its value -> that value (an equation such as ``x^2 + y^2 = 25`` is kept)."""
    if "=" not in t:
        return t
    depth, cuts = 0, []
    for i, ch in enumerate(t):
        depth += 1 if ch in _OPEN else -1 if ch in _CLOSE else 0
        if ch == "=" and depth == 0 and t[i - 1:i] not in ("<", ">", "!", "=") and t[i + 1:i + 2] != "=":
            cuts.append(i)
    if not cuts or re.search(r"[A-Za-z]", _CHAIN_SIDE_RE.sub("", t[:cuts[0]])):
        return t
    last = t[cuts[-1] + 1:].strip()
    return last or t


def plain_value(t: str) -> tuple[Fraction | None, bool]:
    """The exact value of a plain number (integer, decimal, scientific notation, integer fraction,
    mixed number) and whether it was written with a decimal point; (None, False) otherwise."""
    m = _MIXED_SLASH_RE.match(t)  # "2 1/2": a mixed number written in plain text
    if m and 0 < int(m.group(3)) < int(m.group(4)):
        v = int(m.group(2)) + Fraction(int(m.group(3)), int(m.group(4)))
        return (-v if m.group(1) == "-" else v), False
    if re.search(r"\d\s+\d", t) or len(t) > MAX_PLAIN_CHARS:
        return None, False
    s = t.replace(" ", "").replace("{}", "")
    if _NUMBER_RE.fullmatch(s):
        return Fraction(s.rstrip(".") or "0"), "." in s
    m = _TIMES_POW_RE.match(s)
    if m and abs(int(m.group(2))) <= MAX_PLAIN_EXPONENT:
        return Fraction(m.group(1).rstrip(".")) * Fraction(10) ** int(m.group(2)), "." in m.group(1)
    m = _POW10_RE.match(s)
    if m and abs(int(m.group(2))) <= MAX_PLAIN_EXPONENT:
        v = Fraction(10) ** int(m.group(2))
        return (-v if m.group(1) == "-" else v), False
    m = _FRAC_RE.match(s)
    if m:
        if m.group(5) is not None:
            num, den, whole, sign = int(m.group(5)), int(m.group(6)), None, ""
        else:
            sign, whole, num, den = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
        if den == 0:
            return None, False
        v = Fraction(num, den)
        if whole is not None:
            if not 0 <= v < 1:  # 2\frac{3}{2} is a product, not a mixed number: left to math-verify
                return None, False
            v += int(whole)
        return (-v if sign == "-" else v), False
    return None, False


def parse_answer(text: str) -> Answer:
    """An answer's items (see the module docstring); ``alt`` holds the other reading of ``1,000``.
    Cached (gold answers recur): treat the result as read-only."""
    text = str(text)
    if _PLAIN_INT_RE.fullmatch(text):  # the common case, without the regex passes below
        return Answer([Item(text, Fraction(text))])
    return _parse_cached(text)


_PLAIN_INT_RE = re.compile(r"-?\d{1,30}")


@functools.lru_cache(maxsize=8192)
def _parse_cached(text: str) -> Answer:
    return _parse(text, False)


def _parse(text: str, _split_numbers: bool) -> Answer:
    s = clean(text)
    s = _TEXT_DIGITS_RE.sub(r"\1", _LEAD_IN_RE.sub("", s)).strip()  # "\text{The answer is } 5", "\text{x = 2}"
    choice = _CHOICE_RE.match(s)
    if choice and choice.group(3):  # "(B) 12": the letter, and the value after it
        ans = _parse(choice.group(3), _split_numbers)
        return replace(ans, choice=choice.group(1) or choice.group(2))
    remark = _REMARK_RE.search(s)  # "3 \; (\text{since } x > 0)", "-2 \quad \text{(rejected 3)}": a remark
    if remark and remark.start() > 0:
        head = s[:remark.start()].rstrip()
        head = head[:-1] if head.endswith("(") else head
        s = re.sub(r"(?:\s|,|;|\\q?quad)+$", "", head) or s
    s = _reshape(s)
    delims = ""
    if (s.startswith("\\{") and s.endswith("\\}") and not re.search(r"\\mid|\||:", s)
            and s[2:-2].strip() != "\\emptyset"):  # {∅} is not the empty set
        s = s[2:-2].strip()
        if not s:
            s = "\\emptyset"
    elif len(s) > 2 and s[0] in "([" and s[-1] in ")]" and _balanced_inside(s) and _top_level_spans(s[1:-1]):
        delims = s[0] + s[-1]
    parts, kinds = _split(s, _split_numbers)
    items: list[Item] = []
    for p in parts[: MAX_ITEMS + 1]:
        items += [make_item(x) for x in _expand_pm(p)]
    joiner = "single" if len(items) == 1 else ("or" if kinds == {"or"} else "and" if kinds == {"and"} else "list")
    ans = Answer(items, joiner, delims if len(parts) == 1 else "", choice=(choice.group(1) or choice.group(2)) if choice else "")
    if not _split_numbers and _COMMA_GROUPS_RE.search(s):
        ans.alt = _parse(text, True)
    return ans


def _reshape(s: str) -> str:
    """Whole-answer forms that say the same as a plainer one: ``x \\in \\{2, 3\\}`` -> ``\\{2, 3\\}``,
    ``\\{x \\mid 2 < x \\le 5\\}`` -> ``2 < x \\le 5``, ``(a, b) = (3, 4)`` -> ``a = 3, b = 4``."""
    m = _SET_ASSIGN_RE.match(s)
    if m and s.endswith("\\}"):
        s = s[m.end():]
    m = _SET_BUILDER_RE.match(s)
    if m and _RELATION_RE.search(m.group(1)):
        return m.group(1).strip()
    m = _TUPLE_ASSIGN_RE.match(s)
    if m and _balanced_inside(m.group(2)):
        names = [n.strip() for n in m.group(1).split(",")]
        inner = m.group(2)[1:-1]
        spans = [(a, b) for a, b, kind in _top_level_spans(inner) if kind == ","]
        vals = [inner[a:b].strip() for a, b in zip([0] + [e for _s, e in spans], [st for st, _e in spans] + [len(inner)])]
        if len(vals) == len(names) and all(vals):
            return ", ".join(f"{n} = {v}" for n, v in zip(names, vals))
    return s


def _balanced_inside(s: str) -> bool:
    """Do the outer brackets of ``s`` enclose everything (``(1, 2)`` yes, ``(1) + (2)`` no)?"""
    depth = 0
    for i, ch in enumerate(s):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth == 0 and i != len(s) - 1:
                return False
    return depth == 0


def untuple(ans: Answer) -> Answer:
    """A single bracketed tuple ``(a, b)`` as the list of its elements."""
    if ans.joiner != "single" or not ans.delims:
        return ans
    inner = parse_answer(ans.items[0].text[1:-1])
    return replace(inner, joiner="list") if len(inner.items) > 1 else ans


# --- exact comparison of plain numbers ---------------------------------------------------------------


def readings(item: Item) -> list[Fraction]:
    """The values a plain-number item may mean: as written, and /100 when it carries a percent sign."""
    assert item.value is not None
    return [item.value, item.value / 100] if item.percent else [item.value]


def close(a: Fraction, b: Fraction, rel_tol: float, inexact: bool) -> bool:
    """Equal exactly, or -- when either was written with a decimal point -- within ``rel_tol`` of the
    larger magnitude (relative, so 1.2e-7 and 1.3e-7 differ; 0 equals only 0)."""
    if a == b:
        return True
    return inexact and abs(a - b) <= Fraction(rel_tol) * max(abs(a), abs(b))


def fast_equal(gold: Item, cand: Item, rel_tol: float) -> bool | None:
    """Plain number vs plain number, exactly (None when either is not a plain number)."""
    if gold.value is None or cand.value is None:
        return None
    inexact = gold.inexact or cand.inexact
    return any(close(g, c, rel_tol, inexact) for g in readings(gold) for c in readings(cand))


# --- which comparisons decide a verdict --------------------------------------------------------------


@dataclass
class Union:
    """Relations an answer joined with or/and, compared as one set (``x<2 or x>5``)."""

    items: list[Item]
    op: str

    def wire(self) -> dict:
        return {"union": [i.wire() for i in self.items], "op": self.op}


Side = Item | Union


@dataclass
class Plan:
    """The (gold side, answer side) pairs whose equality decides, and how: ``mode`` "all" (every pair
    equal), "sets" (each gold item equals some answer item and each answer item some gold item; pairs
    are the full grid, row-major) or a ready ``verdict`` (False, reason) needing no comparison."""

    pairs: list[tuple[Side, Side]] = field(default_factory=list)
    mode: str = "all"
    shape: tuple[int, int] = (0, 0)
    verdict: tuple[bool, str] | None = None

    def decide(self, eq: list[bool]) -> tuple[bool, str]:
        if self.verdict is not None:
            return self.verdict
        if self.mode == "all":
            return (all(eq), "" if all(eq) else "not equal")
        rows, cols = self.shape
        grid = [eq[r * cols:(r + 1) * cols] for r in range(rows)]
        missing = [r for r in range(rows) if not any(grid[r])]
        extra = [c for c in range(cols) if not any(grid[r][c] for r in range(rows))]
        if missing or extra:
            return False, f"sets differ ({len(missing)} gold values missing, {len(extra)} answer values extra)"
        return True, ""


def _single_side(gold: Item, ans: Answer, gold_delims: str) -> Side | str:
    """What one answer offers against a one-item gold: an item, a union of relations, or a hedge reason."""
    if len(ans.items) == 1:
        return ans.items[0]
    if ans.relations and ans.joiner in ("or", "and"):
        return Union(ans.items, ans.joiner)
    if gold_delims == "()" and (ans.joiner == "list" or ans.joiner == "and" and all(i.var for i in ans.items)) \
            and len(ans.items) == gold.text.count(",") + 1:
        return Item("(" + ", ".join(i.text for i in ans.items) + ")")
    return f"hedge: {len(ans.items)} values where one is expected"


def plan(gold: Answer, answers: list[Answer]) -> Plan:
    """The comparisons that decide whether ``answers`` (every boxed answer) match ``gold``."""
    if not gold.items:
        return Plan(verdict=(False, "empty gold"))
    if any(len(a.items) > MAX_ITEMS for a in answers):
        return Plan(verdict=(False, f"hedge: more than {MAX_ITEMS} values"))
    if gold.choice and all(a.choice for a in answers):  # multiple choice: the letters decide
        ok = all(a.choice == gold.choice for a in answers)
        return Plan(verdict=(ok, "" if ok else "another choice"))
    if len(gold.items) == 1:
        g = gold.items[0]
        pairs: list[tuple[Side, Side]] = []
        for a in answers:
            side = _single_side(g, a, gold.delims)
            if isinstance(side, str):
                return Plan(verdict=(False, side))
            if isinstance(side, Item) and g.var and side.var and g.var != side.var:
                return Plan(verdict=(False, f"answer names {side.var}, the gold {g.var}"))
            if isinstance(side, Item) and g.equation and "=" in side.text:  # 2x + y = 1 vs y = -2x + 1
                pairs.append((replace(g, text=g.equation, value=None), side))
                continue
            pairs.append((g, side))
        return Plan(pairs, "all")
    items: list[Item] = []
    for a in answers:
        a = untuple(a)
        if a.alt is not None and len(a.items) != len(gold.items) and len(a.alt.items) == len(gold.items):
            a = a.alt
        items += a.items
    if len(items) > MAX_ITEMS:
        return Plan(verdict=(False, f"hedge: more than {MAX_ITEMS} values"))
    gvars = [g.var for g in gold.items]
    if all(gvars) and len(set(gvars)) == len(gvars) and all(i.var for i in items):
        by_var = {i.var: i for i in items}
        if set(by_var) != set(gvars) or len(items) != len(gvars):
            return Plan(verdict=(False, "the answer names other variables than the gold"))
        return Plan([(g, by_var[g.var]) for g in gold.items], "all")
    if all(gvars) and len(set(gvars)) == len(gvars) and not any(i.var for i in items):
        if len(items) != len(gvars):  # "a = 3, b = 4" answered "3, 4": in the gold's order
            return Plan(verdict=(False, f"{len(items)} values for {len(gvars)} variables"))
        return Plan(list(zip(gold.items, items)), "all")
    grid = [(g, c) for g in gold.items for c in items]
    return Plan(grid, "sets", (len(gold.items), len(items)))
