"""A vendor ``exLSTM`` or ``LSTM`` node: RKNN-Toolkit2 2.5.0's LSTM (ONNX's default activations,
no peepholes or projection) as an ONNX ``LSTM`` node.  A forward or bidirectional LSTM compiles to
an ``exLSTM``, a reverse or clipped one to an ``LSTM`` node, whose table holds the clip (slot 4),
the direction, the hidden size and the layouts ``"snc"`` / ``"sdbh"`` only; RKNN-Toolkit2 2.3.2 and
older write an ``LSTM`` without a table, whose direction is nowhere in the file (refused).

Probed on RKNN-Toolkit2 2.5.0's float16 files of the rk35xx and rv1126b (``lstm*`` corpus cases,
silero-vad's decoder):

* inputs: X ``[seq, batch, I]``, W and R, B, ``sequence_lens`` (an empty placeholder, or a
  zero constant of the compiler's), ``initial_h`` and ``initial_c`` (graph tensors, or zero
  constants of the compiler's when the model has none), then the compiler's helpers: a scalar,
  ``dropout`` and ``projB`` rows and a ``proj`` matrix (all zeros: no dropout, no projection),
  a float scratch zone and two views of X;
* W ``[D * 4 * Hp, I]`` and R ``[D * 4 * Hp, H]`` in conv weight tiles, the gates in ONNX's order
  (i, o, f, c), each gate's ``H`` rows padded with zero rows to ``Hp`` (for H = 8: 16 on rk3588,
  rk3576 and rv1126b, 8 on rk3566 and rk3562);
* B float32 ``[D, 8 * Hp]``: per direction ONNX's two biases summed in the first ``4 * Hp`` (each
  gate padded as W's rows), zeros after;
* an exLSTM's parameter table (type 98): batch (slot 3), direction (5), hidden size (6), the input
  and output layouts ``"snc"`` / ``"sbnc"`` (8, 9), the sequence length (11), one activation alpha
  and beta of 0 and an empty activation name (0..2: ONNX's defaults);
* the blob where other nodes keep their BSON is no BSON document (56 bytes: zeros and the
  layouts' names); one that is a document with attributes is refused.

The simulator computes the gates in float from the float16 weights and rounds each output to
float16 (the board's tasks use the file's sigmoid and tanh tables); an int8 file's exLSTM
(int8 weights and states, an int32 bias) is refused by name.
"""

from __future__ import annotations

import re
from typing import List, Tuple

import numpy as np

from ...errors import ModelInvalidError
from .graph import VendorNode, VendorTensor
from .weights import decode_weight, weight_tiles
from ..graph import Node

__all__ = ["lower_lstm"]

#: the two forms of RKNN-Toolkit2 2.5.0's LSTM node (parameter table type 98 both): the slots its
#: table holds (``optional``: may be absent), its input and output layout names, its directions
_FORMS = {
    "exLSTM": {"slots": {0, 1, 2, 3, 5, 6, 8, 9, 11}, "optional": set(), "layouts": ("snc", "sbnc"),
               "directions": ("forward", "bidirectional")},
    "LSTM": {"slots": {5, 6, 8, 9}, "optional": {4}, "layouts": ("snc", "sdbh"),
             "directions": ("forward", "reverse", "bidirectional")},
}
#: the compiler's scratch inputs of an LSTM node (besides constants of zeros)
_SCRATCH = re.compile(r"_(compute_zone|exSecondary\d*)$")


