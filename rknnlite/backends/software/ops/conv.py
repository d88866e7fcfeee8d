"""Convolution kernels (see the package docstring for the calling convention)."""

from __future__ import annotations

import numpy as np

from ....errors import ModelInvalidError
from ...._native.kernels import im2col
from . import kernel


def _conv_pads(attrs, in_hw, kernel_hw, strides, dilations):
    """(top, left, bottom, right) pads per ONNX ``pads`` / ``auto_pad``."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads_begin, pads_end = [], []
        for size, k, s, d in zip(in_hw, kernel_hw, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            pads_begin.append(small if auto_pad == "SAME_UPPER" else big)
            pads_end.append(big if auto_pad == "SAME_UPPER" else small)
        return pads_begin[0], pads_begin[1], pads_end[0], pads_end[1]
    if auto_pad == "VALID":
        return 0, 0, 0, 0
    pads = attrs.get("pads", [0, 0, 0, 0])
    return pads[0], pads[1], pads[2], pads[3]


@kernel("Conv")
def conv(inputs, attrs, out=None):
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    if x.ndim != 4:
        raise ModelInvalidError(f"Conv supports 2-D images (4-D input), got {x.ndim}-D", op="rknn_run")
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    group = attrs.get("group", 1)
    sh, sw = attrs.get("strides", [1, 1])
    dh, dw = attrs.get("dilations", [1, 1])
    top, left, bottom, right = _conv_pads(attrs, (h, wd), (kh, kw), (sh, sw), (dh, dw))
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + left + right - (kw - 1) * dw - 1) // sw + 1
    x = np.ascontiguousarray(x, dtype=np.float32)
    wmat = w.reshape(group, m // group, cg * kh * kw).astype(np.float32, copy=False)
    cols = np.empty((cg * kh * kw, oh * ow), np.float32)
    y = np.empty((n, m, oh * ow), np.float32)
    mg = m // group
    for i in range(n):
        for g in range(group):
            im2col(x[i, g * cg:(g + 1) * cg], cols, kh, kw, sh, sw, top, left, dh, dw, oh, ow)
            np.matmul(wmat[g], cols, out=y[i, g * mg:(g + 1) * mg])
    if b is not None:
        y += b.astype(np.float32, copy=False).reshape(1, m, 1)
    return [y.reshape(n, m, oh, ow)]
