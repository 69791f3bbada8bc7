"""Import ``transformers`` the first time in a process without the optional packages rlvr never uses.

transformers treats ``scipy`` and ``accelerate`` as optional: ``import transformers`` asks once whether
each is installed (``is_scipy_available`` / ``is_accelerate_available``, cached for the process) and its
modules import them only where that answer is yes. When installed, loading a causal LM pulls
``scipy.optimize`` (for the object-detection losses' Hungarian matching, via ``modeling_utils`` →
``loss_utils``) and ``accelerate`` (device maps, disk offload, ``dispatch_model``), about 55 MB resident
together (39 + 16, measured), in every trainer process. rlvr loads
models whole on one device and never uses either through transformers.

:func:`import_transformers` runs transformers' first import with both hidden from the import system
(``sys.modules[name] = None``, Python's documented way to make ``import name`` fail and
``importlib.util.find_spec(name)`` answer None), so transformers settles on "not installed" for this
process, then unhides them: later ``import scipy`` / ``import accelerate`` (peft, a user's reward
function) work as usual. It changes nothing when transformers is already imported (its answers are
cached already: hiding a package it believes present would break its imports) nor for a package already
imported. ``RLVR_HF_OPTIONAL=1`` in the environment turns it off (transformers then sees both).

Call it before rlvr's first ``from transformers import ...`` on any path that can run first in a process
(model and tokenizer loading, the tiny model, the CLI); a path that forgets it loses the saving, nothing
else. ``tests/unit/architecture/test_import_weight.py`` runs a model load, a train step and a save in a
fresh process and checks that neither package was imported and that both still import afterwards.
"""

from __future__ import annotations

import os
import sys

HIDDEN_FROM_TRANSFORMERS = ("scipy", "accelerate")


def import_transformers():
    """``import transformers`` (the module), the first time with :data:`HIDDEN_FROM_TRANSFORMERS` hidden."""
    if "transformers" in sys.modules or os.environ.get("RLVR_HF_OPTIONAL") == "1":
        import transformers

        return transformers
    hide = [n for n in HIDDEN_FROM_TRANSFORMERS if n not in sys.modules]
    for n in hide:
        sys.modules[n] = None  # type: ignore[assignment]
    try:
        import transformers
        from transformers.utils import import_utils

        for check in ("is_scipy_available", "is_accelerate_available"):  # settle both answers inside the
            fn = getattr(import_utils, check, None)                         # window (both lru-cached)
            if fn is not None:
                fn()
    finally:
        for n in hide:
            if n in sys.modules and sys.modules[n] is None:
                del sys.modules[n]
    return transformers


def hf_config(model):
    """``model.config`` as transformers' config class (a new object for rlvr's own Llama module, whose class
    says ``is_rlvr_native``: what an HF class built from this model's config needs)."""
    if not getattr(model, "is_rlvr_native", False):
        return model.config
    raw = model.config.to_dict()
    return import_transformers().AutoConfig.for_model(raw["model_type"],
                                                      **{k: v for k, v in raw.items() if k != "model_type"})
