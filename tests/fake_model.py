"""Model files for the fake librknnrt (``tests/fake_rknnrt``).

``fake_model_bytes`` writes a real Rockchip container (what ``rknnlite.model.loader.detect_format``
calls ``rockchip-rknn`` and ``rknnlite.model.rockchip.read_rockchip`` parses):

* 64-byte header: ``RKNN``, u32 0, u64 format version 6, u64 model_size, 40 zero bytes;
* model_size bytes: a FlatBuffer (identifier ``RKNN``) whose root ``Model`` table carries what
  the reader looks for: version, target, one subgraph with the I/O tensors (dtype, kind, shape,
  name, int8 scale/zero point), compiler and toolkit versions, target platform, framework,
  custom string, default input/output info, batch size, inference type, dynamic shapes;
* u64 json_len, then the JSON trailer: the vendor's keys (``norm_tensor``, ``graph``,
  ``input_num``, ``output_num``, ``target_platform``, ``version``) plus ``fake_graph``, the
  description the fake runtime executes (see ``tests/fake_rknnrt/README.md``).

Shapes are given in model (ONNX) order, NCHW for 4-D tensors; ``layout`` only says how the
runtime presents a 4-D input (``"NHWC"`` by default for 1, 3 or 4 channels, as librknnrt does).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Sequence, Union

__all__ = ["FakeTensor", "fake_node", "fake_model_bytes", "write_fake_model", "add_mul_model"]

FORMAT_VERSION = 6
_DTYPE_CODE = {"int8": 3, "float16": 10}  # FlatBuffer Tensor.dtype values (reference §3)
_KIND_INPUT, _KIND_OUTPUT = 1, 2


@dataclass(frozen=True)
class FakeTensor:
    """A model input or output: ``shape`` in NCHW/ONNX order; ``dtype`` ``"float16"`` or
    ``"int8"`` (with ``scale``/``zp``); ``layout`` ``"NHWC"``/``"NCHW"`` for 4-D inputs
    (``None`` = the runtime's choice: NHWC for 1/3/4 channels)."""

    name: str
    shape: Sequence[int]
    dtype: str = "float16"
    layout: Optional[str] = None
    scale: float = 1.0
    zp: int = 0

    def to_json(self) -> dict:
        d = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.layout is not None:
            d["layout"] = self.layout
        if self.dtype == "int8":
            d["scale"] = self.scale
            d["zp"] = self.zp
        return d


def fake_node(op: str, inputs: Sequence[str], output: str, *, const: Optional[Union[float, str]] = None,
              attrs: Optional[Dict[str, Union[int, float, Sequence[Union[int, float]]]]] = None,
              name: Optional[str] = None) -> dict:
    """One graph node: ``op`` is a built-in element-wise op (add, sub, mul, div, max, min,
    relu, neg, abs, sigmoid) or a custom op type; ``const`` is the second operand of a binary
    op with one input (the fake's weights; ``"shared"``: left out of the file, as a
    ``remove_weight=True`` build does, and taken from the ``SHARE_WEIGHT_MEM`` context's
    node of the same name); ``attrs`` are what ``rknn_custom_op_get_op_attr`` returns (integers ->
    INT64, any fraction -> FLOAT32)."""
    d: dict = {"op": op, "inputs": list(inputs), "output": output}
    if const is not None:
        d["const"] = const if const == "shared" else float(const)
    if attrs:
        d["attrs"] = {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in attrs.items()}
    if name is not None:
        d["name"] = name
    return d


# ---------------------------------------------------------------------------------------------
# A forward-only FlatBuffer writer: each object is placed after the one that refers to it, so
# every uoffset points forward, as the project's reader expects.


class _Table:
    def __init__(self, fields: dict):
        self.fields = fields  # slot -> ("u8"|"i32", value) | str | _Table | list | ("vec_i32"|"vec_f32", values)


def _flatbuffer(root: _Table, ident: bytes = b"RKNN") -> bytes:
    buf = bytearray(struct.pack("<I", 0) + ident)
    queue = [(0, root)]

    def align(n: int = 4) -> None:
        while len(buf) % n:
            buf.append(0)

    def place(obj) -> int:
        if isinstance(obj, _Table):
            slots = sorted(obj.fields)
            num_slots = slots[-1] + 1 if slots else 0
            align(4)
            vt = len(buf)
            offsets = [0] * num_slots
            for k, slot in enumerate(slots):
                offsets[slot] = 4 + 8 * k
            buf.extend(struct.pack(f"<HH{num_slots}H", 4 + 2 * num_slots, 4 + 8 * len(slots), *offsets))
            align(8)
            pos = len(buf)
            buf.extend(struct.pack("<i", pos - vt))
            for slot in slots:
                value = obj.fields[slot]
                cell = len(buf)
                if isinstance(value, tuple) and value[0] in ("u8", "i32"):
                    buf.extend(struct.pack("<B" if value[0] == "u8" else "<i", value[1]))
                else:
                    buf.extend(bytes(4))
                    queue.append((cell, value))
                buf.extend(bytes(cell + 8 - len(buf)))
            return pos
        align(4)
        pos = len(buf)
        if isinstance(obj, str):
            raw = obj.encode("utf-8")
            buf.extend(struct.pack("<I", len(raw)) + raw + b"\0")
        elif isinstance(obj, list):
            buf.extend(struct.pack("<I", len(obj)))
            for item in obj:
                queue.append((len(buf), item))
                buf.extend(bytes(4))
        else:
            kind, values = obj
            buf.extend(struct.pack(f"<I{len(values)}{'i' if kind == 'vec_i32' else 'f'}", len(values), *values))
        return pos

    while queue:
        at, obj = queue.pop(0)
        target = place(obj)
        struct.pack_into("<I", buf, at, target - at)
    align(64)  # the toolkit's model sections are multiples of 64 bytes
    return bytes(buf)


def _version_number(version: str) -> int:
    parts = (version.split("(")[0].split("-")[0].split(".") + ["0", "0", "0"])[:3]
    try:
        major, minor, patch = (int(p) for p in parts)
    except ValueError:
        return 0
    return major * 10000 + minor * 100 + patch


def _tensor_table(t: FakeTensor, kind: int) -> _Table:
    fields = {0: ("u8", _DTYPE_CODE[t.dtype]), 2: ("u8", kind), 4: ("vec_i32", list(t.shape)), 5: t.name}
    if t.dtype == "int8":
        fields[10] = ("vec_f32", [float(t.scale)])
        fields[11] = ("vec_i32", [int(t.zp)])
    return _Table(fields)


def _norm_tensor(t: FakeTensor, tid: int) -> dict:
    q = "int8" if t.dtype == "int8" else ""
    return {"tensor_id": tid, "url": t.name, "size": list(t.shape), "dim_num": len(t.shape),
            "dtype": {"qnt_method": "layer" if q else "", "qnt_type": q, "vx_type": q}}


def fake_model_bytes(inputs: Sequence[FakeTensor], outputs: Sequence[FakeTensor], nodes: Sequence[dict], *,
                     platform: str = "rk3588", toolkit_version: str = "2.3.2", custom_string: str = "",
                     dynamic_shapes: Optional[Sequence[Sequence[Sequence[int]]]] = None, batch: int = 1,
                     fake_graph_extra: Optional[dict] = None) -> bytes:
    """Bytes of a Rockchip-format model the fake runtime executes.

    ``dynamic_shapes``: ``[[shape of input 0, shape of input 1, ...], ...]`` (NCHW order); the
    first set is the shape the attributes report before ``rknn_set_input_shapes``.
    ``fake_graph_extra``: keys merged into ``fake_graph`` (for malformed-model tests).
    """
    inputs, outputs = list(inputs), list(outputs)
    dyn = [[list(s) for s in shapes] for shapes in (dynamic_shapes or [])]
    io_info = {t.name: {"dtype": t.dtype, "layout": t.layout or ("NHWC" if len(t.shape) == 4 else "UNDEFINED")}
               for t in inputs}
    out_info = {t.name: {"dtype": t.dtype, "layout": "NCHW" if len(t.shape) == 4 else "UNDEFINED"} for t in outputs}
    model_fields = {
        0: ("i32", FORMAT_VERSION),
        1: "RKNPU v2",
        2: [_Table({0: [_tensor_table(t, _KIND_INPUT) for t in inputs] + [_tensor_table(t, _KIND_OUTPUT) for t in outputs]})],
        6: ("i32", _version_number(toolkit_version)),
        7: f"{toolkit_version}(compiler version: {toolkit_version} (fake))",
        8: platform,
        9: "ONNX",
        11: custom_string,
        12: json.dumps(io_info),
        13: json.dumps(out_info),
        14: str(batch if batch > 1 else 0),
        16: "dynamic_shape" if dyn else "static_shape",
    }
    if dyn:
        # One ShapeRange per input, holding that input's shape in every set (as observed).
        model_fields[17] = [_Table({0: [_Table({0: ("vec_i32", dyn[s][i])}) for s in range(len(dyn))]})
                            for i in range(len(inputs))]
    payload = _flatbuffer(_Table(model_fields))

    fake_graph = {
        "platform": platform,
        "toolkit_version": toolkit_version,
        "custom_string": custom_string,
        "batch": batch,
        "inputs": [t.to_json() for t in inputs],
        "outputs": [t.to_json() for t in outputs],
        "nodes": list(nodes),
    }
    if dyn:
        fake_graph["dynamic_shapes"] = dyn
    fake_graph.update(fake_graph_extra or {})
    tensors = inputs + outputs
    trailer = {
        "name": "rknn model",
        "network_platform": "ONNX",
        "input_num": len(inputs),
        "output_num": len(outputs),
        "norm_tensor": [_norm_tensor(t, k) for k, t in enumerate(tensors)],
        "graph": [{"left": "input" if k < len(inputs) else "output",
                   "left_tensor_id": k if k < len(inputs) else k - len(inputs),
                   "right": "norm_tensor", "right_tensor_id": k} for k in range(len(tensors))],
        "target_platform": [platform],
        "version": toolkit_version,
        "fake_graph": fake_graph,
    }
    raw_json = json.dumps(trailer).encode("utf-8")
    header = b"RKNN" + struct.pack("<IQQ", 0, FORMAT_VERSION, len(payload)) + bytes(40)
    return header + payload + struct.pack("<Q", len(raw_json)) + raw_json


def write_fake_model(path: Union[str, Path], *args, **kwargs) -> Path:
    """``fake_model_bytes(*args, **kwargs)`` written to ``path``; returns the path."""
    path = Path(path)
    path.write_bytes(fake_model_bytes(*args, **kwargs))
    return path


def add_mul_model(shape=(1, 3, 8, 8), dtype: str = "float16", quant=((0.05, 0), (0.05, 0), (0.1, 0), (0.2, 0)),
                  **kwargs) -> bytes:
    """The fixture graph ``add_mul``: inputs a, b -> ``sum = a + b``, ``prod = (a + b) * b``.
    For int8, ``quant`` gives (scale, zp) of a, b, sum, prod."""
    names = ("a", "b", "sum", "prod")
    tensors = [FakeTensor(n, shape, dtype, scale=q[0], zp=q[1]) if dtype == "int8" else FakeTensor(n, shape, dtype)
               for n, q in zip(names, quant)]
    nodes = [fake_node("add", ["a", "b"], "sum"), fake_node("mul", ["sum", "b"], "prod")]
    return fake_model_bytes(tensors[:2], tensors[2:], nodes, **kwargs)
