"""The program in a code completion: which fenced blocks, what prose to drop, how it joins the prompt.

Rules (each has a test in tests/unit/verifiers/test_code_extract.py and fidelity cases):

1. Blocks: ```` ``` ```` and ``~~~`` fences (:func:`rlvr.verifiers.extract.fenced_blocks`) and
   ``[PYTHON]...[/PYTHON]`` / ``<code>...</code>``. Python-tagged ones (``python``, ``py``,
   ``python3``) and untagged ones that parse count; other languages, console sessions (``>>>``) and
   output blocks do not. Code before a first, untagged fence is a block too (a HumanEval-style body
   closed by a stray ```` ``` ````). No such block: the whole completion.
2. The base block is the last one that defines the entry point (else the last Python block, else the
   last untagged one). Other blocks join it only when they define a name the base (or a block already
   joined) uses but does not bind -- a helper, an import, a constant in its own fence -- in their
   original order. Usage examples, a first draft before the final version and quoted single lines
   stay out, so they cannot break or change the program.
3. Prose: a line that stops the code from parsing is dropped when it sits at column 0 and does not
   start with a Python keyword ("Here is the code:", "This runs in O(n)."); an indented one, or one
   starting with a keyword, cuts the code there -- unless that would lose the entry point's
   definition, in which case the code is left as written (and fails to load: ``crash``).
4. Joining the prompt (``prelude``): code that defines the entry point follows the prelude; code that
   does not is the function's body and continues it -- re-indented to the prompt's body indentation
   when it was written flush left (or with its first line flush left).
5. ``from __future__`` imports are moved to the very top of the final program.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re
import textwrap

from rlvr.verifiers.extract import Fence, fenced_blocks

PY_LANGS = ("python", "python2", "sage", "ipython")  # "py", "python3", "py3" are aliased to python
_FUTURE_RE = re.compile(r"^from[ \t]+__future__[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*)[ \t]*$\n?", re.MULTILINE)
_MAX_FIXES = 60  # prose lines dropped at most
_MAX_FIX_CHARS = 100_000  # longer code is taken as written (each fix compiles it once)
MAX_BLOCKS = 64  # only the last fenced blocks are considered


def _compile(src: str) -> None:
    """Raise SyntaxError as loading would (``return`` outside a function included), run nothing."""
    compile(src, "<candidate>", "exec", dont_inherit=True)


def _parses(src: str) -> bool:
    try:
        _compile(src)
    except (SyntaxError, ValueError):
        return False
    return True


def defines_text(code: str, name: str) -> bool:
    """Does ``code`` hold a column-0 ``def name(`` / ``class name`` / ``name =`` (parseable or not)?"""
    pat = rf"^(?:async[ \t]+def|def|class)[ \t]+{re.escape(name)}\b|^{re.escape(name)}[ \t]*(?::[^=\n]*)?="
    return re.search(pat, code, re.MULTILINE) is not None


def split_future(code: str) -> tuple[str, str]:
    """(the ``from __future__`` import lines, the code without them)."""
    futures = "".join(m.group().rstrip("\n") + "\n" for m in _FUTURE_RE.finditer(code))
    return futures, _FUTURE_RE.sub("", code)


def _bound_top(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level (defs, classes, imports, assignments)."""
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
            out.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return out


def _needed(tree: ast.Module) -> set[str]:
    """Names the code reads but binds nowhere (over-approximate: any binding anywhere counts)."""
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, ast.alias):
            bound.add(n.asname or n.name.split(".")[0])
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
    return used - bound - set(dir(builtins))


def _is_code_block(block: Fence) -> bool:
    if block.lang and block.lang not in PY_LANGS:
        return False
    lines = [ln for ln in block.body.splitlines() if ln.strip()]
    if lines and lines[0].lstrip().startswith(">>>"):
        return False  # a console session
    return bool(lines) and (block.lang != "" or _parses(split_future(block.body)[1]))


def select_blocks(blocks: list[Fence], entry_point: str | None) -> str | None:
    """The program the fenced blocks hold (rule 2), or None when none of them is Python."""
    code = [b for b in blocks[-MAX_BLOCKS:] if _is_code_block(b)]
    if not code:
        others = [b for b in blocks if entry_point and b.body.strip() and defines_text(b.body, entry_point)]
        return others[-1].body if others else None
    defining = [i for i, b in enumerate(code) if entry_point and defines_text(b.body, entry_point)]
    tagged = [i for i, b in enumerate(code) if b.lang]
    base = (defining or tagged or list(range(len(code))))[-1]
    trees: dict[int, ast.Module] = {}
    for i, b in enumerate(code):
        try:
            trees[i] = ast.parse(split_future(b.body)[1])
        except (SyntaxError, ValueError):
            continue
    chosen, todo = {base}, [base]
    while todo:
        i = todo.pop()
        if i not in trees:
            continue
        for name in sorted(_needed(trees[i])):
            providers = [j for j in trees if j not in chosen and name in _bound_top(trees[j])]
            if providers and not any(name in _bound_top(trees[j]) for j in chosen if j in trees):
                chosen.add(providers[-1])
                todo.append(providers[-1])
    return "\n\n".join(code[i].body.strip("\n") + "\n" for i in sorted(chosen))


