"""Values by value across the sandbox boundary (sandbox/values.py), argument mirroring, and the
interpreter's environment inside the sandbox wherever it lives (a venv under /tmp)."""

from __future__ import annotations

import collections
import datetime
import decimal
import enum
import fractions
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlvr.verifiers.sandbox.harness import mirror
from rlvr.verifiers.sandbox.isolation import detect_isolation
from rlvr.verifiers.sandbox.values import MAX_ITEMS, Context, OpaqueObject, decode_value, encode_value
from rlvr.verifiers.sandbox.wire import WireError

np = pytest.importorskip("numpy")
SRC = str(Path(__file__).resolve().parents[3] / "src")


def roundtrip(x, ctx=None):
    return decode_value(json.loads(json.dumps(encode_value(x))), ctx)


Point = collections.namedtuple("Point", "x y")


class Color(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    HIGH = 3


@pytest.mark.parametrize(
    "value",
    [
        collections.Counter("abca"),
        collections.OrderedDict([("b", 1), ("a", 2)]),
        collections.deque([1, 2], maxlen=5),
        Point(1, 2),
        fractions.Fraction(3, 7),
        decimal.Decimal("1.10"),
        2 - 3j,
        b"\x00\xff",
        bytearray(b"ab"),
        range(2, 10, 3),
        datetime.date(2024, 2, 29),
        datetime.datetime(2024, 1, 2, 3, 4, 5, 6),
        datetime.time(7, 8),
        datetime.timedelta(days=1, seconds=2),
        {"k": [Point(0, 0), frozenset({1})]},
    ],
)
def test_stdlib_values_come_back_as_the_same_type_and_value(value):
    back = roundtrip(value)
    assert type(back).__name__ == type(value).__name__ and back == value
    if isinstance(value, collections.OrderedDict):
        assert list(back) == ["b", "a"]  # order kept: OrderedDict equality is order-sensitive
    if isinstance(value, collections.deque):
        assert back.maxlen == 5


def test_defaultdict_keeps_its_factory():
    d = roundtrip(collections.defaultdict(int, {"a": 1}))
    assert d == {"a": 1} and d["missing"] == 0
    lst = roundtrip(collections.defaultdict(list, {}))
    lst["x"].append(1)
    assert lst["y"] == [] and lst["x"] == [1]  # a fresh default each time, as the lambda made


def test_builtin_subclasses_cross_as_their_builtin_value():
    class Rigged(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    back = roundtrip([Rigged(3), type("S", (str,), {})("x"), type("L", (list,), {})([1])])
    assert back == [3, "x", [1]] and [type(v) for v in back] == [int, str, list]
    assert back[0] != 4  # the rigged __eq__ stayed behind


def test_enum_members_use_the_receiving_sides_class():
    assert roundtrip(Level.HIGH) == 3  # an IntEnum the other side lacks: its int value
    ctx = Context({"Color": Color}, __name__)
    assert roundtrip(Color.RED, ctx) is Color.RED
    opaque = roundtrip(Color.RED)
    assert isinstance(opaque, OpaqueObject) and str(opaque) == "Color.RED" and opaque != 1


def test_numpy_values_keep_numpy_semantics():
    arr = roundtrip(np.arange(6).reshape(2, 3))
    assert isinstance(arr, np.ndarray) and arr.shape == (2, 3) and arr.dtype == np.int64
    with pytest.raises(ValueError):
        assert arr == [[0, 1, 2], [3, 4, 5]]  # as ambiguous as the original array
    assert roundtrip(np.int64(5)) == 5 and type(roundtrip(np.int64(5))) is np.int64
    assert roundtrip(np.bool_(True)) is np.True_
    assert roundtrip(np.array(["a", "bc"])).tolist() == ["a", "bc"]
    obj = roundtrip(np.array([1, "x"], dtype=object))
    assert obj.dtype == object and obj.tolist() == [1, "x"]
    with pytest.raises(WireError):
        encode_value(np.array(["2024-01-01"], dtype="datetime64[D]"))


def test_generators_are_drained_and_replayed_with_their_exception():
    def gen():
        yield 1
        yield 2
        raise KeyError("k")

    seen = []
    back = roundtrip(gen(), Context(exception=lambda d: seen.append(d) or LookupError(d["message"])))
    assert next(back) == 1 and next(back) == 2
    with pytest.raises(LookupError):
        next(back)
    assert seen == [{"type": "KeyError", "message": "'k'"}]
    assert list(roundtrip(map(str, [1, 2]))) == ["1", "2"]


def test_endless_iterators_stop_at_the_cap():
    import itertools

    back = roundtrip(itertools.count())
    assert list(itertools.islice(back, 5)) == [0, 1, 2, 3, 4]  # an islice in the tests still works
    with pytest.raises(WireError):
        for _ in back:
            pass
    assert MAX_ITEMS >= 10_000


def test_dict_views_compare_like_views():
    d = {"a": 1, "b": 2}
    assert roundtrip(d.keys()) == {"a", "b"} and list(roundtrip(d.values())) == [1, 2]
    assert roundtrip(d.items()) == {("a", 1), ("b", 2)}


def test_objects_cross_as_attributes_and_identity():
    class Pair:
        def __init__(self):
            self.first, self.second, self._hidden = 1, [2], 3

        def __len__(self):
            return 2

        def __iter__(self):
            return iter([self.first, self.second])

        def __str__(self):
            return "Pair!"

    back = roundtrip(Pair())
    assert back.first == 1 and back.second == [2] and back._hidden == 3 and str(back) == "Pair!"
    assert len(back) == 2 and list(back) == [1, [2]] and back in [back] and back != roundtrip(Pair())
    plain = roundtrip(type("Empty", (), {})())
    assert bool(plain) and type(plain).__name__ == "Empty"
    with pytest.raises(TypeError):
        len(plain)


def test_objects_of_a_class_the_receiver_defines_are_rebuilt_as_it():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Node:
        val: int
        nxt: object = None

    chain = Node(1, Node(2))
    back = roundtrip(chain, Context({"Node": Node}, __name__))
    assert back == chain and type(back.nxt) is Node
    assert type(roundtrip(chain, Context({"Node": Node}, "elsewhere"))) is not Node  # only its own classes


def test_reference_cycles_are_cut_and_functions_do_not_cross():
    class Cell:
        pass

    a, b = Cell(), Cell()
    a.other, b.other = b, a
    back = roundtrip(a)
    assert isinstance(back.other, OpaqueObject) and not hasattr(back.other, "other")
    for f in (len, lambda: 0, int, os):
        with pytest.raises(WireError):
            encode_value(f)


@pytest.mark.parametrize(
    "wire",
    [
        {"t": "ndarray", "v": [1], "a": ["O; import os", [1]]},
        {"t": "ndarray", "v": [1, 2], "a": ["<i8", [3]]},
        {"t": "object", "v": [[["__class__", 1]], None], "a": ["X", "", "", True, None]},
        {"t": "object", "v": [[], None], "a": ["not a name", "", "", True, None]},
        {"t": "namedtuple", "v": [1], "a": ["P", ["a", "b"]]},
        {"t": "defaultdict", "v": [], "a": ["builtin", "eval"]},
        {"t": "complex", "v": ["1", 2]},
        {"t": "Fraction", "v": [1, 0]},
        {"t": "Decimal", "v": ["1e"]},
        {"t": "tag_items", "v": []},
        {"t": "range", "v": [1.5]},
    ],
)
def test_malformed_rich_values_are_refused(wire):
    with pytest.raises(WireError):
        decode_value(wire)


def test_mirror_updates_the_tests_objects_in_place():
    xs, inner = [[2, 1], 3], None
    inner = xs[0]
    mirror(xs, [[1, 2], 4])
    assert xs == [[1, 2], 4] and xs[0] is inner
    d, s, dq = {"a": [1]}, {1}, collections.deque([1])
    mirror(d, {"a": [1, 2], "b": 0})
    mirror(s, {2})
    mirror(dq, collections.deque([3, 4]))
    assert d == {"a": [1, 2], "b": 0} and s == {2} and list(dq) == [3, 4]


# --- the interpreter's own environment inside the sandbox --------------------------------------------

VENV_CHECK = textwrap.dedent("""
    import sys
    sys.path.insert(0, {src!r})
    from rlvr.data.types import Task
    from rlvr.verifiers.code import CodeVerifier
    tests = "def check(c):\\n    assert c(3) == 6\\n"
    task = Task(id="t", kind="code", prompt="", gold={{"entry_point": "f", "tests": tests}})
    code = "import rlvr_venv_marker, numpy as np\\ndef f(x):\\n    return np.int64(x) * rlvr_venv_marker.TWO\\n"
    v = CodeVerifier(isolation={iso!r}).verify(task, code)
    print(v.outcome, v.details)
""")


def _venv_with_marker(root: Path, python: str, system_site: bool) -> Path:
    args = [python, "-m", "venv", "--without-pip"] + (["--system-site-packages"] if system_site else [])
    subprocess.run(args + [str(root / "venv")], check=True, capture_output=True, timeout=120)
    venv_python = root / "venv" / "bin" / "python"
    site = subprocess.run([str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    os.makedirs(os.path.join(site, "rlvr_venv_marker"))
    Path(site, "rlvr_venv_marker", "__init__.py").write_text("TWO = 2\n")
    return venv_python


@pytest.mark.skipif(not detect_isolation().uses_bwrap, reason="needs bubblewrap")
def test_a_venv_under_tmp_is_visible_in_the_sandbox(tmp_path):
    # the venv (and its marker package) lives under /tmp, which the sandbox replaces by a private tmpfs;
    # numpy comes from the base interpreter's site-packages through --system-site-packages
    assert str(tmp_path).startswith("/tmp/")
    venv_python = _venv_with_marker(tmp_path, sys.executable, system_site=True)
    out = subprocess.run([str(venv_python), "-c", VENV_CHECK.format(src=SRC, iso="auto")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.stdout.startswith("pass"), out.stdout + out.stderr[-2000:]


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir("/proc/self/ns"), reason="needs root")
def test_private_tmp_keeps_the_interpreters_dirs(tmp_path):
    # the fallback runner (no bubblewrap) mounts a private /tmp; directories it is told to keep stay
    # visible there, read-only, while the rest of the host's /tmp disappears
    from rlvr.verifiers.sandbox import launch

    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "mark.txt").write_text("here")
    (tmp_path / "hidden.txt").write_text("secret")
    probe = textwrap.dedent(f"""
        import json, os, sys
        exec(sys.argv[1])
        done = _unshare(8, [{str(kept)!r}])
        kept_ok = open({str(kept / "mark.txt")!r}).read() == "here"
        try:
            open({str(kept / "new.txt")!r}, "w")
            writable = True
        except OSError:
            writable = False
        print(json.dumps([done["tmp"], kept_ok, writable, os.path.exists({str(tmp_path / "hidden.txt")!r})]))
    """)
    out = subprocess.run([sys.executable, "-c", probe, launch.runner_source(with_main=False)],
                         capture_output=True, text=True, timeout=60, check=False)
    if out.returncode != 0 or not out.stdout.strip():
        pytest.skip(f"mount namespaces unavailable here: {out.stderr[-300:]}")
    private, kept_ok, writable, hidden_visible = json.loads(out.stdout.strip().splitlines()[-1])
    if not private:
        pytest.skip("the kernel refused a private /tmp here")
    assert kept_ok and not writable and not hidden_visible


def test_sandboxed_numpy_runs_single_threaded():
    from rlvr.verifiers.sandbox.launch import candidate_env

    env = candidate_env()
    assert env["OPENBLAS_NUM_THREADS"] == env["OMP_NUM_THREADS"] == "1"
    assert shutil.which("python3", path=env["PATH"]) is not None
