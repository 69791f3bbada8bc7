"""The import layers of ../shared/DESIGN.md ("Layers"), kept by walking every module's imports.

    errors, config, hooks, console, run_lock -> data -> envs -> verifiers -> models -> rollout -> monitoring -> trainers
      -> distributed -> accel -> stages -> pipeline -> commands -> cli   (losses/, advantages/: torch only, leaves)

A module may import its own layer or a lower one. Imports inside functions count too (a lazy import of a
higher layer is still a dependency), and so does ``from rlvr import X`` (read as ``rlvr.X``).
``rlvr/__init__.py`` is the package's surface and sits above all. The accelerations (``rlvr/accel/``) plug in
behind ``rlvr.hooks``: only ``pipeline``, ``commands`` and ``cli`` import them (they call ``accel.enable()``).
"""

import ast
import re
from pathlib import Path

import rlvr

ROOT = Path(rlvr.__file__).resolve().parent
ORDER = ["errors", "config", "data", "envs", "verifiers", "models", "rollout", "monitoring", "trainers",
         "distributed", "accel", "stages", "pipeline", "commands", "cli"]
RANK = {name: i for i, name in enumerate(ORDER)}
RANK["config"] = RANK["hooks"] = RANK["console"] = RANK["omp_wait"] = RANK["run_lock"] = RANK["errors"]
# the lowest layer holds these (hooks: the slots the accelerations fill; console: full-width console, heartbeat;
# omp_wait: the OpenMP wait policy, set before torch loads)
ACCEL_IMPORTERS = {"accel", "pipeline", "commands", "cli"}
"""The layers that may import ``rlvr.accel`` (itself, and the start-up code that calls ``accel.enable()``)."""
LEAVES = ("losses", "advantages")          # import torch (and each other's nothing) only
THIRD_PARTY_BANNED = {"ray", "wandb", "vllm"}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "rlvr" or len(parts) < 2:
        return None
    return parts[1]


def imports(path: Path) -> list[str]:
    """Every module ``path`` imports; ``from rlvr import X`` (and ``from rlvr.a import X``) also yields
    ``rlvr.X`` (``rlvr.a.X``): X may be a module (``from rlvr import accel``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
            if node.module == "rlvr" or node.module.startswith("rlvr."):
                out += [f"{node.module}.{a.name}" for a in node.names if is_module(f"{node.module}.{a.name}")]
    return out


def is_module(dotted: str) -> bool:
    """Whether ``rlvr.a.b`` names a module or package of rlvr's (not an attribute such as ``rlvr.__version__``)."""
    rel = ROOT.joinpath(*dotted.split(".")[1:])
    return rel.is_dir() or rel.with_suffix(".py").is_file()


def modules():
    for f in sorted(ROOT.rglob("*.py")):
        rel = f.relative_to(ROOT)
        if rel.parts == ("__init__.py",) or rel.parts[0] == "recipes":
            continue
        yield f, rel.parts[0].removesuffix(".py")


def test_no_lower_layer_imports_a_higher_one():
    bad = []
    for f, me in modules():
        for mod in imports(f):
            other = layer_of(mod)
            if other is None or other == me:
                continue
            if me in LEAVES:
                bad.append(f"{f.relative_to(ROOT)} imports {mod} (losses/ and advantages/ import torch only)")
            elif other in LEAVES:
                continue
            elif other not in RANK or me not in RANK:
                bad.append(f"{f.relative_to(ROOT)} -> {mod}: package not in the layer table")
            elif RANK[other] > RANK[me]:
                bad.append(f"{f.relative_to(ROOT)} ({me}) imports {mod} ({other}, a higher layer)")
    assert not bad, "\n".join(bad)


def test_only_the_start_up_layers_import_the_accelerations():
    """The core runs on its own (the plain PyTorch / transformers path); ``rlvr.accel`` plugs in behind
    ``rlvr.hooks`` and only ``pipeline``, ``commands/*`` and ``cli`` name it."""
    bad = [f"{f.relative_to(ROOT)} imports {mod}" for f, me in modules() for mod in imports(f)
           if layer_of(mod) == "accel" and me not in ACCEL_IMPORTERS]
    assert not bad, "only pipeline, commands and cli may import rlvr.accel:\n" + "\n".join(bad)


