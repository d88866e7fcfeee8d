"""``VendorCodes``, ``VendorRequant`` and ``VendorAddRequant``: the integer ends of a vendor int8
conv (internal ops).

A Rockchip NPU multiplies int8 codes, sums them in an int32 accumulator and converts the
sum to the output's int8 grid with one multiplier per channel (``rknnlite/model/rknn_graph/
accumulator.py``).  The executor stores an int8 tensor as its real value ``(q - zp) * scale``
(float32), so a vendor int8 conv runs as three nodes: ``VendorCodes`` (the input's codes
``q - zp``), a ``Conv`` on integer-valued weights (the exact accumulator) and
``VendorRequant`` (the accumulator to the output's grid).

``VendorCodes``: input ``[x]``; attribute ``scale`` (the input's); output ``rint(x / scale)``.

``VendorRequant``: input ``[acc]`` (``N, C, ...``); attributes ``multiplier`` (C floats: the
real value of one accumulator step over the output scale), ``zero_point``, ``scale`` (the
output's), ``qmin`` / ``qmax`` (the int8 range, narrowed by a fused Relu or Clip); output
``(clip(rint(acc * multiplier[c]) + zero_point, qmin, qmax) - zero_point) * scale``, the
product in double.

``VendorAddRequant``: inputs ``[acc, residual]`` (same shape); attributes ``step`` (C floats: the
real value of one accumulator step), ``relu`` (bool), ``zero_point``, ``scale``, ``qmin``,
``qmax``; output ``v = acc * step[c] + residual`` (then ``max(v, 0)``) on the output's grid, in
float32 as the Mul, Add, Relu and quantization it fuses (a ConvAdd / ConvAddRelu).

All three write into the executor's buffer when given one and allocate otherwise; float32
outputs of the input's shape.
"""

from __future__ import annotations

import math

import numpy as np

from ...._native.executor_kernels import add_requant_channels, int8_codes, requant_channels
from ....errors import ModelInvalidError
from . import kernel
from .elementwise import check_float, flat_dest

__all__ = ["vendor_add_requant", "vendor_codes", "vendor_requant"]


def _positive(attrs, name: str, op: str) -> float:
    value = check_float(op, attrs, name, None)
    if not math.isfinite(value) or not value > 0:
        raise ModelInvalidError(f"{op}: attribute {name} must be a finite positive number, got {value!r}", op=op)
    return value


def _int(attrs, name: str, op: str, lo: int, hi: int) -> int:
    value = attrs.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= int(value) <= hi:
        raise ModelInvalidError(f"{op}: attribute {name} must be an integer in [{lo}, {hi}], got {value!r}", op=op)
    return int(value)


def _grid_attrs(attrs, op: str) -> dict:
    """The output grid attributes (``scale``, ``zero_point``, ``qmin``, ``qmax``), checked."""
    qmin = _int(attrs, "qmin", op, -128, 127)
    return {"scale": _positive(attrs, "scale", op), "zero_point": _int(attrs, "zero_point", op, -128, 127),
            "qmin": qmin, "qmax": _int(attrs, "qmax", op, qmin, 127)}


def _channel_values(attrs, name: str, op: str, dtype) -> np.ndarray:
    """Attribute ``name``: one finite positive number per channel, as a flat ``dtype`` array."""
    try:
        values = np.ascontiguousarray(attrs.get(name), dtype=dtype).reshape(-1)
    except (TypeError, ValueError):
        values = np.empty(0, dtype)
    if values.size == 0 or not np.all(np.isfinite(values)) or not np.all(values > 0):
        raise ModelInvalidError(f"{op}: attribute {name} must hold one finite positive number per channel, got "
                                f"{attrs.get(name)!r}", op=op)
    return values


def _codes_prepare(attrs, consts):
    return dict(attrs, scale=_positive(attrs, "scale", "VendorCodes"))


@kernel("VendorCodes", out=True, prepare=_codes_prepare)
def vendor_codes(inputs, attrs, out=None):
    """The integer codes ``rint(x / scale)`` of an int8 tensor stored as real values."""
    x = np.ascontiguousarray(inputs[0], dtype=np.float32)
    y = flat_dest(out, x.shape)
    int8_codes(x.reshape(-1), y.reshape(-1), attrs["scale"])
    return [y]


def _requant_prepare(attrs, consts):
    op = "VendorRequant"
    multiplier = _channel_values(attrs, "multiplier", op, np.float64)
    return dict(attrs, multiplier=multiplier, **_grid_attrs(attrs, op))


def _requant_grid(attrs):
    return attrs["scale"], attrs["zero_point"], attrs["qmin"], attrs["qmax"]


@kernel("VendorRequant", out=True, prepare=_requant_prepare, grid=_requant_grid)
def vendor_requant(inputs, attrs, out=None):
    """An int8 conv's accumulator on its output's int8 grid (see the module doc)."""
    acc = np.ascontiguousarray(inputs[0], dtype=np.float32)
    multiplier = attrs["multiplier"]
    if acc.ndim < 2 or acc.shape[1] != multiplier.size:
        raise ModelInvalidError(f"VendorRequant: input of shape {list(acc.shape)} does not have the "
                                f"{multiplier.size} channels of its multipliers on axis 1", op="VendorRequant")
    y = flat_dest(out, acc.shape)
    if acc.size:
        requant_channels(acc.reshape(-1), y.reshape(-1), multiplier, acc.size // (acc.shape[0] * acc.shape[1]),
                         attrs["zero_point"], attrs["scale"], attrs["qmin"], attrs["qmax"])
    return [y]


def _add_requant_prepare(attrs, consts):
    op = "VendorAddRequant"
    step = _channel_values(attrs, "step", op, np.float32)
    relu = attrs.get("relu", False)
    if not isinstance(relu, (bool, np.bool_)):
        raise ModelInvalidError(f"{op}: attribute relu must be a bool, got {relu!r}", op=op)
    return dict(attrs, step=step, relu=bool(relu), **_grid_attrs(attrs, op))


@kernel("VendorAddRequant", out=True, prepare=_add_requant_prepare, grid=_requant_grid)
def vendor_add_requant(inputs, attrs, out=None):
    """An int8 ConvAdd / ConvAddRelu: the accumulator in real units plus the residual, on the
    output's int8 grid (see the module doc)."""
    acc = np.ascontiguousarray(inputs[0], dtype=np.float32)
    res = np.ascontiguousarray(inputs[1], dtype=np.float32)
    step = attrs["step"]
    if acc.ndim < 2 or acc.shape[1] != step.size or res.shape != acc.shape:
        raise ModelInvalidError(f"VendorAddRequant: accumulator of shape {list(acc.shape)} and residual of shape "
                                f"{list(res.shape)}; both must have the {step.size} channels of its steps on axis 1",
                                op="VendorAddRequant")
    y = flat_dest(out, acc.shape)
    if acc.size:
        add_requant_channels(acc.reshape(-1), res.reshape(-1), y.reshape(-1), step,
                             acc.size // (acc.shape[0] * acc.shape[1]), attrs["zero_point"],
                             attrs["scale"], attrs["relu"], attrs["qmin"], attrs["qmax"])
    return [y]
