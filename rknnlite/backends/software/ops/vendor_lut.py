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
``out_zero_point``, ``out_scale``.  The output is float32, written into the executor's buffer
when it passes one (the compiled loop ``elementwise_kernels.lut_rows``, GIL released).
"""

from __future__ import annotations

import numpy as np

from ....errors import ModelInvalidError
from ....model.rknn_graph.lut import table_problem
from ...._native.elementwise_kernels import lut_rows
from . import kernel
from .elementwise import flat_dest

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
    attrs["_tables"] = np.concatenate(tables)  # the two end to end, as the compiled loop reads them
    return attrs


@kernel(_OP, prepare=_prepare, out=True)
def vendor_lut_activation(inputs, attrs, out=None):
    """Apply the NPU lookup-table stage to a conv accumulator (see the module doc); float32 of
    the input's shape, into the executor's buffer when given one."""
    acc = np.ascontiguousarray(inputs[0], dtype=np.float32)
    scale = attrs["index_scale"]
    if acc.ndim < 2 or acc.shape[1] != len(scale):
        raise ModelInvalidError(f"{_OP}: input of shape {list(acc.shape)} does not have the {len(scale)} channels "
                                "of its index scales on axis 1", op=_OP)
    y = flat_dest(out, acc.shape)
    if acc.size:
        lut_rows(acc.reshape(-1), y.reshape(-1), scale, acc.size // (acc.shape[0] * acc.shape[1]),
                 attrs["_tables"], len(attrs["le_table"]), attrs["index_offset"], attrs["le_start"], attrs["le_end"],
                 attrs["lo_start"], attrs["lo_end"], float(1 << attrs["index_shift"]), attrs["le_uflow_slope"],
                 attrs["lo_oflow_slope"], attrs["out_multiplier"], attrs["out_zero_point"], attrs["out_scale"])
    return [y]
