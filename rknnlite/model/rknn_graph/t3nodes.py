"""The attributes of an rv1106/rv1103 graph's nodes, recovered before lowering.

The graph of an rv1106 container (:data:`rknnlite.model.schema.T3`) stores no parameter table,
no BSON and no shape constants (a Split's sizes, a Reshape's target: their tensors hold no data):
:func:`complete_t3_nodes` gives each node what the other platforms' files store, so that the
lowering runs these files as it runs the others:

* a conv's ``params`` (``param_type`` 1) from its CNA registers (:func:`.t3conv.t3_conv_params`);
* a pool's kernel, strides and pads from its PPU registers (:func:`.t3pool.t3_pool_params`);
* a Concat's or Split's axis (and a Split's sizes) from its tensors' shapes: the one axis on
  which they differ;
* a Reshape's target: its output's shape (the lowering reads it for a node without a shape
  constant whose attributes were recovered).

Recovered attributes are in :attr:`.graph.VendorNode.recovered`; shape constants are dropped
from the nodes' inputs.  An op type without a recovery here is refused by name: guessing an
attribute would give wrong numbers.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Tuple

from ...errors import ModelInvalidError
from .graph import PackedVendorFile, VendorNode, VendorSubgraph
from .regcmd import ENABLE_CNA, ENABLE_PPU, node_registers, read_tasks
from .t3conv import t3_conv_params
from .t3pool import t3_pool_params

__all__ = ["T3_OPS", "complete_t3_nodes", "t3_unsupported_ops"]

_CONV_PARAM_TYPE = 1
_CONV_OPS = ("Conv", "ConvRelu", "ConvClip", "ConvAdd", "ConvAddRelu", "ConvSigmoid", "ConvExSwish", "ConvHardSwish",
             "ConvHardSigmoid")


class _Node:
    """What a recovery reads: the node, its subgraph and its tasks' registers
    (``registers(unit)``: the first task enabling that unit)."""

    def __init__(self, vf: PackedVendorFile, sg: VendorSubgraph, node: VendorNode, registers: Callable[[int], Dict]):
        self.vf, self.sg, self.node = vf, sg, node
        self.registers = registers

    def shape(self, index: int):
        return self.sg.tensor(index, self.node.where).shape

    def data_inputs(self) -> Tuple[int, ...]:
        """The node's inputs but its shape constants (an rv1106 file stores none)."""
        return tuple(i for i in self.node.inputs if self.sg.tensor(i, self.node.where).kind != "shape")

    def refuse(self, message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{self.node.where}: {message} (an rv1106 graph stores no attributes; they were "
                                 "recovered from the tensors' shapes)", op="load")


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
    if len(axes) > 1 or sum(p[min(axes)] for p in parts) != whole[min(axes)] if axes else len(parts) != 1:
        raise n.refuse(f"the shapes {[list(p) for p in parts]} are not parts of {list(whole)} along one axis")
    if not axes:  # one part, the whole: a copy along any axis
        raise n.refuse(f"one part {list(parts[0])} of the same shape: its axis cannot be told")
    return axes.pop()


def _concat(n: _Node) -> VendorNode:
    node = n.node
    parts = [n.shape(i) for i in node.inputs if n.sg.tensor(i, node.where).kind in ("input", "activation", "output")]
    if len(node.outputs) != 1:
        raise n.refuse(f"a Concat with {len(node.outputs)} outputs")
    axis = _axis(n, n.shape(node.outputs[0]), parts)
    return dataclasses.replace(node, inputs=n.data_inputs(), recovered={"axis": _int_attr(axis)})


def _split(n: _Node) -> VendorNode:
    node = n.node
    data = n.data_inputs()
    if len(data) != 1:
        raise n.refuse(f"a Split with data inputs {list(data)}; one was expected")
    outs = [n.shape(i) for i in node.outputs]
    axis = _axis(n, n.shape(data[0]), outs)
    return dataclasses.replace(node, inputs=data, params={"axis": axis, "split": [int(o[axis]) for o in outs]},
                               recovered={})


def _reshape(n: _Node) -> VendorNode:
    return dataclasses.replace(n.node, inputs=n.data_inputs(), recovered={})


def _pool(n: _Node) -> VendorNode:
    node = n.node
    if len(node.inputs) != 1 or len(node.outputs) != 1:
        raise n.refuse(f"a {node.op} with inputs {list(node.inputs)} and outputs {list(node.outputs)}")
    params = t3_pool_params(n.registers(ENABLE_PPU), node.op, n.shape(node.inputs[0]), n.shape(node.outputs[0]),
                            node.where)
    return dataclasses.replace(node, recovered={k: _ints_attr(v) for k, v in params.items()})


def _conv(n: _Node) -> VendorNode:
    node = n.node
    if len(node.inputs) < 2 or len(node.outputs) != 1:
        raise ModelInvalidError(f"{node.where}: a conv with inputs {list(node.inputs)} and outputs "
                                f"{list(node.outputs)}; an input, a weight and one output were expected", op="load")
    params = t3_conv_params(n.registers(ENABLE_CNA), n.shape(node.inputs[1]), n.shape(node.inputs[0]),
                            n.shape(node.outputs[0]), node.where)
    return dataclasses.replace(node, param_type=_CONV_PARAM_TYPE, params=params, recovered={})


#: op type -> its recovery
_RECOVERIES: Dict[str, Callable[[_Node], VendorNode]] = {
    "InputOperator": _as_is, "OutputOperator": _as_is, **{op: _conv for op in _CONV_OPS},
    "Concat": _concat, "Split": _split, "Reshape": _reshape, "MaxPool": _pool, "AveragePool": _pool,
    # attribute-free: standalone lookup-table ops and element-wise ones (broadcast by their shapes)
    **{op: _as_is for op in ("Sigmoid", "exSwish", "HardSwish", "Add", "Mul")}}
#: the vendor op types of rv1106 files whose attributes are recovered
T3_OPS = frozenset(_RECOVERIES)


def t3_unsupported_ops(ops) -> List[str]:
    """The op types among ``ops`` whose attributes are not recovered from an rv1106 file."""
    return sorted(set(ops) - T3_OPS)


def complete_t3_nodes(vf: PackedVendorFile) -> PackedVendorFile:
    """``vf`` with every node's attributes recovered.

    Raises:
        ModelInvalidError: an op type without a recovery (naming every such type), or
            registers and shapes a recovery refuses (naming the register or tensor).
    """
    missing = t3_unsupported_ops(n.op for sg in vf.subgraphs for n in sg.nodes)
    if missing:
        raise ModelInvalidError(
            f"{vf.label}: vendor op type{'s' if len(missing) > 1 else ''} {', '.join(missing)} in an rv1106/rv1103 "
            "container cannot run off-board: its graph stores no attributes, and those of only "
            f"{', '.join(sorted(T3_OPS))} are recovered from the NPU registers and tensor shapes", op="load")
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

    nodes = tuple(_RECOVERIES[node.op](_Node(vf, sg, node, registers_of(node))) for node in sg.nodes)
    return dataclasses.replace(sg, nodes=nodes)
