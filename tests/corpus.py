"""The vendor corpus of ``tests/data/vendor`` for the tests: its folder, the module that generates
it (``tools/vendor_corpus/models.py``, imported by path; numpy only) and each file's arrays."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Dict

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "data" / "vendor"


def _load_models():
    spec = importlib.util.spec_from_file_location("_vendor_corpus_models", REPO / "tools" / "vendor_corpus" / "models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


#: ``tools/vendor_corpus/models.py``: the corpus's cases (``CASES``) and ``stored_arrays``
MODELS = _load_models()


def corpus_arrays(stem: str) -> Dict[str, np.ndarray]:
    """A corpus file's arrays by key: ``in0..`` its raw NCHW inputs (regenerated from the
    manifest's seed), ``out0..`` the simulator's outputs, ``ref0..`` onnxruntime's."""
    return MODELS.stored_arrays(CORPUS / f"{stem}.npz")


def inputs_of(arrays: Dict[str, np.ndarray]) -> list:
    """The ``in0..`` arrays of :func:`corpus_arrays`'s result, in order."""
    return [arrays[f"in{k}"] for k in range(sum(k.startswith("in") for k in arrays))]
