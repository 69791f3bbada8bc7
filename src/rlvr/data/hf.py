"""HF datasets as rlvr data: a folder written by ``save_to_disk`` (``load_from_disk``) or a cached dataset.

Only local data: nothing is downloaded (HF_HUB_OFFLINE is set by the CLI). Errors name the path and split.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.errors import DataError

DISK_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")


def is_saved_dataset(path: str | Path) -> bool:
    """True for a folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``."""
    p = Path(path)
    return p.is_dir() and any((p / m).exists() for m in DISK_MARKERS)


def load_hf_rows(path: str, split: str = "train", what: str = "HF dataset"):
    """The rows of split ``split`` of a saved folder or a cached dataset (an ``datasets.Dataset``)."""
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"{what} {path!r}: reading HF datasets needs the `datasets` package (pip install datasets)"
        ) from None
    if is_saved_dataset(path):
        try:
            ds = datasets.load_from_disk(str(path))
        except Exception as e:  # noqa: BLE001 - surfaced as a one-paragraph error
            raise DataError(f"{what} {path!r}: load_from_disk failed: {type(e).__name__}: {e}") from None
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise DataError(f"{what} {path!r} has no split {split!r} (splits: {sorted(ds)})")
            ds = ds[split]
        return ds
    if Path(path).exists():
        raise DataError(
            f"{what} {path!r} exists but is not a dataset folder written by save_to_disk "
            f"(none of {', '.join(DISK_MARKERS)} inside)"
        )
    try:
        return datasets.load_dataset(path, split=split)
    except Exception as e:  # noqa: BLE001 - surfaced as a one-paragraph error
        raise DataError(f"could not load {what} {path!r} (split {split!r}) offline: {e}") from None
