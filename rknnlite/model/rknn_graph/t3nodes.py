"""The attributes of an rv1106/rv1103 graph's nodes, recovered before lowering.

The graph of an rv1106 container (:data:`rknnlite.model.schema.T3`) stores no BSON, and a conv no
parameter table; other ops keep one (:func:`.graph._t3_params`: a Resize's modes, a Softmax's,
Concat's, Split's or ArgMax's axis).  Its shape constants (a Split's sizes, a Reshape's target, a
Clip's bounds, a Pad's pads, a Slice's starts, a PRelu's slopes) are stored at their offsets in the
weight section, 64 bytes each (observed with RKNN-Toolkit2 2.2.0 to 2.5.0; the recoveries written
before that was found derive theirs from the shapes, as below).  :func:`complete_t3_nodes` gives
each node what the other platforms' files store, so that the lowering runs these files as it runs
the others:

* a conv's ``params`` (``param_type`` 1) from its CNA registers (:func:`.t3conv.t3_conv_params`),
  a ConvTranspose's too (:func:`.deconv_regs.deconv_params`);
* a pool's kernel, strides and pads (an AveragePool's ``count_include_pad``) from its PPU tasks'
  registers (:func:`.t3pool.t3_pool_params`);
* a Concat's or Split's axis (and a Split's sizes) from its tensors' shapes: the one axis on
  which they differ, which must be its table's (a Split with a part nothing reads: its table's
  axis and sizes, checked against the parts read);
* a Reshape's or Expand's target and a Resize's scales: its output's shape (the lowering reads it
  for a node without a shape constant whose attributes were recovered);
* an exSoftmax13's axis from its table, checked against its reduce-sum weight (:func:`_softmax`),
  and an exDataConvert's dtypes (int8 to float16 before it) from its tensors (:func:`_data_convert`);
* an ArgMax's axis from its table, keepdims from its shapes (:func:`_argmax`), a Transpose's
  permutation from its table, checked against its shapes;
* an exSDPAttention's scale from its scores task's BN multiplier (:func:`_attention`);
* a standalone LeakyRelu's slope from its DPU-only task (:func:`_leaky_relu`);
* a ReduceMax's or ReduceMin's axes (its stored ones, else from its shapes) and keepdims from its
  shapes (:func:`_reduce`);
* a standalone Clip's bounds: its stored constants, checked against its task's clamps
  (:func:`_clip`); a Pad's mode (constant, reflect or edge) from what its tasks do, which must
  pad as its stored pads say (:func:`_pad`, :func:`.t3pad.t3_pad`);
* a Pow's task checked to square its input, its stored exponent the lowering's (:func:`_pow`);
* a Gather's axis from its shapes: the one axis on which its stored indices give its output's
  shape (:func:`_gather`).

Ops without attributes run as stored: the standalone lookup-table ops (Sigmoid, exSwish, HardSwish,
exGelu, Tanh, Softplus, and HardSigmoid, whose alpha and beta are in its table alone: it runs on
the file's table, as the NPU does), the CPU's Exp, Erf and Sqrt, a standalone Relu, element-wise
Add, Mul, Sub, Max and Min; so do ops whose parameters are stored constants alone, which the
lowering reads and checks: a standalone PRelu's slopes, a Slice's starts, ends, axes and steps
(against its output's shape), a BatchNormalization's folded scale and bias (its mean 0 and
variance 1; no table holds its epsilon, which is 0 in that form).

Recovered attributes are in :attr:`.graph.VendorNode.recovered`; shape constants a recovery
replaces are dropped from the nodes' inputs.  An op type without a recovery here is refused by
name: guessing an attribute would give wrong numbers (an exNorm's epsilon is not in the file at
all; an Elu's alpha is an ONNX attribute, not a constant, and reading ONNX's defaults instead put
a HardSigmoid(0.3, 0.4) 2 % within one step of the simulator).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Dict, List, Tuple

import numpy as np

from ...errors import ModelInvalidError
from .graph import PackedVendorFile, VendorNode, VendorSubgraph, VendorTensor, is_helper
from .regcmd import (BN_MUL, ENABLE_CNA, ENABLE_PPU, TARGET_DPU, TARGET_RDMA, bn_multiplier, node_registers,
                     read_tasks, task_writes)
from .deconv_regs import deconv_params
from .helpers import is_sum_weight
from .t3conv import t3_check_convert_task, t3_conv_params, t3_standalone_clip, t3_standalone_leaky_slope
from .t3pad import t3_pad
from .t3pool import t3_pool_params

__all__ = ["T3_OPS", "complete_t3_nodes", "t3_unsupported_ops"]

_CONV_PARAM_TYPE, _DECONV_PARAM_TYPE = 1, 2
#: a task's enable mask with the DPU alone (its read and write DMA)
_ENABLE_DPU_ONLY = 0x18
#: lanes a row of an rv1106 reduce-sum weight
_SUM_LANES = 16
#: the axes of an exSoftmax13 in this container: channels and (ONNX's -1) the width
_SOFTMAX_AXES = (1, 3)
#: steps of an input grid beyond which a clamp register (int32) cannot hold a bound
_INT32_LIMIT = 2.0 ** 31 - 1
_CONV_OPS = ("Conv", "ConvRelu", "ConvClip", "ConvAdd", "ConvAddRelu", "ConvSigmoid", "ConvExSwish", "ConvHardSwish",
             "ConvHardSigmoid", "ConvExGelu", "ConvLeakyRelu", "ConvTanh", "ConvPRelu")


class _Node:
    """What a recovery reads: the node, its subgraph and its tasks' registers
    (``registers(unit)``: the first task enabling that unit)."""

    def __init__(self, vf: PackedVendorFile, sg: VendorSubgraph, node: VendorNode, registers: Callable[[int], Dict],
                 tasks: Callable[[], List], writes: Callable[[object], List] = lambda task: []):
        self.vf, self.sg, self.node = vf, sg, node
        self.registers, self.tasks, self.writes = registers, tasks, writes

    def task_states(self, unit: int = 0) -> List[Dict[Tuple[int, int], int]]:
        """Per task of the node, in order, its registers: the node's writes up to that task
        (a later task writes only what changes); ``unit``: only the tasks enabling that unit
        (an ``enable_mask`` bit), every task by default."""
        states, state = [], {}
        for task in self.tasks():
            if task.op_idx == self.node.index:
                state.update(((target, reg), value) for target, reg, value in self.writes(task))
                if not unit or task.enable_mask & unit:
                    states.append(dict(state))
        return states

    def shape(self, index: int):
        return self.sg.tensor(index, self.node.where).shape

    def activations(self) -> List[VendorTensor]:
        """The node's activation inputs but the NPU's scratch ones (:func:`.graph.is_helper`)."""
        tensors = (self.sg.tensor(i, self.node.where) for i in self.node.inputs)
        return [t for t in tensors if t.kind in ("input", "activation", "output") and not is_helper(t)]

    def data_inputs(self) -> Tuple[int, ...]:
        """The node's inputs but its shape constants (an rv1106 file stores none)."""
        return tuple(i for i in self.node.inputs if self.sg.tensor(i, self.node.where).kind != "shape")

    def input_grid(self) -> VendorTensor:
        """The node's first input, which must be on one int8 grid (one scale and zero point)."""
        x = self.sg.tensor(self.node.inputs[0], self.node.where)
        if len(x.zero_point) != 1:
            raise self.refuse(f"a {self.node.op} on {x.name!r} with zero points {list(x.zero_point)}; one int8 grid "
                              "was expected")
        return x

    def refuse(self, message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{self.node.where}: {message} (an rv1106 graph stores no attributes: they are "
                                 "recovered from its tensors and tasks)", op="load")


def _as_is(n: _Node) -> VendorNode:
    return n.node


def _int_attr(value: int) -> Dict[str, object]:
    return {"dtype": "i", "value": int(value)}


def _ints_attr(values) -> Dict[str, object]:
    return {"dtype": "is", "value": [int(v) for v in values]}


def _axis(n: _Node, whole, parts) -> int:
    """The one axis on which ``parts`` (shapes) divide ``whole`` (a shape) along their sizes."""
    if not parts or any(len(p) != len(whole) for p in parts):
        raise n.refuse(f"parts {[list(p) for p in parts]} of {list(whole)} have other ranks")
    axes = {k for p in parts for k, (a, b) in enumerate(zip(p, whole)) if a != b}
    if not axes:  # one part, the whole: a copy along any axis
        raise n.refuse(f"parts {[list(p) for p in parts]} of the whole's shape {list(whole)}: their axis cannot be "
                       "told")
    axis = axes.pop()
    if axes or sum(p[axis] for p in parts) != whole[axis]:
        raise n.refuse(f"the shapes {[list(p) for p in parts]} are not parts of {list(whole)} along one axis")
    return axis


def _table_axis(n: _Node, axis: int, rank: int) -> None:
    """Refuse a node whose parameter table's axis is not the one its shapes show."""
    stored = n.node.params.get("axis")
    if stored is None or (stored % rank if rank else stored) != axis:
        raise n.refuse(f"its parameter table's axis {stored} is not axis {axis}, on which its tensors' shapes differ")


def _concat(n: _Node) -> VendorNode:
    node = n.node
    parts = [t.shape for t in n.activations()]
    if len(node.outputs) != 1:
        raise n.refuse(f"a Concat with {len(node.outputs)} outputs")
    axis = _axis(n, n.shape(node.outputs[0]), parts)
    _table_axis(n, axis, len(parts[0]))
    return dataclasses.replace(node, inputs=n.data_inputs(), recovered={"axis": _int_attr(axis)})


def _split(n: _Node) -> VendorNode:
    """A Split: its axis and sizes from its parts' shapes, the axis checked against its parameter
    table; with a part nothing reads (tensor index -1: no shape) the table's axis and sizes, which
    the parts read and the whole must match."""
    node = n.node
    data = n.data_inputs()
    if len(data) != 1:
        raise n.refuse(f"a Split with data inputs {list(data)}; one was expected")
    whole = n.shape(data[0])
    if all(i >= 0 for i in node.outputs):
        outs = [n.shape(i) for i in node.outputs]
        axis = _axis(n, whole, outs)
        _table_axis(n, axis, len(outs[0]))
        sizes = [int(o[axis]) for o in outs]
    else:
        axis, sizes = node.params.get("axis"), list(node.params.get("split") or ())
        if axis is None or not -len(whole) <= axis < len(whole) or len(sizes) != len(node.outputs) or \
                sum(sizes) != whole[axis]:
            raise n.refuse(f"a Split of {list(whole)} with an unread part and parameter table axis {axis}, sizes "
                           f"{sizes}; sizes of its {len(node.outputs)} parts adding up to the whole were expected")
        axis %= len(whole)
        for size, index in zip(sizes, node.outputs):
            expected = [size if k == axis else d for k, d in enumerate(whole)]
            if index >= 0 and list(n.shape(index)) != expected:
                raise n.refuse(f"a Split part {list(n.shape(index))} of {list(whole)}; its parameter table "
                               f"(axis {axis}, sizes {sizes}) gives {expected}")
    return dataclasses.replace(node, inputs=data, params={"axis": axis, "split": sizes}, recovered={})


def _transpose(n: _Node) -> VendorNode:
    """A Transpose: its parameter table's permutation, which must map its input's shape to its
    output's."""
    node = n.node
    data = [t.index for t in n.activations()]
    perm = node.params.get("perm", [])
    if len(data) != 1 or len(node.outputs) != 1:
        raise n.refuse(f"a Transpose with data inputs {data} and outputs {list(node.outputs)}")
    x, out = n.shape(data[0]), n.shape(node.outputs[0])
    if sorted(perm) != list(range(len(x))) or [x[k] for k in perm] != list(out):
        raise n.refuse(f"a Transpose whose parameter table's permutation {perm} does not map {list(x)} to {list(out)}")
    return dataclasses.replace(node, inputs=n.data_inputs(), recovered={"perm": _ints_attr(perm)})


def _argmax(n: _Node) -> VendorNode:
    """An ArgMax (a CPU op: no task): its parameter table's axis, keepdims from its shapes.  The
    table holds nothing but the axis: its keepdims and select_last_index are at their defaults
    (an ONNX ``select_last_index`` of 1 would have been stored, as the axis is)."""
    node = n.node
    data = n.data_inputs()
    slots = node.params.get("_slots")
    if len(data) != 1 or len(node.outputs) != 1 or slots is None or set(slots) - {0}:
        raise n.refuse(f"an ArgMax with inputs {list(data)}, outputs {list(node.outputs)} and parameter-table fields "
                       f"{slots}; one input, one output and an axis alone were observed")
    x, out = n.shape(data[0]), n.shape(node.outputs[0])
    axis = node.params["axis"] % len(x) if x else node.params["axis"]
    keepdims = int(len(out) == len(x))
    return dataclasses.replace(node, inputs=data, recovered={
        "axis": _int_attr(axis), "keepdims": _int_attr(keepdims), "select_last_index": _int_attr(0)})


def _reshape(n: _Node) -> VendorNode:
    return dataclasses.replace(n.node, inputs=n.data_inputs(), recovered={})


def _expand(n: _Node) -> VendorNode:
    """An Expand: its input broadcast to its output's shape (the shape it would have been given)."""
    node = n.node
    data = n.data_inputs()
    if len(data) != 1 or len(node.outputs) != 1:
        raise n.refuse(f"an Expand with data inputs {list(data)} and outputs {list(node.outputs)}")
    x, out = n.shape(data[0]), n.shape(node.outputs[0])
    try:
        broadcast = list(np.broadcast_shapes(tuple(x), tuple(out)))
    except ValueError:
        broadcast = None
    if broadcast != list(out):
        raise n.refuse(f"an Expand from {list(x)} to {list(out)}, which no broadcast gives")
    return dataclasses.replace(node, inputs=data, recovered={})


def _resize(n: _Node) -> VendorNode:
    """A Resize: its parameter table's modes; on the NPU its scales are its shapes' whole upsampling
    factors (a nearest one runs on DPU-only tasks, rows and columns repeated, a bilinear one on DPU
    tasks and convs of mode 3 over the compiler's phase weights).  One the runtime runs on the CPU
    (no task: other factors, e.g. ``sizes`` of 7x2 from 14x4) runs as stored, its stored scales or
    sizes checked against its output's shape by the lowering (corpus ``cpu_resize_rv110*``)."""
    node = n.node
    data = [t.index for t in n.activations()]
    tasks = [t for t in n.tasks() if t.op_idx == node.index]
    if len(data) != 1 or len(node.outputs) != 1 or "mode" not in node.params:
        raise n.refuse(f"a Resize with data inputs {data}, outputs {list(node.outputs)} and parameters "
                       f"{node.params}; one input, one output and a parameter table were expected")
    nearest = node.params["mode"] == "nearest"
    if not tasks:
        return node
    if nearest and any(t.enable_mask != _ENABLE_DPU_ONLY for t in tasks):
        raise n.refuse(f"a {node.params['mode']} Resize run by tasks with enable masks "
                       f"{[hex(t.enable_mask) for t in tasks]}; a nearest one on DPU-only tasks "
                       f"({_ENABLE_DPU_ONLY:#x}), a bilinear one on NPU tasks were observed")
    x, out = n.shape(data[0]), n.shape(node.outputs[0])
    if len(x) != 4 or list(out[:2]) != list(x[:2]) or any(o % i for o, i in zip(out[2:], x[2:])):
        raise n.refuse(f"a Resize from {list(x)} to {list(out)}; only whole upsampling factors were observed")
    return dataclasses.replace(node, inputs=n.data_inputs(), recovered={})


def _softmax(n: _Node) -> VendorNode:
    """An exSoftmax13 over its parameter table's axis, 1 or 3 (ONNX's -1 on a 4-D input), whose
    reduce-sum weight ``[16, 16 * B, 1, 1]`` sums the ``N`` values of that axis in ``B = ceil(N / 16)``
    column blocks, the first ``N % B`` of ``N // B + 1`` rows and the rest of ``N // B``: a float16 1
    in lane 0 of each such row, zeros elsewhere (rk3588 stores the ones as one row ``[1, N]``).  Over
    channels ``N`` = 10, 16 (YOLOv8's box distribution) and 48 (3 blocks of 16), over the width 11,
    20 (2 blocks of 10), 30 (2 of 15) and 40 (14, 13, 13 rows) were observed
    (classifier_heads_rv110*, softmax_axes_rv110*).  The weight is checked here and dropped (the
    lowering runs ONNX's Softmax)."""
    node = n.node
    tensors = [n.sg.tensor(i, node.where) for i in node.inputs]
    sums = [t for t in tensors if is_sum_weight(t)]
    data = n.activations()
    if not data or len(data[0].shape) != 4 or len(sums) != 1:
        raise n.refuse(f"an exSoftmax13 with inputs {[t.name for t in tensors]}; a 4-D input and one reduce-sum "
                       "weight were expected")
    axis, w = node.params.get("axis"), sums[0]
    if axis not in _SOFTMAX_AXES:
        observed = " and ".join(map(str, _SOFTMAX_AXES))
        raise n.refuse(f"an exSoftmax13 whose parameter table gives axis {axis}; {observed} were observed")
    count = data[0].shape[axis]
    blocks = -(-count // _SUM_LANES)
    raw = np.frombuffer(n.vf.tensor_data(n.sg, w), "<f2") if w.dtype == "float16" else np.zeros(0)
    rows = [count // blocks + (k < count % blocks) for k in range(blocks)]
    expected = np.zeros((_SUM_LANES, blocks, _SUM_LANES), np.float16)
    for k, used in enumerate(rows):
        expected[:used, k, 0] = 1
    if list(w.shape) != [_SUM_LANES, _SUM_LANES * blocks, 1, 1] or not np.array_equal(raw, expected.ravel()):
        raise n.refuse(f"an exSoftmax13 over {count} values of axis {axis} whose reduce-sum weight {w.name!r} "
                       f"({w.dtype}, {list(w.shape)}) is not [{_SUM_LANES}, {_SUM_LANES * blocks}, 1, 1] with a "
                       f"float16 1 in lane 0 of the first {', '.join(map(str, rows))} rows of its column blocks; "
                       "only that form was observed, which tells a softmax over that axis")
    return dataclasses.replace(node, inputs=tuple(t.index for t in data), params={"axis": axis},
                               recovered={"axis": _int_attr(axis)})


def _pool(n: _Node) -> VendorNode:
    node = n.node
    if len(node.inputs) != 1 or len(node.outputs) != 1:
        raise n.refuse(f"a {node.op} with inputs {list(node.inputs)} and outputs {list(node.outputs)}")
    x = n.input_grid()
    params = t3_pool_params(n.task_states(ENABLE_PPU), node.op, x.shape, n.shape(node.outputs[0]), x.zero_point[0],
                            node.where)
    return dataclasses.replace(node, recovered={k: _ints_attr(v) if isinstance(v, list) else _int_attr(v)
                                                for k, v in params.items()})


def _conv(n: _Node) -> VendorNode:
    node = n.node
    if len(node.inputs) < 2 or len(node.outputs) != 1:
        raise ModelInvalidError(f"{node.where}: a conv with inputs {list(node.inputs)} and outputs "
                                f"{list(node.outputs)}; an input, a weight and one output were expected", op="load")
    x = n.input_grid()
    params = t3_conv_params(n.registers(ENABLE_CNA), n.shape(node.inputs[1]), x.shape, n.shape(node.outputs[0]),
                            x.zero_point[0], node.where)
    return dataclasses.replace(node, param_type=_CONV_PARAM_TYPE, params=params, recovered={})


def _deconv(n: _Node) -> VendorNode:
    node = n.node
    if len(node.inputs) < 2 or len(node.outputs) != 1:
        raise n.refuse(f"a ConvTranspose with inputs {list(node.inputs)} and outputs {list(node.outputs)}")
    x = n.sg.tensor(node.inputs[0], node.where)
    attrs = deconv_params(n.registers(ENABLE_CNA), n.shape(node.inputs[1]), x.shape, n.shape(node.outputs[0]),
                          node.where, graph_input=x.kind == "input")
    params = {"kernel_shape": attrs["kernel_shape"], "dilations": attrs["dilations"], "auto_pad": "NOTSET"}
    return dataclasses.replace(node, param_type=_DECONV_PARAM_TYPE, params=params, recovered={
        k: _int_attr(v) if isinstance(v, int) else _ints_attr(v) for k, v in attrs.items()})


def _dpu_tasks(n: _Node, what: str) -> Tuple[VendorTensor, VendorTensor]:
    """The input and output of a node of one activation input and one output run by DPU-only
    tasks."""
    node = n.node
    data = n.activations()
    tasks = [t for t in n.tasks() if t.op_idx == node.index]
    if len(data) != 1 or len(node.outputs) != 1 or not tasks or any(t.enable_mask != _ENABLE_DPU_ONLY for t in tasks):
        raise n.refuse(f"a {what} with inputs {list(node.inputs)}, outputs {list(node.outputs)} and tasks of enable "
                       f"masks {[hex(t.enable_mask) for t in tasks]}; one input and output on DPU-only tasks "
                       f"({_ENABLE_DPU_ONLY:#x}) were observed")
    return data[0], n.sg.tensor(node.outputs[0], node.where)


def _dpu_only(n: _Node, what: str) -> Tuple[VendorTensor, VendorTensor]:
    """The input and output of a node of one activation input and one output run by DPU-only
    tasks (a standalone LeakyRelu, Clip or Pad), each on one int8 grid."""
    x, out = _dpu_tasks(n, what)
    if any(len(t.scale) != 1 or len(t.zero_point) != 1 for t in (x, out)):
        raise n.refuse(f"a {what} from {x.name!r} (scale {list(x.scale)}) to {out.name!r} (scale {list(out.scale)}); "
                       "one int8 grid each was expected")
    return x, out


#: the element-wise stage of an int8 product of two activations (EW_CFG: corpus sigmoid_mul_rv110*), and
#: where the DPU reads its operand (the read DMA's 0x5038) and its input (0x5018)
_EW_CFG, _EW_MULTIPLY = 0x4070, 0x81004094
_DATA_SOURCE, _OPERAND_SOURCE = 0x5018, 0x5038


def _pow(n: _Node) -> VendorNode:
    """A Pow: DPU-only tasks multiplying the input by itself (the product of two activations, its
    operand read where its input is), its exponent a stored constant the lowering requires to be 2."""
    node = n.node
    x, _ = _dpu_tasks(n, "Pow")
    for regs in n.task_states():
        ew, data, operand = (regs.get(key) for key in ((TARGET_DPU, _EW_CFG), (TARGET_RDMA, _DATA_SOURCE),
                                                        (TARGET_RDMA, _OPERAND_SOURCE)))
        if ew != _EW_MULTIPLY or operand != data:
            raise n.refuse(f"a Pow of {x.name!r} whose task writes EW_CFG ({_EW_CFG:#x}) = {ew:#x} and reads its "
                           f"operand at {operand:#x}, its input at {data:#x}; only the input multiplied by itself "
                           f"({_EW_MULTIPLY:#x}, one address) was observed")
    return node


def _gather(n: _Node) -> VendorNode:
    """A Gather of an activation by stored int64 indices (a CPU op: RKNN-Toolkit2 2.3.0 compiles a
    channel shuffle of a pooled map to one): its axis, stored nowhere, is the one axis on which
    gathering by indices of that shape gives the output's shape; the lowering checks the indices."""
    node = n.node
    data = n.activations()
    ids = [t for t in (n.sg.tensor(i, node.where) for i in node.inputs) if t.kind == "shape"]
    if len(data) != 1 or len(ids) != 1 or len(node.outputs) != 1:
        raise n.refuse(f"a Gather with inputs {list(node.inputs)} and outputs {list(node.outputs)}; one activation "
                       "and one stored index tensor were expected")
    x, idx, out = data[0].shape, ids[0].shape, n.shape(node.outputs[0])
    axes = [a for a in range(len(x)) if list(x[:a]) + list(idx) + list(x[a + 1:]) == list(out)]
    if len(axes) != 1:
        raise n.refuse(f"a Gather of {list(x)} by {list(idx)} indices into {list(out)}: axes {axes} give that shape, "
                       "and the file stores none")
    return dataclasses.replace(node, recovered={"axis": _int_attr(axes[0])})


def _leaky_relu(n: _Node) -> VendorNode:
    """A standalone LeakyRelu (Abs: slope -1): DPU-only tasks, the slope in their registers
    (:func:`.t3conv.t3_standalone_leaky_slope`), read from the first."""
    node = n.node
    _dpu_only(n, "LeakyRelu")
    alpha = t3_standalone_leaky_slope(n.registers(_ENABLE_DPU_ONLY), node.where)
    return dataclasses.replace(node, params={"alpha": alpha}, recovered={"alpha": {"dtype": "f", "value": alpha}})


def _stored(n: _Node, dtypes: Tuple[str, ...], counts: Tuple[int, ...], what: str) -> List[np.ndarray]:
    """The values of the node's shape constants (stored at their offsets), which must be of
    ``dtypes`` and hold ``counts`` values, in order (the trailing ones may be absent)."""
    found = [t for t in (n.sg.tensor(i, n.node.where) for i in n.node.inputs) if t.kind == "shape"]
    shown = [(t.name, t.dtype, list(t.shape)) for t in found]
    if not 0 < len(found) <= len(dtypes) or any(t.dtype != d or int(np.prod(t.shape, dtype=np.int64)) != c
                                                for t, d, c in zip(found, dtypes, counts)):
        raise n.refuse(f"{what} {shown}; {', '.join(f'{d} ({c})' for d, c in zip(dtypes, counts))} constants were "
                       "expected")
    values = []
    for t, dtype, count in zip(found, dtypes, counts):
        raw = bytes(n.vf.tensor_data(n.sg, t))
        width = np.dtype(dtype).itemsize * count
        if len(raw) < width:
            raise n.refuse(f"{what} {t.name!r} holds {len(raw)} bytes; {width} were expected")
        values.append(np.frombuffer(raw[:width], np.dtype(dtype).newbyteorder("<")))
    return values


def _clip(n: _Node) -> VendorNode:
    """A standalone int8 Clip: its two float32 bounds, stored constants the lowering reads, checked
    against its DPU-only task's clamps (:func:`.t3conv.t3_standalone_clip`): a bound lies within
    half an input step of its clamp, or where there is no clamp beyond the int32 range (the
    compiler stores +-FLT_MAX for an absent bound) or at 0 (an upper bound, for which it writes none)."""
    node = n.node
    x, _ = _dpu_only(n, "Clip")
    bounds = _stored(n, ("float32", "float32"), (1, 1), "bounds")
    clamps = t3_standalone_clip(n.registers(_ENABLE_DPU_ONLY), x.zero_point[0], node.where)
    if len(bounds) != 2:
        raise n.refuse(f"a Clip with {len(bounds)} stored bounds; a min and a max were expected")
    for side, value, clamp in zip(("lower", "upper"), bounds, clamps):
        steps = float(value[0]) / x.scale[0]
        none = abs(steps) >= _INT32_LIMIT or (side == "upper" and steps == 0)
        if (clamp is None) != none or (clamp is not None and not abs(steps - clamp) <= 0.5 + 1e-4):
            raise n.refuse(f"its stored {side} bound {float(value[0])!r} is {steps:.6g} steps of its input's grid, "
                           f"where its task's clamp is {'none' if clamp is None else clamp}; the bound was observed "
                           "within half a step of its clamp")
    return node


def _pad(n: _Node) -> VendorNode:
    """A Pad (DPU-only tasks): its pads and value, stored constants the lowering reads, checked
    against what its tasks do (:func:`.t3pad.t3_pad`), which alone tells its mode (constant,
    reflect or edge).  The compiler computes a constant Pad's fill code as
    ``trunc(zp + value / scale)`` (saturated to int8), the simulator rounds: the lowering writes
    the stored value, as the simulator does."""
    node = n.node
    if not any(t.op_idx == node.index for t in n.tasks()):
        raise n.refuse("a Pad the compiler runs on the CPU (no NPU task; RKNN-Toolkit2 2.2.0 to 2.3.2 do so with "
                       "some constant Pads: of a graph input, of a pooled column): its mode is stored nowhere, and its "
                       "inputs do not tell it (a reflect Pad keeps a value input too)")
    x, out = _dpu_only(n, "Pad")
    stored = _stored(n, ("int64", "float32"), (2 * len(x.shape), 1), "pads and value")
    mode, pads, code = t3_pad(n.task_states(), x.shape, out.shape, node.where)
    if stored[0].tolist() != pads:
        raise n.refuse(f"stored pads {stored[0].tolist()}, where its tasks pad {pads}")
    if len(stored) > 1 and mode != "constant":
        raise n.refuse(f"a stored value {float(stored[1][0])!r} for a Pad whose tasks {mode}-pad")
    value = float(stored[1][0]) if len(stored) > 1 else 0.0
    fill = int(np.float32(x.zero_point[0]) + np.float32(value) / np.float32(x.scale[0]))
    if code is not None and code not in (fill, min(max(fill, -128), 127)):
        raise n.refuse(f"its stored value {value!r} fills code {fill} (truncated, as the compiler computes it), where "
                       f"its tasks fill {code}")
    return dataclasses.replace(node, params={"mode": mode}, recovered={"mode": {"dtype": "s", "value": mode}})


def _reduce(n: _Node) -> VendorNode:
    """A ReduceMax or ReduceMin (a CPU op: no task): ``keepdims`` from the ranks, the axes from its
    stored axes constant, which must give its output's shape; without one, from the shapes, the
    dims its output lacks or has as 1.  Where several sets of axes give the output's shape
    (keepdims 0, equal sizes side by side) they must then differ in dims of size 1 only, over which
    a reduction changes nothing."""
    node = n.node
    data = n.data_inputs()
    if len(data) != 1 or len(node.outputs) != 1 or any(t.op_idx == node.index for t in n.tasks()):
        raise n.refuse(f"a {node.op} with data inputs {list(data)}, outputs {list(node.outputs)} or NPU tasks; one "
                       "input and output, run on the CPU, were observed")
    x, out = list(n.shape(data[0])), list(n.shape(node.outputs[0]))
    keepdims = int(len(out) == len(x))
    if keepdims:
        axes = [a for a, (d, o) in enumerate(zip(x, out)) if d != o] or [a for a, d in enumerate(x) if d == 1]
        fits = all(out[a] == 1 for a in axes) and all(o == d for a, (d, o) in enumerate(zip(x, out)) if a not in axes)
        candidates = [axes] if axes and fits else []
    else:
        candidates = [list(c) for c in itertools.combinations(range(len(x)), len(x) - len(out))
                      if c and [d for a, d in enumerate(x) if a not in c] == out]
    stored = [t for t in (n.sg.tensor(i, node.where) for i in node.inputs) if t.kind == "shape"]
    if len(stored) == 1 and stored[0].dtype == "int64" and len(stored[0].shape) == 1:
        axes = sorted({int(a) % len(x) for a in _stored(n, ("int64",), (stored[0].shape[0],), "axes")[0]})
        kept = [1 if a in axes else d for a, d in enumerate(x)] if keepdims else \
            [d for a, d in enumerate(x) if a not in axes]
        if not axes or kept != out:
            raise n.refuse(f"a {node.op} of {list(x)} over its stored axes {axes} (keepdims {keepdims}); its output is "
                           f"{list(out)}")
        candidates = [axes]
    moving = {tuple(a for a in c if x[a] != 1) for c in candidates}
    if not candidates or len(moving) != 1:
        raise n.refuse(f"a {node.op} of {list(x)} to {list(out)}: {len(candidates)} sets of axes give that shape "
                       f"{'reducing different dims' if candidates else ''}; one was expected")
    return dataclasses.replace(node, inputs=data, recovered={"axes": _ints_attr(candidates[0]),
                                                            "keepdims": _int_attr(keepdims)})


def _attention(n: _Node) -> VendorNode:
    """An exSDPAttention's ``scale``, which only its scores task holds: the BN multiplier of its
    first CNA task (0x4068, rk3588's form).  The simulator uses the ONNX value, which the register
    rounds to 16 bits: attention's usual ``1/sqrt(d)`` (``d``: q's channels) when it rounds to the
    stored bits, else the register's own value.  Its grids are read from the registers when it is
    lowered (:func:`.transformer.attention_grids`)."""
    node = n.node
    data = n.activations()
    if len(data) != 3 or len(node.outputs) != 1:
        raise n.refuse(f"an exSDPAttention with inputs {[t.name for t in data]}; q, k and v were expected")
    bn = n.registers(ENABLE_CNA).get((TARGET_DPU, BN_MUL))
    multiplier = bn_multiplier(bn)
    if multiplier is None or not multiplier[0]:
        raise n.refuse(f"its first CNA task's BN multiplier 0x4068 is {bn if bn is None else hex(bn)}; a 16-bit scale "
                       "<< 16 | 0x1000 | s << 8 (the attention's scale) was expected")
    stored, unit = multiplier[0], float(1 << multiplier[1])
    usual = float(data[0].shape[1]) ** -0.5
    scale = usual if round(usual * unit) == stored else stored / unit
    return dataclasses.replace(node, recovered={"scale": {"dtype": "f", "value": scale}})


def _data_convert(n: _Node) -> VendorNode:
    """An exDataConvert from int8 to float16 before an exSoftmax13 (a Softmax head's logits; its
    DPU-only tasks checked by :func:`.t3conv.t3_check_convert_task`): its ``i_dtype`` and
    ``o_dtype`` are its tensors'."""
    node = n.node
    x, out = _dpu_tasks(n, "exDataConvert")
    readers = sorted({r.op for r in n.sg.nodes if out.index in r.inputs})
    if (x.dtype, out.dtype) != ("int8", "float16") or readers != ["exSoftmax13"]:
        raise n.refuse(f"an exDataConvert from {x.dtype} to {out.dtype} read by {readers}; only int8 to float16 "
                       "before an exSoftmax13 was observed (the compiler's own around a float16 split conv, say, was "
                       "not decoded)")
    t3_check_convert_task(n.registers(_ENABLE_DPU_ONLY), node.where)
    return dataclasses.replace(node, recovered={"i_dtype": {"dtype": "s", "value": "int8"},
                                                "o_dtype": {"dtype": "s", "value": "float16"}})


#: op type -> its recovery
_RECOVERIES: Dict[str, Callable[[_Node], VendorNode]] = {
    "InputOperator": _as_is, "OutputOperator": _as_is, **{op: _conv for op in _CONV_OPS},
    "Concat": _concat, "Split": _split, "Reshape": _reshape, "Expand": _expand, "MaxPool": _pool,
    "AveragePool": _pool,
    "Resize": _resize, "exSoftmax13": _softmax, "ConvTranspose": _deconv, "ArgMax": _argmax,
    "Transpose": _transpose, "exSDPAttention": _attention, "LeakyRelu": _leaky_relu, "Clip": _clip,
    "ReduceMax": _reduce, "ReduceMin": _reduce, "Pad": _pad, "exDataConvert": _data_convert, "Pow": _pow,
    "Gather": _gather,
    # attribute-free: standalone lookup-table ops, CPU ones and element-wise ones (broadcast by their shapes):
    # corpus standalone_lut_*, sigmoid_mul_*, standalone_attr_free_*; ops whose parameters are stored constants
    # the lowering checks: standalone_prelu_*, slices_*, affine_ops_rv110* (a BatchNormalization in the
    # compiler's folded form, mean 0 and variance 1, whose epsilon, 0 in that form, no table holds here)
    **{op: _as_is for op in ("Sigmoid", "exSwish", "HardSwish", "HardSigmoid", "exGelu", "Tanh", "Softplus", "Exp",
                             "Erf", "Sqrt", "Relu", "Add", "Mul", "Sub", "Max", "Min", "PRelu", "Slice",
                             "BatchNormalization", "BatchNormalizationRelu")}}
#: the vendor op types of rv1106 files whose attributes are recovered
T3_OPS = frozenset(_RECOVERIES)


def t3_unsupported_ops(ops) -> List[str]:
    """The op types among ``ops`` whose attributes are not recovered from an rv1106 file."""
    return sorted(set(ops) - T3_OPS)


#: op types whose attributes no rv1106 file holds at all, with the evidence
_NOT_IN_THE_FILE = {
    "exNorm": "an exNorm runs on the CPU in this container (no NPU task, no parameter table) and its epsilon is "
              "stored nowhere in the file: two RKNN-Toolkit2 2.5.0 builds with epsilon 1e-5 and 1e-2 differ only in "
              "their calibration ranges",
}


def complete_t3_nodes(vf: PackedVendorFile) -> PackedVendorFile:
    """``vf`` with every node's attributes recovered.

    Raises:
        ModelInvalidError: several subgraphs (dynamic shapes, not decoded), an op type without a
            recovery (naming every such type), or registers and shapes a recovery refuses
            (naming the register or tensor).
    """
    if len(vf.subgraphs) > 1:  # dynamic input shapes: one graph per shape set
        raise ModelInvalidError(
            f"{vf.label}: an rv1106/rv1103 container with {len(vf.subgraphs)} subgraphs (dynamic input shapes) "
            "cannot run off-board: where each subgraph's constants lie in the container was not decoded (read as "
            "one file's, a RKNN-Toolkit2 2.5.0 build gave bias multipliers that are not positive)", op="load")
    missing = t3_unsupported_ops(n.op for sg in vf.subgraphs for n in sg.nodes)
    if missing:
        raise ModelInvalidError(
            f"{vf.label}: vendor op type{'s' if len(missing) > 1 else ''} {', '.join(missing)} in an rv1106/rv1103 "
            "container cannot run off-board: its graph stores no attributes, and those of only "
            f"{', '.join(sorted(T3_OPS))} are recovered from the NPU registers and tensor shapes"
            + "".join(f"; {_NOT_IN_THE_FILE[op]}" for op in missing if op in _NOT_IN_THE_FILE), op="load")
    return dataclasses.replace(vf, subgraphs=tuple(_complete(vf, sg) for sg in vf.subgraphs))


def _complete(vf: PackedVendorFile, sg: VendorSubgraph) -> VendorSubgraph:
    kinds = {t.kind: t for t in sg.tensors if t.kind in ("task", "regcmd")}
    cache = {}

    def program():
        if not cache:
            if len(kinds) != 2:
                raise ModelInvalidError(f"{vf.label}: subgraph {sg.index} has no task and register-command "
                                        "tensors", op="load")
            cache["tasks"] = read_tasks(vf.tensor_data(sg, kinds["task"]), f"{vf.label}: tasks")
            cache["regcmd"] = vf.tensor_data(sg, kinds["regcmd"])
        return cache["regcmd"], cache["tasks"]

    def registers_of(node: VendorNode):
        return lambda unit: node_registers(*program(), node.index, node.where, unit)

    def writes(task):
        return task_writes(program()[0], task, f"{vf.label}: subgraph {sg.index}")

    nodes = tuple(_RECOVERIES[node.op](_Node(vf, sg, node, registers_of(node), lambda: program()[1], writes))
                  for node in sg.nodes)
    return dataclasses.replace(sg, nodes=nodes)
