r"""Math-verifier fidelity on generated completions: every gold in the ordinary forms a model writes
it, and near misses that a careful grader marks wrong.

Each gold answer below comes with the ordinary correct renderings of its class (integers with
``x =``/units/bold/thousands separators, decimals vs fractions vs mixed numbers, repeating decimals,
percentages, scientific notation, degrees, surds, π multiples, complex numbers, solution sets under
every connective, inequalities vs intervals, ordered pairs, vectors and matrices, expressions and
equations, text answers, the empty set) and with its near misses (close magnitudes, wrong sign,
reciprocal, partial or extra solutions, other endpoints, hedges such as "3 or 4" for 3). The correct
renderings are then put in ordinary completions (``The answer is $\boxed{..}$.``, ``**Final answer:**
\boxed{..}``, the same value boxed twice, ...). Verdicts are decided by the class, by hand: a correct
rendering must ``pass``, a near miss must not.

    PYTHONPATH=src python bench/math_fidelity.py [--json out.json] [--mathverify] [--limit N]

Prints, per category, how many correct completions were rejected and how many wrong ones accepted,
and lists every disagreement. ``--mathverify`` also judges each boxed answer with math-verify used
directly (``parse`` + ``verify`` on the last box), for comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from fractions import Fraction

from rlvr.data.types import Task
from rlvr.verifiers.math import MathVerifier

Case = tuple[str, str, str, str]  # category, gold, completion, "pass" | "wrong"

# --- completions around a boxed answer --------------------------------------------------------------

WRAPS = [
    lambda a: rf"\boxed{{{a}}}",
    lambda a: rf"So the answer is $\boxed{{{a}}}$.",
    lambda a: rf"Therefore, the final answer is: $\boxed{{{a}}}$. I hope it is correct.",
    lambda a: rf"**Final answer:** \boxed{{{a}}}",
    lambda a: rf"We get \[\boxed{{{a}}}.\]",
]
N_WRAPS = len(WRAPS)


def box(a: str, k: int = 0) -> str:
    return WRAPS[k % N_WRAPS](a)


# --- number renderings -------------------------------------------------------------------------------


def _dec(v: Fraction) -> str | None:
    """A terminating decimal of ``v`` (None when it does not terminate)."""
    q = v.denominator
    for p in (2, 5):
        while q % p == 0:
            q //= p
    if q != 1:
        return None
    s = f"{abs(float(v)):.12f}".rstrip("0").rstrip(".")
    if Fraction(s) != abs(v):  # more digits than a float holds
        return None
    return ("-" if v < 0 else "") + s


def _frac_forms(v: Fraction) -> list[str]:
    n, d = abs(v.numerator), v.denominator
    sg = "-" if v < 0 else ""
    out = [rf"{sg}\frac{{{n}}}{{{d}}}", rf"{sg}\dfrac{{{n}}}{{{d}}}", rf"{sg}{n}/{d}", rf"\frac{{{sg}{n}}}{{{d}}}",
           rf"{sg}\frac{{{2 * n}}}{{{2 * d}}}", rf"{sg}\tfrac{{{n}}}{{{d}}}"]
    if n < 10 and d < 10:
        out.append(rf"{sg}\frac{n}{d}")
    if n > d:  # mixed number
        w, r = divmod(n, d)
        out.append(rf"{sg}{w}\frac{{{r}}}{{{d}}}")
        out.append(rf"{sg}{w} \tfrac{{{r}}}{{{d}}}")
    if sg:
        out.append(rf"−\frac{{{n}}}{{{d}}}")
    return out


def _int_forms(n: int) -> list[str]:
    s = str(n)
    out = [s, f"{s}.0", f"x = {s}", f"x={s}", rf"\mathbf{{{s}}}", rf"\textbf{{{s}}}", f"{{{s}}}",
           rf"\text{{{s}}}", rf"{s}.", rf"\left({s}\right)" if n < 0 else rf"+{s}" if n > 0 else "-0",
           rf"\frac{{{2 * n}}}{{2}}", f"{s}.00", rf"{s}\,", rf"\displaystyle {s}", f"${s}$"]
    if n < 0:
        out += [f"−{abs(n)}", f"- {abs(n)}", f"({s})"]
    if abs(n) >= 1000:
        g = f"{abs(n):,}"
        sg = "-" if n < 0 else ""
        out += [sg + g, sg + g.replace(",", "{,}"), sg + g.replace(",", r"\,"), sg + g.replace(",", " "),
                sg + g.replace(",", r"\ ")]
    if n > 0 and n % 1000 == 0:
        out += [rf"{n // 1000}\times 10^3", rf"{n // 1000} \cdot 10^{{3}}"]
    return out


def _int_wrong(n: int) -> list[str]:
    out = [str(n + 1), str(n - 1), str(10 * n) if n else "10", f"{n}.5", f"{n}.01", f"{n} \\text{{ or }} {n + 1}",
           f"{n}, {n + 1}", f"{n} \\text{{ and }} {n + 2}", rf"\boxed{{{n}}} \text{{ or }} \boxed{{{n + 1}}}",
           f"x = {n} \\text{{ or }} x = {n + 1}", rf"\{{{n}, {n + 1}\}}", f"{n}; {n - 1}", rf"{n} \pm 1",
           f"{n + 1} \\text{{ cm}}"]
    if n:
        out += [str(-n), rf"\pm {abs(n)}", rf"{abs(n)}^2" if abs(n) > 1 else "2", rf"\frac{{1}}{{{n}}}" if abs(n) > 1 else "0"]
    if abs(n) >= 1000:
        out.append(f"{n}001")
    return out


def integer_cases() -> list[Case]:
    out: list[Case] = []
    for n in (0, 7, -3, 42, 1000, 12345, -250, 1000000, 2024):
        for k, r in enumerate(_int_forms(n)):
            out.append(("integer", str(n), box(r, k), "pass"))
        for k, r in enumerate(_int_wrong(n)):
            out.append(("integer", str(n), box(r, k) if r.startswith("\\boxed") is False else r, "wrong"))
    # units and currency around an integer (the gold is the number)
    for k, r in enumerate([r"12\;\text{cm}", r"12 \text{ cm}", r"12\,\mathrm{cm}", r"12 cm", r"12\text{ cm}^2",
                           r"12 \, \text{cm}^{2}", r"\$12", r"12 \text{ dollars}", r"12\ \text{m/s}", r"12 \text{ km/h}",
                           r"12\text{ apples}", r"12 \mathrm{~cm}", r"12\quad\text{cm}", r"12~\text{cm}",
                           r"\text{12 cm}", r"12 \text{ units}", r"12\text{ minutes}", r"12\,\text{kg}", r"12\ \mathrm{m}",
                           r"12 \text{ square units}", r"12\text{ cm}^3", r"12 \text{ hours}", r"12 \text{ m}^2",
                           r"x = 12 \text{ cm}", r"12 \, \mathrm{m}/\mathrm{s}", r"12\ \text{students}"]):
        out.append(("units", "12", box(r, k), "pass"))
    for k, r in enumerate([r"13\;\text{cm}", r"12.5 \text{ cm}", r"1.2 \text{ cm}", r"120 \text{ cm}", r"-12\text{ cm}",
                           r"12 \text{ or } 13 \text{ cm}", r"\$13", r"21 \text{ apples}"]):
        out.append(("units", "12", box(r, k), "wrong"))
    for k, (g, r, want) in enumerate([("1,000", "1000", "pass"), ("1,000", r"1{,}000", "pass"), ("12,345", "12345", "pass"),
                                      ("1, 2", "1,2", "pass"), ("1, 2", "2,1", "pass"),
                                      ("1,000", "1001", "wrong"), ("1, 2", "12", "wrong"), ("1000", "1,0", "wrong")]):
        out.append(("separators", g, box(r, k), want))
    return out


def decimal_cases() -> list[Case]:
    out: list[Case] = []
    golds = ["0.5", "2.25", "-1.75", "3.14", "0.125", "12.5", "0.04", "-0.2", "1.6", "100.75"]
    for g in golds:
        v = Fraction(g)
        forms = [g, g + "0", g.replace("0.", ".", 1) if g.startswith(("0.", "-0.")) else g + "00", f"x = {g}",
                 rf"\mathbf{{{g}}}", f"{g}."] + _frac_forms(v)
        for k, r in enumerate(forms):
            out.append(("decimal", g, box(r, k), "pass"))
        # the gold written as a fraction, the answer as a decimal
        fg = rf"\frac{{{v.numerator}}}{{{v.denominator}}}" if v > 0 else rf"-\frac{{{-v.numerator}}}{{{v.denominator}}}"
        for k, r in enumerate([g, g + "0", f"{g}000"]):
            out.append(("decimal", fg, box(r, k), "pass"))
        eps = [Fraction(1, 10**3), Fraction(1, 10**5), Fraction(1, 10**7)]
        wrong = [_dec(v * (1 + e)) for e in eps] + [_dec(-v), _dec(v * 10), _dec(v / 10), _dec(v + Fraction(1, 100))]
        wrong += [rf"\frac{{{v.denominator}}}{{{abs(v.numerator)}}}" if abs(v) != 1 else "2"]
        for k, r in enumerate(w for w in wrong if w is not None):
            out.append(("decimal", g, box(r, k), "wrong"))
            out.append(("decimal", fg, box(r, k + 1), "wrong"))
    return out


def fraction_cases() -> list[Case]:
    out: list[Case] = []
    for p, q in ((1, 3), (-2, 3), (7, 2), (5, 6), (22, 7), (1, 12), (-5, 4)):
        v = Fraction(p, q)
        sg = "-" if v < 0 else ""
        gold = rf"{sg}\frac{{{abs(p)}}}{{{q}}}"
        forms = _frac_forms(v)
        d = _dec(v)
        if d:
            forms += [d, d + "0"]
        else:  # repeating decimals, written exactly
            whole, rest = divmod(abs(v.numerator), v.denominator)
            digits, seen, r, pos = "", {}, rest, 0
            while r and r not in seen:
                seen[r] = pos
                r *= 10
                digits += str(r // v.denominator)
                r %= v.denominator
                pos += 1
            fixed, rep = digits[:seen[r]], digits[seen[r]:]
            forms += [rf"{sg}{whole}.{fixed}\overline{{{rep}}}", rf"{sg}{whole}.{fixed}\overline{rep}" if len(rep) == 1 else
                      rf"{sg}{whole}.{fixed}\overline{{{rep}}}", rf"{sg}{whole}.{fixed}{rep}\overline{{{rep}}}",
                      rf"{sg}{whole}.{fixed}\bar{{{rep}}}"]
            approx = f"{float(v):.3f}"
            out.append(("fraction", gold, box(approx), "wrong"))  # an approximation, not the value
            out.append(("fraction", gold, box(f"{float(v):.2f}", 1), "wrong"))
        for k, r in enumerate(forms):
            out.append(("fraction", gold, box(r, k), "pass"))
        wrong = [rf"\frac{{{q}}}{{{abs(p)}}}", rf"{'' if sg else '-'}\frac{{{abs(p)}}}{{{q}}}", rf"\frac{{{abs(p) + 1}}}{{{q}}}",
                 rf"{sg}\frac{{{abs(p)}}}{{{q + 1}}}", rf"{sg}\frac{{{abs(p)}}}{{{q}}} \text{{ or }} {sg}\frac{{{abs(p) + 1}}}{{{q}}}"]
        for k, r in enumerate(wrong):
            out.append(("fraction", gold, box(r, k), "wrong"))
    return out


def percent_cases() -> list[Case]:
    out: list[Case] = []
    for g, pv in (("12.5", "12.5"), ("25", "25"), (r"12.5\%", "12.5"), (r"40\%", "40"), ("7", "7"), ("0.25", "25")):
        forms = [rf"{pv}\%", rf"{pv} \%", f"{pv}%", f"{pv} percent", rf"{pv}\text{{ percent}}", rf"{pv}\,\%",
                 rf"{pv}\text{{\%}}", rf"{pv}\ \%"]
        if g != "0.25":
            forms += [pv]
        for k, r in enumerate(forms):
            out.append(("percent", g, box(r, k), "pass"))
        x = Fraction(pv)
        for k, w in enumerate([x + 1, x * 10, x / 10, x + Fraction(1, 10)]):
            wd = _dec(w)
            out.append(("percent", g, box(rf"{wd}\%", k), "wrong"))
    return out


def scientific_cases() -> list[Case]:
    out: list[Case] = []
    table = [  # gold, correct forms, wrong forms
        ("300000000", [r"3e8", r"3E8", r"3 \times 10^8", r"3\times10^{8}", r"3\cdot10^8", r"3 \cdot 10^{8}",
                       r"3.0\times10^{8}", r"300,000,000", r"3*10^8", r"30\times10^{7}", r"3 × 10^8",
                       r"3\times 10^{8}\text{ m/s}", r"3.00 \times 10^{8}", r"3\times10^{+8}", r"3e+08", r"0.3\times10^9"],
         [r"3e9", r"3.1\times10^{8}", r"3\times10^{7}", r"-3\times10^{8}", r"3\times10^{-8}", r"30000000"]),
        (r"6.02\times10^{23}", [r"6.02e23", r"6.02 \times 10^{23}", r"602000000000000000000000", r"6.02\cdot10^{23}",
                                r"6.020\times10^{23}", r"60.2\times10^{22}", r"6.02 \cdot 10^{23}"],
         [r"6.03\times10^{23}", r"6.02\times10^{22}", r"6.0\times10^{23}", r"6.022\times10^{23}", r"6.02"]),
        ("602000000000000000000000", [r"6.02\times10^{23}", r"6.02e23", r"6.02 \times 10^{23}"],
         [r"6.02\times10^{22}", r"6\times10^{23}"]),
        (r"1.6\times10^{-19}", [r"1.6e-19", r"1.6 \times 10^{-19}", r"1.60\times10^{-19}", r"16\times10^{-20}",
                                r"0.00000000000000000016", r"1.6\cdot 10^{-19}", r"1.6E-19"],
         [r"1.9\times10^{-19}", r"1.6\times10^{-18}", r"-1.6\times10^{-19}", r"1.61\times10^{-19}", r"1.6\times10^{19}",
          r"0", r"1.6"]),
        ("0.000001", [r"10^{-6}", r"1\times10^{-6}", r"1e-6", r"1.0 \times 10^{-6}", r"\frac{1}{1000000}", r"0.0000010"],
         [r"1.4\times10^{-6}", r"10^{-5}", r"1e-7", r"0.00001", r"0"]),
        (r"1.2\times10^{-7}", [r"1.2e-7", r"0.00000012", r"12\times10^{-8}", r"1.20\times10^{-7}"],
         [r"1.3\times10^{-7}", r"1.3e-7", r"1.2\times10^{-6}", r"1.21e-7", r"1.1999\times10^{-7}"]),
        (r"6.626\times10^{-34}", [r"6.626e-34", r"6.626 \times 10^{-34}"],
         [r"1.055\times10^{-34}", r"6.63\times10^{-34}", r"6.626\times10^{-33}"]),
        ("2.5", [r"2.5\times10^{0}", r"25\times10^{-1}", r"2.5e0"], [r"2.5\times10^{1}", r"2.5e-1"]),
    ]
    for g, good, bad in table:
        for k, r in enumerate(good):
            out.append(("scientific", g, box(r, k), "pass"))
        for k, r in enumerate(bad):
            out.append(("scientific", g, box(r, k), "wrong"))
    return out


def degree_cases() -> list[Case]:
    out: list[Case] = []
    for g in ("30", r"30^\circ", r"30^{\circ}"):
        for k, r in enumerate([r"30^\circ", r"30°", r"30^{\circ}", r"30 \text{ degrees}", r"30\degree", r"30 ^\circ",
                               r"30\,^\circ", r"30\text{°}", r"30", r"\angle A = 30^\circ", r"30.0^\circ", r"x = 30^\circ"]):
            out.append(("degree", g, box(r, k), "pass"))
        for k, r in enumerate([r"60^\circ", r"30.5^\circ", r"150^\circ", r"-30^\circ", r"3^\circ", r"30^\circ \text{ or } 150^\circ"]):
            out.append(("degree", g, box(r, k), "wrong"))
    for k, r in enumerate([r"30^\circ", r"30°", r"\frac{\pi}{6}", r"\pi/6"]):
        out.append(("degree", r"\frac{\pi}{6}", box(r, k), "pass"))
    for k, r in enumerate([r"60^\circ", r"\frac{\pi}{3}", r"0.52"]):
        out.append(("degree", r"\frac{\pi}{6}", box(r, k), "wrong"))
    for k, r in enumerate([r"25^\circ C", r"25^\circ\text{C}", r"25\,^{\circ}\mathrm{C}", r"25°C", r"25 \text{ °C}"]):
        out.append(("degree", "25", box(r, k), "pass"))
    out.append(("degree", "25", box(r"26^\circ C"), "wrong"))
    return out


def surd_pi_complex_cases() -> list[Case]:
    table = [
        ("surd", r"\sqrt{2}", [r"\sqrt2", r"\sqrt{2}", r"2^{1/2}", r"\sqrt{\frac{4}{2}}", r"\frac{2}{\sqrt{2}}", r"√2",
                               r"\frac{\sqrt{8}}{2}", r"1.4142135623730951"],
         [r"1.414", r"\sqrt{3}", r"2\sqrt{2}", r"-\sqrt{2}", r"\pm\sqrt{2}", r"\frac{\sqrt{2}}{2}"]),
        ("surd", r"2\sqrt{3}", [r"2 \sqrt{3}", r"\sqrt{12}", r"2\sqrt3", r"2 \cdot \sqrt{3}", r"2*\sqrt{3}", r"\sqrt{3} \cdot 2",
                                r"\frac{6}{\sqrt{3}}", r"2√3", r"\sqrt{3}\times 2"],
         [r"\sqrt{3}", r"3\sqrt{2}", r"2\sqrt{2}", r"3.46", r"4\sqrt{3}"]),
        ("surd", r"\frac{\sqrt{3}}{2}", [r"\frac{\sqrt3}{2}", r"\dfrac{\sqrt{3}}{2}", r"\frac{1}{2}\sqrt{3}", r"\sqrt{3}/2",
                                          r"\frac{3}{2\sqrt{3}}", r"\sqrt{\frac{3}{4}}", r"\frac{\sqrt{3}}{2}", r"0.5\sqrt{3}"],
         [r"\frac{\sqrt{2}}{2}", r"\frac{1}{2}", r"\sqrt{3}", r"0.866", r"\frac{2}{\sqrt{3}}"]),
        ("surd", r"3+2\sqrt{2}", [r"2\sqrt{2}+3", r"3 + 2 \sqrt{2}", r"(1+\sqrt{2})^2", r"3+\sqrt{8}"],
         [r"3-2\sqrt{2}", r"5\sqrt{2}", r"3+\sqrt{2}"]),
        ("surd", r"\frac{1+\sqrt{5}}{2}", [r"\frac{\sqrt{5}+1}{2}", r"\frac{1}{2}+\frac{\sqrt{5}}{2}", r"(1+\sqrt5)/2",
                                            r"0.5 + 0.5\sqrt{5}"],
         [r"\frac{1-\sqrt{5}}{2}", r"\frac{1\pm\sqrt{5}}{2}", r"1.618", r"\frac{1+\sqrt{5}}{4}"]),
        ("pi", r"2\pi", [r"2 \pi", r"\pi \cdot 2", r"2π", r"2\cdot\pi", r"\frac{4\pi}{2}", r"2 pi", r"6.283185307179586",
                         r"\pi\times 2", r"2\,\pi"],
         [r"\pi", r"4\pi", r"6.28", r"-2\pi", r"2\pi^2", r"\frac{\pi}{2}"]),
        ("pi", r"\frac{\pi}{4}", [r"\pi/4", r"\frac14\pi", r"\frac{1}{4}\pi", r"0.25\pi", r"\dfrac{\pi}{4}", r"\frac{π}{4}",
                                   r"45^\circ"],
         [r"\frac{\pi}{2}", r"0.785", r"4\pi", r"\frac{3\pi}{4}", r"45"]),
        ("pi", r"\frac{3\pi}{2}", [r"\frac{3}{2}\pi", r"1.5\pi", r"3\pi/2", r"\dfrac{3\pi}{2}"],
         [r"\frac{2\pi}{3}", r"-\frac{3\pi}{2}", r"\frac{3\pi}{4}"]),
        ("pi", r"36\pi", [r"36 \pi", r"36\pi \text{ cm}^2", r"36\pi\text{ square units}", r"36π"],
         [r"36", r"6\pi", r"113.1", r"36\pi^2"]),
        ("complex", "3+4i", [r"4i+3", r"3 + 4i", r"(3+4i)", r"3+4\,i", r"3+i\cdot 4", r"3 + 4 i", r"3+4\mathrm{i}", r"z = 3+4i"],
         [r"3-4i", r"4+3i", r"3+4", r"5", r"-3+4i", r"3+4i \text{ or } 3-4i"]),
        ("complex", "-1-2i", [r"-2i-1", r"-(1+2i)", r"-1 - 2i", r"−1−2i"], [r"-1+2i", r"1-2i", r"-1-i"]),
        ("complex", r"\frac{1}{2}+\frac{\sqrt{3}}{2}i", [r"\frac{1+i\sqrt{3}}{2}", r"\frac12 + \frac{\sqrt3}{2} i",
                                                         r"0.5+\frac{\sqrt{3}}{2}i"],
         [r"\frac{1}{2}-\frac{\sqrt{3}}{2}i", r"\frac{\sqrt{3}}{2}+\frac{1}{2}i"]),
        ("complex", "2i", [r"2 i", r"0+2i", r"2\cdot i"], [r"-2i", r"2", r"i"]),
        ("infinity", r"\infty", [r"+\infty", r"∞", r"\infty"], [r"-\infty", r"0"]),
        ("combinatorics", "10", [r"\binom{5}{2}", r"\frac{5!}{2!3!}", r"{5 \choose 2}"], [r"\binom{5}{3}+1", r"20"]),
        ("log", "3", [r"\log_2 8", r"\log_{2}8"], [r"\log_2 9", r"\log 8"]),
    ]
    out: list[Case] = []
    for cat, g, good, bad in table:
        for k, r in enumerate(good):
            out.append((cat, g, box(r, k), "pass"))
        for k, r in enumerate(bad):
            out.append((cat, g, box(r, k), "wrong"))
    return out


def set_cases() -> list[Case]:
    out: list[Case] = []
    golds = [("2, 3", "2", "3"), (r"-1, \frac{1}{2}", "-1", r"\frac{1}{2}"), ("-3, 3", "-3", "3"), ("0, 4", "0", "4"),
             (r"\frac{1+\sqrt{5}}{2}, \frac{1-\sqrt{5}}{2}", r"\frac{1+\sqrt{5}}{2}", r"\frac{1-\sqrt{5}}{2}"),
             ("1, 10", "1", "10"), (r"-2, 2", "-2", "2")]
    for g, a, b in golds:
        forms = [f"{a}, {b}", f"{b}, {a}", f"{a}; {b}", rf"{a} \text{{ or }} {b}", rf"x={a} \text{{ or }} x={b}",
                 f"x = {a}, x = {b}", f"x_1 = {a}, x_2 = {b}", rf"\{{{a}, {b}\}}", rf"{a} \text{{ and }} {b}",
                 rf"x \in \{{{a}, {b}\}}", rf"{a},\ {b}", rf"{a} \text{{, }} {b}", rf"x = {a} \text{{ and }} x = {b}",
                 f"{a} or {b}", f"{a} and {b}", rf"x={a}\text{{ or }}x={b}", rf"{a},\;{b}", rf"\left\{{{a}, {b}\right\}}",
                 rf"x=\{{{a},{b}\}}", rf"{a}\quad\text{{and}}\quad {b}", rf"x_{{1}}={a},\ x_{{2}}={b}"]
        if g in ("-3, 3", "-2, 2"):
            forms += [rf"\pm {b}", rf"x = \pm {b}", rf"\pm{b}", rf"{b}, -{b}"]
        if "sqrt" in g:
            forms += [r"\frac{1 \pm \sqrt{5}}{2}", r"x = \frac{1\pm\sqrt5}{2}"]
        for k, r in enumerate(forms):
            out.append(("set", g, box(r, k), "pass"))
        out.append(("set", g, rf"The roots are $\boxed{{{a}}}$ and $\boxed{{{b}}}$.", "pass"))
        wrong = [a, b, f"{a}, {a}", rf"{a}, {b}, 7", rf"{a} \text{{ or }} {b} \text{{ or }} 7", rf"\{{{a}\}}",
                 f"{a}, 5", rf"x = {a}"]
        for k, r in enumerate(wrong):
            out.append(("set", g, box(r, k), "wrong"))
    # three roots
    for k, r in enumerate([r"3, 2, 1", r"x=1, x=2, x=3", r"1 \text{ or } 2 \text{ or } 3", r"\{1,2,3\}", r"1, 2, \text{and } 3",
                           r"1,2,\text{ and }3", r"1, 2 \text{ and } 3"]):
        out.append(("set", "1, 2, 3", box(r, k), "pass"))
    for k, r in enumerate([r"1, 2", r"1, 2, 3, 4", r"1, 2, 4", r"\{1, 3\}"]):
        out.append(("set", "1, 2, 3", box(r, k), "wrong"))
    # the gold written as a set
    for k, r in enumerate([r"2, 3", r"3 \text{ or } 2", r"\{2,3\}", r"x=2, x=3"]):
        out.append(("set", r"\{2, 3\}", box(r, k), "pass"))
    out.append(("set", r"\{2, 3\}", box("2"), "wrong"))
    # the empty set
    for k, r in enumerate([r"\varnothing", r"\emptyset", r"\{\}", r"∅", r"\{ \}", r"x \in \emptyset", r"\O"]):
        out.append(("empty", r"\emptyset", box(r, k), "pass"))
        out.append(("empty", r"\varnothing", box(r, k + 1), "pass"))
    for k, r in enumerate([r"\{0\}", r"0", r"\{\emptyset\}", r"\mathbb{R}"]):
        out.append(("empty", r"\emptyset", box(r, k), "wrong"))
    return out


def interval_cases() -> list[Case]:
    table = [
        ("(2, 5]", [r"2<x\le5", r"2 < x \leq 5", r"x \in (2,5]", r"(2,5]", r"\left(2, 5\right]", r"5 \ge x > 2",
                    r"x>2 \text{ and } x\le5", r"(2,\,5]", r"\{x \mid 2 < x \le 5\}", r"2<x≤5"],
         [r"[2,5]", r"(2,5)", r"2 < x < 5", r"2 \le x \le 5", r"(2, 6]", r"x > 2"]),
        (r"[0, \infty)", [r"x \ge 0", r"[0,\infty)", r"0 \le x", r"x \geq 0", r"[0, +\infty)", r"x\in[0,\infty)", r"[0,∞)"],
         [r"x > 0", r"(0, \infty)", r"(-\infty, 0]", r"[1, \infty)"]),
        (r"(-\infty, 2) \cup (5, \infty)", [r"x<2 \text{ or } x>5", r"(-\infty,2)\cup(5,+\infty)",
                                            r"x \in (-\infty, 2) \cup (5, \infty)", r"(5,\infty)\cup(-\infty,2)",
                                            r"x < 2 \text{ or } x > 5"],
         [r"(-\infty,2]\cup(5,\infty)", r"(2, 5)", r"x<2", r"(-\infty, 2) \cup [5, \infty)"]),
        ("[-1, 3]", [r"-1 \le x \le 3", r"[-1,3]", r"x\in[-1,3]", r"-1\leq x\leq 3", r"\left[-1, 3\right]"],
         [r"(-1, 3)", r"[-1, 3)", r"-1 < x \le 3", r"[1, 3]", r"-1, 3"]),
        ("x > 3", [r"(3, \infty)", r"x>3", r"3 < x", r"x \in (3,\infty)"], [r"x \ge 3", r"[3,\infty)", r"x<3"]),
    ]
    out: list[Case] = []
    for g, good, bad in table:
        for k, r in enumerate(good):
            out.append(("interval", g, box(r, k), "pass"))
        for k, r in enumerate(bad):
            out.append(("interval", g, box(r, k), "wrong"))
    return out


def tuple_cases() -> list[Case]:
    table = [
        ("tuple", "(1, 2)", [r"(1,2)", r"\left(1, 2\right)", r"x=1, y=2", r"(1,\ 2)", r"x = 1,\ y = 2", r"\left( 1 , 2 \right)",
                             r"(x, y) = (1, 2)", r"1, 2", r"(1.0, 2)", r"\left(1,2\right)."],
         [r"(2, 1)", r"(1, -2)", r"1", r"(1, 2, 3)", r"x = 2, y = 1", r"(1,3)"]),
        ("tuple", r"(3, -1)", [r"(3,-1)", r"x = 3, y = -1", r"(3, −1)", r"\left(3,-1\right)"], [r"(-1, 3)", r"(3, 1)"]),
        ("tuple", r"\left(-\frac{1}{2}, 4\right)", [r"(-\frac12, 4)", r"(-0.5, 4)", r"\left(-\dfrac{1}{2}, 4\right)",
                                                    r"(-1/2, 4)"], [r"(\frac12, 4)", r"(4, -\frac12)"]),
        ("tuple", "a = 3, b = 4", [r"a=3, b=4", r"b = 4, a = 3", r"a=3,\ b=4", r"(a, b) = (3, 4)", r"3, 4"],
         [r"a = 4, b = 3", r"4, 3", r"a = 3", r"a = 3, b = 5"]),
        ("matrix", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", [r"\begin{bmatrix} 1 \\ 2 \end{bmatrix}", r"\begin{pmatrix}1\\2\end{pmatrix}",
                                                             r"(1, 2)", r"\left(\begin{matrix}1\\2\end{matrix}\right)"],
         [r"\begin{pmatrix} 2 \\ 1 \end{pmatrix}", r"\begin{pmatrix} 1 \\ 3 \end{pmatrix}"]),
        ("matrix", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", [r"\begin{bmatrix}1&2\\3&4\end{bmatrix}",
                                                                     r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}",
                                                                     r"\begin{pmatrix} 1.0 & 2 \\ 3 & \frac{8}{2} \end{pmatrix}"],
         [r"\begin{pmatrix} 1 & 3 \\ 2 & 4 \end{pmatrix}", r"\begin{pmatrix} 1 & 2 \\ 3 & 5 \end{pmatrix}"]),
    ]
    out: list[Case] = []
    for cat, g, good, bad in table:
        for k, r in enumerate(good):
            out.append((cat, g, box(r, k), "pass"))
        for k, r in enumerate(bad):
            out.append((cat, g, box(r, k), "wrong"))
    return out


def expression_cases() -> list[Case]:
    table = [
        ("expression", "x^2+2x+1", [r"(x+1)^2", r"x^2 + 2x + 1", r"1+2x+x^2", r"x^{2}+2x+1", r"x\cdot x + 2x + 1", r"(1+x)^{2}"],
         [r"x^2+1", r"(x-1)^2", r"x^2+2x", r"(x+1)^3"]),
        ("expression", "2x+3", [r"3+2x", r"y = 2x + 3", r"f(x) = 2x+3", r"2x + 3", r"2\cdot x + 3", r"2*x+3", r"2 x + 3"],
         [r"2x-3", r"3x+2", r"2x", r"y = 2x + 3 \text{ or } y = 2x"]),
        ("expression", r"\frac{x+1}{x-1}", [r"\frac{1+x}{x-1}", r"\dfrac{x+1}{x-1}", r"(x+1)/(x-1)", r"\frac{-x-1}{1-x}"],
         [r"\frac{x-1}{x+1}", r"\frac{x+1}{x+1}"]),
        ("equation", "y = 2x + 1", [r"y=2x+1", r"y = 1 + 2x", r"2x - y + 1 = 0", r"y-2x=1"], [r"y = 2x - 1", r"y = x + 1"]),
        ("text", r"\text{Monday}", [r"\text{Monday}", r"Monday", r"\textbf{Monday}", r"\text{ Monday }"],
         [r"\text{Tuesday}", r"Tuesday"]),
        ("text", r"\text{(A)}", [r"(A)", r"\text{(A)}", r"A", r"\text{A}", r"\textbf{(A)}", r"\mathrm{(A)}"],
         [r"(B)", r"B", r"\text{(B)}"]),
    ]
    out: list[Case] = []
    for cat, g, good, bad in table:
        for k, r in enumerate(good):
            out.append((cat, g, box(r, k), "pass"))
        for k, r in enumerate(bad):
            out.append((cat, g, box(r, k), "wrong"))
    return out


def completion_cases() -> list[Case]:
    """Whole completions: the same value boxed twice, a box inside display math, nested wrappers."""
    out: list[Case] = [
        ("completion", r"\frac{1}{2}", r"So $x = \boxed{\frac{1}{2}} = \boxed{0.5}$.", "pass"),
        ("completion", "5", r"First we find \boxed{5}. Checking: indeed the answer is \boxed{5}.", "pass"),
        ("completion", "5", r"$$\boxed{x = 5}$$", "pass"),
        ("completion", "5", r"The answer is \boxed{\textbf{5}}.", "pass"),
        ("completion", "5", r"The answer is $\boxed{5}$", "pass"),
        ("completion", "5", r"\boxed{\boxed{5}}", "pass"),
        ("completion", "5", r"Answer: \fbox{5}", "pass"),
        ("completion", "5", r"\boxed 5", "pass"),
        ("completion", "5", r"The answer is \boxed{5}. (Not 4, which fails the check.)", "pass"),
        ("completion", "5", r"It is either \boxed{5} or \boxed{4}.", "wrong"),
        ("completion", "5", r"\boxed{4}", "wrong"),
        ("completion", "5", r"The answer is 5.", "format"),
        ("completion", r"\frac{1}{2}", r"\boxed{\frac12} or maybe \boxed{\frac13}", "wrong"),
    ]
    return out


def extra_cases() -> list[Case]:
    """One-off ordinary forms and near misses (currency, chains of equalities, number words, vectors in
    angle brackets, 'all real numbers', approximations after the exact value, absolute values ...)."""
    table = [
        ('1234.56', '\\$1,234.56', 'pass'),
        ('1.5', '1\\frac{1}{2} \\text{ hours}', 'pass'),
        ('1.5', '1.5 \\text{ hours}', 'pass'),
        ('-\\frac{3}{2}', 'x = -\\frac{3}{2}', 'pass'),
        ('-\\frac{3}{2}', '-1\\tfrac{1}{2}', 'pass'),
        ('-\\frac{3}{2}', '\\frac{3}{-2}', 'pass'),
        ('\\frac{\\sqrt{2}}{2}', '\\sqrt{2}/2', 'pass'),
        ('0.5', '2^{-1}', 'pass'),
        ('1000', '10^3', 'pass'),
        ('500', '5.0 \\times 10^{2}', 'pass'),
        ('\\frac{3}{4}', '\\frac{6}{8} = \\frac{3}{4}', 'pass'),
        ('\\frac{3}{4}', '\\frac{6}{8} = \\frac{2}{4}', 'wrong'),
        ('12', '5 \\text{ (cm)}', 'wrong'),
        ('12\\text{ cm}', '12', 'pass'),
        ('\\$18', '18', 'pass'),
        ('18 \\text{ dollars}', '\\$18.00', 'pass'),
        ('\\frac{1}{2}', '50\\%', 'pass'),
        ('x=5', '5', 'pass'),
        ('2, 3', 'x = 2 \\text{ or } 3', 'pass'),
        ('-1, \\frac{1}{2}', 'x = -1 \\text{ and } x = \\frac{1}{2}', 'pass'),
        ('2, 3', '(2, 3)', 'pass'),
        ('(-\\infty, -1] \\cup [3, \\infty)', 'x \\leq -1 \\text{ or } x \\geq 3', 'pass'),
        ('[-2, 3)', '-2 \\le x < 3', 'pass'),
        ('(3, \\infty)', '\\{x : x > 3\\}', 'pass'),
        ('(-\\infty, \\infty)', '\\mathbb{R}', 'pass'),
        ('(-\\infty, \\infty)', 'x \\in \\mathbb{R}', 'pass'),
        ('(-\\infty, \\infty)', '\\text{all real numbers}', 'pass'),
        ('\\langle 1, 2, 3 \\rangle', '(1, 2, 3)', 'pass'),
        ('(1, 2, 3)', '\\langle 1, 2, 3 \\rangle', 'pass'),
        ('(1, 2)', 'x = 1 \\text{ and } y = 2', 'pass'),
        ('\\frac{1}{x}', 'x^{-1}', 'pass'),
        ('e^{2x}', '\\exp(2x)', 'pass'),
        ('2\\ln 2', '\\ln 4', 'pass'),
        ('\\frac{\\pi}{2} - 1', '\\frac{\\pi - 2}{2}', 'pass'),
        ('\\text{Yes}', 'yes', 'pass'),
        ('\\text{yes}', '\\text{Yes}', 'pass'),
        ('\\text{Yes}', 'No', 'wrong'),
        ('C', '\\text{(C)}', 'pass'),
        ('\\text{odd}', 'odd', 'pass'),
        ('\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}', '\\left[\\begin{array}{cc}1&2\\\\3&4\\end{array}\\right]', 'pass'),
        ('\\frac{\\pi}{6}', '\\frac{\\pi}{6}\\text{ rad}', 'pass'),
        ('\\frac{\\pi}{6}', '\\frac{\\pi}{6} \\text{ radians}', 'pass'),
        ('\\frac{5}{2}', '2 1/2', 'pass'),
        ('3', 'x \\approx 3', 'pass'),
        ('3', '3 \\le x \\le 4', 'wrong'),
        ('3', '\\{3\\}', 'pass'),
        ('3', '3 \\text{ (or } 4)', 'wrong'),
        ('12', '\\text{12}', 'pass'),
        ('-5', '−5', 'pass'),
        ('4', '\\sqrt{16}', 'pass'),
        ('4', '\\pm 4', 'wrong'),
        ('4', '\\pm\\sqrt{16}', 'wrong'),
        ('5', '\\boxed{5}\\text{ cm}', 'pass'),
        ('0.25', '\\frac{1}{4}', 'pass'),
        ('0.25', '25\\%', 'pass'),
        ('0.25', '2.5\\%', 'wrong'),
        ('40', '40\\%', 'pass'),
        ('\\frac{2}{5}', '40\\%', 'pass'),
        ('\\frac{2}{5}', '0.4', 'pass'),
        ('\\frac{2}{5}', '4\\%', 'wrong'),
        ('8', '8 \\text{ cm}^3', 'pass'),
        ('1', '1.', 'pass'),
        ('1', '\\text{one}', 'pass'),
        ('2', '\\text{two}', 'pass'),
        ('\\dfrac{1}{2}', '\\frac{1}{2}', 'pass'),
        ('1', 'x^0', 'pass'),
        ('6', '3!', 'pass'),
        ('5', '|-5|', 'pass'),
        ('5', '\\left|-5\\right|', 'pass'),
        ('\\infty', '\\infty', 'pass'),
        ('-\\infty', '-\\infty', 'pass'),
        ('\\infty', '-\\infty', 'wrong'),
        ('0', '\\infty', 'wrong'),
        ('4', '2 + 2 = 4', 'pass'),
        ('12', '3 \\times 4 = 12', 'pass'),
        ('12', '3 \\times 4 = 13', 'wrong'),
        ('15', '15\\text{ cm}^2', 'pass'),
        ('7', '7 \\text{ ways}', 'pass'),
        ('7', '\\text{7 ways}', 'pass'),
        ('10', '\\$10', 'pass'),
        ('10', '10 \\text{ dollars}', 'pass'),
        ('10', '\\text{\\$}10', 'pass'),
        ('\\frac{1}{6}', '\\frac{1}{6} \\approx 0.1667', 'pass'),
        ('\\frac{1}{6}', '0.1667', 'wrong'),
        ('\\sqrt{3}', '\\sqrt{3} \\approx 1.732', 'pass'),
        ('2\\sqrt{5}', '2\\sqrt5', 'pass'),
        ('y=3x-2', 'y = 3x - 2', 'pass'),
        ('y=3x-2', '3x - 2', 'pass'),
        ('y=3x-2', 'y = 3x + 2', 'wrong'),
        ('x^2 + y^2 = 25', 'x^2+y^2=25', 'pass'),
        ('x^2 + y^2 = 25', 'y^2 + x^2 = 25', 'pass'),
        ('x^2 + y^2 = 25', 'x^2 + y^2 = 5', 'wrong'),
        ('\\frac{5}{2}', '2\\tfrac12', 'pass'),
        ('5', '2\\frac{1}{2}', 'wrong'),
        ('2', 'x = 2 = 2.0', 'pass'),
        ('3', '\\text{three}', 'pass'),
        ('3', '\\text{four}', 'wrong'),
        ('(1,2)', 'x = 1 \\text{ or } y = 2', 'wrong'),
        ('\\frac{7}{3}', '2\\frac{1}{3}', 'pass'),
        ('\\frac{7}{3}', '2.\\overline{3}', 'pass'),
        ('\\frac{7}{3}', '2.33', 'wrong'),
        ('-4', 'x=-4', 'pass'),
        ('-4', '\\textbf{x = -4}', 'pass'),
        ('-4', '4', 'wrong'),
        ('1, -5', 'x = 1 \\text{ or } x = -5', 'pass'),
        ('1, -5', 'x = -5, \\; x = 1', 'pass'),
        ('1, -5', '-5 \\text{ and } 1', 'pass'),
        ('1, -5', '1', 'wrong'),
        ('1, -5', '1, -5, 0', 'wrong'),
        ('3\\sqrt{2}', '\\sqrt{18}', 'pass'),
        ('3\\sqrt{2}', '4.24', 'wrong'),
        ('\\frac{\\pi}{3}', '60^\\circ', 'pass'),
        ('\\frac{\\pi}{3}', '60', 'wrong'),
        ('72', '72\\%', 'pass'),
        ('72', '\\text{72\\%}', 'pass'),
        ('2.5', '\\frac{5}{2} \\text{ km}', 'pass'),
        ('2.5', '2\\frac12\\text{ km}', 'pass'),
        ('2.5', '2.6 \\text{ km}', 'wrong'),
        ('4.5\\times10^{-3}', '0.0045', 'pass'),
        ('4.5\\times10^{-3}', '4.5 \\times 10^{-3}\\ \\text{mol}', 'pass'),
        ('4.5\\times10^{-3}', '4.6\\times10^{-3}', 'wrong'),
        ('4.5\\times10^{-3}', '0.045', 'wrong'),
        ('(-1, 4)', '\\left(-1,\\ 4\\right)', 'pass'),
        ('(-1, 4)', '(-1,4]', 'wrong'),
        ('[1, 4)', '1 \\le x < 4', 'pass'),
        ('[1, 4)', '1 < x < 4', 'wrong'),
        ('\\{1, 2, 3\\}', '\\{3, 2, 1\\}', 'pass'),
        ('\\{1, 2, 3\\}', '\\{1, 2\\}', 'wrong'),
        ('\\dfrac{3\\sqrt{3}}{4}', '\\frac{3}{4}\\sqrt{3}', 'pass'),
        ('\\dfrac{3\\sqrt{3}}{4}', '\\frac{3\\sqrt{3}}{2}', 'wrong'),
        ('1-i', '-i+1', 'pass'),
        ('1-i', '1+i', 'wrong'),
        ('20', '\\$20.00', 'pass'),
        ('20', '20.00 \\text{ dollars}', 'pass'),
        ('20', '\\$21', 'wrong'),
        ('1{,}200', '1200', 'pass'),
        ('1200', '1.2\\times 10^3', 'pass'),
        ('1200', '1.2 \\text{ thousand}', 'pass'),
        ('1200000', '1.2 million', 'pass'),
        ('1200000', '\\$1.2 \\text{ million}', 'pass'),
        ('1200000', '1.3 million', 'wrong'),
        ('72', '\\text{72\\%}', 'pass'),
        ('1200', '1.2 \\text{ thousand}', 'pass'),
        ('\\frac{3}{4}', '\\frac {3} {4}', 'pass'),
        ('\\frac{3}{4}', '3 / 4', 'pass'),
        ('\\frac{3}{4}', '75\\%', 'pass'),
        ('\\frac{3}{4}', '¾', 'pass'),
        ('300000000', '3\\times 10^{8}\\ \\mathrm{m\\,s^{-1}}', 'pass'),
        ('9.8', '9.8 \\, \\text{m/s}^2', 'pass'),
        ('5', '5\\text{ m}^{2}', 'pass'),
        ('5', '5 USD', 'pass'),
        ('2, 3', 'x = 2, 3', 'pass'),
        ('2, 3', '\\boxed{x = 2, 3}', 'pass'),
        ('(1, 2), (3, 4)', '(3, 4), (1, 2)', 'pass'),
        ('(1, 2), (3, 4)', '(1,2) \\text{ and } (3,4)', 'pass'),
        ('(1, 2), (3, 4)', '\\{(1,2),(3,4)\\}', 'pass'),
        ('(1, 2), (3, 4)', '(1, 2)', 'wrong'),
        ('(1, 2), (3, 4)', '(1, 2), (4, 3)', 'wrong'),
        ('(1, 2)', '\\mathbf{v} = (1, 2)', 'pass'),
        ('(1, 2)', '\\vec{v} = (1, 2)', 'pass'),
        ('\\frac{x-3}{2}', 'f^{-1}(x) = \\frac{x-3}{2}', 'pass'),
        ('\\frac{x-3}{2}', 'f^{-1}(x) = \\frac{x+3}{2}', 'wrong'),
        ('2x', "f'(x) = 2x", 'pass'),
        ('2x', '\\frac{dy}{dx} = 2x', 'pass'),
        ('12', '\\text{Area} = 12', 'pass'),
        ('12', '\\text{Area} = 12\\text{ cm}^2', 'pass'),
        ('5', 'AB = 5', 'pass'),
        ('5', '\\overline{AB} = 5', 'pass'),
        ('5', 'AB = 6', 'wrong'),
        ('0.25', '\\frac{1}{4} = 25\\%', 'pass'),
        ('0.25', '25\\% = 0.25', 'pass'),
        ('55', 'S_{10} = 55', 'pass'),
        ('2n+1', 'a_n = 2n+1', 'pass'),
        ('\\frac{1}{4}', 'P = \\frac{1}{4}', 'pass'),
        ('\\frac{1}{4}', 'P(A) = \\frac{1}{4}', 'pass'),
        ('\\frac{x^2-1}{x+1}', 'x-1', 'pass'),
        ('\\sqrt{2}', '\\sqrt{2}\\text{ units}', 'pass'),
        ('-\\frac{1}{2}', '-0.5', 'pass'),
        ('-\\frac{1}{2}', '−0.5', 'pass'),
        ('-\\frac{1}{2}', '\\frac{1}{2}', 'wrong'),
        ('8', '8 \\text{ cm}', 'pass'),
        ('8', '8 \\text{cm}', 'pass'),
        ('8', '8cm', 'pass'),
        ('8', '8\\,\\text{cm}', 'pass'),
        ('1.5', '\\frac{3}{2}\\text{ hours}', 'pass'),
        ('90', '90 \\text{ minutes}', 'pass'),
        ('\\$1.50', '1.50', 'pass'),
        ('\\$1.50', '\\$1.5', 'pass'),
        ('\\$1.50', '1.05', 'wrong'),
        ('6', '6\\text{ ways}.', 'pass'),
        ('6', '\\text{6}', 'pass'),
        ('6', '\\mathrm{6}', 'pass'),
        ('6', '6.00', 'pass'),
        ('3', '3 \\; (\\text{since } x > 0)', 'pass'),
        ('-2', '-2 \\quad \\text{(rejected 3)}', 'pass'),
        ('3', '3 \\text{ (or } 4)', 'wrong'),
        ('3', '3 \\text{ or } 4 \\text{ (since both work)}', 'wrong'),
        ('3', '3 \\quad \\text{(since } 4 \\text{ fails)}', 'pass'),
        ('B', '\\textbf{(B)}', 'pass'),
        ('B', '\\textbf{(B)}\\ 12', 'pass'),
        ('B', '(B)\\ 12', 'pass'),
        ('B', '\\text{(B) } 12', 'pass'),
        ('B', '\\text{B}', 'pass'),
        ('B', '(C)', 'wrong'),
        ('\\text{(B)}', 'B', 'pass'),
        ('\\textbf{(B) }12', 'B', 'pass'),
        ('\\textbf{(B) }12', '12', 'pass'),
        ('\\textbf{(B) }12', '\\textbf{(C) }13', 'wrong'),
        ('2', '\\text{x = 2}', 'pass'),
        ('12', '\\text{12 inches}', 'pass'),
        ('\\frac{1}{2}', '\\frac{1}{2}\\text{.}', 'pass'),
        ('\\frac{1}{2}', '\\frac{1}{2}.', 'pass'),
        ('\\frac{1}{2}', '\\left. \\frac{1}{2} \\right.', 'pass'),
        ('5', '\\text{The answer is } 5', 'pass'),
        ('5', '5\\text{ is the answer}', 'pass'),
        ('300000000', '3.00 \\times 10^{8} \\mathrm{~m} / \\mathrm{s}', 'pass'),
        ('50', '50 \\mathrm{~J}', 'pass'),
        ('50', '50\\text{ J}', 'pass'),
        ('50', '50 \\, \\mathrm{kg \\, m^2}', 'pass'),
        ('50', '50\\,\\Omega', 'pass'),
        ('50', '50 \\ \\Omega', 'pass'),
        ('50', '50\\,\\mu\\text{m}', 'pass'),
        ('50', '50 \\text{ N}\\cdot\\text{m}', 'pass'),
        ('50', '50\\ \\mathrm{mol/L}', 'pass'),
        ('50', '50 \\mathrm{kJ/mol}', 'pass'),
        ('50', '50 km/h', 'pass'),
        ('50', '50\\text{ km}/\\text{h}', 'pass'),
        ('50', '50 \\mathrm{eV}', 'pass'),
        ('50', '51 \\mathrm{eV}', 'wrong'),
        ('4.2', '4.2 \\, \\text{V}', 'pass'),
        ('4.2', '4.2\\,\\mathrm{V}', 'pass'),
        ('4.2', '4.3\\,\\mathrm{V}', 'wrong'),
        ('9.81', '9.81\\ \\frac{\\text{m}}{\\text{s}^2}', 'pass'),
        ('9.81', '9.81 \\mathrm{~m/s^2}', 'pass'),
        ('2.5', '2.5 \\text{ hrs}', 'pass'),
        ('100', '100\\text{ cm}^{3}', 'pass'),
        ('100', '100 \\text{ cm}^3', 'pass'),
        ('100', '100\\,\\text{mL}', 'pass'),
        ('1.5\\times10^{-3}', '1.5 \\text{ mA}', 'wrong'),
        ('2\\mu', '2', 'wrong'),
        ('2', '2\\mu', 'wrong'),
        ('50', '50\\,\\mu\\text{m}', 'pass'),
        ('50', '50 \\mu m', 'pass'),
        ('[3, \\infty)', '3 <= x', 'pass'),
        ('[3, \\infty)', 'x >= 3', 'pass'),
        ('3', '3 <= x', 'wrong'),
        ('(-\\infty, 1) \\cup (3, \\infty)', '(-\\infty,1)\\,\\cup\\,(3,\\infty)', 'pass'),
        ('(-\\infty, 1) \\cup (3, \\infty)', 'x < 1 \\text{ or } 3 < x', 'pass'),
        ('(-\\infty, 1) \\cup (3, \\infty)', '\\{x \\mid x < 1 \\text{ or } x > 3\\}', 'pass'),
        ('(-\\infty, 1) \\cup (3, \\infty)', '(-\\infty,1] \\cup (3,\\infty)', 'wrong'),
        ('(-\\infty, 1) \\cup (3, \\infty)', '(1, 3)', 'wrong'),
        ('[-2, 2]', '|x| \\le 2', 'pass'),
        ('[-2, 2]', '-2 \\leqslant x \\leqslant 2', 'pass'),
        ('[-2, 2]', 'x \\in [-2,2]', 'pass'),
        ('[-2, 2]', '[-2,2)', 'wrong'),
        ('(0, 1)', '0 < x < 1', 'pass'),
        ('(0, 1)', '\\{x: 0<x<1\\}', 'pass'),
        ('\\begin{pmatrix} 2 & -1 \\\\ 0 & 3 \\end{pmatrix}', '\\begin{bmatrix} 2 & -1 \\\\ 0 & 3 \\end{bmatrix}', 'pass'),
        ('\\begin{pmatrix} 2 & -1 \\\\ 0 & 3 \\end{pmatrix}', '\\left[\\begin{matrix} 2 & -1 \\\\ 0 & 3 \\end{matrix}\\right]', 'pass'),
        ('\\begin{pmatrix} 2 & -1 \\\\ 0 & 3 \\end{pmatrix}', '\\begin{pmatrix} 2 & 1 \\\\ 0 & 3 \\end{pmatrix}', 'wrong'),
        ('\\begin{pmatrix} \\frac{1}{2} \\\\ -1 \\end{pmatrix}', '\\begin{pmatrix} 0.5 \\\\ -1 \\end{pmatrix}', 'pass'),
        ('\\begin{pmatrix} \\frac{1}{2} \\\\ -1 \\end{pmatrix}', '\\left(\\frac{1}{2}, -1\\right)', 'pass'),
        ('(2, -1, 3)', '\\langle 2, -1, 3 \\rangle', 'pass'),
        ('(2, -1, 3)', 'x = 2, y = -1, z = 3', 'pass'),
        ('(2, -1, 3)', 'x=2,\\ y=-1,\\ z=3', 'pass'),
        ('(2, -1, 3)', '(2, 3, -1)', 'wrong'),
        ('2, -1', 'x=2 \\text{ or } x=-1', 'pass'),
        ('2, -1', '2 \\text{ or } -1', 'pass'),
        ('2, -1', '-1 \\text{ and } 2', 'pass'),
        ('2, -1', 'x = -1, 2', 'pass'),
        ('2, -1', 'x \\in \\{-1, 2\\}', 'pass'),
        ('2, -1', '\\{-1,2\\}', 'pass'),
        ('2, -1', 'x=2', 'wrong'),
        ('2, -1', 'x = \\pm 1', 'wrong'),
        ('\\pm 2', '2, -2', 'pass'),
        ('\\pm 2', 'x = \\pm 2', 'pass'),
        ('\\pm 2', '-2 \\text{ or } 2', 'pass'),
        ('\\pm 2', '2', 'wrong'),
        ('-2 \\pm \\sqrt{3}', '-2+\\sqrt{3}, -2-\\sqrt{3}', 'pass'),
        ('-2 \\pm \\sqrt{3}', 'x = -2 \\pm \\sqrt{3}', 'pass'),
        ('-2 \\pm \\sqrt{3}', '-2+\\sqrt{3}', 'wrong'),
        ('1 \\pm 2i', '1+2i, 1-2i', 'pass'),
        ('1 \\pm 2i', '1 - 2i \\text{ and } 1 + 2i', 'pass'),
        ('1 \\pm 2i', '1+2i', 'wrong'),
        ('\\frac{-3 \\pm \\sqrt{5}}{2}', '\\frac{-3+\\sqrt{5}}{2}, \\frac{-3-\\sqrt{5}}{2}', 'pass'),
        ('\\frac{-3 \\pm \\sqrt{5}}{2}', '-\\frac{3}{2} \\pm \\frac{\\sqrt{5}}{2}', 'pass'),
        ('1011_2', '1011_{2}', 'pass'),
        ('1011_2', '(1011)_2', 'pass'),
        ('1011_2', '1011', 'pass'),
        ('1011_2', '1101_2', 'wrong'),
        ('3:4', '3 : 4', 'pass'),
        ('3:4', '3:5', 'wrong'),
        ('12:30', '12{:}30', 'pass'),
        ('\\frac{3}{4}', '\\frac{3}{4} \\text{ of the pie}', 'pass'),
        ('5', '5 \\text{ (answer)}', 'pass'),
        ('-1', '-1 \\text{ (double root)}', 'pass'),
        ('2', 'x = 2 \\text{ (double root)}', 'pass'),
    ]
    return [("forms", g, a if "\\boxed" in a else box(a, k), w) for k, (g, a, w) in enumerate(table)]


GENERATORS = [integer_cases, decimal_cases, fraction_cases, percent_cases, scientific_cases, degree_cases,
              surd_pi_complex_cases, set_cases, interval_cases, tuple_cases, expression_cases, completion_cases, extra_cases]


def all_cases() -> list[Case]:
    out: list[Case] = []
    for gen in GENERATORS:
        out += gen()
    seen, uniq = set(), []
    for c in out:
        if (c[1], c[2]) not in seen:
            seen.add((c[1], c[2]))
            uniq.append(c)
    return uniq


def _mathverify_direct(gold: str, completion: str) -> bool:
    from math_verify import parse, verify

    try:
        return bool(verify(parse("\\boxed{" + gold + "}", parsing_timeout=None),
                           parse(completion, parsing_timeout=None), timeout_seconds=None))
    except Exception:  # noqa: BLE001 - math-verify's own failure is a rejection
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write every case and verdict here")
    ap.add_argument("--mathverify", action="store_true", help="also judge with math-verify used directly")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--quiet", action="store_true", help="do not list the disagreements")
    args = ap.parse_args(argv)
    cases = all_cases()
    if args.limit:
        cases = cases[: args.limit]
    mv = MathVerifier(timeout_s=10.0)
    rows, t0 = [], time.perf_counter()
    stats: dict[str, Counter] = defaultdict(Counter)
    direct: Counter = Counter()
    for cat, gold, comp, want in cases:
        v = mv.verify(Task(id=cat, prompt="?", kind="math", gold={"answer": gold}), comp)
        got = v.outcome
        ok = (got == "pass") == (want == "pass") and (want != "format" or got == "format")
        s = stats[cat]
        s["cases"] += 1
        s[want] += 1
        if want == "pass" and got != "pass":
            s["rejected"] += 1
        if want != "pass" and got == "pass":
            s["accepted"] += 1
        if args.mathverify and want in ("pass", "wrong"):
            d = _mathverify_direct(gold, comp)
            direct["rejected" if want == "pass" and not d else "accepted" if want == "wrong" and d else "ok"] += 1
        rows.append({"category": cat, "gold": gold, "completion": comp, "expected": want, "outcome": got,
                     "agrees": ok, "reason": v.details.get("reason", "")})
        if not ok and not args.quiet:
            print(f"[{cat}] gold {gold!r} | {comp!r}: expected {want}, got {got} ({v.details.get('reason', '')})")
    mv.close()
    tot = Counter()
    print(f"\n{'category':<14}{'cases':>7}{'correct':>9}{'rejected':>10}{'wrong':>7}{'accepted':>10}")
    for cat, s in sorted(stats.items()):
        print(f"{cat:<14}{s['cases']:>7}{s['pass']:>9}{s['rejected']:>10}{s['wrong'] + s['format']:>7}{s['accepted']:>10}")
        tot.update(s)
    n_pass, n_wrong = tot["pass"], tot["wrong"] + tot["format"]
    print(f"{'total':<14}{tot['cases']:>7}{n_pass:>9}{tot['rejected']:>10}{n_wrong:>7}{tot['accepted']:>10}")
    print(f"correct rejected: {tot['rejected']}/{n_pass} ({100 * tot['rejected'] / max(n_pass, 1):.1f}%), "
          f"wrong accepted: {tot['accepted']}/{n_wrong}; {time.perf_counter() - t0:.0f}s")
    if args.mathverify:
        print(f"math-verify directly: correct rejected {direct['rejected']}/{n_pass} "
              f"({100 * direct['rejected'] / max(n_pass, 1):.1f}%), wrong accepted {direct['accepted']}/{tot['wrong']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": {k: dict(v) for k, v in stats.items()}, "cases": rows}, f, indent=1)
    return 0 if tot["rejected"] == 0 and tot["accepted"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
