r"""What surrounds a value in a final math answer: units, currency, percent and degree signs, number
notations (scientific, repeating decimals, digit groups). Text only, stdlib only, nothing evaluated.

Used by :func:`rlvr.verifiers.math_answer.make_item` on one item of an answer:

* :func:`strip_units` drops currency signs in front and units behind a value -- ``\text{cm}``,
  ``\mathrm{m}/\mathrm{s}``, ``\text{ cm}^2``, ``12 apples``, ``12 m``, ``\text{12 cm}`` -- but never a
  constant (``\mathrm{i}``, ``\text{e}``) or a math word (``\pi``, ``\sin``);
* :func:`split_percent` / :func:`split_degrees` remove a percent / degree sign and say it was there
  (the comparison then tries both readings: ``25\%`` is 25 and 0.25, ``30°`` is 30 and π/6);
  a temperature (``25^\circ C``) is a number with a unit, not an angle;
* :func:`number_notations` rewrites ``3e8`` as ``3\times10^{8}`` (never 3·e·8), ``0.\overline{3}``,
  ``0.\bar{3}``, ``0.\dot{3}`` as the exact fraction, and removes digit-group commas (``1,000``).
"""

from __future__ import annotations

import re
from fractions import Fraction

COMMA_GROUPS_RE = re.compile(r"(?<![\d.,])[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,]|\.\d)")
_SCI_RE = re.compile(r"(?<![\w\\.])(\d+(?:\.\d+)?|\.\d+)[eE]([+-]?\d+)(?![\w.])")
_REPEAT_RE = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\(?:overline|bar|dot)\s*\{?\s*(\d+)\s*\}?")
_PERCENT_RE = re.compile(r"\s*(?:\\%|%|\\text\s*\{\s*\\?%\s*\}|\\(?:text|mbox)\s*\{\s*percent\s*\}|\bpercent)\s*$",
                         re.IGNORECASE)
_DEGREE_RE = re.compile(r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|°|\\degree\b|\\(?:text|mbox)\s*\{\s*(?:°|degrees?)\s*\}|\bdegrees?\b)\s*")
_DEGREE_NUMBER_RE = re.compile(r"((?:\d+(?:\.\d*)?|\.\d+)|\{[^{}]*\}|[A-Za-z])" + _DEGREE_RE.pattern.replace(r"\s*$", ""))
_TEMPERATURE_RE = re.compile(r"(?:\s*\^\s*\{?\s*)?(?:°|\\circ\s*\}?|\\degree)\s*(?:\\(?:text|mathrm)\s*\{\s*)?[CF]\b")
_CURRENCY_RE = re.compile(r"^(?:\\\$|\$|\\text\s*\{\s*\\?\$\s*\}|USD\b|€|£|\\euro\b|\\pounds\b)\s*")
UNIT_TEXT_RE = re.compile(r"\s*(?:/|\\cdot)?\s*\\(?:text|mathrm|mbox|textrm|textit)\s*\{\s*[~A-Za-z°][A-Za-z .\-/°]*\s*\}"
                           r"(?:\s*\^\s*\{?\d\}?)?(?:\s*/\s*\\?[A-Za-z]+)?\s*$")
_UNIT_WORD_RE = re.compile(r"(?<=[\d}])\s+(?:[A-Za-z]{2,}(?:\^\{?\d\}?)?(?:\s*/\s*[A-Za-z]+)?\s*)+$")
_UNIT_LETTER_RE = re.compile(r"(?<=\d)\s+[mgsLKJNWVAhCF](?:\^\{?\d\}?)?$")
_GREEK_UNIT_RE = re.compile(r"(?<=[\d}])\s*(?:\\(?:Omega|ohm)(?![A-Za-z])|\\mu\s*(?:\\(?:text|mathrm)\s*\{\s*[A-Za-z]{1,3}\s*\}|[A-Za-z]{1,3}))"
                            r"(?:\s*\^\s*\{?-?\d\}?)?\s*$")  # \mu alone is a symbol (2\mu), \mu m a unit
_FRAC_UNIT_RE = re.compile(r"(?<=[\d}\s])\s*\\frac\s*\{\s*\\(?:text|mathrm)\s*\{[A-Za-z ]+\}\s*\}\s*"
                           r"\{\s*\\(?:text|mathrm)\s*\{[A-Za-z ]+\}\s*(?:\^\s*\{?\d\}?)?\s*\}\s*$")
