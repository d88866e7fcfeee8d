"""``VendorLutActivation``: the lookup-table stage of a vendor int8 conv (internal op).

A Rockchip NPU runs an int8 conv's Sigmoid, x*Sigmoid(x), HardSwish or HardSigmoid
through two 513-entry int16 tables that the file's register stream loads
(``rknnlite/model/rknn_graph/lut.py`` decodes them; ``docs/vendor-format-notes.md`` §1).
This kernel applies that stage to a conv's accumulator, channel by channel (axis 1):

1. index map: ``u = acc * index_scale[c] + index_offset`` (the DPU's per-channel
   multiplier and BN stage, ``(acc * mul[c] >> ms) * M + A >> s``, kept in float64
   without the shifts' intermediate rounding: that is what the vendor simulator's
   float pipeline matches best);
2. table: ``u`` in ``[le_start, le_end)`` interpolates linearly in ``le_table``, in
   ``[lo_start, lo_end]`` in ``lo_table`` (entries ``2^index_shift`` index units apart);
   below ``le_start`` the LE table's first entry plus ``(u - le_start) * le_uflow_slope``;
   above ``lo_end`` the LO table's last entry plus ``(u - lo_end) * lo_oflow_slope``;
3. output conversion: ``q = clip(floor(t * out_multiplier + 0.5) + out_zero_point,
   -128, 127)``, returned as the real value ``(q - out_zero_point) * out_scale``
   (float32, on the output tensor's int8 grid).

Inputs: ``[acc]``, the accumulator as float (``N, C, ...``; integer-valued when the conv
ran on integer tensors).  Attributes (set by the vendor lowering, checked by ``prepare``):
``index_scale`` (C floats), ``index_offset``, ``le_table`` / ``lo_table`` (int sequences of
``(end - start) / 2^index_shift + 1`` entries), ``le_start``, ``le_end``, ``lo_start``,
``lo_end``, ``index_shift``, ``le_uflow_slope``, ``lo_oflow_slope``, ``out_multiplier``,
``out_zero_point``, ``out_scale``.  The output is a new float32 array.
"""

from __future__ import annotations

import numpy as np

from ....errors import ModelInvalidError
from ....model.rknn_graph.lut import table_problem
from . import kernel

__all__ = ["vendor_lut_activation"]

_OP = "VendorLutActivation"
_FLOATS = ("index_offset", "le_uflow_slope", "lo_oflow_slope", "out_multiplier", "out_scale")
_INTS = ("le_start", "le_end", "lo_start", "lo_end", "index_shift", "out_zero_point")


def _prepare(attrs, consts):
    attrs = dict(attrs)
    missing = [k for k in _FLOATS + _INTS + ("index_scale", "le_table", "lo_table") if k not in attrs]
    if missing:
        raise ModelInvalidError(f"{_OP} lacks attributes {missing}", op=_OP)
    try:
        for k in _FLOATS:
            attrs[k] = float(attrs[k])
        for k in _INTS:
            attrs[k] = int(attrs[k])
        scale = np.asarray(attrs["index_scale"], np.float64).reshape(-1)
        tables = [np.asarray(attrs[k], np.float64).reshape(-1) for k in ("le_table", "lo_table")]
    except (TypeError, ValueError) as e:
        raise ModelInvalidError(f"{_OP} attributes are not numbers: {e}", op=_OP) from None
    problem = table_problem(len(tables[0]), len(tables[1]), attrs["le_start"], attrs["le_end"], attrs["lo_start"],
                            attrs["lo_end"], attrs["index_shift"])
    if problem:
        raise ModelInvalidError(f"{_OP}: {problem}", op=_OP)
    if not np.all(np.isfinite(scale)) or not (attrs["out_scale"] > 0 and attrs["out_multiplier"] > 0):
        raise ModelInvalidError(f"{_OP}: index scales, output multiplier and output scale must be finite and "
                                "positive", op=_OP)
    attrs["index_scale"], attrs["le_table"], attrs["lo_table"] = scale, tables[0], tables[1]
    return attrs


def _interpolate(table: np.ndarray, start: int, shift: int, u: np.ndarray) -> np.ndarray:
    """Linear interpolation in ``table`` (entry ``k`` at ``start + k * 2^shift``) at ``u`` inside its range."""
    pos = (u - start) / float(1 << shift)
    k = np.minimum(np.floor(pos).astype(np.int64), len(table) - 2)
    frac = pos - k
    return table[k] + (table[k + 1] - table[k]) * frac


@kernel(_OP, prepare=_prepare)
def vendor_lut_activation(inputs, attrs, out=None):
    """Apply the NPU lookup-table stage to a conv accumulator (see the module doc); a new
    float32 array of the input's shape."""
    acc = inputs[0]
    scale = attrs["index_scale"]
    if acc.ndim < 2 or acc.shape[1] != len(scale):
        raise ModelInvalidError(f"{_OP}: input of shape {list(acc.shape)} does not have the {len(scale)} channels "
                                "of its index scales on axis 1", op=_OP)
    u = acc.astype(np.float64) * scale.reshape((1, -1) + (1,) * (acc.ndim - 2)) + attrs["index_offset"]
    le_start, le_end, lo_start, lo_end = attrs["le_start"], attrs["le_end"], attrs["lo_start"], attrs["lo_end"]
    le, lo, shift = attrs["le_table"], attrs["lo_table"], attrs["index_shift"]
    t = np.empty_like(u)
    under, over = u < le_start, u > lo_end
    in_le = ~under & (u < le_end)
    in_lo = ~over & (u >= lo_start)
    t[in_le] = _interpolate(le, le_start, shift, u[in_le])
    t[in_lo] = _interpolate(lo, lo_start, shift, u[in_lo])
    t[under] = le[0] + (u[under] - le_start) * attrs["le_uflow_slope"]
    t[over] = lo[-1] + (u[over] - lo_end) * attrs["lo_oflow_slope"]
    zp = attrs["out_zero_point"]
    q = np.floor(t * attrs["out_multiplier"] + 0.5)
    np.clip(q + zp, -128, 127, out=q)
    q -= zp
    q *= attrs["out_scale"]
    return [q.astype(np.float32)]
