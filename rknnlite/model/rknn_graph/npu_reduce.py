"""rk3576/rv1126b's ReduceMax over the channels, which their compiler runs as NPU tasks.

Every other platform runs a ReduceMax on the CPU (no task; lower.py's ``cpu_op``).  rk3576 and
rv1126b run one over several channels as DPU tasks (RKNN-Toolkit2 2.5.0; corpus
``reducemax_npu_*``, random graphs 104, 131, 136, 140, 141 and 158 of rk3576): the node reads,
besides its input ``x`` and its axes constant, two scratch tensors of the compiler's,

* ``<x>_exSecondary0``: the reduced map (``x``'s shape with one channel), on the output's grid
  (int8 files) or float16;
* ``<x>_exSecondary1``: ``x``'s shape, int16 with ``x``'s scale and zero point 128 (int8 files)
  or float16.

A maximum is exact on either grid, and the simulator's results are the ONNX op's on the
dequantized input put on the output's grid (bit for bit in those files), so the lowering runs
the ONNX op and reads neither scratch tensor; this module checks that they are the ones above,
so that another compiled form is refused rather than run as this one.
"""

from __future__ import annotations

from typing import List, Sequence

from ...errors import ModelInvalidError
from .graph import VendorTensor

__all__ = ["check_reducemax_scratch", "SCRATCH_ZERO_POINT"]

#: the int16 scratch copy's zero point, whatever the input's (observed with -128, -104, -23 and 13)
SCRATCH_ZERO_POINT = 128


def check_reducemax_scratch(x: VendorTensor, out: VendorTensor, scratch: Sequence[VendorTensor],
                            axes: List[int], where: str) -> None:
    """Refuse a ReduceMax with NPU tasks (input ``x``, output ``out``, the compiler's ``scratch``
    tensors among its inputs, its ``axes``) unless it is the channel maximum of the module doc,
    scratch tensors and all."""
    def refuse(message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{where}: a ReduceMax run as NPU tasks {message}; only the channel maximum of "
                                 "rk3576/rv1126b's form (docs/vendor-format-notes.md) was checked against the "
                                 "simulator", op="load")

    if axes != [1] or len(x.shape) != 4:
        raise refuse(f"over axes {axes} of a {len(x.shape)}-D input")
    names = [t.name for t in scratch]
    if names != [f"{x.name}_exSecondary0", f"{x.name}_exSecondary1"]:
        raise refuse(f"with scratch tensors {names}")
    reduced, copy = scratch
    int8 = x.dtype == "int8"
    if list(reduced.shape) != [x.shape[0], 1, *x.shape[2:]] or reduced.dtype != out.dtype or \
            int8 and (reduced.scale, reduced.zero_point) != (out.scale, out.zero_point):
        raise refuse(f"whose reduced scratch {reduced.name!r} is {reduced.dtype} {list(reduced.shape)} (the output: "
                     f"{out.dtype}); the output's dtype and grid on {[x.shape[0], 1, *x.shape[2:]]} were expected")
    expected = "int16" if int8 else "float16"
    if list(copy.shape) != list(x.shape) or copy.dtype != expected or \
            int8 and (copy.scale, copy.zero_point) != (x.scale, (SCRATCH_ZERO_POINT,)):
        raise refuse(f"whose input scratch {copy.name!r} is {copy.dtype} {list(copy.shape)} (scale {copy.scale}, zero "
                     f"point {copy.zero_point}); {expected} {list(x.shape)}"
                     + (f" with the input's scale and zero point {SCRATCH_ZERO_POINT}" if int8 else "") + " was expected")
