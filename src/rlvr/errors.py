"""User-facing errors: one paragraph that names the culprit (file, line, field, path)."""


class RlvrError(Exception):
    """An error caused by the user's input; the CLI prints it without a traceback (unless --debug) and exits
    with ``exit_code``."""

    exit_code = 2


class ConfigError(RlvrError):
    """A recipe or override is invalid."""


class DataError(RlvrError):
    """A data file is malformed."""


class ModelLoadError(RlvrError):
    """A model or tokenizer could not be loaded."""


class NothingJudged(RlvrError):
    """Every verdict was ``infra``: the verifier failed on every completion, so nothing was judged. The
    results are written, and the CLI exits 3 so that a script does not read them as a score of 0."""

    exit_code = 3


class Interrupted(Exception):
    """A stage stopped on SIGINT/SIGTERM after writing a checkpoint (the CLI prints the resume command and
    exits 130, the shell's status for a command stopped by Ctrl-C)."""

    def __init__(self, stage: str, step: int, checkpoint: str | None) -> None:
        self.stage, self.step, self.checkpoint = stage, step, checkpoint
        super().__init__(f"stage {stage} stopped at step {step}; checkpoint: {checkpoint}")


MAX_LISTED = 5
"""How many problems one message names before it counts the rest."""


def listing(problems: list[str], what: str) -> str:
    """One paragraph naming the first :data:`MAX_LISTED` problems (``"3 <what>: a; b; c"``) and counting the
    rest; a single problem is itself."""
    if len(problems) == 1:
        return problems[0]
    more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
    return f"{len(problems)} {what}: " + "; ".join(problems[:MAX_LISTED]) + more
