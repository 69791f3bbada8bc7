"""The model-judged reward term (``name: judge``, RLAIF): the stage's judge callable, wrapped.

The task's verifier still runs (its verdict, outcome and ``correct`` reward are kept); then every
completion whose verdict is usable is scored by each judge term's :class:`~rlvr.models.judge.ModelJudge`
in batches (cached), and the score goes to ``verdict.details["rewards"][key]``, where the ``judge``
reward term reads it. A completion the judge cannot score becomes an ``infra`` verdict (kept out of
the advantages and counted), never a reward of 0.
"""

from __future__ import annotations

from dataclasses import replace

from rlvr.data.chat import prompt_text
from rlvr.models.judge import ModelJudge
from rlvr.verifiers.base import INFRA_OUTCOMES, Verdict


def with_model_judges(judge, rewards, tokenizer=None, judges: dict | None = None):
    """``judge`` with every ``name: judge`` term of ``rewards`` scored beside it (unchanged when none).
    ``judges``: already built scorers by term key (tests)."""
    terms = [t for t in rewards if t.model_judged]
    if not terms:
        return judge
    scorers = judges or {t.key: ModelJudge(t.judge_model, t.rubric) for t in terms}

    def judged(tasks, completions):
        verdicts = list(judge(tasks, completions))
        rows = [i for i, v in enumerate(verdicts) if v.outcome not in INFRA_OUTCOMES]
        prompts = [tasks[i].prompt or prompt_text(tokenizer, tasks[i]) for i in rows] if rows else []
        for key, scorer in scorers.items():
            scores = scorer.score(prompts, [completions[i] for i in rows]) if rows else []
            for i, s in zip(rows, scores):
                v = verdicts[i]
                if v.outcome in INFRA_OUTCOMES:
                    continue
                if s is None:
                    verdicts[i] = Verdict.infra(f"judge {key}: no score (the judge did not answer with a digit)")
                    continue
                details = {**v.details, "rewards": {**v.details.get("rewards", {}), key: s}}
                verdicts[i] = replace(v, details=details)
        return verdicts
    return judged
