"""Multi-turn tool environments: a typed, batched reset/step protocol (see ``base``).

Built in: ``files`` (a virtual filesystem), ``kvstore`` (a key-value store), ``kvchain`` (a 30-turn chain of dependent reads), ``calculator``
(multi-step arithmetic with add/sub/mul tools), ``sql`` (a read-only query tool over SQLite, then a
final query checked by row comparison) and ``textarena`` (any single-player TextArena game, extra ``gym``). Tool-call markup is
documented in ``tools``. No torch, no model: the rollout side drives these with generated text.
"""

from rlvr.envs.base import (
    EnvError,
    Environment,
    EnvLimits,
    GoalResult,
    GoldLeakError,
    LeakGuard,
    Observation,
    PolicyViolation,
    StepResult,
    ToolEnv,
    ToolError,
    ToolSpec,
    Violation,
)
from rlvr.envs.batched import BatchedEnv
from rlvr.envs.calculator import CalculatorEnv, generate_calculator_tasks
from rlvr.envs.files import FilesEnv, generate_files_tasks
from rlvr.envs.kvchain import KVChainEnv, generate_kvchain_tasks
from rlvr.envs.kvstore import KVStoreEnv, generate_kvstore_tasks
from rlvr.envs.registry import ENVIRONMENTS, env_class, make_env
from rlvr.envs.sql_agent import SqlAgentEnv, generate_sql_tasks
from rlvr.envs.textarena import TextArenaEnv
from rlvr.envs.tools import ToolCall, ToolCallError, parse_turn, render_output, split_transcript

__all__ = [
    "ENVIRONMENTS",
    "BatchedEnv",
    "CalculatorEnv",
    "EnvError",
    "EnvLimits",
    "Environment",
    "FilesEnv",
    "GoalResult",
    "GoldLeakError",
    "KVChainEnv",
    "KVStoreEnv",
    "LeakGuard",
    "Observation",
    "PolicyViolation",
    "SqlAgentEnv",
    "StepResult",
    "TextArenaEnv",
    "ToolCall",
    "ToolCallError",
    "ToolEnv",
    "ToolError",
    "ToolSpec",
    "Violation",
    "env_class",
    "generate_calculator_tasks",
    "generate_files_tasks",
    "generate_kvchain_tasks",
    "generate_kvstore_tasks",
    "generate_sql_tasks",
    "make_env",
    "parse_turn",
    "render_output",
    "split_transcript",
]
