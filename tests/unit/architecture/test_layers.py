"""The import layers of ../shared/DESIGN.md ("Layers"), kept by walking every module's imports.

    errors, config, hooks, console -> data -> envs -> verifiers -> models -> rollout -> monitoring -> trainers
      -> distributed -> accel -> pipeline -> commands -> cli          (losses/, advantages/: torch only, leaves)

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
         "distributed", "accel", "pipeline", "commands", "cli"]
RANK = {name: i for i, name in enumerate(ORDER)}
RANK["config"] = RANK["hooks"] = RANK["console"] = RANK["omp_wait"] = RANK["errors"]
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


def test_the_hf_engine_implements_the_rollout_protocol():
    from rlvr.models.tiny import build_tiny
    from rlvr.rollout.engine import RolloutEngine
    from rlvr.rollout.hf_engine import HFEngine

    model, tok = build_tiny(size="test")
    assert isinstance(HFEngine(model, tok), RolloutEngine)
