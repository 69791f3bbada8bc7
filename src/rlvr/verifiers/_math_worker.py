"""Child process that runs math-verify for :class:`rlvr.verifiers.math.MathVerifier`.

Run as a plain script (``python -I _math_worker.py --memory-mb N``): it imports no rlvr module, so it
starts in any environment where math-verify is installed. Protocol: one JSON request per stdin line
``{"pairs": [[gold_side, answer_side], ...], "rel_tol": float, "soft_s": float, "max_digits": float}``
where a side is an item ``{"text": latex, "pct": bool, "rad": latex}`` (from
:mod:`rlvr.verifiers.math_answer`) or ``{"union": [item, ...], "op": "or"|"and"}`` (relations joined
into one set); one JSON reply per stdout line ``{"outcome": "pass", "eq": [bool], "reasons": [str]}``
(or ``{"outcome": "timeout"|"infra"|"wrong", "reason": str}``). The first line written is
``{"ready": true}``.

Equality is math-verify's ``verify`` (sets, intervals, relations, matrices, symbolic forms) with its
numeric comparison replaced by :func:`numeric_eq`: exact for exact values, relative tolerance
``rel_tol`` when a decimal is involved -- the rule the parent's fast path applies to plain numbers.

The worker owns its main thread, so it runs math-verify with math-verify's own signal timeouts off and
arms its own soft timer (``setitimer``) that raises a BaseException math-verify cannot swallow. A
payload that blocks inside C code (a huge integer power) ignores that timer; the parent then kills
this process at its hard limit. Address space is capped (RLIMIT_AS) so a memory bomb raises
MemoryError instead of swapping the host. Model text is only ever handed to ``math_verify.parse``
(a LaTeX/expression parser), never to ``eval`` or ``sympify``.
"""

from __future__ import annotations

import json
import math
import signal
import sys

MAX_NODES = 4000  # a parsed answer with more nodes than this is not a final answer
MAX_DIGITS = 10_000  # default log10 magnitude above which a numeric value is a bomb, not an answer


class _SoftTimeout(BaseException):
    """Raised by the soft timer; BaseException so math-verify's ``except Exception`` cannot catch it."""


def _on_alarm(signum, frame):
    raise _SoftTimeout()


def _limit_memory(mb: int) -> None:
    if mb > 0:
        import resource

        lim = mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))


def _shape(e) -> str:
    """Coarse kind of a parsed answer: scalar, set, relation, tuple, matrix or text."""
    from sympy import Basic, Eq, MatrixBase, Set, Symbol, Tuple
    from sympy.core.relational import Relational
    from sympy.logic.boolalg import BooleanFunction

    if isinstance(e, str):
        return "text"
    if isinstance(e, MatrixBase):
        return "matrix"
    if isinstance(e, Set):
        return "set"
    if isinstance(e, Eq) and isinstance(e.lhs, Symbol):  # an assignment "x = 3" is its right side
        return _shape(e.rhs)
    if isinstance(e, (Relational, BooleanFunction)):
        return "relation"
    if isinstance(e, (Tuple, list, tuple)):
        return "tuple"
    return "scalar" if isinstance(e, Basic) else "text"


def _magnitude(e, depth: int = 0) -> float:
    """Estimated log10 of the size of the numbers in ``e`` (inf for towers), without evaluating it."""
    from sympy import Add, Float, Mul, Pow, Rational, factorial

    if depth > 50:
        return math.inf
    if isinstance(e, Rational):  # Integer included
        return max(abs(int(e.p)).bit_length(), abs(int(e.q)).bit_length()) * 0.30103
    if isinstance(e, Float):
        _sign, _man, exp, bits = e._mpf_
        return (abs(exp) + bits) * 0.30103
    if isinstance(e, Pow):
        base, exp = _magnitude(e.base, depth + 1), _magnitude(e.exp, depth + 1)
        if exp > 300:
            return math.inf
        return max(base, 1.0) * (10.0 ** exp)
    if isinstance(e, factorial):
        n = _magnitude(e.args[0], depth + 1)
        return math.inf if n > 7 else (10.0 ** n) * max(n, 1.0)
    if isinstance(e, Mul):
        return sum(_magnitude(a, depth + 1) for a in e.args)
    if isinstance(e, Add) or getattr(e, "args", ()):
        return max((_magnitude(a, depth + 1) for a in e.args), default=0.0)
    return 0.0


