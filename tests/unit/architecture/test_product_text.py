"""The product speaks of itself: src/, docs/, recipes/, bench/ and README.md carry no development history.

No session numbers, no paths of the development machine, no internal issue numbers or research-seed ids, no
commit hashes as narrative (history belongs in git and CHANGELOG.md); every dotted ``rlvr.`` reference in the
docs resolves to a module or attribute; modules named ``test_*`` live under tests/ only.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCOPE = ("src", "docs", "recipes", "bench", "README.md")
SKIP_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache"}
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".json", ".jsonl", ".sh", ".c", ".h", ".inc",
                 ".html", ".cfg", ".tsv", ".ini"}

# the code sandbox's escape probe tries to write these paths on purpose (rlvr.verifiers.probes.code_hooks)
ALLOWED_LINE = re.compile(r"rlvr-probe-sentinel")

RULES = {
    "session number": re.compile(r"\bsession\s+\d", re.IGNORECASE),
    "development-machine path": re.compile(
        r"(?<![\w.])/(?:work|root)/"                      # the working copies and home of the dev machine
        r"|(?<![\w.])/home/[a-z_][\w-]*/"                  # a user's home
        r"|(?<![\w.])/tmp/(?:venv|pytest-of-)"              # the shared venv, pytest's run folders
        r"|(?<![\w.])/tmp/[\w.-]*_[a-z0-9_]{8}(?![\w])"    # tempfile.mkdtemp run folders
    ),
    "internal issue number": re.compile(r"\bissues?\s*#?\d+|(?<![\w&#/])#\d{1,4}\b(?![\w-])", re.IGNORECASE),
    "research-seed id": re.compile(r"\bseeds?\s*[/ ]?\s*00\d", re.IGNORECASE),
}
# a 7-10 hex-digit word with a digit and a letter: a commit hash (not checked in C sources or recorded JSON)
COMMIT = re.compile(r"(?<![\w.])(?=[0-9a-f]{7,10}\b)(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,10}\b")
NO_COMMIT_CHECK = {".c", ".h", ".inc", ".json", ".jsonl"}
# CSS colours (#333) are not issue numbers
NO_HASH_NUMBER_CHECK = {".html", ".css", ".c", ".h", ".inc"}


def product_files() -> list[Path]:
    out = []
    for top in SCOPE:
        path = ROOT / top
        if path.is_file():
            out.append(path)
            continue
        for dirpath, dirnames, filenames in os.walk(path):  # does not follow the src/rlvr/recipes symlink
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
            out += [Path(dirpath) / f for f in filenames if Path(f).suffix in TEXT_SUFFIXES]
    return sorted(out)


def offending_lines(path: Path, text: str) -> list[str]:
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        if ALLOWED_LINE.search(line):
            continue
        for name, rule in RULES.items():
            if name == "internal issue number" and path.suffix in NO_HASH_NUMBER_CHECK:
                rule = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)
            m = rule.search(line)
            if m:
                bad.append(f"{path.relative_to(ROOT)}:{n}: {name} {m.group(0)!r}")
        if path.suffix not in NO_COMMIT_CHECK:
            m = COMMIT.search(line)
            if m:
                bad.append(f"{path.relative_to(ROOT)}:{n}: commit hash {m.group(0)!r}")
    return bad


def test_rules_catch_what_they_are_for():
    p = ROOT / "docs" / "x.md"
    for line in ("as measured in Session 12", "run /work/runs/s21/run.json", "see /root/notes",
                 "out: /tmp/bench_quickstart_l5_7a385/qs", "after issue 13", "the #19 line", "(seed 004)",
                 "at commit a9346bb", "(d612f8e)", "/home/alice/x"):
        assert offending_lines(p, line), line
    for line in ("model: {path: /models/qwen}", "--json /tmp/r.json", "seed 0", "seeds 0-2", "1e-4 steps",
                 "sha256 of the file", "12 sessions", "step 1024 of 2048"):
        assert not offending_lines(p, line), line
    assert not offending_lines(ROOT / "src" / "x.html", "color: #333;")


def test_no_development_history_in_the_product():
    files = product_files()
    assert any(f.name == "quickstart.yaml" for f in files)
    bad = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        bad += offending_lines(f, text)
    assert not bad, "the product speaks of its current state only:\n" + "\n".join(bad[:60])


REF = re.compile(r"(?<![\w./-])rlvr(?:\.[A-Za-z_]\w*)+")


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            continue
        if cut == len(parts):
            return True
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:  # an optional dependency (ray, vllm, ...): the module exists
            return not (e.name or "").startswith("rlvr")
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("*.md"))]


def test_dotted_rlvr_references_in_the_docs_resolve():
    bad = []
    for f in doc_files():
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for ref in REF.findall(line):
                if not resolves(ref):
                    bad.append(f"{f.relative_to(ROOT)}:{n}: {ref}")
    assert not bad, "references to no module or attribute:\n" + "\n".join(bad)


def test_resolver_tells_real_from_stale():
    assert resolves("rlvr.run") and resolves("rlvr.losses") and resolves("rlvr.omp_wait")
    assert not resolves("rlvr.data.pair_builder")
    assert not resolves("rlvr.no_such_module.x")


def test_modules_named_test_live_under_tests_only():
    bad = []
    for top in ("src", "bench", "scripts"):
        for dirpath, dirnames, filenames in os.walk(ROOT / top):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
            bad += [str((Path(dirpath) / f).relative_to(ROOT)) for f in filenames
                    if f.startswith("test_") and f.endswith(".py")]
    assert not bad, f"modules named test_* outside tests/: {bad}"


@pytest.mark.parametrize("path", ["src/rlvr/recipes"])
def test_packaged_recipes_are_the_checkout_recipes(path):
    # the wheel copies the files through this link (tests/integration/test_wheel_contents.py checks the wheel)
    assert (ROOT / path / "quickstart.yaml").read_text() == (ROOT / "recipes" / "quickstart.yaml").read_text()
