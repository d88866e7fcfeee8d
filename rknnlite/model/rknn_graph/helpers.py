"""The constants the compiler generates beside a Concat or an exSoftmax13, checked for what the
lowering takes them to be.

The lowering runs a vendor Concat as ONNX's Concat and an exSoftmax13 as ONNX's Softmax, and
does not read these constants.  That is right only when they are what every observed file holds:

* a Concat's ``<output>_conv_weight``: the 1x1 conv by which the NPU gathers its inputs'
  channels, each input's channels on lanes of their own (padded to the layout's channel
  block), into the output: a 0/1 matrix ``[C_out, lanes]`` taking the inputs' channels in
  order;
* an exSoftmax13's ``<input>_rs_weight``: the reduce-sum weight, ones over the softmax's axis
  (``<input>_rs_weight_0`` and on when several softmaxes read one input: :func:`is_sum_weight`).

A compiler that folded something more into them (a channel permutation, a scale) would make
the lowering's answer silently wrong, so anything else is refused by name.
"""

from __future__ import annotations

import re
from typing import List

import numpy as np

from .graph import VendorNode, VendorTensor
from .weights import decode_weight

__all__ = ["check_concat_selection", "check_softmax_sum_weight", "is_sum_weight"]

# the compiler names a second helper of one name with a counter (two softmaxes of one input:
# x_rs_weight, x_rs_weight_0; corpus float_only_rv110*)
_SUM_WEIGHT, _SELECTION = re.compile(r"_rs_weight(_\d+)?$"), re.compile(r"_conv_weight$")


def _is_generated(t: VendorTensor, name: re.Pattern) -> bool:
    return t.kind == "generated" and name.search(t.name) is not None


def is_sum_weight(t: VendorTensor) -> bool:
    """Whether ``t`` is an exSoftmax13's reduce-sum weight (a generated ``<input>_rs_weight``,
    with the counter the compiler appends to a repeated name)."""
    return _is_generated(t, _SUM_WEIGHT)


def _generated(lowering, node: VendorNode, name: re.Pattern) -> List[VendorTensor]:
    return [t for t in (lowering.tensor(i, node) for i in node.inputs) if _is_generated(t, name)]


def check_concat_selection(lowering, node: VendorNode, channels: List[int]) -> None:
    """Refuse a Concat over axis 1 whose ``*_conv_weight`` is not the in-order selection of its
    inputs' ``channels`` (a row per output channel, one 1 in it; each input's channels on
    consecutive lanes, the inputs in order)."""
    for t in _generated(lowering, node, _SELECTION):
        where = f"{lowering.label}: {node.label} helper weight {t.name!r}"
        if len(t.shape) != 4 or t.shape[0] != sum(channels) or list(t.shape[2:]) != [1, 1]:
            raise lowering.error(f"{node.label}: helper weight {t.name!r} of shape {list(t.shape)}; a 1x1 selection "
                                 f"of the {sum(channels)} output channels was expected")
        w = decode_weight(lowering.vf.tensor_data(lowering.sg, t), t.npu_shape, t.shape, t.dtype, where, t.size,
                          align=lowering.weight_align())
        w = w.reshape(t.shape[0], t.shape[1]).astype(np.float64)
        lanes = np.argmax(w != 0, axis=1)
        one_each = np.all(np.count_nonzero(w, axis=1) == 1) and np.all(w[np.arange(len(w)), lanes] == 1)
        starts = np.cumsum([0] + channels[:-1])
        contiguous = all(np.array_equal(np.diff(lanes[s:s + c]), np.ones(c - 1)) for s, c in zip(starts, channels))
        if not (one_each and contiguous and np.all(np.diff(lanes) > 0)):
            raise lowering.error(f"{node.label}: helper weight {t.name!r} is not the in-order selection of its inputs' "
                                 f"{channels} channels (output channel -> lane {lanes.tolist()}); only that was "
                                 "observed, so the Concat it serves is not run as a plain Concat")


def check_softmax_sum_weight(lowering, node: VendorNode, channels: int) -> None:
    """Refuse an exSoftmax13 over ``channels`` values whose ``*_rs_weight`` (the reduce-sum weight,
    shape ``[rows, channels, 1, 1]``, rows 1 or 8) does not hold ``channels`` ones in its first
    row (a plain sum).  The buffer holds blocks of ``rows`` rows of as many input lanes as the NPU
    shape states (32 on rk3576/rv1126b: a softmax over 48 channels has two, random graph 115), the
    first row's lanes first; a single row, or a single block, is the ones in a row.  The other
    rows are padding: zeros, or whatever memory held."""
    for t in _generated(lowering, node, _SUM_WEIGHT):
        raw = np.frombuffer(lowering.vf.tensor_data(lowering.sg, t), "<f2") if t.dtype == "float16" else np.zeros(0)
        rows = t.shape[0] if len(t.shape) == 4 else 0
        lanes = t.npu_shape[4] if len(t.npu_shape) == 6 and t.npu_shape[4] > 0 else channels
        first = np.concatenate([raw[b * rows * lanes:b * rows * lanes + lanes]
                                for b in range(-(-channels // lanes))])[:channels] if rows else raw[:0]
        if len(t.shape) != 4 or t.shape[1] != channels or first.size < channels or not np.all(first == 1):
            raise lowering.error(f"{node.label}: reduce-sum weight {t.name!r} ({t.dtype}, {list(t.shape)}, blocks of "
                                 f"{lanes} lanes) holds {first.tolist()} in its first row; {channels} float16 ones (a "
                                 "plain sum over the softmax's axis) were expected")
