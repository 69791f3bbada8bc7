"""CLI command implementations; src/rlvr/cli.py only wires them into the typer app."""


def use_accelerations() -> bool:
    """Fill the core's hooks (``rlvr.hooks``) with rlvr's CPU accelerations (``rlvr.accel``) unless
    ``RLVR_ACCEL=0``; torch-free, idempotent. Called at start-up by the CLI, the Python API and the pipeline."""
    from rlvr import accel

    return accel.enable()


def quiet_hf() -> None:
    """No HF download/loading progress bars (rlvr shows its own progress); idempotent."""
    try:
        from rlvr.models.hf import import_transformers

        import_transformers()
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    except ImportError:
        pass
    try:
        import datasets

        datasets.disable_progress_bars()
    except ImportError:
        pass
