"""Post-training int8 quantization for the toolkit's ``build(do_quantization=True)``.

The steps:

1. :func:`~rknnlite.toolkit.dataset.read_dataset` reads the calibration list (images
   or ``.npy`` arrays, one line per sample; see :mod:`rknnlite.toolkit.dataset`).
2. :func:`calibrate` runs the optimised float32 graph over the samples (after the
   configured mean/std, as the runtime applies it) and chooses a range for every float
   activation - the graph inputs after normalisation and every node output - with the
   configured algorithm: ``normal`` (min/max, one pass over the data), ``kl_divergence`` (a
   second pass collecting histograms; see :mod:`rknnlite.toolkit.calibration`) or ``mmse``
   (the ``kl_divergence`` parameters searched layer by layer, the weights' too:
   :func:`mmse_search`).
3. :func:`quantize_graph` turns those ranges into :class:`~rknnlite.model.spec.QuantParams`:
   activations asymmetric int8 per tensor (:func:`activation_params`), the constant
   weights of ``Conv`` / ``ConvTranspose`` / ``Gemm`` / ``MatMul`` asymmetric int8 per
   output channel (method ``"channel"``) or per tensor (``"layer"``)
   (:func:`weight_params`).  Biases and other constants stay float (the runtime holds an
   int8 conv's bias as int32 in accumulator units).

The software executor then stores every quantized tensor on its int8 grid (fake
quantization), which is what the vendor's simulator does too; the parameters of the
model's inputs and outputs are what ``TensorAttr.scale`` / ``TensorAttr.zp`` report.
"""

from __future__ import annotations

import sys
from typing import Callable, Collection, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..model.attention import find_attentions
from ..model.graph import Graph, Node
from ..model.spec import QuantParams
from .calibration import (ALGORITHMS, MMSE_CHANNEL_MIN_SIZE, MMSE_MULTIPLIERS, MMSE_NORMAL_BELOW, QMAX, QMIN,
                          HistogramObserver, MinMaxObserver, SampleKLObserver, affine_params, mmse_best,
                          mmse_errors_pieces, mmse_fake_quant)
from .dataset import DatasetError, read_dataset

__all__ = [
    "DatasetError",
    "QUANTIZED_DTYPES",
    "QUANTIZED_ALGORITHMS",
    "QUANTIZED_METHODS",
    "read_dataset",
    "normalise",
    "graph_feeds",
    "calibrate",
    "mmse_search",
    "MMSE_PASS_OPS",
    "MMSE_FUSED_ACTIVATIONS",
    "ACTIVATION_INPUT_BOUNDS",
    "activation_input_bounds",
    "OUTPUT_RANGE_TO_INPUT",
    "AVERAGE_POOL_MAX_KERNEL",
    "bound_activation_inputs",
    "activation_params",
    "weight_params",
    "weight_axis",
    "quantize_graph",
    "live_quant",
    "implied_grids",
    "QAT_PASS_OPS",
    "QAT_SAME_GRID_OPS",
    "QAT_BACK_PRODUCERS",
]

#: ``config(quantized_dtype=...)`` values this toolkit builds (both mean asymmetric int8).
QUANTIZED_DTYPES = ("asymmetric_quantized-8", "w8a8")
#: ``config(quantized_algorithm=...)`` values this toolkit builds (see :mod:`.calibration`).
QUANTIZED_ALGORITHMS = ALGORITHMS
#: ``config(quantized_method=...)`` values this toolkit builds.
QUANTIZED_METHODS = ("channel", "layer")