_TEXT_NUMBER_RE = re.compile(r"^\\(?:text|mbox|textrm|mathrm)\s*\{\s*([-+]?(?:\d[\d,.]*|\.\d+)(?:\s+[A-Za-z][A-Za-z .\-/]*|\s*\\?%))\}$")
_SCALE_WORD_RE = re.compile(r"(?<![\d.])(\d(?:[\d.]*\d)?)\s*(?:\\(?:text|mathrm)\s*\{\s*)?(thousand|million|billion|trillion)\b\s*\}?",
                            re.IGNORECASE)
_SCALE = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12}

MATH_WORDS = frozenset({"pi", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "inf", "infty",
                        "infinity", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "mod", "max", "min",
                        "or", "and", "i", "e", "percent"})
_UNIT_LETTERS = frozenset("mgsLKJNWVAhCF")


def _unit_words(m: re.Match) -> str:
    words = re.findall(r"[A-Za-z]+", m.group())
    return m.group() if any(w.lower() in MATH_WORDS for w in words) else ""


def _unit_text(m: re.Match) -> str:
    content = re.sub(r"^(?:/|\\cdot)?\s*\\[A-Za-z]+\s*\{|\}.*$", "", m.group().strip(), flags=re.DOTALL).strip()
    letters = re.sub(r"[^A-Za-z]", "", content)
    if content.lower() in MATH_WORDS or (len(letters) == 1 and letters not in _UNIT_LETTERS):
        return m.group()  # \mathrm{i}, \text{e}: a constant, not a unit
    return ""


def strip_units(t: str) -> str:
    """Currency signs in front, units behind a value (see the module docstring)."""
    t = _CURRENCY_RE.sub("", t).strip()
    m = _TEXT_NUMBER_RE.match(t)  # \text{12 cm}, \text{72\%}
    if m:
        t = m.group(1).strip()
    if re.search(r"(?i)thousand|million|billion|trillion", t):
        t = _SCALE_WORD_RE.sub(lambda g: rf"{g.group(1)}\times10^{{{_SCALE[g.group(2).lower()]}}}", t)  # 1.2 million
    for _ in range(4):
        before = t
        if re.search(r"\d", t):  # 50\,\Omega, 3\,\mu\text{m}, 9.81\,\frac{\text{m}}{\text{s}^2}
            t = _FRAC_UNIT_RE.sub("", _GREEK_UNIT_RE.sub("", t)).strip()
        t = UNIT_TEXT_RE.sub(_unit_text, t).strip()
        if re.search(r"\d", t):
            t = _UNIT_WORD_RE.sub(_unit_words, t).strip()
            t = _UNIT_LETTER_RE.sub("", t).strip()
        if t == before or not t:
            return t or before
    return t


def split_percent(t: str) -> tuple[str, bool]:
    """The text without a final percent sign/word, and whether it had one."""
    found = bool(_PERCENT_RE.search(t))
    return (_PERCENT_RE.sub("", t).strip() if found else t), found


def split_degrees(t: str) -> tuple[str, str]:
    """The text without degree signs, and the same text with each ``N°`` as ``N·π/180`` ('' when it has
    none, or when the degrees are a temperature)."""
    if not _DEGREE_RE.search(t):
        return t, ""
    if _TEMPERATURE_RE.search(t):  # 25^\circ C: a temperature
        t = _TEMPERATURE_RE.sub("", t).strip()
        return _DEGREE_RE.sub(" ", t).strip(), ""
    radians = _DEGREE_NUMBER_RE.sub(lambda g: rf"({g.group(1)}\cdot\frac{{\pi}}{{180}})", t)
    radians = _DEGREE_RE.sub(" ", radians).strip()
    return _DEGREE_RE.sub(" ", t).strip(), radians


def _repeating(m: re.Match) -> str:
    whole, fixed, rep = m.group(1) or "0", m.group(2), m.group(3)
    num = Fraction(int(whole + fixed or "0"), 10 ** len(fixed))
    num += Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed))
    return rf"\frac{{{num.numerator}}}{{{num.denominator}}}"


def number_notations(t: str) -> str:
    """Digit groups removed, ``3e8`` -> ``3\\times10^{8}``, repeating decimals -> exact fractions."""
    t = COMMA_GROUPS_RE.sub(lambda g: g.group().replace(",", ""), t)
    t = _SCI_RE.sub(lambda g: rf"{g.group(1)}\times10^{{{int(g.group(2))}}}", t)
    return _REPEAT_RE.sub(_repeating, t)
