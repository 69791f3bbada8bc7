"""Plain-data wire format between the trusted test harness and the candidate process.

Stdlib only and free of rlvr imports: this file's source is also sent verbatim into the sandboxed
candidate and the harness (``python -c``), so both sides speak exactly this format.

A message is a 4-byte big-endian length then UTF-8 JSON. Values are plain data only:
``None``, ``bool``, ``int``, ``float``, ``str`` as JSON scalars, ``list`` as a JSON array and
``tuple``/``set``/``frozenset``/``dict`` as ``{"t": tag, "v": [...]}`` (a dict's ``v`` is a list of
``[key, value]`` pairs). Types are checked with ``type(x) is int`` (never ``isinstance``), so a
subclass with a rigged ``__eq__`` cannot cross; decoding builds fresh builtins only and never
unpickles or evaluates anything.
"""

import json
import os
import struct

WIRE_MAX_DEPTH = 64
_SCALARS = (bool, int, float, str)
_TAGGED = {"tuple": tuple, "set": set, "frozenset": frozenset}


class WireError(Exception):
    """A value that is not plain data, or a malformed message."""


def to_wire(x, depth=0, other=None):
    """Plain value -> JSON-able structure; anything else (subclasses included) goes to ``other(x, depth)``
    when given (:mod:`values`: known types by value), else raises WireError."""
    t = type(x)
    if x is None or t in _SCALARS:
        return x
    if depth >= WIRE_MAX_DEPTH:
        raise WireError(f"value nested deeper than {WIRE_MAX_DEPTH} levels")
    if t is list:
        return [to_wire(v, depth + 1, other) for v in x]
    if t is tuple or t is set or t is frozenset:
        return {"t": t.__name__, "v": [to_wire(v, depth + 1, other) for v in x]}
    if t is dict:
        return {"t": "dict", "v": [[to_wire(k, depth + 1, other), to_wire(v, depth + 1, other)] for k, v in x.items()]}
    if other is not None:
        return other(x, depth)
    raise WireError(f"a {t.__name__} is not plain data")


def wire_pairs(items, depth, other=None):
    """``[[key, value], ...]`` of a list of 2-item lists, each side decoded (WireError when malformed)."""
    out = []
    for pair in items:
        if type(pair) is not list or len(pair) != 2:
            raise WireError("malformed dict item")
        out.append((from_wire(pair[0], depth + 1, other), from_wire(pair[1], depth + 1, other)))
    return out


def from_wire(w, depth=0, other=None):
    """JSON-decoded structure -> fresh builtin value; raises WireError on anything unexpected. Tags other
    than the plain ones go to ``other(tag, items, aux, depth)`` when given (it builds trusted types only)."""
    t = type(w)
    if w is None or t in _SCALARS:
        return w
    if depth >= WIRE_MAX_DEPTH:
        raise WireError(f"value nested deeper than {WIRE_MAX_DEPTH} levels")
    if t is list:
        return [from_wire(v, depth + 1, other) for v in w]
    if t is not dict or not {"t", "v"} <= set(w) <= {"t", "v", "a"} or type(w["v"]) is not list:
        raise WireError("malformed value")
    tag, items = w["t"], w["v"]
    try:
        if "a" not in w and tag in _TAGGED:
            return _TAGGED[tag](from_wire(v, depth + 1, other) for v in items)
        if "a" not in w and tag == "dict":
            return dict(wire_pairs(items, depth, other))
        if other is not None and type(tag) is str:
            return other(tag, items, w.get("a"), depth)
    except TypeError as e:  # unhashable set element or dict key
        raise WireError(f"malformed value: {e}") from None
    raise WireError(f"unknown tag {tag!r}")


def send_msg(fd, obj):
    """Write one framed JSON message to a file descriptor."""
    data = json.dumps(obj, separators=(",", ":")).encode("utf-8")
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd, n):
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("peer closed the channel")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_msg(fd, limit):
    """Read one framed JSON message (EOFError when the peer is gone, WireError when malformed or too big)."""
    (n,) = struct.unpack(">I", _read_exact(fd, 4))
    if n > limit:
        raise WireError(f"message of {n} bytes is over the {limit}-byte limit")
    try:
        return json.loads(_read_exact(fd, n).decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise WireError(f"malformed message: {str(e)[:200]}") from None