#: Ops whose outputs stay float (the vendor computes them in float16 after int8 inputs:
#: a Softmax output is a float16 tensor in its int8 models).
FLOAT_OUTPUT_OPS = ("Softmax", "LogSoftmax")
#: Ops that only move values.  Reading a :data:`FLOAT_OUTPUT_OPS` output (directly or through
#: others of them) they stay float too (the vendor's SSD head ``Softmax -> Flatten`` and a
#: ``Softmax -> Transpose -> Reshape`` output are float16 to the end); reading an int8 tensor
#: of a pre-quantized model they keep its grid (:func:`implied_grids`).
LAYOUT_OPS = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity")
#: Ops through which a pre-quantized model's grid passes where the model gives none
#: (:func:`implied_grids`): their output keeps their input's int8 parameters, and a
#: tensor they alone read (made by one of :data:`QAT_BACK_PRODUCERS`) takes their output's.
#: A ``Clip`` (TensorFlow's Relu6) as a ``Relu``: the vendor's int8 Clip keeps its input's grid
#: (``Concat -> Relu6``, a conv's output read by a Relu6 and another conv) and a Concat before
#: ``Relu6 -> FakeQuant`` takes the FakeQuant's.  One after a Conv is fused into it first
#: (:func:`~rknnlite.toolkit.optimize.fuse_activations` keeps the grids).
QAT_PASS_OPS = ("MaxPool", "AveragePool", "GlobalAveragePool", "Relu", "Clip")
#: :data:`QAT_PASS_OPS` whose int8 output always has their input's parameters (the vendor
#: drops a FakeQuant's own grid after a TensorFlow AvgPool, a global one too).  Not
#: GlobalAveragePool: a TFLite ``MEAN`` keeps its own output grid in the vendor's build
#: (``tflite/mobilenet_v1_qat``).
QAT_SAME_GRID_OPS = ("AveragePool",)
#: Producers of a tensor that takes its only reader's grid backwards (:func:`implied_grids`):
#: those the vendor was seen to do it for.  An ``Add`` before a ``Relu`` is not one (the vendor
#: fuses the pair; PyTorch's ``add_relu`` is on the Relu's grid either way).
QAT_BACK_PRODUCERS = ("Concat", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool")

#: Ops whose constant input 1 is a weight quantized per output channel.
WEIGHT_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


# -- calibration -------------------------------------------------------------------------------


def normalise(x: np.ndarray, mean: Optional[Sequence[float]], std: Optional[Sequence[float]]) -> np.ndarray:
    """``(x - mean) / std`` per channel on axis 1 in float32, as the runtime computes it
    (a new array); ``x`` itself (no copy) when there is nothing to apply."""
    if mean is None or (all(m == 0 for m in mean) and all(s == 1 for s in std)):
        return x
    shape = (1, len(mean)) + (1,) * (x.ndim - 2)
    out = np.subtract(x, np.reshape(np.asarray(mean, np.float32), shape), dtype=np.float32)
    np.divide(out, np.reshape(np.asarray(std, np.float32), shape), out=out)
    return out


def graph_feeds(sample: Sequence[np.ndarray], preprocess) -> List[np.ndarray]:
    """One calibration sample as the graph takes it: float inputs after their ``(mean, std)``
    (``preprocess``: per input, or None)."""
    feeds = []
    for i, x in enumerate(sample):
        p = preprocess[i] if preprocess and i < len(preprocess) else None
        feeds.append(normalise(x, *p) if p is not None and x.dtype.kind == "f" else x)
    return feeds


def calibrate(graph: Graph, samples: Iterable[Sequence[np.ndarray]],
              preprocess: Optional[Sequence[Optional[Tuple[Sequence[float], Sequence[float]]]]] = None,
              algorithm: str = "normal", progress: bool = False,
              custom_ops: Sequence[object] = (), method: str = "channel") -> Dict[str, Tuple[float, float]]:
    """Run ``graph`` in float32 over ``samples`` and return ``{tensor: (lo, hi)}``, the
    range chosen by ``algorithm`` (see :mod:`rknnlite.toolkit.calibration`) for every
    float graph input (after ``preprocess``: per input ``(mean, std)`` or None) and every
    float node output.  ``normal`` gives the min/max; ``mmse`` and ``kl_divergence``
    run the samples a second time (``kl_divergence`` ranges each sample of a graph input on
    its own and unites the ranges, as the vendor does).  Tensors feeding only a HardSwish,
    HardSigmoid, Sigmoid or Tanh are then clamped, a tensor feeding only a Relu or a MaxPool
    takes its output's range, and pooled tensors their input's
    (:func:`bound_activation_inputs`).  ``mmse`` then searches those ``kl_divergence``
    parameters layer by layer (:func:`mmse_search`; ``method``, the ``quantized_method``, says
    whether weights are searched per channel) and also returns the range of every weight it
    tuned (per channel: ``(lows, highs)`` tuples), which :func:`quantize_graph` uses.
    Tensors holding NaN or infinities are left out.
    ``progress`` shows a tqdm bar per pass on stderr (when it is a terminal and tqdm is
    installed).  ``custom_ops``: the registered custom operator objects the graph's
    custom nodes run with (``RKNN.reg_custom_op``).
    ``graph`` and the samples are not changed."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"quantized_algorithm {algorithm!r} is not one of {ALGORITHMS}")
    if algorithm != "normal" and not isinstance(samples, Sequence):
        samples = list(samples)  # two passes
    passes = 1 if algorithm == "normal" else 2
    first = MinMaxObserver()
    _run_pass(graph, samples, preprocess, first.add, _bar(progress, 1, passes), custom_ops)
    ranges = minmax = first.ranges()
    if algorithm != "normal":  # mmse starts from the kl_divergence ranges
        second = HistogramObserver(ranges)
        inputs, per_sample = set(graph.inputs), SampleKLObserver()  # the model's inputs: per sample, then united

        def observe(name, value):
            (per_sample if name in inputs else second).add(name, value)
        _run_pass(graph, samples, preprocess, observe, _bar(progress, 2, passes), custom_ops)
        ranges = second.ranges()
        ranges.update((n, r) for n, r in per_sample.ranges().items() if n in ranges)
    ranges = bound_activation_inputs(graph, ranges)
    if algorithm == "mmse":
        ranges = mmse_search(graph, samples, preprocess, ranges, minmax, method, custom_ops)
    return ranges


def _hardsigmoid_bound(attrs: Mapping) -> Optional[Tuple[float, float]]:
    alpha, beta = float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))
    return (-beta / alpha, (1.0 - beta) / alpha) if alpha > 0 else None


#: op -> ``bound(attrs)``: the interval a tensor feeding that activation is clamped to, or
#: None for none (RKNN-Toolkit2 2.5.0, every algorithm; measured in
#: ``tests/range_rule_vendor_cases.py`` and ``docs/vendor-examples.md``).  HardSigmoid and
#: HardSwish are flat outside theirs; Sigmoid and Tanh are within 1e-3 and 4e-3 of their
#: limits there.  The ``x * Clip(x + 3, 0, 6) [/ 6]`` form of HardSwish counts as a HardSwish.
ACTIVATION_INPUT_BOUNDS: Dict[str, Callable[[Mapping], Optional[Tuple[float, float]]]] = {
    "HardSigmoid": _hardsigmoid_bound,
    "HardSwish": lambda attrs: (-3.0, np.inf),
    "Sigmoid": lambda attrs: (-7.0, 7.0),
    "Tanh": lambda attrs: (-3.2, 3.2),
}


def activation_input_bounds(graph: Graph) -> Dict[str, Tuple[float, float]]:
    """``{tensor: (lo, hi)}`` for tensors whose one consumer is an activation of
    :data:`ACTIVATION_INPUT_BOUNDS` (HardSigmoid ``[-beta / alpha, (1 - beta) / alpha]``,
    HardSwish ``[-3, inf]``, Sigmoid ``[-7, 7]``, Tanh ``[-3.2, 3.2]``): the bound of that
    activation.  A HardSwish may also be ``x * Clip(x + 3, 0, 6)`` as Paddle exports it, with
    or without the ``/ 6`` (its Add and Mul both read ``x``; also when the optimizer has made
    ``ChannelAffine(scale 1, shift 3)`` with a fused ``Clip(0, 6)`` of the Add and Clip).
    A tensor read by anything else as well, by two activations (even two Sigmoids) or that
    is a graph output gets no bound; graph inputs do.  RKNN-Toolkit2 2.5.0 clamps the
    calibrated range of such tensors to that interval under every algorithm
    (``docs/vendor-examples.md``)."""
    consumers: Dict[str, List] = {}
    for node in graph.nodes:
        for name in set(node.inputs):
            if name:
                consumers.setdefault(name, []).append(node)

    def scalar(node, index, attr):
        if index < len(node.inputs) and node.inputs[index] in graph.constants:
            v = np.asarray(graph.constants[node.inputs[index]])
            return float(v.reshape(-1)[0]) if v.size == 1 else None
        return float(node.attrs[attr]) if attr in node.attrs else None

    def const_all(name, value):
        v = graph.constants.get(name)
        return v is not None and np.asarray(v).size > 0 and bool(np.all(np.asarray(v) == value))

    def swish_parts(x, node):
        """The nodes of ``x * Clip(x + 3, 0, 6)`` starting at ``node`` (the Add, or the
        ChannelAffine with a fused Clip the optimizer makes of Add + Clip), or None."""
        if node.op == "Add" and len(node.inputs) == 2:
            other = node.inputs[1] if node.inputs[0] == x else node.inputs[0]
            if not const_all(other, 3.0) or np.asarray(graph.constants[other]).size != 1:
                return None
            clip = consumers.get(node.outputs[0], [])
            if len(clip) != 1 or clip[0].op != "Clip" or scalar(clip[0], 1, "min") != 0.0 \
                    or scalar(clip[0], 2, "max") != 6.0:
                return None
            head, clipped = [node, clip[0]], clip[0].outputs[0]
        elif node.op == "ChannelAffine" and node.inputs[0] == x and len(node.inputs) == 3:
            if not (const_all(node.inputs[1], 1.0) and const_all(node.inputs[2], 3.0)
                    and node.attrs.get("_activation") == "Clip"
                    and node.attrs.get("_activation_min") == 0.0 and node.attrs.get("_activation_max") == 6.0):
                return None
            head, clipped = [node], node.outputs[0]
        else:
            return None
        mul = consumers.get(clipped, [])
        if len(mul) != 1 or mul[0].op != "Mul" or x not in mul[0].inputs:
            return None
        return head + [mul[0]]

    def activation(x, nodes):
        """The one activation reading ``x`` as ``(op, attrs)``, or None."""
        if len(nodes) == 1:
            return nodes[0].op, nodes[0].attrs
        if len(nodes) == 2:  # the two heads of a decomposed HardSwish
            parts = swish_parts(x, nodes[0]) or swish_parts(x, nodes[1])
            if parts and all(any(n is p for p in parts) for n in nodes):
                return "HardSwish", {}
        return None

    bounds: Dict[str, Tuple[float, float]] = {}
    outputs = set(graph.outputs)
    for x, nodes in consumers.items():
        act = activation(x, nodes) if x not in outputs else None
        rule = ACTIVATION_INPUT_BOUNDS.get(act[0]) if act else None
        bound = rule(act[1]) if rule else None
        if bound is not None and bound[0] < bound[1]:
            bounds[x] = bound
    return bounds


#: Ops whose input takes the output's range when the op is its only reader and the input is
#: not a graph output: op -> whether a model input does too.  The vendor fuses a Relu into
#: the tensor's producer (a model input has none); a MaxPool's input and output share one
#: range, the output's when the pool is the only reader.
OUTPUT_RANGE_TO_INPUT = {"Relu": False, "MaxPool": True}

#: The largest AveragePool kernel side the vendor keeps as a pool whose output shares its
#: input's range (a wider kernel becomes depthwise convolutions with ranges of their own).
AVERAGE_POOL_MAX_KERNEL = 7


def _takes_input_range(node) -> bool:
    """Whether ``node``'s output gets its input's range: a MaxPool, or an AveragePool with a
    2-D kernel of sides up to :data:`AVERAGE_POOL_MAX_KERNEL`."""
    if node.op == "MaxPool":
        return True
    kernel = node.attrs.get("kernel_shape")
    return node.op == "AveragePool" and kernel is not None and len(kernel) == 2 \
        and max(kernel) <= AVERAGE_POOL_MAX_KERNEL


def bound_activation_inputs(graph: Graph, ranges: Mapping[str, Tuple[float, float]]) -> Dict[str, Tuple[float, float]]:
    """``ranges`` (a new dict) with the vendor's rules applied, in this order:

    1. each range of :func:`activation_input_bounds`, widened to contain 0 (as quantization
       does anyway), clamped to its bound (a range entirely above a Sigmoid's ``[-7, 7]``
       becomes ``[0, 7]``, as the vendor writes it);
    2. last node first, the range of a tensor whose only reader is an op of
       :data:`OUTPUT_RANGE_TO_INPUT` (a Relu, a MaxPool) replaced by that op's output range
       (not for graph outputs, nor for model inputs read by a Relu);
    3. first node first, the output of a MaxPool or of an AveragePool with a kernel up to
       7 x 7 given its input's range (also when it is a graph output).

    ``docs/vendor-examples.md`` has the measurements."""
    out = dict(ranges)
    for name, (blo, bhi) in activation_input_bounds(graph).items():
        if name in out:
            lo, hi = out[name]
            lo, hi = max(min(lo, 0.0), blo), min(max(hi, 0.0), bhi)
            if lo <= hi:
                out[name] = (lo, hi)
    outputs, inputs = set(graph.outputs), set(graph.inputs)
    readers: Dict[str, int] = {}
    for node in graph.nodes:
        for name in set(node.inputs):
            readers[name] = readers.get(name, 0) + 1
    for node in reversed(graph.nodes):
        x = node.inputs[0] if node.inputs else None
        if node.op in OUTPUT_RANGE_TO_INPUT and readers.get(x) == 1 and x in out and x not in outputs \
                and (OUTPUT_RANGE_TO_INPUT[node.op] or x not in inputs) and node.outputs[0] in out:
            out[x] = out[node.outputs[0]]
    for node in graph.nodes:
        if _takes_input_range(node) and node.inputs and node.inputs[0] in out and node.outputs[0] in out:
            out[node.outputs[0]] = out[node.inputs[0]]
    return out


# -- mmse --------------------------------------------------------------------------------------

#: Activations that form one ``mmse`` layer with the (not grouped) Conv before them, as the
#: vendor's layers are (a HardSwish after a depthwise conv is a layer of its own there; a Relu is
#: fused into the conv here already).
MMSE_FUSED_ACTIVATIONS = ("HardSwish",)
#: Ops at which the ``mmse`` search leaves the input's parameters alone (their output keeps the
#: input's grid; the vendor skips its MaxPool and Reshape layers the same way).
MMSE_PASS_OPS = frozenset("Relu MaxPool GlobalMaxPool Reshape Flatten Squeeze Unsqueeze Transpose Identity "
                          "Dropout".split())
_INT32 = (-(2 ** 31), 2 ** 31 - 1)


def _f32_product(scale, multiplier):
    """``float32(scale) * float32(multiplier)`` in float64: how the vendor updates a searched scale."""
    return np.asarray(scale, np.float32).astype(np.float64) * np.asarray(multiplier, np.float32).astype(np.float64)


def _grid_range(scale, zp) -> Tuple:
    """The range whose :func:`affine_params` are ``(scale, zp)``: ``(qmin - zp) * scale`` to
    ``(qmax - zp) * scale`` (floats, or tuples for per-channel arrays)."""
    lo, hi = (QMIN - np.asarray(zp)) * np.asarray(scale), (QMAX - np.asarray(zp)) * np.asarray(scale)
    if np.ndim(lo):
        return tuple(float(v) for v in lo), tuple(float(v) for v in hi)
    return float(lo), float(hi)


def _rows(arrays: Sequence[np.ndarray], axis: Optional[int] = None) -> np.ndarray:
    """The samples' values one after another, as the vendor stacks them: one row, or one row
    per slice along ``axis`` (per channel)."""
    if axis is None:
        return np.concatenate([np.asarray(a, np.float32).reshape(-1) for a in arrays])[None]
    arrays = [np.asarray(a) for a in arrays]
    shape = arrays[0].shape
    if any(a.shape != shape for a in arrays):
        raise ValueError(f"samples of shapes {sorted({a.shape for a in arrays})} do not stack")
    rows = np.empty((shape[axis], len(arrays), arrays[0].size // max(shape[axis], 1)), np.float32)
    for i, a in enumerate(arrays):  # one copy: rows[c, i] is sample i's slice c
        rows[:, i] = np.moveaxis(a, axis, 0).reshape(shape[axis], -1)
    return rows.reshape(shape[axis], -1)


def _errors(target: np.ndarray, arrays: Sequence[np.ndarray], axis: Optional[int] = None) -> np.ndarray:
    """``mmse_errors(target, _rows(arrays, axis))``, the same sums, without copying the samples
    into rows (a sample is copied only when its rows are no view of it)."""
    if axis is None:
        pieces = [np.reshape(a, (1, -1)) for a in arrays]
    else:
        pieces = [np.moveaxis(a, axis, 0).reshape(np.shape(a)[axis], -1) for a in arrays]
    if len({p.shape for p in pieces}) != 1:  # samples of different sizes (one row): copied together
        return mmse_errors_pieces(target, [_rows(arrays, axis)])
    return mmse_errors_pieces(target, pieces)


class _Layer:
    """Nodes run on their own in float32 over every sample (no int8 grid between them), with
    some constants replaced."""

    def __init__(self, nodes: List, graph: Graph, inputs: List[str], custom_ops: Sequence[object]):
        self.nodes, self.inputs, self.custom_ops = nodes, inputs, custom_ops
        self.outputs = [o for node in nodes for o in node.outputs]
        self.constants = {c: graph.constants[c] for node in nodes for c in node.inputs if c in graph.constants}
        self._plain = None
        self._last = (None, None)  # (constants, executor) of the last run with replaced constants

    def run(self, feeds: Mapping[str, Sequence[np.ndarray]], constants: Mapping[str, np.ndarray] = None):
        """Per output of :attr:`outputs`, the list of per-sample values.  The executor (its packed
        weights) is kept for the next run with no ``constants`` or with the same mapping object,
        which must not change in between (the input candidates of one layer share it)."""
        from ..backends.software.executor import Executor

        if not constants and self._plain is not None:
            ex = self._plain
        elif constants and self._last[0] is constants:
            ex = self._last[1]
        else:
            ex = Executor(Graph(list(self.nodes), list(self.inputs), list(self.outputs),
                                {**self.constants, **(constants or {})}), "float32", self.custom_ops)
            if constants:
                self._last = (constants, ex)
            else:
                self._plain = ex
        n = len(next(iter(feeds.values()))) if feeds else 1
        state = ex.new_state()
        try:
            per_sample = [state.run([feeds[t][i] for t in self.inputs]) for i in range(n)]
        finally:
            state.close()
        return [list(v) for v in zip(*per_sample)]


def _output_axis(op: str, weight_axis_: Optional[int], ndim: int) -> Optional[int]:
    """The axis of ``op``'s output holding the channels of its weight's ``weight_axis_``."""
    if weight_axis_ is None:
        return None
    return ndim - 1 if op == "MatMul" else 1


def mmse_search(graph: Graph, samples: Sequence[Sequence[np.ndarray]], preprocess,
                ranges: Mapping[str, Tuple[float, float]], minmax: Mapping[str, Tuple[float, float]],
                method: str = "channel", custom_ops: Sequence[object] = ()) -> Dict[str, Tuple]:
    """RKNN-Toolkit2 2.5.0's ``mmse`` (its ``MmseQaunt2``, traced in its build): ``ranges`` (the
    ``kl_divergence`` ones) tuned node by node in graph order, each candidate scored by
    :func:`~rknnlite.toolkit.calibration.mmse_error` between the node's float output and its
    output from the quantized path (inputs as quantized upstream, fake-quantized again with
    their parameters).  At each node with a weight (Conv, ConvTranspose, Gemm, MatMul):

    1. the weight's scale (per output channel under ``method="channel"``, each channel
       keeping the multiplier best for its own output channel when the output has at least
       :data:`~rknnlite.toolkit.calibration.MMSE_CHANNEL_MIN_SIZE` values per channel, one
       multiplier for all below) times each of
       :data:`~rknnlite.toolkit.calibration.MMSE_MULTIPLIERS`, zero point kept, the bias
       fake-quantized to int32 with ``input scale * weight scale``;
    2. then the scale of the node's input the same way (the weight as chosen), unless the
       input has other readers, the node has other activation inputs or is one of
       :data:`MMSE_PASS_OPS`; when the input's ``kl_divergence`` scale is below
       :data:`~rknnlite.toolkit.calibration.MMSE_NORMAL_BELOW` of its min/max scale, the
       multipliers are also tried on the min/max parameters and those win when strictly better.

    A Conv (not grouped) whose only reader is one of :data:`MMSE_FUSED_ACTIVATIONS` forms one layer
    with it (scored on the activation's output; the tensor between them is not searched); a
    conv with a fused residual Add is scored before the sum, as the vendor's separate conv.
    A node without a weight only has step 2.  A graph output no node reads is searched last, its
    error taken on the tensor itself.  A tensor whose values are all equal keeps its range.  The
    chosen scale is ``float32(scale) * float32(m)`` and the range is that grid's
    ``[(-128 - zp) * scale, (127 - zp) * scale]``; the result holds the ranges of the
    activations as the search leaves them (the rules of :func:`bound_activation_inputs` are not
    applied again: a searched HardSwish input may reach below -3, a MaxPool's output differ
    from its input, as in the vendor's table) and of the weights searched (per channel: tuples
    of ends)."""
    consts = graph.constants
    values: Dict[str, List[np.ndarray]] = {}
    _run_pass(graph, samples, preprocess, lambda n, v: values.setdefault(n, []).append(v), _identity, custom_ops,
              floats_only=False)
    act = {n: tuple(float(v) for v in affine_params(lo, hi)) for n, (lo, hi) in ranges.items() if n not in consts}
    readers: Dict[str, int] = {}
    for node in graph.nodes:
        for name in set(node.inputs):
            readers[name] = readers.get(name, 0) + 1
    for name in graph.outputs:
        readers[name] = readers.get(name, 0) + 1
    out = {n: r for n, r in ranges.items() if n not in consts}
    weights: Dict[str, Tuple] = {}
    quantized = {n: values[n] for n in graph.inputs if n in values}  # values along the quantized path

    def fake(name, arrays, scale=None, zp=None, m=1.0):
        if name not in act or not arrays or arrays[0].dtype.kind != "f":
            return arrays
        s, z = act[name] if scale is None else (scale, zp)
        return [mmse_fake_quant(a, s, z, m) for a in arrays]

    def search(name, score):
        """Tune ``act[name]`` by ``score(scale, zp, m) -> (error, result)``; the best result."""
        lo, hi = minmax.get(name, (0.0, 0.0))
        if lo == hi:  # a constant keeps its range
            return score(*act[name], 1.0)[1]
        bases = [act[name]]
        normal = tuple(float(v) for v in affine_params(lo, hi))
        if act[name][0] < MMSE_NORMAL_BELOW * normal[0]:
            bases.append(normal)
        best = None
        for base in bases:
            trials = [score(base[0], base[1], m) for m in MMSE_MULTIPLIERS]
            k = mmse_best([e for e, _ in trials])
            if best is None or trials[k][0] < best[0]:
                best = (trials[k][0], base, MMSE_MULTIPLIERS[k], trials[k][1])
        _, (scale, zp), m, result = best
        act[name] = (float(_f32_product(scale, m)), zp)
        out[name] = _grid_range(*act[name])
        return result

    consumers: Dict[str, List] = {}
    for node in graph.nodes:
        for name in set(node.inputs):
            consumers.setdefault(name, []).append(node)
    fused = set()
    for node in graph.nodes:
        inputs = [t for t in dict.fromkeys(node.inputs) if t and t not in consts]
        if id(node) in fused or not node.outputs or any(t not in quantized for t in inputs):
            continue
        nodes = [node]
        after = consumers.get(node.outputs[0], [])
        if node.op == "Conv" and int(node.attrs.get("group", 1)) == 1 and len(node.outputs) == 1 \
                and readers.get(node.outputs[0]) == 1 and len(after) == 1 and after[0].op in MMSE_FUSED_ACTIVATIONS:
            nodes.append(after[0])  # one layer, as the vendor compiles them: its input is never searched
            fused.add(id(after[0]))
        layer = scoring = _Layer(nodes, graph, inputs, custom_ops)
        result = layer.outputs.index(nodes[-1].outputs[0])
        feeds = {t: fake(t, quantized[t]) for t in inputs}
        reference = values.get(nodes[-1].outputs[0])
        if node.op == "Conv" and node.attrs.get("_residual") and not node.attrs.get("_activation") \
                and len(node.inputs) == 4 and len(inputs) == 2 and inputs[0] == node.inputs[0]:
            # the vendor's conv and its Add are two layers: the conv is scored before the sum
            attrs = {k: v for k, v in node.attrs.items() if k != "_residual"}
            scoring = _Layer([Node(node.op, node.name, node.inputs[:3], [node.outputs[0] + "/conv"], attrs)],
                             graph, inputs[:1], custom_ops)
            reference = scoring.run({inputs[0]: values[inputs[0]]})[0]
            result = 0
        searchable = reference is not None and reference[0].dtype.kind == "f" and reference[0].size > 0
        replaced: Dict[str, np.ndarray] = {}
        w = node.inputs[1] if node.op in WEIGHT_OPS and len(node.inputs) > 1 else None
        wv = consts.get(w) if w else None
        if searchable and wv is not None and wv.dtype.kind == "f" and wv.size and inputs:
            axis = weight_axis(node.op, node.attrs, wv) if method == "channel" else None
            q = weight_params(wv, axis)
            scales, zps = np.asarray(q.scale), np.asarray(q.zero_point)
            b = node.inputs[2] if node.op in ("Conv", "ConvTranspose", "Gemm") and len(node.inputs) > 2 else None
            bv = consts.get(b) if b else None
            in_scale = act.get(inputs[0], (None,))[0]
            if bv is None or bv.dtype.kind != "f" or in_scale is None \
                    or (len(scales) > 1 and bv.shape != scales.shape):
                b = None

            def constants(wscale, m):
                c = {w: mmse_fake_quant(wv, wscale, zps, m, axis)}
                if b is not None:  # int32, scale input scale * weight scale
                    bscale = in_scale * (wscale * m)
                    c[b] = mmse_fake_quant(bv, bscale if len(scales) > 1 else bscale[0], 0, 1.0,
                                           0 if len(scales) > 1 else None, *_INT32)
                return c

            oaxis = _output_axis(node.op, axis, reference[0].ndim)
            channels = len(scales) if oaxis is not None and reference[0].shape[oaxis] == len(scales) \
                and reference[0].size // len(scales) >= MMSE_CHANNEL_MIN_SIZE else 0
            along = oaxis if channels else None
            target = _rows(reference, along)
            scored = {t: feeds[t] for t in scoring.inputs}
            errors = np.asarray([_errors(target, scoring.run(scored, constants(scales, m))[result], along)
                                 for m in MMSE_MULTIPLIERS])
            picks = MMSE_MULTIPLIERS[[mmse_best(errors[:, c]) for c in range(errors.shape[1])]]
            scales = _f32_product(scales, picks if channels else picks[0])
            weights[w] = _grid_range(scales if axis is not None else float(scales[0]),
                                     zps if axis is not None else int(zps[0]))
            replaced = constants(scales, 1.0)
        t = inputs[0] if inputs else None
        if searchable and t in act and len(scoring.inputs) == 1 and readers.get(t) == 1 \
                and node.op not in MMSE_PASS_OPS and quantized[t][0].dtype.kind == "f":
            target = _rows(reference)

            def score(scale, zp, m):
                got = scoring.run({t: fake(t, quantized[t], scale, zp, m)}, replaced)
                return _errors(target, got[result])[0], got
            outputs = search(t, score)  # the best candidate's outputs go on
            if scoring is not layer:
                feeds[t] = fake(t, quantized[t])
                outputs = layer.run(feeds, replaced)
        else:
            outputs = layer.run(feeds, replaced)
        quantized.update(zip(layer.outputs, outputs))
    for name in graph.outputs:
        if name in act and readers.get(name) == 1 and name in quantized and quantized[name][0].dtype.kind == "f":
            target = _rows(values[name])
            search(name, lambda scale, zp, m: (
                _errors(target, fake(name, quantized[name], scale, zp, m))[0], None))
    out.update(weights)
    return out


def _run_pass(graph: Graph, samples: Iterable[Sequence[np.ndarray]], preprocess,
              observe: Callable[[str, np.ndarray], None],
              wrap: Callable[[Iterable], Iterable], custom_ops: Sequence[object] = (),
              floats_only: bool = True) -> None:
    """Run every sample through ``graph`` (float32) and hand each float graph input (after
    its mean/std) and node output (every one unless ``floats_only``) to ``observe(name, value)``."""
    from ..backends.software.executor import Executor

    produced = graph.produced()
    watched = list(graph.inputs) + produced
    probe = Graph(graph.nodes, list(graph.inputs), produced, graph.constants)
    state = Executor(probe, "float32", custom_ops).new_state()
    try:
        for sample in wrap(samples):
            feeds = graph_feeds(sample, preprocess)
            outs = state.run(feeds)
            for name, value in zip(watched, feeds + outs):
                if not floats_only or value.dtype.kind == "f":
                    observe(name, value)
    finally:
        state.close()


def _bar(enabled: bool, index: int, passes: int) -> Callable[[Iterable], Iterable]:
    """A wrapper showing a tqdm progress bar (stderr, vendor-style ``I Quantizating``
    label) over the samples of one pass; the identity when disabled, when stderr is not
    a terminal or when tqdm is missing."""
    if not enabled or not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return _identity
    try:
        from tqdm import tqdm
    except ImportError:
        return _identity
    desc = "I Quantizating" if passes == 1 else f"I Quantizating {index}/{passes}"

    def wrap(samples: Iterable) -> Iterator:
        total = len(samples) if isinstance(samples, Sequence) else None
        return iter(tqdm(samples, desc=desc, total=total, file=sys.stderr, leave=True, unit="sample"))

    return wrap


def _identity(samples: Iterable) -> Iterable:
    return samples


# -- parameters --------------------------------------------------------------------------------


def activation_params(vmin: float, vmax: float) -> QuantParams:
    """Asymmetric int8 per tensor for values in ``[vmin, vmax]``: the range is widened to
    contain 0, ``scale = (max - min) / 255`` and ``zero_point = round(-128 - min / scale)``
    clipped to int8 (:func:`~rknnlite.toolkit.calibration.affine_params`).  An all-zero
    range gets scale 1."""
    scale, zp = affine_params(vmin, vmax)
    return QuantParams("int8", (float(scale),), (int(zp),))


def weight_params(w: np.ndarray, axis: Optional[int]) -> QuantParams:
    """Asymmetric int8 for a weight, as RKNN-Toolkit2 quantizes weights: per slice along
    ``axis`` (per channel) or for the whole tensor (``axis=None``), the slice's range widened
    to contain 0, ``scale = (max - min) / 255`` and ``zero_point = round(-128 - min / scale)``
    (:func:`~rknnlite.toolkit.calibration.affine_params`, the activations' rule), so every
    channel uses all 256 codes.  (The vendor's int8 files hold such weights: each channel's
    codes span exactly 255 around its zero point; a symmetric ``max|w| / 127`` step is up to
    twice as coarse on a one-sided channel.)  All-zero slices get scale 1, zero point 0, and
    so do slices whose step, or half of it (``mmse`` multiplies steps by
    :data:`~rknnlite.toolkit.calibration.MMSE_MULTIPLIERS`), would not be a normal float32:
    weights below about 1e-36, as PP-OCRv4 rec has in two channels.  They are 0 in int8
    either way."""
    a = np.asarray(w, dtype=np.float64)
    flat = a.reshape(1, -1) if axis is None else np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1)
    if flat.shape[1] == 0:
        lo = hi = np.zeros(flat.shape[0])
    else:
        lo, hi = flat.min(axis=1), flat.max(axis=1)
        tiny = float(np.finfo(np.float32).tiny) / float(np.min(MMSE_MULTIPLIERS))
        zero = (np.maximum(hi, 0) - np.minimum(lo, 0)) / 255 < tiny
        lo, hi = np.where(zero, 0.0, lo), np.where(zero, 0.0, hi)
    scales, zps = affine_params(lo, hi)
    return QuantParams("int8", tuple(float(v) for v in scales), tuple(int(v) for v in zps), axis)


def weight_axis(op: str, attrs: Mapping, w: np.ndarray) -> Optional[int]:
    """The output-channel axis of ``op``'s weight ``w`` (input 1): 0 for Conv (``[M, C/g, k...]``),
    1 for ConvTranspose (``[C, M/g, k...]``), 0 or 1 for Gemm by ``transB``, the last
    axis for MatMul; None when the weight has no such axis (a 1-D MatMul operand)."""
    if op == "Conv":
        return 0
    if op == "ConvTranspose":
        return 1 if w.ndim >= 2 else None
    if op == "Gemm":
        return 0 if attrs.get("transB", 0) else 1
    if op == "MatMul":
        return w.ndim - 1 if w.ndim >= 2 else None
    raise ValueError(f"{op} has no quantized weight")


def quantize_graph(graph: Graph, ranges: Mapping[str, Tuple[float, float]],
                   method: str = "channel", float_tensors: Collection[str] = ()) -> Dict[str, QuantParams]:
    """The quantization table for ``graph`` from calibration ``ranges`` (see :func:`calibrate`):
    every calibrated activation per tensor, except tensors some node reads as a shape
    argument (they stay exact) and outputs of :data:`FLOAT_OUTPUT_OPS` (and of the
    :data:`LAYOUT_OPS` after them) but an attention's probabilities, which are int8 over
    ``[0, max]``, and an attention's scaled or masked scores, which stay float
    (:mod:`rknnlite.model.attention`: the vendor's int8 exSDPAttention); the float
    constant input 1 of Conv / ConvTranspose / Gemm / MatMul per channel
    (``method="channel"``) or per tensor (``"layer"``), or from their own entry of ``ranges``
    when ``mmse`` searched them (per channel when the ends are sequences).  ``float_tensors`` (hybrid
    quantization) stay float, and so do the weights of the layers that produce them.
    Returns a new dict; ``graph`` is not changed."""
    if method not in QUANTIZED_METHODS:
        raise ValueError(f"quantized_method {method!r} is not one of {QUANTIZED_METHODS}")
    from ..backends.software.ops import SHAPE_INPUTS

    keep_float = set(float_tensors)
    attentions = find_attentions(graph)
    probabilities = {p for att in attentions for p in att.probs}
    float_values: set = set()
    for node in graph.nodes:  # topological order
        moved = node.op in LAYOUT_OPS and bool(node.inputs) and node.inputs[0] in float_values
        if (node.op in FLOAT_OUTPUT_OPS and node.outputs[0] not in probabilities) or moved:
            float_values.update(node.outputs)
    # an attention's scale and mask apply in float to its scores' grid (module attention)
    keep_float |= float_values | {t for att in attentions for t in att.links}
    for node in graph.nodes:
        if node.op in WEIGHT_OPS and len(node.inputs) > 1 and any(o in float_tensors for o in node.outputs):
            keep_float.add(node.inputs[1])  # a float16 layer keeps its weights float
        for k in SHAPE_INPUTS.get(node.op, ()):
            if k < len(node.inputs) and node.inputs[k]:
                keep_float.add(node.inputs[k])
    quant: Dict[str, QuantParams] = {}
    for name, (vmin, vmax) in ranges.items():
        if name not in graph.constants and name not in keep_float:
            quant[name] = activation_params(vmin, vmax)
    for node in graph.nodes:
        if node.op not in WEIGHT_OPS or len(node.inputs) < 2:
            continue
        name = node.inputs[1]
        w = graph.constants.get(name)
        if w is None or w.dtype.kind != "f" or w.size == 0 or name in keep_float:
            continue
        if name in ranges:  # searched by mmse: per channel when its ends are sequences
            lo, hi = ranges[name]
            scales, zps = affine_params(lo, hi)
            axis = weight_axis(node.op, node.attrs, w) if np.ndim(lo) else None
            q = QuantParams("int8", tuple(float(v) for v in np.ravel(scales)), tuple(int(v) for v in np.ravel(zps)),
                            axis)
        else:
            axis = weight_axis(node.op, node.attrs, w) if method == "channel" else None
            q = weight_params(w, axis)
        if name in quant and quant[name] != q:
            q = weight_params(w, None)  # shared by layers that disagree on the axis: one scale fits all
        quant[name] = _bias_fits(q, node, graph.constants, quant)
    return quant


def _weight_codes(w: np.ndarray, q: QuantParams) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The int8 codes of the float weight ``w`` on ``q`` (per tensor or per channel along
    ``q.axis``), ``rint(w / s) + zp`` computed in float64 as RKNN-Toolkit2 computes them: float32
    arithmetic lands on the other code at near ties, and so did rounding the weights to float16
    first (0.8 % of a Linear's codes, 0.6 % of PP-OCR cls'); with the scale and zero point as
    arrays broadcasting onto ``w``."""
    w = np.asarray(w, np.float64)
    shape = [1] * w.ndim
    if len(q.scale) > 1:
        shape[q.axis if q.axis is not None else 0] = len(q.scale)
    scale = np.asarray(q.scale, np.float64).reshape(shape)
    zp = np.asarray(q.zero_point, np.float64).reshape(shape)
    return np.clip(np.rint(w / scale) + zp, QMIN, QMAX), scale, zp


def snap_weights(graph: Graph) -> int:
    """Replace each int8-quantized float constant of ``graph`` (a calibrated build's weights) by
    its values on its grid, ``(code - zp) * s`` with the codes of :func:`_weight_codes`, in place;
    returns how many changed.  Later steps (float16 storage, the executor's float32 snapping)
    then keep the vendor's codes."""
    changed = 0
    for name, q in graph.quant.items():
        w = graph.constants.get(name)
        if w is None or w.dtype.kind != "f" or q.dtype != "int8":
            continue
        codes, scale, zp = _weight_codes(w, q)
        snapped = ((codes - zp) * scale).astype(np.float32)
        if not np.array_equal(snapped, w):
            graph.constants[name] = snapped
            changed += 1
    return changed


def codes_lost_in_float16(graph: Graph) -> set:
    """The quantized float constants of ``graph`` whose values, rounded to float16, would fall on
    another int8 code (a per-channel scale below float16's range): stored float32 instead."""
    lost = set()
    for name, q in graph.quant.items():
        w = graph.constants.get(name)
        if w is None or w.dtype.kind != "f" or q.dtype != "int8":
            continue
        with np.errstate(over="ignore"):
            half = np.asarray(w, np.float32).astype(np.float16).astype(np.float32)
        if not np.array_equal(_weight_codes(half, q)[0], _weight_codes(w, q)[0]):
            lost.add(name)
    return lost


def _bias_fits(q: QuantParams, node, constants: Mapping[str, np.ndarray],
               quant: Mapping[str, QuantParams]) -> QuantParams:
    """``q`` (the weight of ``node``) with every channel's step raised, where needed, to
    ``|b| / (s_x * (2^31 - 1))``: an int8 Conv or Gemm holds its bias ``b`` as int32 in units
    of ``s_x * s_w`` (input step times weight step), so a smaller step clips the bias, to 0 in
    effect.  PP-OCRv4 rec has such channels: weights within 1e-14 of 0 (step 3e-17) under a
    bias of -0.45, which the vendor's simulator keeps.  The zero point is recomputed for the
    channel's range on the coarser step (PP-OCR's weights, far below it, quantize to 0)."""
    if node.op not in ("Conv", "Gemm") or len(node.inputs) < 3:
        return q
    b, qx = constants.get(node.inputs[2]), quant.get(node.inputs[0])
    if b is None or b.dtype.kind != "f" or qx is None or len(qx.scale) != 1:
        return q
    need = np.abs(np.asarray(b, np.float64).reshape(-1)) / (qx.scale[0] * _INT32[1])
    scale, zp = np.asarray(q.scale), np.asarray(q.zero_point)
    if len(scale) == 1:
        need = need.max(initial=0.0, keepdims=True)
    if need.size != scale.size or np.all(scale >= need):
        return q
    lo = (QMIN - zp) * scale  # the channel's minimum, widened to 0
    new = np.maximum(scale, need)
    zp = np.where(scale < need, np.clip(np.round(QMIN - lo / new), QMIN, QMAX), zp)
    return QuantParams(q.dtype, tuple(float(v) for v in new), tuple(int(v) for v in zp), q.axis)


def implied_grids(graph: Graph, quant: Mapping[str, QuantParams]) -> Dict[str, QuantParams]:
    """``quant`` (a pre-quantized model's own table) plus the int8 parameters the vendor gives
    the tensors the model leaves without, as RKNN-Toolkit2 2.5.0 builds quantization-aware
    TensorFlow graphs (``build(do_quantization=False)``, ``rk3566``; small FakeQuant graphs
    and its ``tensorflow/inception_v3_qat`` example):

    * forward: the output of a :data:`LAYOUT_OPS` or :data:`QAT_PASS_OPS` node (MaxPool,
      AveragePool, Relu, Clip) keeps its input's parameters (a MaxPool / 3x3 AvgPool after a
      FakeQuant'd conv is int8 on that conv's grid; an int8 Reshape after the last
      FakeQuant); a Concat's output takes its inputs' parameters when they are all the same
      (inputs on different grids give a float16 Concat);
    * backward: a tensor of a :data:`QAT_BACK_PRODUCERS` node (Concat, Conv, pools) whose only
      reader is a :data:`QAT_PASS_OPS` node with parameters on its output takes them
      (``Concat -> AvgPool -> FakeQuant``: the Concat is int8 on the FakeQuant's grid, its
      inputs requantized to it; a conv without a FakeQuant before ``MaxPool -> FakeQuant``),
      through chains of pools;
    * where the two disagree (``FakeQuant a -> MaxPool -> MaxPool -> FakeQuant b``: the
      tensor between the pools) the tensor stays float16;
    * a :data:`QAT_SAME_GRID_OPS` node (AvgPool) with parameters on its input has them on its
      output too, replacing a FakeQuant's of its own.

    Graph inputs never take parameters this way.  Returns a new dict."""
    own = dict(quant)
    readers: Dict[str, List[Node]] = {}
    for node in graph.nodes:
        for i in node.inputs:
            if i:
                readers.setdefault(i, []).append(node)
    fixed = set(graph.inputs) | set(graph.constants) | set(graph.outputs)
    producer = {o: node.op for node in graph.nodes for o in node.outputs if o}
    back: Dict[str, QuantParams] = {}
    for node in reversed(graph.nodes):  # reverse topological order: chains of pass ops
        if node.op not in QAT_PASS_OPS or not node.inputs or not node.outputs:
            continue
        x, y = node.inputs[0], node.outputs[0]
        p = own.get(y, back.get(y))
        if (p is not None and x not in own and x not in fixed and producer.get(x) in QAT_BACK_PRODUCERS
                and len(readers.get(x, ())) == 1):
            back[x] = p
    out = dict(own)
    for node in graph.nodes:  # topological order
        fwd = None
        if node.op in LAYOUT_OPS or node.op in QAT_PASS_OPS:
            fwd = out.get(node.inputs[0]) if node.inputs else None
        elif node.op == "Concat":
            ins = [out.get(i) for i in node.inputs if i and i not in graph.constants]
            fwd = ins[0] if ins and all(q is not None and q == ins[0] for q in ins) else None
        elif node.attrs.get("_pool_stage_taps") and out.get(node.inputs[0]) is not None:
            weight = graph.constants[node.inputs[1]]
            fwd = _pool_stage_grid(out[node.inputs[0]], weight, node.attrs["_pool_stage_taps"])
            out.setdefault(node.inputs[1], weight_params(weight, 0))  # the vendor's int8 weight: code 127
        for o in node.outputs:
            if not o or o in graph.constants:
                continue
            if o in own:
                if fwd is not None and node.op in QAT_SAME_GRID_OPS:
                    out[o] = fwd
            elif fwd is not None and (o not in back or back[o] == fwd):
                out[o] = fwd
            elif fwd is None and o in back:
                out[o] = back[o]
    return out


def _pool_stage_grid(q: QuantParams, weight: np.ndarray, taps: int) -> Optional[QuantParams]:
    """The int8 grid of a split GlobalAveragePool's stage output (``optimize.split_global_average_pools``)
    in a pre-quantized build: its input's, the scale times the window's gain (its one weight value
    times the most real elements a window covers), as RKNN-Toolkit2 2.5.0 stores it (e.g. 8 x 8:
    stage ``7 x 7 / 7`` pad 3 of weights 1/8 over 16 real elements, scale x2; 12 x 12 x3, 20 x 20
    x2.45, 32 x 32 x1.53125, zero point kept; ``tools/vendor_corpus/qdq_avgpool_probe.py --pool global``)."""
    if len(q.scale) != 1:
        return None
    gain = float(np.float32(weight.flat[0])) * taps
    return QuantParams(q.dtype, (float(np.float32(q.scale[0] * gain)),), q.zero_point)


def live_quant(graph: Graph) -> Dict[str, QuantParams]:
    """The entries of ``graph.quant`` (e.g. a pre-quantized model's own table, set by its
    loader before optimisation) for tensors the graph still has: graph inputs, constants
    and node outputs.  Returns a new dict; ``graph`` is not changed."""
    names = set(graph.inputs) | set(graph.constants)
    for node in graph.nodes:
        names.update(node.outputs)
    return {k: q for k, q in graph.quant.items() if k in names}
