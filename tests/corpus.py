"""The vendor corpus of ``tests/data/vendor`` for the tests: its folder, the module that generates
it (``tools/vendor_corpus/models.py``, imported by path; numpy only) and each file's arrays."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "data" / "vendor"


def _load_models():
    path = REPO / "tools" / "vendor_corpus" / "models.py"
    spec = importlib.util.spec_from_file_location("_vendor_corpus_models", path)
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
    manifest's seed) and ``out0..`` the simulator's outputs."""
    return MODELS.stored_arrays(CORPUS / f"{stem}.npz")


def lowered(stem: str):
    """Corpus file ``stem`` lowered to the software executor's graph (a
    :class:`rknnlite.model.rknn_graph.VendorModel`: ``.graph``, ``.metadata``)."""
    from rknnlite.model.loader import load_model
    from rknnlite.model.rknn_graph import lower_rockchip

    loaded = load_model(str(CORPUS / f"{stem}.rknn"))
    return lower_rockchip(loaded.payload, loaded.model)


def inputs_of(arrays: Dict[str, np.ndarray]) -> list:
    """The ``in0..`` arrays of :func:`corpus_arrays`'s result, in order."""
    return [arrays[f"in{k}"] for k in range(sum(k.startswith("in") for k in arrays))]


def steps_from_simulator(stem: str) -> List[np.ndarray]:
    """Corpus file ``stem`` run off-board on its stored inputs: per output, how many of its
    quantization steps each value is from the simulator's (flat float64 arrays; an int8 file's)."""
    import rknnlite

    arrays = corpus_arrays(stem)
    with rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as ctx:
        outs = ctx.run(inputs_of(arrays))
        steps = [attr.scale for attr in ctx.outputs]
    return [np.abs(np.asarray(out, np.float64).ravel() - arrays[f"out{k}"].ravel()) / step
            for k, (out, step) in enumerate(zip(outs, steps))]


@functools.lru_cache(maxsize=None)
def _onnxruntime_session(model: str):
    import onnxruntime as ort

    case = MODELS.case_named(model)
    proto = (case.reference or case.build)()  # onnxruntime runs no custom op: the standard-op twin
    return case, ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


def onnxruntime_outputs(model: str, raw_inputs: list) -> list:
    """onnxruntime's outputs of corpus case ``model``'s ONNX on ``raw_inputs`` normalised as the
    vendor file does it (the references ``manifest.json``'s ``cos`` and ``max_abs`` compare the
    simulator with), float32."""
    case, session = _onnxruntime_session(model)
    feeds = {name: x for (name, _, _), x in zip(case.inputs, case.normalise(raw_inputs))}
    return [np.asarray(y, np.float32) for y in session.run(None, feeds)]
