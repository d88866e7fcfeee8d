"""The int32 accumulator of an int8 vendor conv, computed exactly.

The NPU multiplies int8 codes and sums them in an int32 accumulator, then converts the sum to
the output's int8 grid (``docs/vendor-format-notes.md`` §5).  Summing dequantized float32
products instead rounds every partial sum, and in an order that the conv kernel, BLAS and the
CPU's SIMD width choose: an output near a rounding boundary then lands on one int8 step or the
next depending on the machine (measured: the corpus ``bench_i8`` file was 62.5 % exact against
the simulator on AVX-512 and AVX2, 75 % on the generic path).

:func:`emit_accumulator` lowers the sum as the NPU forms it:

* ``VendorCodes``: the input's integer codes ``q_x - zp_x`` (exact: the executor stores an
  int8 tensor as ``(q - zp) * scale``), once per tensor; where the tensor's writer is another int8
  conv's conversion and the codes its only reader, that writer outputs the codes instead
  (:func:`fuse_codes`);
* ``Conv`` on integer-valued float32 weights ``q_w - zp_w`` and bias
  ``bias_i32 + zp_x * sum(q_w - zp_w)``, without Winograd (whose transforms are not
  integer): every product and partial sum is an integer, so float32 holds it exactly while
  ``sum |q_w - zp_w| * max |q_x - zp_x| + |bias|`` stays below 2^24 (:attr:`Accumulator.exact`),
  whatever the order of summation.

Then one conversion per channel: ``VendorRequant`` puts the accumulator on the output's int8
grid, ``rint(acc * step[c] / s_out)``, with a fused Relu or Clip as the narrowed code range
(:func:`emit_requant`; :mod:`rknnlite.backends.software.ops.vendor_int8`); a residual Add
[and Relu] fuses with the conversion (:func:`emit_add_requant`); a fused part that needs the
real value (LeakyRelu, HardSigmoid...) gets ``acc * step[c]``; a lookup-table
activation takes the accumulator itself (:mod:`.lut`).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, replace
from typing import Collection, List, Optional

import numpy as np

__all__ = ["Accumulator", "FLOAT32_EXACT", "emit_accumulator", "emit_add_requant", "emit_codes", "emit_requant",
           "fuse_codes", "grid_code"]

#: ops that can write an int8 tensor's integer codes ``q - zp`` instead of its real values: the
#: attribute that scales their output (set to 1 for the codes)
_CODE_WRITERS = {"VendorRequant": "scale", "VendorLutActivation": "out_scale"}
#: integers below this magnitude are exact in float32 (24-bit significand)
FLOAT32_EXACT = 1 << 24
_log = logging.getLogger("rknnlite.vendor")


@dataclass(frozen=True)
class Accumulator:
    """What an int8 conv's accumulator needs: ``weight`` ``q_w - zp_w`` (int64, model layout
    ``[O, I/group, kh, kw]``), ``bias`` ``bias_i32 + zp_in * sum(q_w - zp_w)`` per output
    channel (int64), the input's ``s_in`` / ``zp_in``, and ``step``: the real value of one
    accumulator unit per output channel (``s_in * s_w[c]``; float64), or ``None`` when the
    accumulator feeds a lookup table."""

    weight: np.ndarray
    bias: np.ndarray
    s_in: float
    zp_in: int
    step: Optional[np.ndarray] = None

    @classmethod
    def of(cls, q: np.ndarray, w_zp: np.ndarray, bias_i32: np.ndarray, zp_in: int, s_in: float,
           s_w: Optional[np.ndarray] = None) -> "Accumulator":
        """From an int8 conv's weight codes ``q`` (``[O, ...]``) and zero points ``w_zp[c]``, its
        int32 bias (which leaves out ``zp_in * sum(q - zp_w)``), the input's quantization and the
        weight scales ``s_w[c]`` (``None``: the accumulator feeds a lookup table)."""
        centred = q.astype(np.int64) - np.asarray(w_zp, np.int64).reshape(-1, 1, 1, 1)
        step = None if s_w is None else s_in * s_w
        return cls(centred, bias_i32 + zp_in * centred.sum(axis=(1, 2, 3)), s_in, zp_in, step)

    @property
    def bound(self) -> int:
        """The largest accumulator magnitude any int8 input can produce."""
        x_span = max(127 - self.zp_in, self.zp_in + 128)
        return int(np.max(np.abs(self.weight).sum(axis=(1, 2, 3)) * x_span + np.abs(self.bias)))

    def real(self):
        """The float32 ``(weight, bias)`` of the conv in real units: ``(q_w - zp_w) * s_w[c]`` and
        the bias times one accumulator step, ``s_in * s_w[c]`` (needs :attr:`step`)."""
        weight = (self.weight * (self.step / self.s_in).reshape(-1, 1, 1, 1)).astype(np.float32)
        return weight, (self.bias * self.step).astype(np.float32)

    @property
    def exact(self) -> bool:
        """Whether float32 holds every partial sum exactly, for any input and summation order."""
        return self.bound < FLOAT32_EXACT


def emit_codes(lowering, node, x: str, scale: float) -> str:
    """The name of the integer codes ``q - zp`` of int8 tensor ``x`` (scale ``scale``): a
    ``VendorCodes`` node emitted on ``lowering`` at its first use, shared by later ones."""
    codes = lowering.codes.get(x)
    if codes is None:
        codes = lowering.codes[x] = f"{x}__codes"
        lowering.emit(node, "VendorCodes", [x], {"scale": float(scale)}, output=codes)
    return codes


def emit_accumulator(lowering, node, x, out, w, b, acc: Accumulator, attrs: dict, transposed: bool = False) -> str:
    """Emit the integer ``Conv`` (``ConvTranspose`` when ``transposed``: ``acc.weight`` is
    still ``[O, I, kh, kw]``, the conv it runs as) of ``acc`` on ``lowering`` (lower.py's
    ``_Lowering``; ``x``/``out``/``w``/``b`` the vendor tensors, ``attrs`` the Conv
    attributes) on the input's codes, and return the name of the accumulator tensor."""
    if not acc.exact:
        _log.debug("%s: %s: its accumulator may reach %d, past 2^24, where float32 rounds it (relative error 6e-8)",
                   lowering.label, node.label, acc.bound)
    codes = emit_codes(lowering, node, lowering.names[x.index], acc.s_in)
    # a depthwise deconv's [C, 1, kh, kw] is already both views
    weight = acc.weight.transpose(1, 0, 2, 3) if transposed and attrs.get("group", 1) == 1 else acc.weight
    total = f"{lowering.names[out.index]}__acc"
    lowering.emit(node, "ConvTranspose" if transposed else "Conv",
                  [codes, lowering.constant(lowering.names[w.index], np.ascontiguousarray(weight, np.float32)),
                   lowering.constant(lowering.names[b.index], acc.bias.astype(np.float32))],
                  dict(attrs) if transposed else dict(attrs, _winograd=False), output=total)
    return total