def _too_big(parsed, gold_parsed, max_digits: float = MAX_DIGITS) -> str:
    """A reason to refuse comparing ``parsed`` (too many nodes, astronomically large numbers), or ''."""
    from sympy import Basic, preorder_traversal

    exprs = [p for p in parsed if isinstance(p, Basic)]
    for ex in exprs:
        for n, _ in enumerate(preorder_traversal(ex), start=1):
            if n > MAX_NODES:
                return f"answer has more than {MAX_NODES} expression nodes"
        if _magnitude(ex) > max_digits:
            gold_mag = max((_magnitude(g) for g in gold_parsed if isinstance(g, Basic)), default=0.0)
            if gold_mag <= max_digits:
                return f"answer holds a number with more than {max_digits:g} digits"
    return ""


_CACHE: dict[str, list] = {}
REL_TOL_DEFAULT = 1e-9
REL_TOL = 1e-9  # replaced per request


def _parse(text: str):
    """math-verify's parse of one item (cached: the gold's items recur in every request)."""
    from math_verify import parse

    hit = _CACHE.get(text)
    if hit is None:
        hit = parse("\\boxed{" + text + "}", parsing_timeout=None)
        if len(_CACHE) > 4096:
            _CACHE.clear()
        _CACHE[text] = hit
    return hit


def _has_float(e) -> bool:
    from sympy import Basic, Float

    return isinstance(e, Basic) and e.has(Float)


def numeric_eq(a, b, float_rounding=None, numeric_precision=None) -> bool:
    """Replaces math-verify's numeric comparison (which rounds to 6 decimal places, so 1.6e-19 equals
    1.9e-19 and 0.5000004 equals 1/2): exact for exact numbers, and -- when either side holds a
    decimal (a Float) -- equal within REL_TOL of the larger magnitude, as the fast path decides."""
    from sympy import Basic, MatrixBase, Rational

    if isinstance(a, MatrixBase) and isinstance(b, MatrixBase):
        a, b = a.doit(), b.doit()
        return a.shape == b.shape and all(numeric_eq(x, y) for x, y in zip(a, b))
    if not (isinstance(a, Basic) and isinstance(b, Basic)):
        return False
    try:
        a, b = a.doit(), b.doit()
        if a.free_symbols or b.free_symbols or not (a.is_number and b.is_number):
            return False
        if isinstance(a, Rational) and isinstance(b, Rational):
            return bool(a == b)
        if a.is_finite is False or b.is_finite is False:  # oo, -oo, zoo: only the same infinity
            return bool(a == b)
        va, vb = a.evalf(50), b.evalf(50)
        if not (va.is_number and vb.is_number) or va.has(*_NAN) or vb.has(*_NAN):
            return False
        diff, scale = abs(complex(va - vb)), max(abs(complex(va)), abs(complex(vb)))
    except Exception:  # noqa: BLE001 - anything sympy cannot evaluate is not numerically equal
        return False
    tol = REL_TOL if (_has_float(a) or _has_float(b)) else 1e-30
    return diff <= tol * scale if scale else diff == 0


_NAN: tuple = ()


def _install() -> None:
    """Point math-verify at our numeric comparison (it looks the function up at call time)."""
    global _NAN
    from math_verify import grader
    from sympy import nan, zoo

    _NAN = (nan, zoo)
    grader.sympy_numeric_eq = numeric_eq


def _readings(item: dict) -> list:
    """The parsed values an item may mean: as written, /100 with a percent sign, in radians with °."""
    from sympy import Basic, Rational

    out = []
    for text in [item["text"]] + ([item["rad"]] if item.get("rad") else []):
        parsed = _parse(text)
        if parsed and isinstance(parsed[0], Basic):
            e = _imaginary(parsed[0])
            out.append(e)
            if item.get("pct"):
                out.append(e * Rational(1, 100))
        elif parsed:
            out.append(parsed[0])
    return out


def _imaginary(e):
    """Every symbol named ``i`` as the imaginary unit (math-verify's parser gives ``2i`` and ``2 i``
    symbols with different assumptions, which then never compare equal)."""
    from sympy import I

    try:
        syms = [s for s in e.free_symbols if getattr(s, "name", "") == "i"]
        return e.xreplace({s: I for s in syms}) if syms else e
    except Exception:  # noqa: BLE001 - a form without free_symbols is left as parsed
        return e


def _combined(side: dict) -> list:
    """An item, or relations joined by or/and as one set (x < 2 or x > 5 -> their union)."""
    from math_verify.grader import unwrap_fcs
    from sympy import Intersection, Union

    if "union" not in side:
        return _readings(side)
    sets = []
    for item in side["union"]:
        r = _readings(item)
        if not r:
            return []
        try:
            sets.append(unwrap_fcs(r[0]).as_set())
        except Exception:  # noqa: BLE001 - not a relation in one variable
            return []
    return [Union(*sets) if side.get("op") == "or" else Intersection(*sets)]


