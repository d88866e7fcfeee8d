"""Official ONNX node cases through the whole toolkit path.

Each in-scope case of every op in ``REQUIRED_OPS`` is imported
(:func:`rknnlite.toolkit.onnx_import.import_onnx`), optimised, written as a portable
float32 model, loaded by :class:`rknnlite.Context` and run on every data set, fed in
the model's own layout (``data_format=None``); the outputs must match ONNX's reference
outputs (:func:`onnx_cases.assert_matches`).  ``tools/conformance.py`` runs the same
and writes ``docs/conformance.md``.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx_cases import REQUIRED_OPS, assert_matches, node_cases, unsupported_reason  # noqa: E402

#: Element types in a case's I/O that the NPU runtime has no tensor type for, beyond
#: those ``onnx_cases.unsupported_reason`` lists: ``rknn_tensor_type`` has no UINT64.
#: The importer refuses it (ModelInvalidError), so such cases are out of scope.
EXTRA_UNSUPPORTED_ELEM_TYPES = ("UINT64",)


_RANDOM_DROPOUT = ("training-mode Dropout with ratio > 0: the expected output comes from a random generator; "
                   "an inference runtime refuses it (ModelInvalidError, as tests/test_ops_tensor.py checks)")
_TRAINING_BN = ("training-mode BatchNormalization (batch statistics, running-stat outputs): the kernel refuses "
                "training_mode=1 with ModelInvalidError; an inference runtime runs BN in inference mode")

#: Official cases that are refused on purpose, with the reason; the test checks that
#: they fail with a clear ModelInvalidError instead of passing.
EXCLUDED = {
    "test_training_dropout_default": _RANDOM_DROPOUT,
    "test_training_dropout_default_mask": _RANDOM_DROPOUT,
    "test_training_dropout": _RANDOM_DROPOUT,
    "test_training_dropout_mask": _RANDOM_DROPOUT,
    "test_batchnorm_example_training_mode": _TRAINING_BN,
    "test_batchnorm_epsilon_training_mode": _TRAINING_BN,
}


def scope_reason(case) -> Optional[str]:
    """Why a case is out of scope for the runtime (None if in scope)."""
    reason = unsupported_reason(case)
    if reason is not None:
        return reason
    if case.name in EXCLUDED:
        return EXCLUDED[case.name]
    from onnx import TensorProto

    g = case.model.graph
    for vi in list(g.input) + list(g.output):
        name = TensorProto.DataType.Name(vi.type.tensor_type.elem_type)
        if name in EXTRA_UNSUPPORTED_ELEM_TYPES:
            return f"{vi.name}: element type {name} (no runtime tensor type)"
    return None


def build_case(case) -> bytes:
    """The case's model converted as the toolkit does: import, optimise, write (float32)."""
    from rknnlite.model.metadata import build_metadata
    from rknnlite.model.portable import write_portable
    from rknnlite.toolkit.onnx_import import import_onnx
    from rknnlite.toolkit.optimize import optimize

    imported = import_onnx(case.model)
    graph = optimize(imported.graph, imported.shapes)
    metadata = build_metadata(imported.input_specs, imported.output_specs, float_dtype="float32",
                              custom_string=case.name)
    return write_portable(metadata, graph)


_CONTEXTS: Dict[str, object] = {}


def context_for(case):
    """A Context on the converted case (built once per case, reused for its data sets)."""
    import rknnlite

    ctx = _CONTEXTS.get(case.name)
    if ctx is None:
        ctx = _CONTEXTS[case.name] = rknnlite.Context(build_case(case), backend="software")
    return ctx


def as_array(x) -> np.ndarray:
    """A data-set entry as an array (entries may be numpy scalars or TensorProtos), dtype kept."""
    from onnx import TensorProto, numpy_helper

    if isinstance(x, TensorProto):
        return numpy_helper.to_array(x)
    return np.asarray(x)


def run_case(case, k: int) -> None:
    """Convert and run data set ``k`` of ``case``; raises on any mismatch or error."""
    inputs, expected = case.data_sets[k]
    ctx = context_for(case)
    actual = ctx.run([as_array(x) for x in inputs], data_format="nchw")  # ONNX data is in model order
    assert_matches(case, actual, [as_array(e) for e in expected])


def all_params() -> List[Tuple[str, object, int, Optional[str]]]:
    """``(op, case, data set index, out-of-scope reason or None)`` for every required op."""
    out = []
    for op in REQUIRED_OPS:
        for case in node_cases(op):
            reason = scope_reason(case)
            for k in range(len(case.data_sets)):
                out.append((op, case, k, reason))
    return out


def _pytest_params(in_scope: bool):
    params = []
    for op, case, k, reason in all_params():
        if reason is not None and unsupported_reason(case) is not None:
            continue  # onnx_cases' own exclusions (not tensors, or types like STRING); see docs/conformance.md
        if (reason is None) == in_scope:
            params.append(pytest.param(case, k, id=f"{op}-{case.name}[{k}]"))
    return params


@pytest.fixture(scope="module", autouse=True)
def _close_contexts():
    yield
    for ctx in _CONTEXTS.values():
        ctx.close()
    _CONTEXTS.clear()


@pytest.mark.parametrize("case, k", _pytest_params(in_scope=True))
def test_node_case_through_the_toolkit(case, k):
    run_case(case, k)


@pytest.mark.parametrize("case, k", _pytest_params(in_scope=False))
def test_out_of_scope_case_is_refused_clearly(case, k):
    """Cases out of scope (EXCLUDED, or I/O types the runtime lacks) fail with ModelInvalidError."""
    from rknnlite import ModelInvalidError

    with pytest.raises(ModelInvalidError, match="training_mode|element type"):
        run_case(case, k)


def test_excluded_cases_exist():
    names = {case.name for _, case, _, _ in all_params()}
    assert set(EXCLUDED) <= names
