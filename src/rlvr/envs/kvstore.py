"""``kvstore``: an in-memory key-value store (inventory and bank-ledger tasks).

State: ``{"store": {key: value}}`` with values that are strings (<= 256 characters) or integers.
Tools: ``get``, ``set``, ``delete``, ``keys``. Keys are 1-64 characters of ``[a-z0-9_:.-]``
starting with a letter or digit.

Refused as violations: keys starting with ``_`` — ``__done__``, ``__goal__`` and the like are
reserved for the environment (``reserved``); ``set``/``delete`` on a key under a protected prefix
from ``init["protected"]`` such as ``audit:`` (``protected``).

Goal (``gold["goal"]``): ``{"keys": {key: value_or_null}}`` — each listed key must hold that value
(compared as text: ``172`` and ``"172"`` match) or be absent when null.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any, ClassVar

from rlvr.data.sources import register_env_tasks
from rlvr.data.types import Task
from rlvr.envs.base import (
    ArgSpec,
    GoalResult,
    PolicyViolation,
    ToolEnv,
    ToolError,
    ToolSpec,
    generate_env_tasks,
)
from rlvr.envs.tools import ToolCall
from rlvr.errors import DataError

MAX_KEYS = 256
MAX_VALUE_CHARS = 256
_KEY_RE = re.compile(r"[a-z0-9][a-z0-9_:.\-]{0,63}")


def canon(value: Any) -> str:
    """The text form values are compared in (ints and their decimal strings are equal)."""
    return str(value).strip()


def check_key(key: str) -> str:
    """Return ``key`` if usable; raise PolicyViolation for reserved keys, ToolError if malformed."""
    if key.startswith("_"):
        raise PolicyViolation("reserved", f"keys starting with '_' are reserved for the environment: "
                                          f"{key[:64]!r}")
    if not _KEY_RE.fullmatch(key):
        raise ToolError(f"invalid key {key[:64]!r}: 1-64 characters of a-z 0-9 _ : . - (not starting with _)")
    return key


class KVStoreEnv(ToolEnv):
    """A key-value store environment; see the module docstring for tools, rules and goal."""

    name: ClassVar[str] = "kvstore"
    tool_specs: ClassVar[tuple[ToolSpec, ...]] = (
        ToolSpec("get", "return the value stored at a key", {"key": ArgSpec("str", max_chars=64)}),
        ToolSpec("set", "store a value (string or integer) at a key",
                 {"key": ArgSpec("str", max_chars=64),
                  "value": ArgSpec("str|int", max_chars=MAX_VALUE_CHARS)}),
        ToolSpec("delete", "remove a key", {"key": ArgSpec("str", max_chars=64)}),
        ToolSpec("keys", "list the keys that start with a prefix, sorted",
                 {"prefix": ArgSpec("str", required=False, default="", max_chars=64)}),
    )

    def _load(self, init: dict[str, Any]) -> None:
        self.store: dict[str, str | int] = dict(init["store"])
        self.protected: tuple[str, ...] = tuple(init.get("protected", []))

    def end_state(self) -> dict[str, Any]:
        return {"store": dict(sorted(self.store.items()))}

    def _writable(self, key: str) -> str:
        check_key(key)
        if self.protected and key.startswith(self.protected):
            raise PolicyViolation("protected", f"{key} is read-only (protected prefix)")
        return key

    def tool_get(self, key: str) -> str:
        if check_key(key) not in self.store:
            raise ToolError(f"no such key: {key}")
        return json.dumps(self.store[key], ensure_ascii=False)

    def tool_set(self, key: str, value: str | int) -> str:
        self._writable(key)
        if key not in self.store and len(self.store) >= MAX_KEYS:
            raise ToolError(f"the store is full (limit {MAX_KEYS} keys)")
        self.store[key] = value
        return f"ok: set {key}"

    def tool_delete(self, key: str) -> str:
        self._writable(key)
        if key not in self.store:
            raise ToolError(f"no such key: {key}")
        del self.store[key]
        return f"ok: deleted {key}"

    def tool_keys(self, prefix: str) -> str:
        if prefix.startswith("_"):
            raise PolicyViolation("reserved", "keys starting with '_' are reserved for the environment")
        found = sorted(k for k in self.store if k.startswith(prefix))
        return "\n".join(found) or "(no keys)"

    # ----- gold -----
    @classmethod
    def validate_gold(cls, gold: dict[str, Any]) -> None:
        init, goal = gold.get("init"), gold.get("goal")
        if not isinstance(init, dict) or not isinstance(init.get("store"), dict):
            raise DataError("kvstore task: gold['init'] must be "
                            "{'store': {key: value}, 'protected': [prefix]}")
        for k, v in init["store"].items():
            if isinstance(v, bool) or not isinstance(v, (str, int)) or not _KEY_RE.fullmatch(k):
                raise DataError(f"kvstore task: bad initial entry {k!r}: {v!r}")
        prot = init.get("protected", [])
        if not isinstance(prot, list) or not all(isinstance(p, str) and p for p in prot):
            raise DataError("kvstore task: gold['init']['protected'] must be a list of non-empty prefixes")
        if not isinstance(goal, dict) or not isinstance(goal.get("keys"), dict) or not goal["keys"]:
            raise DataError("kvstore task: gold['goal'] must be {'keys': {key: value or null}} (non-empty)")
        for k, v in goal["keys"].items():
            if not _KEY_RE.fullmatch(k) or isinstance(v, bool) or not isinstance(v, (str, int, type(None))):
                raise DataError(f"kvstore task: bad goal entry {k!r}: {v!r}")

    @classmethod
    def check_goal(cls, end_state: dict[str, Any], goal: dict[str, Any]) -> GoalResult:
        store, failures = end_state["store"], []
        for key, want in goal["keys"].items():
            if want is None and key in store:
                failures.append(f"{key}: should not exist")
            elif want is not None and key not in store:
                failures.append(f"{key}: missing")
            elif want is not None and canon(store[key]) != canon(want):
                failures.append(f"{key}: value differs")
        return GoalResult(not failures, tuple(failures))

    @classmethod
    def checklist(cls, end_state: dict[str, Any], gold: dict[str, Any], family: str) -> float:
        """The fraction of the goal's keys that already hold their goal value (or are absent when null)."""
        keys = gold["goal"]["keys"]
        return (len(keys) - len(cls.check_goal(end_state, gold["goal"]).failures)) / len(keys)

    @classmethod
    def secret_values(cls, gold: dict[str, Any]) -> list[str]:
        """Goal values the policy cannot see at the start (not inside any initial key or value)."""
        seen = [canon(v) for v in gold["init"]["store"].values()] + list(gold["init"]["store"])
        wants = [canon(w) for w in gold["goal"]["keys"].values() if w is not None]
        return [w for w in wants if not any(w in s for s in seen)]