def _equal(g_side: dict, c_side: dict, max_digits: float) -> tuple[bool, str]:
    from math_verify import verify

    gold, cand = _combined(g_side), _combined(c_side)
    if not gold:
        raise _GoldUnparsed(g_side.get("text", "")[:80])
    if not cand:
        return False, "answer could not be parsed"
    why = _too_big(cand, gold, max_digits)
    if why:
        return False, why
    from sympy.core.relational import Relational

    g_shape, c_shape = _shape(gold[0]), _shape(cand[0])
    if isinstance(gold[0], Relational):  # an equation gold ("y = -2x + 1") meets equations as equals
        g_shape = "relation"
    if g_shape == "scalar" and c_shape in ("set", "relation", "tuple", "matrix"):
        return False, f"hedge: a {c_shape} where one value is expected"
    for g in gold:
        for c in cand:
            if verify([g], [c], timeout_seconds=None, allow_set_relation_comp=True) or _vector_equal(g, c):
                return True, ""
    return False, "not equivalent"


def _entries(e):
    """A column/row vector's or a tuple's entries (an open interval ``(a, b)`` is a pair too), else None."""
    from sympy import Interval, MatrixBase, Tuple

    if isinstance(e, MatrixBase) and 1 in e.shape:
        return list(e)
    if isinstance(e, Tuple):
        return list(e.args)
    if isinstance(e, Interval) and e.left_open and e.right_open and e.start.is_finite and e.end.is_finite:
        return [e.start, e.end]
    return None


def _vector_equal(g, c) -> bool:
    """A vector written as a matrix on one side and as a tuple on the other: entry by entry, in order."""
    from math_verify import verify
    from sympy import MatrixBase

    if isinstance(g, MatrixBase) == isinstance(c, MatrixBase):
        return False
    ge, ce = _entries(g), _entries(c)
    if ge is None or ce is None or len(ge) != len(ce):
        return False
    return all(verify([a], [b], timeout_seconds=None) for a, b in zip(ge, ce))


class _GoldUnparsed(Exception):
    pass


def judge(pairs: list, max_digits: float = MAX_DIGITS) -> dict:
    """Decide each (gold item, answer item) pair; the parent combines them into a verdict."""
    eq, reasons = [], []
    try:
        for g, c in pairs:
            ok, why = _equal(g, c, max_digits)
            eq.append(ok)
            reasons.append(why)
    except _GoldUnparsed as e:
        return {"outcome": "infra", "reason": f"gold answer {str(e)!r} could not be parsed"}
    return {"outcome": "pass", "eq": eq, "reasons": reasons}


def _handle(line: str) -> dict:
    global REL_TOL
    req = json.loads(line)
    REL_TOL = float(req.get("rel_tol", REL_TOL_DEFAULT))
    signal.setitimer(signal.ITIMER_REAL, float(req.get("soft_s", 4.0)))
    try:
        return judge(list(req["pairs"]), float(req.get("max_digits", MAX_DIGITS)))
    except _SoftTimeout:
        return {"outcome": "timeout", "reason": "soft time limit"}
    except MemoryError:
        return {"outcome": "wrong", "reason": "memory limit while comparing (answer too large)"}
    except RecursionError:
        return {"outcome": "wrong", "reason": "answer too deeply nested"}
    except Exception as e:  # noqa: BLE001 - the worker must answer every request
        return {"outcome": "infra", "reason": f"{type(e).__name__}: {str(e)[:200]}"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when its parent goes (PR_SET_PDEATHSIG); no-op elsewhere."""
    import os

    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:  # the parent died before prctl took effect
        sys.exit(0)


def main(argv: list[str]) -> None:
    mb = int(argv[argv.index("--memory-mb") + 1]) if "--memory-mb" in argv else 0
    _die_with_parent(int(argv[argv.index("--parent") + 1]) if "--parent" in argv else 0)
    import logging

    logging.disable(logging.CRITICAL)  # math-verify warns on every disabled timeout
    _limit_memory(mb)
    signal.signal(signal.SIGALRM, _on_alarm)
    import math_verify  # noqa: F401 - import before announcing readiness

    _install()
    _equal({"text": "\\frac{1}{2}"}, {"text": "x \\in [0, 1)"}, MAX_DIGITS)  # warm the parser's lazy loads

    out = sys.stdout
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            res = _handle(line)
        except _SoftTimeout:  # the timer fired between judge() returning and being disarmed
            res = {"outcome": "timeout", "reason": "soft time limit"}
        out.write(json.dumps(res) + "\n")
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