def lower_lstm(lowering, node: VendorNode) -> None:
    """Lower an ``exLSTM`` or ``LSTM`` node (see the module doc) to ``LSTM``; anything else is
    refused by name."""
    form = _FORMS[node.op]
    if len(node.inputs) < 7 or len(node.outputs) != 3:
        raise lowering.error(f"{node.label} has {len(node.inputs)} inputs and {len(node.outputs)} outputs; an "
                             f"{node.op} has X, W, R, B, sequence_lens, initial_h, initial_c and the compiler's "
                             "helpers, and Y, Y_h, Y_c")
    x, w, r, b, lens, h0, c0 = (lowering.tensor(i, node) for i in node.inputs[:7])
    if x.dtype != "float16" or w.dtype != "float16":
        raise lowering.error(f"{node.label}: an {node.op} on {x.dtype} data with {w.dtype} weights; only float16 "
                             "ones (an fp16 file's) were decoded")
    params = node.params
    if not params:
        raise lowering.error(f"{node.label}: an {node.op} without a parameter table (RKNN-Toolkit2 2.3.2 and older "
                             "write none): its direction, forward or reverse, is nowhere in the file")
    slots, direction = set(params.get("_slots", ())), params.get("direction")
    if not form["slots"] <= slots <= form["slots"] | form["optional"] or direction not in form["directions"]:
        raise lowering.error(f"{node.label}: parameter table {params}; an {node.op} with slots "
                             f"{sorted(form['slots'])} (and {sorted(form['optional']) or 'no other'}), direction "
                             f"{' or '.join(form['directions'])} was decoded")
    if len(x.shape) != 3:
        raise lowering.error(f"{node.label}: input {list(x.shape)} is not [seq, batch, input]")
    seq, batch, size = (int(d) for d in x.shape)
    hidden, dirs = int(params.get("hidden_size", 0)), 2 if direction == "bidirectional" else 1
    expected = {"layouts": form["layouts"]}
    found = {"layouts": (params.get("input_layout"), params.get("output_layout"))}
    if node.op == "exLSTM":  # its table also holds ONNX's activation attributes, the batch and sequence length
        expected.update({"batch": batch, "seq_length": seq, "activation_alpha": (0.0,), "activation_beta": (0.0,),
                         "activations": ("",)})
        found.update({key: params.get(key) for key in expected if key != "layouts"})
    if found != expected or hidden < 1 or params.get("clip", 1.0) <= 0:
        raise lowering.error(f"{node.label}: parameter table {found} (hidden size {hidden}, clip "
                             f"{params.get('clip')}); {expected} were decoded (ONNX's default activations, its "
                             "input's batch and sequence length)")
    stray = _bson_attributes(node)
    if stray:
        raise lowering.error(f"{node.label}: BSON attributes {sorted(stray)}; an {node.op}'s blob was never a BSON "
                             "document (its attributes are its parameter table's)")
    _check_zero(lowering, node, lens, "sequence_lens")
    for t in (lowering.tensor(i, node) for i in node.inputs[7:]):
        if t.is_const:
            _check_zero(lowering, node, t, "helper constant")
        elif not _SCRATCH.search(t.name):
            raise lowering.error(f"{node.label}: input {t.name!r} ({t.kind}) is neither a constant of zeros nor the "
                                 "compiler's scratch zone or input view")
    outputs = [None if i < 0 else lowering.tensor(i, node) for i in node.outputs]
    shapes = ([seq, dirs, batch, hidden], [dirs, batch, hidden], [dirs, batch, hidden])
    for t, shape in zip(outputs, shapes):
        if t is not None and list(t.shape) != shape:
            raise lowering.error(f"{node.label}: output {t.name!r} is {list(t.shape)}, an LSTM's of hidden size "
                                 f"{hidden} is {shape}")
    states = [_state(lowering, node, t, [dirs, batch, hidden], what) for t, what in ((h0, "initial_h"),
                                                                                    (c0, "initial_c"))]
    weights, padded = _gate_rows(lowering, node, w, dirs, hidden, size, "W")
    recurrent, _ = _gate_rows(lowering, node, r, dirs, hidden, hidden, "R")
    bias = _bias(lowering, node, b, dirs, hidden, padded)
    name = node.name or f"{node.op}#{node.index}"
    prefix = lowering.names[w.index]
    inputs = [lowering.names[x.index], lowering.constant(f"{prefix}/W", weights),
              lowering.constant(f"{prefix}/R", recurrent), lowering.constant(f"{prefix}/B", bias), ""] + states
    names = [f"{name}/unread_Y" if t is None else lowering.names[t.index] for t in outputs]
    attrs = {"hidden_size": hidden, "direction": direction}
    if "clip" in params:
        attrs["clip"] = float(params["clip"])
    lowering.nodes.append(Node("LSTM", name, inputs, names, attrs))


