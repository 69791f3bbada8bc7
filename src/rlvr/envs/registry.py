"""Environment names -> classes, and ``make_env`` for a task."""

from __future__ import annotations

from typing import Any

from rlvr.data.types import Task
from rlvr.envs.base import EnvLimits, ToolEnv
from rlvr.envs.calculator import CalculatorEnv
from rlvr.envs.files import FilesEnv
from rlvr.envs.kvchain import KVChainEnv
from rlvr.envs.kvstore import KVStoreEnv
from rlvr.envs.sql_agent import SqlAgentEnv
from rlvr.envs.textarena import TextArenaEnv
from rlvr.errors import DataError

ENVIRONMENTS: dict[str, type[ToolEnv]] = {FilesEnv.name: FilesEnv, KVStoreEnv.name: KVStoreEnv,
                                          CalculatorEnv.name: CalculatorEnv, SqlAgentEnv.name: SqlAgentEnv,
                                          KVChainEnv.name: KVChainEnv, TextArenaEnv.name: TextArenaEnv}


def env_class(name: Any) -> type[ToolEnv]:
    """The environment class registered as ``name``; DataError naming the known ones otherwise."""
    if not isinstance(name, str) or name not in ENVIRONMENTS:
        raise DataError(f"unknown environment {name!r}; known: {sorted(ENVIRONMENTS)}")
    return ENVIRONMENTS[name]


def make_env(task: Task, limits: EnvLimits | None = None) -> ToolEnv:
    """A fresh, not yet reset environment of the kind ``task.gold["env"]`` names."""
    gold = task.gold if isinstance(task.gold, dict) else {}
    try:
        cls = env_class(gold.get("env"))
    except DataError as e:
        raise DataError(f"task {task.id}: {e}") from None
    return cls(limits)