def emit_requant(lowering, node, total: str, acc: Accumulator, out, s_out: float, zp_out: int,
                 qmin: int = -128, qmax: int = 127) -> None:
    """Emit ``VendorRequant``: the accumulator ``total`` on the int8 grid of vendor tensor
    ``out`` (scale ``s_out``, zero point ``zp_out``), clamped to ``[qmin, qmax]``."""
    lowering.emit(node, "VendorRequant", [total], {"multiplier": (acc.step / s_out).tolist(), "zero_point": zp_out,
                                                   "scale": s_out, "qmin": qmin, "qmax": qmax},
                  output=lowering.names[out.index])


def grid_code(value: float, s_out: float, zp_out: int) -> int:
    """The int8 code a real ``value`` takes on the grid ``(s_out, zp_out)``, computed as the
    executor quantizes (float32 division, ties to even), clamped to int8."""
    q = float(np.rint(np.float32(value) / np.float32(s_out))) + zp_out
    return int(min(127.0, max(-128.0, q)))


def emit_add_requant(lowering, node, total: str, acc: Accumulator, residual: str, out, s_out: float, zp_out: int,
                     relu: bool) -> None:
    """Emit ``VendorAddRequant``: ``acc * step[c] + residual`` (a ConvAdd; then Relu: a
    ConvAddRelu) on the int8 grid of vendor tensor ``out``."""
    lowering.emit(node, "VendorAddRequant", [total, residual],
                  {"step": acc.step.astype(np.float32).tolist(), "relu": relu, "zero_point": zp_out, "scale": s_out,
                   "qmin": -128, "qmax": 127}, output=lowering.names[out.index])


def fuse_codes(nodes: List, outputs: Collection[str]) -> List:
    """``nodes`` with each ``VendorCodes`` whose input only it reads, and which a requantization
    or lookup table writes (not a graph output), folded into that writer: the writer outputs
    the codes ``q - zp`` directly (its output scale set to 1), saving a pass over the tensor.
    The values are the same: ``rint((q - zp) * s / s)`` is ``q - zp``."""
    readers = Counter(name for node in nodes for name in node.inputs)
    writers = {node.outputs[0]: node for node in nodes if node.op in _CODE_WRITERS}
    fused = {}
    for node in nodes:
        if node.op != "VendorCodes":
            continue
        source = node.inputs[0]
        writer = writers.get(source)
        if writer is None or readers[source] != 1 or source in outputs:
            continue
        key = _CODE_WRITERS[writer.op]
        if np.float32(writer.attrs[key]) != np.float32(node.attrs["scale"]):
            continue  # another grid: the codes are not the writer's
        fused[id(writer)] = replace(writer, outputs=[node.outputs[0]], attrs=dict(writer.attrs, **{key: 1.0}))
        fused[id(node)] = None
    kept = (fused.get(id(node), node) for node in nodes)
    return [node for node in kept if node is not None]
