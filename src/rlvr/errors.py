"""User-facing errors: one paragraph that names the culprit (file, line, field, path)."""


class RlvrError(Exception):
    """An error caused by the user's input; the CLI prints it without a traceback (unless --debug)."""


class ConfigError(RlvrError):
    """A recipe or override is invalid."""


class DataError(RlvrError):
    """A data file is malformed."""


class ModelLoadError(RlvrError):
    """A model or tokenizer could not be loaded."""


class Interrupted(Exception):
    """A stage stopped on SIGINT/SIGTERM after writing a checkpoint (the CLI exits 0 with the resume command)."""

    def __init__(self, stage: str, step: int, checkpoint: str | None) -> None:
        self.stage, self.step, self.checkpoint = stage, step, checkpoint
        super().__init__(f"stage {stage} stopped at step {step}; checkpoint: {checkpoint}")
