"""Operator kernels of the software backend, keyed by ONNX op type.

Calling convention (every kernel)::

    fn(inputs, attrs, out=None) -> list[np.ndarray]

* ``inputs``: one entry per ONNX input; ``None`` for an omitted optional input
  (trailing omitted inputs may be missing from the list).  The executor has checked the
  count and the required ones against the op's entry in :mod:`.arity` (every kernel has one).  Float tensors arrive as
  float32 (the executor stores every float tensor in float32, rounded to float16
  precision in float16 mode); integer and bool tensors keep their dtype.  Inputs
  may be read-only views of the model file: never modify them.
* ``attrs``: the node's ONNX attributes as Python values (ints, floats, str,
  lists, numpy arrays for tensor attributes) plus ``"_opset"``, the model's
  default-domain opset version, and ``"_num_outputs"``, how many outputs the node
  declares, after ``prepare`` (below) has run once.
* ``out``: for kernels registered with ``out=True``, the executor may pass
  preallocated arrays of the exact output shapes and dtypes; the kernel writes
  into them and returns them.  With ``out=None`` the kernel allocates.
* Returns one array per ONNX output the node declares (optional trailing outputs
  may be omitted when the node does not declare them).

Registration options:

* ``prepare(attrs, consts) -> attrs``: runs once when the model is compiled, with
  the constant inputs (``None`` where an input is not constant); it may validate
  attributes (raising ``ModelInvalidError``) and precompute (packed weights...).
* ``data_dependent=True``: the output shape depends on input *values* (NonZero,
  TopK with a runtime k...), so the executor never preallocates for it or for
  anything downstream.
* ``caches_inputs=(i, ...)``: once the kernel has run, it keeps its own derived
  form of these inputs when they are model constants (packed weights) and never
  reads the originals again, so the runtime may drop their file pages from memory.
* ``grid(attrs) -> (scale, zero_point, qmin, qmax)``: the kernel writes its (single)
  output on that integer grid already, so where the output tensor is quantized with
  the same scale and zero point and a range that contains ``[qmin, qmax]``, the
  executor skips its own snapping pass (an optimisation only: the pass would not
  change a value).
* ``view=True``: called without ``out``, the kernel's single output is a view of input 0
  (a reshape: same values, same dtype) whenever that input is C-contiguous, so a planned
  run gives the step no buffer of its own and reads the input's buffer through the view.
* ``joins=True``: the kernel concatenates its inputs along ``attrs["axis"]`` (ONNX
  Concat) and, given ``out``, copies only the inputs that are not already their slices
  of it; a planned run lets producers write their outputs straight into those slices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

__all__ = ["KernelSpec", "KERNELS", "SHAPE_INPUTS", "kernel", "supported_ops"]


@dataclass(frozen=True)
class KernelSpec:
    """A registered kernel and how the executor may call it."""

    op_type: str
    fn: Callable
    out: bool = False
    prepare: Optional[Callable] = None
    data_dependent: bool = False
    caches_inputs: tuple = ()
    grid: Optional[Callable] = None
    view: bool = False
    joins: bool = False


KERNELS: Dict[str, KernelSpec] = {}


def kernel(*op_types: str, out: bool = False, prepare: Optional[Callable] = None, data_dependent: bool = False,
           caches_inputs: tuple = (), grid: Optional[Callable] = None, view: bool = False,
           joins: bool = False):
    """Register the decorated function as the kernel of ``op_types`` (see the module doc)."""

    def register(fn):
        for op in op_types:
            KERNELS[op] = KernelSpec(op, fn, out, prepare, data_dependent, tuple(caches_inputs), grid, view, joins)
        return fn

    return register


#: Inputs whose *values* set an op's output shape.  When one of them is not a
#: constant of the model, the executor treats the node as data-dependent.
SHAPE_INPUTS: Dict[str, tuple] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 3), "ConstantOfShape": (0,),
    "Range": (0, 1, 2), "TopK": (1,), "Resize": (1, 2, 3), "Upsample": (1,), "Split": (1,), "Squeeze": (1,),
    "Unsqueeze": (1,), "ReduceMean": (1,), "ReduceSum": (1,), "ReduceMax": (1,), "ReduceMin": (1,),
    "ReduceProd": (1,), "ReduceL2": (1,),
}


def supported_ops() -> List[str]:
    """Every op type the software backend can run, sorted."""
    return sorted(KERNELS)


from . import activation, affine, conv, elementwise, linear, norm, pool, reduce, resize, rnn, shape, tensor, vendor_int8, vendor_lut  # noqa: E402,F401,E501