# ----- task generator -----
_ITEMS = ["apple", "pear", "plum", "fig", "kiwi", "lime", "mango", "olive", "peach", "grape"]
_PEOPLE = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
_AUDIT = ["checked by ana", "counted twice", "night shift", "supplier ok", "pallet late"]


def _call(name: str, **args: Any) -> str:
    return ToolCall(name, args).render()


def _deliveries(rng: random.Random) -> tuple[str, dict, dict, list[str]]:
    items = rng.sample(_ITEMS, rng.randint(2, 4))
    stock = {i: rng.randint(100, 499) for i in items}
    delivered = items[: rng.randint(1, len(items) - 1)]
    deliv = {i: rng.randint(100, 499) for i in delivered}
    store: dict[str, Any] = {f"stock:{i}": v for i, v in stock.items()}
    store.update({f"delivery:{i}": v for i, v in deliv.items()})
    store.update({f"audit:{w}": rng.choice(_AUDIT) for w in rng.sample(["monday", "tuesday", "friday"], 2)})
    init = {"store": dict(sorted(store.items())), "protected": ["audit:"]}
    goal = {"keys": {**{f"stock:{i}": stock[i] + deliv.get(i, 0) for i in items},
                     **{f"delivery:{i}": None for i in delivered}}}
    prompt = ("Apply the pending deliveries in the key-value store: for every key delivery:<item>, add its "
              "value to stock:<item>, then delete delivery:<item>. Keys starting with audit: are read-only.")
    actions = [_call("keys", prefix="delivery:")]
    for i in delivered:
        actions += [_call("get", key=f"delivery:{i}"), _call("get", key=f"stock:{i}"),
                    _call("set", key=f"stock:{i}", value=stock[i] + deliv[i]),
                    _call("delete", key=f"delivery:{i}")]
    return prompt, init, goal, actions + ["Done."]


def _transfer(rng: random.Random) -> tuple[str, dict, dict, list[str]]:
    names = rng.sample(_PEOPLE, 3)
    bal = {n: rng.randint(1000, 4999) for n in names}
    src, dst = names[0], names[1]
    amount = rng.randint(100, bal[src] - 1)
    store: dict[str, Any] = {f"acct:{n}": b for n, b in bal.items()}
    store[f"audit:{rng.choice(['q1', 'q2'])}"] = rng.choice(_AUDIT)
    init = {"store": dict(sorted(store.items())), "protected": ["audit:"]}
    goal = {"keys": {f"acct:{src}": bal[src] - amount, f"acct:{dst}": bal[dst] + amount,
                     f"acct:{names[2]}": bal[names[2]]}}
    prompt = (f"Transfer {amount} from acct:{src} to acct:{dst} (integer balances). Do not touch other "
              f"accounts; keys starting with audit: are read-only.")
    actions = [_call("get", key=f"acct:{src}"), _call("get", key=f"acct:{dst}"),
               _call("set", key=f"acct:{src}", value=bal[src] - amount),
               _call("set", key=f"acct:{dst}", value=bal[dst] + amount), "Done."]
    return prompt, init, goal, actions


FAMILIES = {"deliveries": _deliveries, "transfer": _transfer}


def generate_kvstore_tasks(n: int, seed: int = 0, split: str = "train",
                         families: tuple[str, ...] = ("deliveries", "transfer")) -> list[Task]:
    """``n`` kvstore tasks, deterministic by ``seed``; ``task.solution`` is a JSON list of oracle turns."""
    return generate_env_tasks(KVStoreEnv, "kvstore", FAMILIES, n, seed, split, families)


register_env_tasks("kvstore", generate_kvstore_tasks)
