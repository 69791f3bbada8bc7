"""User-facing errors: one paragraph that names the culprit (file, line, field, path)."""


class RlvrError(Exception):
    """An error caused by the user's input; the CLI prints it without a traceback (unless --debug)."""


class ConfigError(RlvrError):
    """A recipe or override is invalid."""


class DataError(RlvrError):
    """A data file is malformed."""


class ModelLoadError(RlvrError):
    """A model or tokenizer could not be loaded."""
