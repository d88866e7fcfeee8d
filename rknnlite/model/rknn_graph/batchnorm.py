"""The vendor's ``BatchNormalization`` and ``BatchNormalizationRelu``: a per-channel
``x * scale + bias`` (then Relu) on an activation no conv absorbed, as RKNN-Toolkit2 compiles
an ONNX ``BatchNormalization`` or a ``Mul(x, c)`` then ``Add(m, d)`` after an activation
(PP-OCRv4's det and rec files hold them).

The compiler folds the mean and variance into the scale and bias: its files hold mean 0,
variance 1 and epsilon 0 beside them, the only form decoded here.  The lowering emits one
``ChannelAffine`` (float32 arithmetic, one rounding at its output, as the simulator's):

* float16 files: the scale as stored (float16) and the bias (float32), both kept float32 at run
  time;
* int8 files: the scale as int16 codes of one step, the bias as int32 in units of input step x
  scale step with the input's zero point folded in (``d / (s_x s_c) - zp_x c_q``, checked
  against the ONNX values), so ``x * scale + bias`` is ``(x_q * c_q + b_q) * s_x * s_c``.
"""

from __future__ import annotations

import numpy as np

from .graph import VendorNode, VendorTensor, attr_value

__all__ = ["lower_batch_norm"]

_DTYPES = {"float32": "<f4", "float16": "<f2", "int32": "<i4", "int16": "<i2"}


def lower_batch_norm(lowering, node: VendorNode) -> None:
    """``BatchNormalization`` / ``BatchNormalizationRelu`` with inputs ``x, scale, bias, mean,
    variance`` (each ``(C,)``) as one ``ChannelAffine``; anything else is refused by name."""
    if len(node.inputs) != 5:
        raise lowering.error(f"{node.label} has {len(node.inputs)} inputs; x, scale, bias, mean and variance "
                             "were expected")
    data = lowering.activation_inputs(node, 1, 1)
    x = lowering.tensor(node.inputs[0], node)
    out = lowering.single_output(node)
    scale, bias, mean, var = (lowering.tensor(i, node) for i in node.inputs[1:])
    channels = int(x.shape[1]) if len(x.shape) == 4 else -1
    if channels < 1 or list(out.shape) != list(x.shape):
        raise lowering.error(f"{node.label}: input {list(x.shape)} -> output {list(out.shape)}; a 4-D NCHW tensor "
                             "of unchanged shape was expected")
    values = [_values(lowering, node, t, channels) for t in (scale, bias, mean, var)]
    eps = node.params.get("epsilon", 0.0)
    if attr_value(node, "epsilon", eps) != eps:
        raise lowering.error(f"{node.label}: BSON epsilon {attr_value(node, 'epsilon')} is not the parameter table's "
                             f"{eps}")
    if np.any(values[2] != 0) or np.any(values[3] != 1) or eps != 0:
        raise lowering.error(f"{node.label}: mean {values[2][:4].tolist()}..., variance {values[3][:4].tolist()}..., "
                             f"epsilon {eps}; only the compiler's folded form (mean 0, variance 1, epsilon 0) was "
                             "checked against the simulator")
    if x.dtype == "int8":
        s, b = _int8_affine(lowering, node, x, scale, bias, values[0], values[1])
    elif x.dtype == "float16" and scale.dtype in ("float16", "float32") and bias.dtype in ("float16", "float32"):
        s, b = values[0].astype(np.float32), values[1].astype(np.float32)
        if scale.dtype == "float16":
            lowering.note(f"{node.label}: its scale {scale.name!r} is stored in float16; the vendor simulator "
                          "multiplies by the source model's float32 scale, which the file does not hold, so outputs "
                          "may be one float16 step from its (affine_ops_fp16: about half of them at the "
                          "BatchNormalization)")
    else:
        raise lowering.error(f"{node.label}: a {x.dtype} input with a {scale.dtype} scale and a {bias.dtype} bias; "
                             "float16 with float parameters or int8 with int16 / int32 ones were decoded")
    base = lowering.names[out.index]
    attrs = {"_activation": "Relu"} if node.op == "BatchNormalizationRelu" else {}
    lowering.emit(node, "ChannelAffine", data + [lowering.constant(f"{base}__scale", s, keep_float=True),
                                                 lowering.constant(f"{base}__shift", b, keep_float=True)], attrs)


def _values(lowering, node: VendorNode, t: VendorTensor, channels: int) -> np.ndarray:
    """The raw stored values of one ``(C,)`` parameter (floats as float64, integers as int64)."""
    if t.dtype not in _DTYPES or t.layout not in ("plain", "NCHW") or list(t.shape) != [channels]:
        raise lowering.error(f"{node.label}: parameter {t.name!r} is {t.dtype} {t.layout} of shape {list(t.shape)}; "
                             f"a plain ({channels},) float16/32 or int16/32 vector was expected")
    raw = lowering.vf.tensor_data(lowering.sg, t)
    item = np.dtype(_DTYPES[t.dtype])
    if len(raw) < channels * item.itemsize:
        raise lowering.error(f"{node.label}: parameter {t.name!r} needs {channels * item.itemsize} bytes, has "
                             f"{len(raw)}")
    values = np.frombuffer(raw, item, channels)
    return values.astype(np.float64 if item.kind == "f" else np.int64)


def _int8_affine(lowering, node: VendorNode, x: VendorTensor, scale: VendorTensor, bias: VendorTensor,
                 codes: np.ndarray, acc_bias: np.ndarray):
    """float32 scale and shift of an int8 file's parameters: int16 scale codes of one step
    ``s_c`` (zero point 0), int32 bias in units of ``s_x * s_c`` holding ``-zp_x * c_q``."""
    if scale.dtype != "int16" or bias.dtype != "int32" or len(scale.scale) != 1 or list(scale.zero_point) not in ([], [0]) \
            or not scale.scale[0] > 0:
        raise lowering.error(f"{node.label}: an int8 input with a {scale.dtype} scale (steps {list(scale.scale)}, "
                             f"zero points {list(scale.zero_point)}) and a {bias.dtype} bias; int16 codes of one "
                             "step and zero point 0 with an int32 bias were decoded")
    q = lowering.activation_quant(x)
    step = float(q.scale[0]) * float(scale.scale[0])
    s = codes * float(scale.scale[0])
    b = (acc_bias + q.zero_point[0] * codes) * step
    return s.astype(np.float32), b.astype(np.float32)