def test_imports_read_from_rlvr_import_x_as_the_module(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from rlvr import accel, omp_wait\nfrom rlvr.models import logprobs\nimport torch\n")
    f.write_text(f.read_text() + "from rlvr import __version__\n")
    got = imports(f)
    assert {"rlvr.accel", "rlvr.omp_wait", "rlvr.models.logprobs", "torch"} <= set(got)
    assert "rlvr.__version__" not in got
    assert layer_of("rlvr.accel") == "accel"


def test_torch_free_and_optional_packages_stay_where_they_belong():
    bad = []
    for f, me in modules():
        for mod in imports(f):
            top = mod.split(".")[0]
            if me in ("config", "verifiers", "envs") and top in ("torch", "transformers"):
                bad.append(f"{f.relative_to(ROOT)} imports {top}")
            if top == "ray" and me != "distributed":
                bad.append(f"{f.relative_to(ROOT)} imports ray (only distributed/ may)")
            if me in ("config", "losses", "advantages", "verifiers") and top in THIRD_PARTY_BANNED:
                bad.append(f"{f.relative_to(ROOT)} imports {top}")
    assert not bad, "\n".join(bad)


def test_no_trainer_imports_another_stage():
    stages = {"sft", "preference", "reward_model", "rl", "ppo"}
    bad = []
    for f in (ROOT / "trainers").glob("*.py"):
        for mod in imports(f):
            m = re.fullmatch(r"rlvr\.trainers\.(\w+)", mod)
            if m and m.group(1) in stages and m.group(1) != f.stem:
                bad.append(f"trainers/{f.name} imports {mod}")
    assert not bad, "\n".join(bad)


def test_trainer_files_stay_small():
    sizes = {f.name: len(f.read_text().splitlines()) for f in (ROOT / "trainers").glob("*.py")}
    assert all(n <= 600 for n in sizes.values()), sizes


VARIANT_TABLE = ROOT / "trainers" / "variants.py"


def test_no_branch_on_a_variants_identity_outside_the_table():
    """``loss.type == ...``, ``weighting.type in (...)``, ``credit.type == ...``, ``isinstance(x, DAPOLoss)`` and ``match`` on a
    type are the variant table's business only (config classes declare their own ``type`` literal)."""
    bad = []
    type_attr = re.compile(r"\b(loss|weighting|loss_cfg|wcfg|credit|credit_cfg)\.type\s*(==|!=|in\b|not in\b)|"
                           r"(==|!=|\bin)\s*\w*\.?(loss|weighting|credit)\.type\b")
    variant_classes = re.compile(r"isinstance\([^)]*(Loss|Weighting)\b")
    for f in ROOT.rglob("*.py"):
        if f == VARIANT_TABLE or f.parent.name == "config":
            continue
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if type_attr.search(line) or variant_classes.search(line) or re.search(r"match\s+\w+\.(loss|weighting|credit)\.type", line):
                bad.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)


STAGE_TABLE = ROOT / "stages.py"
VALUE_FIELDS = {"reward", "scorer"}
"""Fields whose values share a stage type's name (``reward: reward_model``, ``scorer: reward_model``)."""


def _stage_names() -> set[str]:
    """The stage types (their aliases, ``grpo``, ``dpo``, ..., are loss variants' names once a recipe loads)."""
    from rlvr.config.recipe import STAGE_TYPES

    return set(STAGE_TYPES)


def _literals(node: ast.AST) -> list[str]:
    """The string constants of a constant or of a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for e in node.elts for v in _literals(e)]
    return []


def _names_a_value_field(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr in VALUE_FIELDS
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        return bool(set(_literals(node.args[0])) & VALUE_FIELDS)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
            and len(node.args) >= 2:
        return bool(set(_literals(node.args[1])) & VALUE_FIELDS)
    if isinstance(node, ast.Subscript):
        return bool(set(_literals(node.slice)) & VALUE_FIELDS)
    return False


def _is_stage_class(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    if isinstance(node, ast.Tuple):
        return any(_is_stage_class(e) for e in node.elts)
    return name.endswith("Stage")


def stage_identity_branches(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """``(line, what)`` for each place that decides by a stage type's identity: a comparison with a stage type's
    name (``st.type == "rl"``, ``kind in ("rft", "distill")``, ``"sft" in types``), ``isinstance(x, *Stage)``,
    a ``case "rl":`` and a literal collection or mapping naming two stage types or more (a second table)."""
    out = []
    exports = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)}  # module names, not types
    for node in ast.walk(tree):
        if id(node) in exports:
            continue
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            hit = [v for o in operands for v in _literals(o) if v in names]
            if hit and not any(_names_a_value_field(o) for o in operands):
                out.append((node.lineno, f"compares with stage type {hit[0]!r}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                and len(node.args) == 2 and _is_stage_class(node.args[1]):
            out.append((node.lineno, "isinstance of a stage config class"))
        elif isinstance(node, ast.MatchValue) and set(_literals(node.value)) & names:
            out.append((node.value.lineno, f"case {_literals(node.value)[0]!r}"))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(set(_literals(node)) & names) >= 2 \
                and len(_literals(node)) == len(node.elts):
            out.append((node.lineno, f"a collection of stage types {sorted(set(_literals(node)) & names)}"))
        elif isinstance(node, ast.Dict) and len({v for k in node.keys if k is not None for v in _literals(k)} & names) >= 2:
            out.append((node.lineno, "a mapping keyed by stage types"))
    return out


def test_no_branch_on_a_stage_types_identity_outside_the_table():
    """What differs between stage types (trainer, checks, command, policy or not, distributed) is read from the
    stage table (``rlvr/stages.py``); ``config/`` declares the types. Nowhere else compares a stage's type with
    a name, asks ``isinstance(st, RLStage)`` or keeps its own list of types."""
    names, bad = _stage_names(), []
    for f in ROOT.rglob("*.py"):
        if f == STAGE_TABLE or f.relative_to(ROOT).parts[0] in ("config", "recipes"):
            continue
        for line, what in stage_identity_branches(ast.parse(f.read_text()), names):
            bad.append(f"{f.relative_to(ROOT)}:{line}: {what}")
    assert not bad, "\n".join(bad)


def test_the_stage_identity_check_catches_each_form():
    src = """
