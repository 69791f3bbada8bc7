"""Child process that runs math-verify for :class:`rlvr.verifiers.math.MathVerifier`.

Run as a plain script (``python -I _math_worker.py --memory-mb N``): it imports no rlvr module, so it
starts in any environment where math-verify is installed. Protocol: one JSON request per stdin line
``{"gold": str, "cands": [str], "soft_s": float, "max_digits": float}``, one JSON reply per stdout line
``{"outcome": "pass"|"wrong"|"timeout"|"infra", "reason": str}``. The first line written is
``{"ready": true}``.

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


_GOLD_CACHE: dict[str, list] = {}


def _parse(text: str):
    from math_verify import parse

    return parse("\\boxed{" + text + "}", parsing_timeout=None)


def judge(gold: str, cands: list[str], max_digits: float = MAX_DIGITS) -> dict:
    """Compare every candidate with the gold; all of them must match (several answers = hedge)."""
    from math_verify import verify

    g = _GOLD_CACHE.get(gold)
    if g is None:
        g = _parse(gold)
        if len(_GOLD_CACHE) > 4096:
            _GOLD_CACHE.clear()
        _GOLD_CACHE[gold] = g
    if not g:
        return {"outcome": "infra", "reason": f"gold answer {gold[:80]!r} could not be parsed"}
    gold_shape = _shape(g[0])
    for c in cands:
        p = _parse(c)
        if not p:
            return {"outcome": "wrong", "reason": f"answer {c[:80]!r} could not be parsed"}
        shape = _shape(p[0])
        if gold_shape == "scalar" and shape in ("set", "relation", "tuple", "matrix"):
            return {"outcome": "wrong", "reason": f"hedge: a {shape} where one value is expected"}
        why = _too_big(p, g, max_digits)
        if why:
            return {"outcome": "wrong", "reason": why}
        if not verify(g, p, timeout_seconds=None):
            return {"outcome": "wrong", "reason": "not equivalent" if len(cands) == 1 else
                    f"hedge: {len(cands)} different answers, {c[:40]!r} is wrong"}
    return {"outcome": "pass", "reason": ""}


def _handle(line: str) -> dict:
    req = json.loads(line)
    signal.setitimer(signal.ITIMER_REAL, float(req.get("soft_s", 4.0)))
    try:
        return judge(str(req["gold"]), [str(c) for c in req["cands"]], float(req.get("max_digits", MAX_DIGITS)))
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