def _fix_prose(code: str, prefix: str, entry_point: str | None) -> str | None:
    """``code`` with prose lines dropped (rule 3) so that ``prefix + code`` parses, or None."""
    if len(code) > _MAX_FIX_CHARS:
        return code if _parses(prefix + code) else None
    lines = code.split("\n")
    offset = prefix.count("\n")
    must_define = bool(entry_point) and defines_text(code, entry_point or "")
    for _ in range(_MAX_FIXES):
        text = "\n".join(lines)
        try:
            _compile(prefix + text)
            return text
        except (SyntaxError, ValueError) as e:
            lineno = getattr(e, "lineno", None)
        i = (lineno or 0) - 1 - offset
        if not 0 <= i < len(lines):
            return None
        line = lines[i]
        first = re.match(r"[A-Za-z_]\w*", line)
        if line[:1] not in (" ", "\t") and line.strip() and not (first and keyword.iskeyword(first.group())):
            del lines[i]
        else:
            lines = lines[:i]
        rest = "\n".join(lines)
        if not rest.strip() or (must_define and not defines_text(rest, entry_point or "")):
            return None
    return None


def _prompt_indent(prelude: str) -> str:
    for line in reversed(prelude.splitlines()):
        if line.strip():
            return re.match(r"[ \t]*", line).group() or "    "  # type: ignore[union-attr]
    return "    "


def _body_variants(code: str, indent: str) -> list[str]:
    """The body as written, re-indented flush-left code, and code whose first line lost its indent."""
    out = [code]
    if "\t" in code:
        code = code.expandtabs(4)  # tabs against the prompt's spaces
        out.append(code)
    flat = textwrap.dedent(code).strip("\n")
    out.append(textwrap.indent(flat, indent) + "\n")
    lines = code.strip("\n").split("\n")
    if len(lines) > 1 and lines[0][:1] not in (" ", "\t"):
        rest = textwrap.dedent("\n".join(lines[1:]))
        out.append(textwrap.indent(lines[0] + "\n" + rest, indent) + "\n")
    return list(dict.fromkeys(out))


_ALT_FENCES = (("[PYTHON]", "[/PYTHON]"), ("<code>", "</code>"))


def code_blocks(completion: str) -> list[Fence]:
    """The fenced blocks (``[PYTHON]``/``<code>`` tags count as fences), plus the code *before* the
    first fence when that fence is a stray closer: a body ending in ```` ``` ```` then prose."""
    for a, b in _ALT_FENCES:
        if a in completion and b in completion:
            completion = completion.replace(a, "\n```python\n").replace(b, "\n```\n")
    blocks = fenced_blocks(completion)
    if blocks and not blocks[0].lang:
        head = completion[: blocks[0].start]
        if head.strip() and (re.search(r"^\s*(return|def|import|from|for|if|while|class)\b", head, re.MULTILINE)):
            blocks.insert(0, Fence("python", head))
    return blocks


def program_source(completion: str, prelude: str | None, entry_point: str | None) -> str:
    """The whole program to load for a completion: prelude + the code it holds (rules 1-5)."""
    blocks = code_blocks(completion)
    code = select_blocks(blocks, entry_point) if blocks else None
    if code is None:
        code = completion
        flat = textwrap.dedent(code)
        if entry_point and flat != code and defines_text(flat, entry_point):
            code = flat  # a whole function indented as a block
    futures, code = split_future(code)
    pre_futures, prelude = split_future(prelude or "")
    futures = "".join(dict.fromkeys((pre_futures + futures).splitlines(keepends=True)))
    if not prelude.strip():
        return futures + (_fix_prose(code, "", entry_point) or code)
    if entry_point and defines_text(code, entry_point):
        prefix = prelude.rstrip("\n") + "\n\n"
        return futures + prefix + (_fix_prose(code, prefix, entry_point) or code)
    prefix = prelude if prelude.endswith("\n") else prelude + "\n"
    variants = _body_variants(code, _prompt_indent(prelude))
    for body in variants:  # as written or re-indented, before dropping any line as prose
        if _parses(prefix + body):
            return futures + prefix + body
    for body in variants:
        fixed = _fix_prose(body, prefix, None)
        if fixed is not None and fixed.strip():
            return futures + prefix + fixed
    return futures + prefix + code


def extract_code(completion: str, entry_point: str | None = None) -> str:
    """The code a completion holds, without the prompt (rules 1-3 and 5); "" when blank."""
    if not completion.strip():
        return ""
    return program_source(completion, None, entry_point)