if stage.type == "rl": pass
if st.type in ("rft", "distill"): pass
if kind != "sft": pass
if "ppo" == x.type: pass
ok = "sft" in [x.type for x in stages]
if raw.get("type") == "onpolicy_distill": pass
if isinstance(st, RLStage): pass
if isinstance(st, (config.PPOStage, int)): pass
match st.type:
    case "preference": pass
JUDGED = ("rl", "ppo")
COMMANDS = {"sft": "sft", "rl": "grpo"}
"""
    found = stage_identity_branches(ast.parse(src), _stage_names())
    assert sorted({line for line, _ in found}) == [2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13], found
    fine = """
if st.reward == "reward_model": pass
if pairs.get("scorer") != "reward_model": pass
if getattr(pairs, "scorer", None) == "reward_model": pass
__all__ = ["sft", "preference", "rl"]
if st.type == only: pass
if device.type == "cpu": pass
ok = hasattr(st, "rewards")
"""
    assert stage_identity_branches(ast.parse(fine), _stage_names()) == []


def test_the_stage_table_covers_every_stage_type():
    from rlvr.config.recipe import STAGE_TYPES
    from rlvr.stages import STAGES

    assert set(STAGES) == set(STAGE_TYPES)
    assert all(k.type == t for t, k in STAGES.items())


def test_the_hf_engine_implements_the_rollout_protocol():
    from rlvr.models.tiny import build_tiny
    from rlvr.rollout.engine import RolloutEngine
    from rlvr.rollout.hf_engine import HFEngine

    model, tok = build_tiny(size="test")
    assert isinstance(HFEngine(model, tok), RolloutEngine)


SOURCE_TABLE = ROOT / "trainers" / "sources.py"
ROLLOUT_MODES = {"single_turn", "multi_turn"}


def rollout_mode_branches(path: Path) -> list[int]:
    """Lines of ``path`` that read ``<x>.rollout.mode`` or compare something with a rollout mode's name."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "mode" and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "rollout":
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare):
            names = [c for c in [node.left, *node.comparators] for c in ([c] if not isinstance(c, (ast.Tuple, ast.List, ast.Set)) else c.elts)]
            if any(isinstance(c, ast.Constant) and c.value in ROLLOUT_MODES for c in names):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_no_branch_on_the_rollout_mode_outside_the_source_table():
    """The rollout mode picks the stage's source once, in ``trainers/sources.py``; everything else reads the
    source or the config's declared property (``RolloutConfig.closed_loop``), never the mode itself."""
    bad = []
    for f in ROOT.rglob("*.py"):
        if f == SOURCE_TABLE or f.parent.name == "config":
            continue
        lines = f.read_text().splitlines()
        bad += [f"{f.relative_to(ROOT)}:{i}: {lines[i - 1].strip()}" for i in rollout_mode_branches(f)]
    assert not bad, "\n".join(bad)


def test_the_rollout_mode_check_sees_a_branch(tmp_path):
    code = tmp_path / "m.py"
    code.write_text("def f(stage, r):\n    if stage.rollout.mode == 'x':\n        pass\n"
                    "    return getattr(r, 'mode', None) in ('multi_turn',)\n")
    assert rollout_mode_branches(code) == [2, 4]
