"""``rlvr validate``: a dry run. Resolve everything a run will touch and report every problem at once.

Checked without training anything: the starting model (a local HF folder, an adapter folder, or a tiny
size), every task source and pairs file (read and parsed in full, so a bad line is caught before any
stage starts), SFT demonstrations present, stage inputs (a PPO reward model, a pair-builder scorer, an
RM backbone), batch arithmetic (micro-batch larger than the batch, RL groups of one), custom reward
functions importable, and held-out safety: evaluation tasks marked ``split: train``, training tasks
marked ``split: heldout``, and evaluation prompts that also occur in a stage's training tasks (by a
hash of the prompt's content), tasks their kind's verifier cannot judge (where they are judged: the
held-out tasks, the data of a stage scored by the verifier), and text the model's tokenizer cannot encode
(``rlvr.data.encodable``), SFT demonstrations that ``max_length`` cuts (to nothing: an error; short of their
end: a warning), and an RL stage's token budget that cuts its tasks' worked solutions or an overlong ramp they
reach (warnings). Each problem names its key, the recipe file and the key's line.

The checks are the list :data:`CHECKS`, each a function of the :class:`DryRun` returning every problem it
finds, so none hides another. When the recipe's schema itself fails, :mod:`rlvr.commands.preflight_raw`
runs those that need no valid recipe on the YAML as read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.config.recipe import Recipe, task_sources, with_system_prompt
from rlvr.errors import ConfigError, RlvrError, listing
from rlvr.stages import stage_kind


@dataclass
class Problem:
    key: str
    message: str
    warning: bool = False


def prompt_hash(task) -> str:
    """A hash of what the policy is asked (user/assistant turns; a system prompt does not make it new)."""
    turns = [m for m in task.policy_messages() if m["role"] != "system"]
    return hashlib.blake2b(json.dumps(turns, sort_keys=True).encode(), digest_size=12).hexdigest()


def _try(problems: list[Problem], key: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except RlvrError as e:
        problems.append(Problem(key, str(e)))
    except (OSError, ValueError) as e:
        problems.append(Problem(key, f"{type(e).__name__}: {e}"))
    return None


def _source_key(key: str, src: Any) -> str:
    return f"{key}.path" if getattr(src, "path", None) is not None else key


@dataclass
class DryRun:
    """What the checks of one dry run share: the recipe (with its system prompt in every task source), the
    options of the command, and what earlier checks loaded (the tokenizer, each task source's tasks)."""

    recipe: Recipe | None
    only: str | None = None
    init_path: str | None = None
    allow_unprobed_judge: bool = False
    tokenizer: Any = None
    tasks: dict[str, list] = field(default_factory=dict)
    texts: dict[str, tuple[list, bool]] = field(default_factory=dict)
    """Problem key -> (tasks or preference records loaded there, whether its demonstrations are trained on)."""


def check_model(recipe: Recipe, init_path: str | None, dry: DryRun | None = None) -> list[Problem]:
    """The starting model exists and its tokenizer loads (kept on ``dry`` for the text check)."""
    path, key = (init_path, "--model") if init_path else (recipe.model.path, "model.path")
    if path is None:
        if recipe.model.tiny is None:
            return [Problem("model", "set model.path (a local HF folder) or model.tiny")]
        if dry is not None:
            from rlvr.models.tokenizer import build_tokenizer

            dry.tokenizer = build_tokenizer(recipe.model.tiny.tokenizer)
        return []
    return check_model_folder(path, key, recipe.model.chat_template, dry)


def check_model_folder(path: str, key: str, template: str = "required", dry: DryRun | None = None) -> list[Problem]:
    p = Path(path)
    if not p.exists():
        return [Problem(key, f"{path!r} does not exist (models load from local folders only)")]
    if (p / "config.json").exists():
        return check_tokenizer(p, key, template, dry)
    if (p / "adapter_config.json").exists():  # a LoRA adapter runs with its base model's tokenizer
        from rlvr.models.load import adapter_base

        probs: list[Problem] = []
        base = _try(probs, key, lambda: adapter_base(p))
        return probs if base is None else check_model_folder(str(base), key, template, dry)
    return [Problem(key, f"{path!r} has no config.json nor adapter_config.json: not a model folder")]


def check_tokenizer(path: Path, key: str, template: str, dry: DryRun | None = None) -> list[Problem]:
    """The folder's tokenizer has a chat template (unless ``model.chat_template: plain``) and fits the model's
    vocabulary (a token id past the embedding table would crash mid-run, or silently read another row)."""
    from rlvr.models.hf import import_transformers

    import_transformers()
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - reported as a problem of the key
        return [Problem(key, f"{str(path)!r}: the tokenizer does not load ({type(e).__name__}: {str(e)[:200]})")]
    if dry is not None:
        dry.tokenizer = tok
    out = []
    if template == "required" and not getattr(tok, "chat_template", None):
        out.append(Problem(key, f"{str(path)!r}: the tokenizer has no chat template (tokenizer_config.json "
                                "'chat_template' or chat_template.jinja): prompts would be rendered as plain text. "
                                "Add the template the model was tuned with, or set model.chat_template: plain "
                                "for a base model"))
    try:
        cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return [*out, Problem(key, f"{path / 'config.json'}: unreadable ({e})")]
    vocab = cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")
    if isinstance(vocab, int) and vocab < len(tok):
        out.append(Problem(key, f"{path / 'config.json'}: vocab_size {vocab} is smaller than the tokenizer's "
                                f"{len(tok)} tokens: ids >= {vocab} have no embedding row. Use the model's own "
                                f"tokenizer, or resize the embeddings (model.resize_token_embeddings({len(tok)})) "
                                "and save the model again"))
    return out


def check_batches(i: int, st: Any, distributed: Any = None, earlier: frozenset = frozenset()) -> list[Problem]:
    """Batch arithmetic, then the stage type's own checks (:attr:`rlvr.stages.StageKind.check`; ``earlier``:
    what the stages before it produce, e.g. a reward model)."""
    out = []
    pre = f"stages.{i}"
    if hasattr(st, "batch_size") and (st.micro_batch_size or 0) > st.batch_size:
        out.append(
            Problem(
                f"{pre}.micro_batch_size",
                f"micro_batch_size {st.micro_batch_size} > batch_size "
                f"{st.batch_size}: each step is a single micro-batch of {st.batch_size} (did you mean "
                "to swap them?)",
                warning=True,
            )
        )
    return out + [Problem(f"{pre}.{key}", why) for key, why in stage_kind(st).check(st, distributed, earlier)]


def check_stage_inputs(i: int, st: Any) -> list[Problem]:
    """The model folders the stage reads (a pair-builder scorer, then the stage type's own: a PPO reward model,
    an RM backbone, a teacher) and its python rewards."""
    out: list[Problem] = []
    pre = f"stages.{i}"
    paths = []
    pairs = getattr(st, "pairs", None)
    if pairs is not None and getattr(pairs, "scorer", None) == "reward_model":
        if pairs.reward_model_path is None:
            out.append(
                Problem(f"{pre}.pairs.reward_model_path", "scorer: reward_model needs reward_model_path")
            )
        paths.append(("pairs.reward_model_path", pairs.reward_model_path))
    if getattr(pairs, "model_judged", False):
        paths.append(("pairs.judge_model", pairs.judge_model))
    paths += stage_kind(st).model_paths(st)
    for k, p in paths:
        if p is not None and not (Path(p) / "config.json").exists():
            out.append(Problem(f"{pre}.{k}", f"{p!r} is not a local model folder (no config.json)"))
    from rlvr.verifiers.reward_check import check_python_rewards

    out += [Problem(key, why) for key, why in check_python_rewards(i, st)]  # imported, signature, called
    return out


def check_pairs(i: int, st: Any, dry: DryRun | None = None) -> list[Problem]:
    pairs = getattr(st, "pairs", None)
    if pairs is None or not hasattr(pairs, "path"):
        return []
    from rlvr.data.preference import PreferencePair, load_preferences

    out: list[Problem] = []
    for name in ("path", "heldout_path"):
        path = getattr(pairs, name)
        recs = (
            _try(out, f"stages.{i}.pairs.{name}", lambda path=path: load_preferences(path)) if path else None
        )
        if recs and dry is not None:
            dry.texts[f"stages.{i}.pairs.{name}"] = (recs, True)
        loss = getattr(getattr(st, "loss", None), "type", None)
        if recs and loss not in (None, "kto") and any(not isinstance(r, PreferencePair) for r in recs):
            bad = next(r for r in recs if not isinstance(r, PreferencePair))
            out.append(
                Problem(
                    f"stages.{i}.pairs.{name}",
                    f"{bad.source}: loss {loss} needs pairs "
                    "{prompt, chosen, rejected}; this line is an unpaired label (use type: kto)",
                )
            )
    return out


def judged_sources(recipe: Recipe) -> set[str]:
    """Keys of the task sources whose tasks are judged by their kind's verifier: the held-out tasks, and the
    data of a stage that scores with it (an RL stage's ``correct`` reward, PPO against the verifier,
    rejection sampling, distillation) or builds pairs with it."""
    keys = {"eval.tasks"}
    for i, st in enumerate(recipe.stages):
        if stage_kind(st).data_judged(st):
            keys.add(f"stages.{i}.data")
        pairs = getattr(st, "pairs", None)
        if getattr(pairs, "scorer", None) == "verifier":
            keys.add(f"stages.{i}.pairs.tasks")
    return keys


def check_tasks(recipe: Recipe, dry: DryRun | None = None) -> list[Problem]:
    """Load every task source; tasks their verifier cannot judge (where they are judged); demonstrations for
    SFT; split fields; eval/train overlap by content hash. The loaded tasks are kept on ``dry``."""
    from rlvr.data.sources import load_task_source
    from rlvr.verifiers.registry import unjudgeable

    out: list[Problem] = []
    loaded: dict[str, list] = dry.tasks if dry is not None else {}
    judged = judged_sources(recipe)
    demonstrated = {f"stages.{i}.{f}" for i, st in enumerate(recipe.stages) if stage_kind(st).demonstrations
                    for f in ("data", "heldout")}
    for key, src in task_sources(recipe):
        tasks = _try(out, _source_key(key, src), lambda src=src: load_task_source(src))
        if tasks is None:
            continue
        loaded[key] = tasks
        if dry is not None:
            dry.texts[_source_key(key, src)] = (tasks, key in demonstrated)
        bad = unjudgeable(tasks) if key in judged else []
        if bad:
            out.append(Problem(_source_key(key, src), listing(bad, "tasks cannot be judged by their kind's verifier "
                                                                   "(every completion would be 'infra')")))
    for i, st in enumerate(recipe.stages):
        for name in ("data", "heldout") if stage_kind(st).demonstrations else ():
            missing = [t.id for t in loaded.get(f"stages.{i}.{name}", []) if not t.solution]
            if missing:
                out.append(
                    Problem(
                        _source_key(f"stages.{i}.{name}", getattr(st, name)),
                        f"SFT needs a demonstration ('completion', 'solution', or a final assistant turn "
                        f"in 'messages') on every task; {len(missing)} have none (first: {missing[0]!r})",
                    )
                )
    ev = loaded.get("eval.tasks", [])
    marked = [t.id for t in ev if t.split == "train"]
    if marked:
        out.append(
            Problem(
                _source_key("eval.tasks", recipe.eval.tasks),
                f"{len(marked)} evaluation task(s) are "
                f'marked "split": "train" (first: {marked[0]!r}); held-out evaluation must not use them',
            )
        )
    ev_hashes = {prompt_hash(t) for t in ev}
    for key, tasks in loaded.items():
        if key == "eval.tasks":
            continue
        if key.endswith(".heldout"):  # SFT held-out demonstrations: not training data
            continue
        held = [t.id for t in tasks if t.split == "heldout"]
        if held:
            out.append(
                Problem(
                    key,
                    f'{len(held)} training task(s) are marked "split": "heldout" (first: '
                    f"{held[0]!r}); filter them with split: train on the source",
                )
            )
        n = sum(prompt_hash(t) in ev_hashes for t in {prompt_hash(t): t for t in tasks}.values())
        if n:
            out.append(
                Problem(
                    _source_key("eval.tasks", recipe.eval.tasks),
                    f"{n} evaluation prompt(s) also occur in the training tasks of {key} (same content): "
                    "held-out results would be measured on training data (eval.overlap: warn to allow)",
                    warning=recipe.eval.overlap == "warn",
                )
            )
    return out


def check_judges(i: int, st: Any, allow_unprobed: bool) -> list[Problem]:
    """A model-judged reward or pair builder (RLAIF) is labelled, and refused unless ``--allow-unprobed-judge`` or
    a passing ``rlvr probe judge`` report exists for exactly this judge checkpoint and rubric (by their hashes)."""
    out: list[Problem] = []
    for j, t in enumerate(getattr(st, "rewards", [])):
        if t.model_judged:
            what = f"reward {t.key!r} is model-judged by {t.judge_model!r}: stage {st.name} is RLAIF, not RLVR (its " \
                   "reward does not come from an executable oracle)"
            out += judge_problems(f"stages.{i}.rewards.{j}", t.judge_model, t.rubric, what, allow_unprobed)
    pairs = getattr(st, "pairs", None)
    if getattr(pairs, "model_judged", False):
        what = f"pairs are chosen and rejected by the model judge {pairs.judge_model!r}: stage {st.name} is RLAIF " \
               "(its preferences do not come from an executable oracle)"
        out += judge_problems(f"stages.{i}.pairs", pairs.judge_model, pairs.rubric, what, allow_unprobed)
    return out


def judge_problems(key: str, judge_model: str, rubric: str, what: str, allow_unprobed: bool) -> list[Problem]:
    """The RLAIF label of one model judge, and its refusal unless it passed ``rlvr probe judge`` with this rubric."""
    out = [Problem(key, what, warning=True)]
    if allow_unprobed:
        return out + [Problem(key, "the judge is used unprobed (--allow-unprobed-judge)", warning=True)]
    from rlvr.models.judge import checkpoint_hash, probe_report_path, rubric_hash

    try:
        want = (checkpoint_hash(judge_model), rubric_hash(rubric))
    except (RlvrError, OSError) as e:
        return out + [Problem(f"{key}.judge_model", str(e))]
    path = probe_report_path(judge_model, rubric)
    rep = json.loads(path.read_text()) if path.exists() else None
    if rep is None or (rep.get("judge_hash"), rep.get("rubric_hash")) != want:
        why = "no probe report" if rep is None else "the probe report is for another checkpoint or rubric"
        out.append(Problem(key, f"{why} ({path}): run `rlvr probe judge --judge-model {judge_model} --rubric "
                                "...` first, or pass --allow-unprobed-judge"))
    elif not rep.get("passed"):
        moved = ", ".join(a["attack"] for a in rep.get("attacks", []) if a.get("moves_score"))
        out.append(Problem(key, f"the judge failed its probe ({path}): {moved} move(s) its score; fix the rubric "
                                "or the judge, or pass --allow-unprobed-judge"))
    return out


def stage_checks(dry: DryRun) -> list[Problem]:
    """Per stage this command runs: batch arithmetic, stage inputs, pairs files, model judges."""
    out: list[Problem] = []
    earlier: frozenset[str] = frozenset()  # what the stages before produce (a policy, a reward model)
    for i, st in enumerate(dry.recipe.stages):
        if dry.only is None or st.type == dry.only:
            out += check_batches(i, st, dry.recipe.distributed, earlier) + check_stage_inputs(i, st)
            out += check_pairs(i, st, dry) + check_judges(i, st, dry.allow_unprobed_judge)
        earlier = earlier | {stage_kind(st).produces}
    return out


def check_text(dry: DryRun) -> list[Problem]:
    """Text the model's tokenizer cannot encode (it would read ``<unk>``) in what the checks before loaded:
    prompts and chat messages (the system prompt among them), SFT demonstrations, pairs' answers."""
    if dry.tokenizer is None:
        return []
    from rlvr.data.encodable import CharCheck, unencodable

    check, out = CharCheck(dry.tokenizer), []
    for key, (items, demonstrations) in dry.texts.items():
        bad = unencodable(dry.tokenizer, items, demonstrations, check)
        if bad:
            out.append(Problem(key, listing(bad, "fields hold text the model's tokenizer cannot encode")))
    return out


def check_demo_lengths(dry: DryRun) -> list[Problem]:
    """Demonstrations an SFT stage's ``max_length`` cuts, encoded with the model's tokenizer as the stage will: to
    no completion token (an error: they would train on nothing) or short of their end (a warning)."""
    if dry.tokenizer is None:
        return []
    from rlvr.data.chat import demo_cuts

    out: list[Problem] = []
    for i, st in enumerate(dry.recipe.stages):
        if not stage_kind(st).demonstrations or (dry.only is not None and st.type != dry.only):
            continue
        for name in ("data", "heldout"):
            tasks = [t for t in dry.tasks.get(f"stages.{i}.{name}", []) if t.solution]
            if not tasks:
                continue
            what = f"the {len(tasks)} demonstrations of stages.{i}.{name}"
            _, error, warning = _try(out, f"stages.{i}.{name}", lambda tasks=tasks, what=what: demo_cuts(
                _encoded_once(tasks, dry.tokenizer, what), tasks, st.max_length, what)) or (None, None, None)
            out += [Problem(f"stages.{i}.max_length", m, warning=m is warning) for m in (error, warning) if m]
    return out


def check_answer_budget(dry: DryRun) -> list[Problem]:
    """An RL stage's token budget against the lengths of its tasks' worked solutions (where they have them), in
    the model's tokens with the end of turn: right answers longer than ``sampling.max_new_tokens`` are cut and
    score nothing, and right answers that reach an overlong term's ramp (the last ``buffer`` tokens of the
    budget) are punished for their length, so a short wrong answer can outscore a long right one — the run
    learns to stop early (docs/methods.md, long outputs). Warnings: the recipe may mean it."""
    if dry.tokenizer is None:
        return []
    from rlvr.data.chat import encode_completion

    out: list[Problem] = []
    for i, st in enumerate(dry.recipe.stages):
        budget = getattr(getattr(st, "sampling", None), "max_new_tokens", None)
        if budget is None or (dry.only is not None and st.type != dry.only):
            continue
        sols = sorted({t.solution for t in dry.tasks.get(f"stages.{i}.data", []) if t.solution and t.kind != "env"})
        if not sols:
            continue
        lengths = sorted(len(encode_completion(dry.tokenizer, s)) for s in sols[:: max(1, len(sols) // 4000)])
        share = (lambda n: sum(x > n for x in lengths) / len(lengths))
        what = f"of the worked solutions of stages.{i}.data (longest {lengths[-1]} tokens)"
        if share(budget) > 0:
            out.append(Problem(f"stages.{i}.sampling.max_new_tokens", f"{share(budget):.0%} {what} are longer than "
                               f"the budget of {budget} tokens: their right answers are cut and score nothing",
                               warning=True))
        for j, term in enumerate(getattr(st, "rewards", None) or []):
            start = budget - (term.buffer if term.buffer is not None else budget // 5)
            if term.name == "overlong" and term.weight and start < budget and share(start) > 0:
                out.append(Problem(f"stages.{i}.rewards.{j}", f"the overlong term's ramp starts at {start} tokens "
                                   f"and {share(start):.0%} {what} reach it: right answers are punished for their "
                                   "length and a short wrong answer can outscore them, so the run learns to stop "
                                   "early; raise sampling.max_new_tokens above the answers or set the term's "
                                   "weight to 0", warning=True))
    return out


def _encoded_once(tasks: list, tokenizer, what: str) -> list:
    """``demo_examples`` of ``tasks``, each distinct demonstration encoded once (a draw with replacement repeats
    problems)."""
    from rlvr.trainers.sft import demo_examples

    distinct = {(t.id, repr(t.solution)): t for t in tasks}
    encoded = dict(zip(distinct, demo_examples(list(distinct.values()), tokenizer, what=what)))
    return [encoded[(t.id, repr(t.solution))] for t in tasks]


def check_plan(dry: DryRun) -> list[Problem]:
    """The plan's teacher (``plan.teacher``) is a local model folder."""
    t = dry.recipe.plan.teacher
    if t is not None and not (Path(t) / "config.json").exists():
        return [Problem("plan.teacher", f"{t!r} is not a local model folder (no config.json)")]
    return []


CHECKS: list[Callable[[DryRun], list[Problem]]] = [
    lambda d: check_model(d.recipe, d.init_path, d),
    stage_checks,
    check_plan,
    lambda d: check_tasks(d.recipe, d),
    check_text,
    check_demo_lengths,
    check_answer_budget,
]
"""The dry run, one function per concern, each returning every problem it finds (none stops the others);
later checks read what earlier ones loaded (the tokenizer, the tasks). A new check is one entry here."""


def check_recipe(recipe: Recipe, only: str | None = None, init_path: str | None = None,
                 allow_unprobed_judge: bool = False) -> list[Problem]:
    """Every problem of a recipe (resolved with its system prompt); ``only``: the stage type a stage command runs."""
    dry = DryRun(with_system_prompt(recipe), only, init_path, allow_unprobed_judge)
    return [p for check in CHECKS for p in check(dry)]


def format_problem(p: Problem, source: str | None, text: str) -> str:
    from rlvr.config.load import _line_of

    loc = [int(x) if x.isdigit() else x for x in p.key.split(".")]
    line = _line_of(text, loc) if text else None
    where = f"{source}:{line}" if source and line else (source or "")
    return f"{where + ': ' if where else ''}{p.key}: {p.message}"


def preflight(
    recipe: Recipe, source: str | None = None, only: str | None = None, init_path: str | None = None,
    allow_unprobed_judge: bool = False,
) -> list[str]:
    """Raise ConfigError listing every problem (key, file:line); return the warnings' text."""
    text = Path(source).read_text(encoding="utf-8") if source and Path(source).is_file() else ""
    probs = check_recipe(recipe, only, init_path, allow_unprobed_judge)
    errors = [format_problem(p, source, text) for p in probs if not p.warning]
    warnings = [format_problem(p, source, text) for p in probs if p.warning]
    if errors:
        n = len(errors)
        raise ConfigError(
            f"{n} problem{'s' if n > 1 else ''} found before running anything:\n  - "
            + "\n  - ".join(errors)
            + "".join(f"\n  - (warning) {w}" for w in warnings)
        )
    return warnings