def _bson_attributes(node: VendorNode) -> dict:
    """The node's BSON attributes, ``{}`` for its usual blob, which is no BSON document."""
    try:
        return node.attrs
    except ModelInvalidError:
        return {}


def _check_zero(lowering, node: VendorNode, t: VendorTensor, what: str) -> None:
    """A helper constant of the compiler's that must hold zeros (an empty placeholder too)."""
    if not t.is_const:
        raise lowering.error(f"{node.label}: its {what} is a {t.kind} tensor {t.name!r}; a constant of zeros was "
                             "decoded")
    if any(bytes(lowering.vf.tensor_data(lowering.sg, t))):
        raise lowering.error(f"{node.label}: its {what} {t.name!r} is not all zeros (a dropout, projection or "
                             "sequence lengths were never observed)")


def _gate_rows(lowering, node: VendorNode, t: VendorTensor, dirs: int, hidden: int, cols: int,
               what: str) -> Tuple[np.ndarray, int]:
    """W or R as ONNX holds them, ``[D, 4H, cols]`` float32, from the tiles' padded gate rows, and
    the rows each gate is padded to."""
    rows = sum(tile[0] * tile[4] for tile in weight_tiles(t.npu_shape)) if t.npu_shape else 0
    padded, extra = divmod(rows, 4 * dirs)
    if extra or padded < hidden:
        raise lowering.error(f"{node.label}: {what} {t.name!r} has {rows} rows in its tiles {list(t.npu_shape)}; "
                             f"{dirs} x 4 gates of at least {hidden} were expected")
    where = f"{lowering.label}: {node.label} {what}"
    full = decode_weight(lowering.vf.tensor_data(lowering.sg, t), t.npu_shape, (rows, cols, 1, 1), "float16",
                         where, t.size).astype(np.float32).reshape(dirs, 4, padded, cols)
    if np.any(full[:, :, hidden:]):
        raise lowering.error(f"{node.label}: {what} {t.name!r} holds values in the rows padding each gate's "
                             f"{hidden} to {padded}")
    return np.ascontiguousarray(full[:, :, :hidden].reshape(dirs, 4 * hidden, cols)), padded


def _bias(lowering, node: VendorNode, t: VendorTensor, dirs: int, hidden: int, padded: int) -> np.ndarray:
    """ONNX's B ``[D, 8H]`` from the file's ``[D, 8 * padded]``: the two biases summed per gate
    (``padded`` values each), zeros after; as ONNX's Wb, with Rb 0."""
    raw = lowering.vf.tensor_data(lowering.sg, t)
    count = dirs * 8 * padded
    if t.dtype != "float32" or len(raw) != 4 * count:
        raise lowering.error(f"{node.label}: bias {t.name!r} ({t.dtype}, {len(raw)} bytes) is not {count} float32 "
                             f"values ({dirs} x 8 x {padded})")
    stored = np.frombuffer(raw, "<f4", count).reshape(dirs, 2, 4, padded)
    if np.any(stored[:, 1]) or np.any(stored[:, 0, :, hidden:]):
        raise lowering.error(f"{node.label}: bias {t.name!r} holds values past each gate's {hidden} summed biases")
    bias = np.zeros((dirs, 8 * hidden), np.float32)
    bias[:, :4 * hidden] = stored[:, 0, :, :hidden].reshape(dirs, 4 * hidden)
    return bias


def _state(lowering, node: VendorNode, t: VendorTensor, shape: List[int], what: str) -> str:
    """The name of an initial state, or ``""`` (ONNX: zeros) for the compiler's zero constant."""
    if t.is_const:
        _check_zero(lowering, node, t, what)
        return ""
    if list(t.shape) != shape:
        raise lowering.error(f"{node.label}: {what} {t.name!r} is {list(t.shape)}, expected {shape}")
    return lowering.names[t.index]
