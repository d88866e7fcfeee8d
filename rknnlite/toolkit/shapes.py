"""Shape sets of dynamic-shape builds and the batch axis of multi-batch builds.

``config(dynamic_input=[[shape_in0, shape_in1, ...], ...])`` lists the *shape sets* a
model must run: set ``s`` gives one shape per model input, and the inputs of one run
take their shapes from the same set (no cross combinations), as the vendor runtime's
``RKNN_QUERY_INPUT_DYNAMIC_RANGE`` pairs them.  The toolkit builds one graph with
shared weights for every set (dims that vary across the sets stay symbolic, ``-1``),
and this module holds the helpers for that:

* :func:`validate_shape_sets` - the structure of a ``dynamic_input`` value;
* :func:`stored_order` - the order a built file keeps the sets in (the vendor compiler's);
* :func:`check_sets_against_inputs` - the sets against a model's declared inputs;
* :func:`merge_shapes` - per input, the set-wide shape with ``-1`` on varying dims;
* :func:`match_set` / :func:`fit_to_shape` / :func:`cover_shape_sets` - calibration
  samples for every set;
* :func:`verify_shape_sets` - run a graph on every set (the build's proof that one
  graph serves them all), giving each set's output shapes.

:func:`batch_specs` describes the I/O of ``build(rknn_batch_size=N)``: axis 0 of every
input and output multiplied by ``N`` (the stored graph stays the batch-1 graph; the
runtime splits a batch into ``N`` runs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ModelInvalidError, RKNNError
from ..model.graph import Graph
from ..model.spec import TensorSpec, numpy_dtype

__all__ = [
    "MAX_DYNAMIC_SHAPE_NUM",
    "ShapeSets",
    "validate_shape_sets",
    "stored_order",
    "check_sets_against_inputs",
    "merge_shapes",
    "match_set",
    "fit_to_shape",
    "cover_shape_sets",
    "verify_shape_sets",
    "merge_output_shapes",
    "batch_specs",
]

#: ``RKNN_MAX_DYNAMIC_SHAPE_NUM``: the most shape sets a model may declare.
MAX_DYNAMIC_SHAPE_NUM = 512

Shape = Tuple[int, ...]
#: ``sets[s][i]``: the shape of input ``i`` in set ``s``.
ShapeSets = Tuple[Tuple[Shape, ...], ...]


def stored_order(sets: ShapeSets) -> ShapeSets:
    """``sets`` in the order RKNN-Toolkit2 2.5.0 stores them in a built file, which is the
    order librknnrt reports them in (``INPUT_DYNAMIC_RANGE``) and whose first set is current
    after init: the largest first by total input elements, ties in the given order (seen on
    its builds: ``[32x32, 16x16, 24x40]`` -> ``[32x32, 24x40, 16x16]``, ``[12x12, 8x8, 8x16]``
    -> ``[12x12, 8x16, 8x8]``)."""
    return tuple(sorted(sets, key=lambda shape_set: -sum(int(np.prod(shape)) for shape in shape_set)))


def validate_shape_sets(dynamic_input) -> ShapeSets:
    """Check a ``dynamic_input`` value and return it as tuples.

    It must be a non-empty list of at most :data:`MAX_DYNAMIC_SHAPE_NUM` sets, each a
    non-empty list with one shape per model input (the same count in every set), each
    shape a list of ints > 0 (bools are not ints here), and input ``i`` must have the
    same rank in every set.  Raises ``ValueError`` naming the set and input at fault.
    """
    if not isinstance(dynamic_input, (list, tuple)) or not dynamic_input:
        raise ValueError(f"dynamic_input must be a non-empty list of shape sets, one shape per model input "
                         f"in each, like [[[1,3,224,224]], [[1,3,160,160]]]; got {dynamic_input!r}")
    if len(dynamic_input) > MAX_DYNAMIC_SHAPE_NUM:
        raise ValueError(f"dynamic_input has {len(dynamic_input)} shape sets; at most {MAX_DYNAMIC_SHAPE_NUM} "
                         f"are supported (RKNN_MAX_DYNAMIC_SHAPE_NUM)")
    sets = []
    for s, shape_set in enumerate(dynamic_input):
        if not isinstance(shape_set, (list, tuple)) or not shape_set:
            raise ValueError(f"dynamic_input[{s}] must be a non-empty list with one shape per model input "
                             f"(e.g. [[1,3,224,224]] for one input), not {shape_set!r}")
        shapes = []
        for i, shape in enumerate(shape_set):
            if isinstance(shape, np.ndarray) and shape.ndim == 1:
                shape = shape.tolist()
            if not isinstance(shape, (list, tuple)) or not all(
                    isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)) for d in shape):
                raise ValueError(f"dynamic_input[{s}][{i}] (input {i} of set {s}) must be a list of ints, "
                                 f"not {shape!r}")
            if any(int(d) <= 0 for d in shape):
                raise ValueError(f"dynamic_input[{s}][{i}] (input {i} of set {s}) is {list(shape)}; every dim "
                                 f"must be > 0")
            shapes.append(tuple(int(d) for d in shape))
        sets.append(tuple(shapes))
    first = sets[0]
    for s, shape_set in enumerate(sets[1:], 1):
        if len(shape_set) != len(first):
            raise ValueError(f"dynamic_input[{s}] has {len(shape_set)} shapes but dynamic_input[0] has "
                             f"{len(first)}; every set needs one shape per model input")
        for i, (a, b) in enumerate(zip(first, shape_set)):
            if len(a) != len(b):
                raise ValueError(f"dynamic_input[{s}][{i}] has rank {len(b)} ({list(b)}) but "
                                 f"dynamic_input[0][{i}] has rank {len(a)} ({list(a)}); an input keeps its rank")
    seen = {}
    for s, shape_set in enumerate(sets):
        if shape_set in seen:
            raise ValueError(f"dynamic_input[{s}] repeats dynamic_input[{seen[shape_set]}] "
                             f"({[list(x) for x in shape_set]})")
        seen[shape_set] = s
    return tuple(sets)


def check_sets_against_inputs(sets: ShapeSets, names: Sequence[str],
                              declared: Sequence[Optional[Sequence[int]]], op: str = "load_onnx") -> None:
    """Check the sets against the model's inputs: one shape per input, the rank each
    input declares, and the dims it fixes (``declared[i]``: the declared shape with
    ``-1`` on symbolic dims, or None when the model gives none).  Raises
    :class:`ModelInvalidError` naming the set and the input."""
    if len(sets[0]) != len(names):
        raise ModelInvalidError(
            f"dynamic_input sets have {len(sets[0])} shape(s) each, but the model has {len(names)} input(s) "
            f"({', '.join(names)}); give one shape per input in every set", op=op)
    for s, shape_set in enumerate(sets):
        for i, (name, shape, decl) in enumerate(zip(names, shape_set, declared)):
            if decl is None:
                continue
            where = f"dynamic_input[{s}][{i}] (input {name!r}) is {list(shape)}"
            if len(decl) != len(shape):
                raise ModelInvalidError(f"{where}, but the model gives the input rank {len(decl)} ({list(decl)})",
                                        op=op)
            for axis, (d, v) in enumerate(zip(decl, shape)):
                if d >= 0 and d != v:
                    raise ModelInvalidError(
                        f"{where}, but the model fixes axis {axis} to {d} ({list(decl)}); only symbolic dims "
                        f"may vary", op=op)


def merge_shapes(sets: ShapeSets) -> List[Shape]:
    """Per input, the shape shared by every set: a dim all sets agree on keeps its
    value, one that varies becomes ``-1``."""
    merged = []
    for i in range(len(sets[0])):
        dims = zip(*(shape_set[i] for shape_set in sets))
        merged.append(tuple(d[0] if all(x == d[0] for x in d) else -1 for d in dims))
    return merged


def match_set(shapes: Sequence[Sequence[int]], sets: ShapeSets) -> Optional[int]:
    """The index of the set whose shapes are exactly ``shapes`` (one per input), or None."""
    key = tuple(tuple(int(d) for d in s) for s in shapes)
    for s, shape_set in enumerate(sets):
        if shape_set == key:
            return s
    return None


def fit_to_shape(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``x`` brought to ``shape`` (same rank): each axis centre-cropped where ``x`` is
    longer and wrapped around (periodic padding) where it is shorter, so the values
    keep the statistics of real data.  A new array; ``x`` is not changed."""
    if x.ndim != len(shape):
        raise ValueError(f"cannot fit an array of shape {list(x.shape)} to rank {len(shape)} ({list(shape)})")
    index = []
    pads = []
    for n, want in zip(x.shape, shape):
        if n >= want:
            start = (n - want) // 2
            index.append(slice(start, start + want))
            pads.append((0, 0))
        else:
            index.append(slice(None))
            pads.append(((want - n) // 2, want - n - (want - n) // 2))
    y = x[tuple(index)]
    if any(p != (0, 0) for p in pads):
        y = np.pad(y, pads, mode="wrap")
    return np.array(y)


def cover_shape_sets(samples: Sequence[Sequence[np.ndarray]], sets: ShapeSets
                     ) -> Tuple[List[List[np.ndarray]], List[int]]:
    """Calibration samples that run every shape set.

    Every sample must match one set exactly (``ValueError`` naming the sample
    otherwise).  Each set no sample matches gets samples fitted to its shapes
    (:func:`fit_to_shape`), so quantization sees the activations of every set: all of
    them while that at most triples the calibration work, else fewer (taken in turn,
    at least one per set).  Returns ``(samples, added set indices)``; the given samples
    come first, unchanged (not copied).
    """
    covered = set()
    for k, sample in enumerate(samples):
        s = match_set([x.shape for x in sample], sets)
        if s is None:
            raise ValueError(
                f"calibration sample {k} (non-blank dataset line {k + 1}) has shapes "
                f"{[list(x.shape) for x in sample]}, which are none of the dynamic_input sets "
                f"{[[list(x) for x in st] for st in sets]}")
        covered.add(s)
    out = [list(sample) for sample in samples]
    added = [s for s in range(len(sets)) if s not in covered]
    if not added:
        return out, added
    per_set = min(len(samples), max(1, 2 * len(samples) // len(added)))
    k = 0
    for s in added:
        for _ in range(per_set):
            sample = samples[k % len(samples)]
            k += 1
            out.append([fit_to_shape(x, shape) for x, shape in zip(sample, sets[s])])
    return out, added


def verify_shape_sets(graph: Graph, sets: ShapeSets, input_specs: Sequence[TensorSpec],
                      op: str = "build", custom_ops: Sequence = ()) -> List[List[Shape]]:
    """Run ``graph`` (float32, zero inputs) once per shape set; returns each set's output
    shapes.  Raises :class:`ModelInvalidError` naming the set and the failing node when
    the graph cannot run a set (e.g. a Reshape to a fixed size on a varying input).
    ``custom_ops``: Python custom operators for the graph's custom op types."""
    from ..backends.software.executor import Executor

    state = Executor(graph, "float32", custom_ops).new_state(threads=1)
    results = []
    try:
        for s, shape_set in enumerate(sets):
            feeds = [np.zeros(shape, numpy_dtype(spec.dtype)) for shape, spec in zip(shape_set, input_specs)]
            try:
                with np.errstate(all="ignore"):  # zeros may divide by zero; only shapes matter here
                    outs = state.run(feeds)
            except RKNNError as e:
                raise ModelInvalidError(
                    f"the model cannot run dynamic_input[{s}] {[list(x) for x in shape_set]}: {e.message}; "
                    f"the graph must be shape-generic over every dynamic_input set", op=op) from None
            results.append([tuple(o.shape) for o in outs])
    finally:
        state.close()
    return results


def merge_output_shapes(per_set: Sequence[Sequence[Shape]], names: Sequence[str], op: str = "build") -> List[Shape]:
    """Per output, the shape shared by every set's run (``-1`` on dims that vary);
    :class:`ModelInvalidError` when an output's rank changes between sets."""
    merged = []
    for k, name in enumerate(names):
        shapes = [outs[k] for outs in per_set]
        ranks = {len(x) for x in shapes}
        if len(ranks) != 1:
            raise ModelInvalidError(
                f"output {name!r} changes rank across the dynamic_input sets: {[list(x) for x in shapes]}", op=op)
        merged.append(tuple(d[0] if all(x == d[0] for x in d) else -1 for d in zip(*shapes)))
    return merged


def batch_specs(specs: Sequence[TensorSpec], n: int, what: str, *, require_unit_batch: bool,
                op: str = "build") -> List[TensorSpec]:
    """``specs`` with axis 0 multiplied by ``n`` (``rknn_batch_size``); ``-1`` stays ``-1``.

    Rank-0 tensors have no batch axis: :class:`ModelInvalidError`.  With
    ``require_unit_batch`` (model inputs), axis 0 must be 1: the runtime splits a
    batch into ``n`` runs of the batch-1 graph.  New specs; quantization and layout kept.
    """
    out = []
    for spec in specs:
        if not spec.shape:
            raise ModelInvalidError(
                f"rknn_batch_size={n}: {what} {spec.name!r} is a scalar (rank 0); multi-batch needs a batch "
                f"axis (axis 0) on every input and output", op=op)
        d0 = spec.shape[0]
        if require_unit_batch and d0 != 1:
            raise ModelInvalidError(
                f"rknn_batch_size={n}: {what} {spec.name!r} has shape {list(spec.shape)}; multi-batch needs "
                f"axis 0 to be 1 (fix it with load_onnx(input_size_list=...) or export the model with batch 1)",
                op=op)
        out.append(replace(spec, shape=(d0 * n if d0 > 0 else d0,) + tuple(spec.shape[1:])))
    return out
