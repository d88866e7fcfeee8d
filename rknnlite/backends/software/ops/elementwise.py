"""Element-wise kernels: arithmetic, math functions, comparisons, logic and Cast.

All follow ONNX semantics with numpy (multidirectional) broadcasting and the
package calling convention (see ``ops/__init__.py``).  Every kernel here is
registered with ``out=True``: it computes straight into the output buffer with
ufunc ``out=`` (allocating that buffer itself when ``out`` is None, so both paths
run the same code and give identical results) and allocates no tensor-sized
temporaries except where noted.

The helpers ``dest``, ``quiet`` and ``check_attr`` are shared with the activation
and reduction modules.

Binding (``fn.bind``): the kernels that are one ufunc call once their output buffer is
known (unary math, binary arithmetic, comparisons and logic, float Div, 2-input
Max/Min/Sum) carry a ``bind(attrs, ins, out)`` attribute.  Given the node's attributes,
its inputs' ``(shape, dtype)`` and its planned output arrays, it returns ``(call, extra)``
such that ``call(*inputs, *extra)`` computes the node into ``out[0]`` exactly as the
kernel would, or ``None`` when this node cannot be bound (the executor then calls the
kernel).  The bound call does not silence floating-point warnings: the executor runs it
with them silenced (:func:`silence_fp`).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from ....errors import ModelInvalidError
from . import kernel

try:  # compiled erf/GELU loops; a slow but exact per-element fallback is used without them
    from ...._native import elementwise_kernels as _native
except ImportError:  # pragma: no cover - exercised by monkeypatching in the tests
    _native = None

__all__ = ["dest", "quiet", "silence_fp", "restore_fp", "check_attr", "check_float", "erf_into", "gelu_into",
           "ONNX_CAST_TARGETS"]

try:  # numpy >= 2 keeps the floating-point error state in a ContextVar (what np.errstate sets)
    from numpy._core._ufunc_config import _extobj_contextvar as _ERR_STATE, _make_extobj

    _IGNORE_ALL = _make_extobj(all="ignore")
except (ImportError, AttributeError, TypeError):  # numpy 1.x: np.errstate
    _ERR_STATE = _IGNORE_ALL = None


# --------------------------------------------------------------------------- helpers


def dest(out: Optional[Sequence[np.ndarray]], shape, dtype, index: int = 0) -> np.ndarray:
    """The output buffer ``out[index]`` if the executor gave one, else a new empty array."""
    if out is not None:
        return out[index]
    return np.empty(shape, dtype)


def flat_dest(out: Optional[Sequence[np.ndarray]], shape) -> np.ndarray:
    """``out[0]`` when it is a C-contiguous float32 array of ``shape`` (what a compiled loop
    writes through a flat view), else a new one."""
    if out is not None and out[0].dtype == np.float32 and out[0].flags.c_contiguous and out[0].shape == shape:
        return out[0]
    return np.empty(shape, np.float32)


if _ERR_STATE is not None:
    #: ``silence_fp()`` ignores every numpy floating-point error on this thread (context) and
    #: returns a token; ``restore_fp(token)`` puts back the state it replaced.  The pair
    #: behind :func:`quiet`, for callers that cannot use a ``with`` block cheaply.
    silence_fp = partial(_ERR_STATE.set, _IGNORE_ALL)
    silence_fp.__doc__ = "Ignore numpy floating-point errors in this context; returns the token for restore_fp."
    restore_fp = _ERR_STATE.reset
else:  # numpy 1.x: the per-thread error state of np.seterr
    def silence_fp():
        """Ignore numpy floating-point errors on this thread; returns the previous settings."""
        return np.seterr(all="ignore")

    def restore_fp(token) -> None:
        """Put back the settings :func:`silence_fp` replaced."""
        np.seterr(**token)


class _Quiet:
    """``np.errstate(all="ignore")`` with the error state built once (see :func:`silence_fp`)."""

    __slots__ = ("_token",)

    def __enter__(self):
        self._token = silence_fp()
        return self

    def __exit__(self, *exc):
        restore_fp(self._token)
        return False


def quiet():
    """A context that silences numpy floating-point warnings (inf/nan results are ONNX-valid).

    Same effect as ``np.errstate(all="ignore")`` (per thread, nests), several times cheaper
    to enter on numpy >= 2: the error state object is made once, not per call."""
    return _Quiet()


#: what a ``bind`` returns: ``(call, extra)`` or None (see the module doc)
Binding = Optional[Tuple[Callable, tuple]]


def _bind_ufunc(ufunc, out_keyword: bool = False) -> Callable[..., Binding]:
    """A ``bind`` (see the module doc) for a kernel that is ``ufunc(*inputs, out=out[0])``
    when it has ``ufunc.nin`` inputs.  ``out_keyword``: pass ``out`` by keyword (numpy
    deprecates a positional ``out`` for maximum and minimum); positional otherwise, the
    cheaper call."""

    def bind(attrs, ins, out):
        if len(ins) != ufunc.nin or not out or out[0] is None:
            return None
        if out_keyword:
            return partial(ufunc, out=out[0]), ()
        return ufunc, (out[0],)

    return bind


def check_attr(op: str, attrs: dict, name: str, allowed, default):
    """``attrs[name]`` (or ``default``) after checking it is one of ``allowed``; else ModelInvalidError."""
    value = attrs.get(name, default)
    if value not in allowed:
        raise ModelInvalidError(
            f"attribute {name!r} must be one of {sorted(allowed)!r}, got {value!r}", op=op
        )
    return value


def check_float(op: str, attrs: dict, name: str, default: float) -> float:
    """``attrs[name]`` (or ``default``) as a float; ModelInvalidError when not a number."""
    value = attrs.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ModelInvalidError(f"attribute {name!r} must be a float, got {value!r}", op=op)
    return float(value)


def _via_exp(finish, x: np.ndarray, o: np.ndarray, half: bool) -> np.ndarray:
    """Fill a float32 work buffer with ``exp(-x*x)`` (``exp(-x*x/2)`` if ``half``) using
    numpy's SIMD exp, then let the compiled ``finish(flat_x, flat_work)`` loop turn it
    into the result in place; the work buffer is ``o`` itself when it is contiguous float32.
    """
    xf = x if x.dtype == np.float32 and x.flags.c_contiguous else np.array(x, dtype=np.float32, order="C")
    direct = o.dtype == np.float32 and o.flags.c_contiguous and not np.may_share_memory(xf, o)
    work = o if direct else np.empty(o.shape, np.float32)
    with quiet():
        np.multiply(xf, xf, out=work)
        np.multiply(work, -0.5 if half else -1.0, out=work)
        np.exp(work, out=work)
    finish(xf.reshape(-1), work.reshape(-1))
    if not direct:
        np.copyto(o, work, casting="unsafe")
    return o


_py_erf = np.frompyfunc(math.erf, 1, 1)
_py_erfc = np.frompyfunc(math.erfc, 1, 1)


def erf_into(x: np.ndarray, o: np.ndarray) -> np.ndarray:
    """``o[...] = erf(x)`` element-wise (same shapes; computed in float32); returns ``o``.

    Uses the compiled vectorised loop (within 1 float32 ulp, see
    ``cython/kernels/elementwise_kernels.pyx``) when available, else ``math.erf`` per element.
    """
    if _native is not None:
        return _via_exp(_native.erf_from_exp, x, o, half=False)
    np.copyto(o, _py_erf(np.asarray(x, dtype=np.float64)).astype(np.float64), casting="unsafe")
    return o


def gelu_into(x: np.ndarray, o: np.ndarray) -> np.ndarray:
    """``o[...] = 0.5 * x * (1 + erf(x / sqrt(2)))`` (exact GELU, same shapes); returns ``o``.

    Compiled loop when available, else ``0.5 * x * erfc(-x / sqrt(2))`` with ``math.erfc``
    per element (the erfc form stays accurate for negative x).
    """
    if _native is not None:
        return _via_exp(_native.gelu_from_exp, x, o, half=True)
    xd = np.asarray(x, dtype=np.float64)
    np.copyto(o, 0.5 * xd * _py_erfc(-xd / math.sqrt(2.0)).astype(np.float64), casting="unsafe")
    return o


# --------------------------------------------------------------------------- unary math


def _register_unary(op: str, ufunc, doc: str, int_identity: bool = False):
    def fn(inputs, attrs, out=None):
        x = inputs[0]
        o = dest(out, x.shape, x.dtype)
        if int_identity and x.dtype.kind in "iub":
            np.copyto(o, x)
            return [o]
        with quiet():
            ufunc(x, out=o)
        return [o]

    def bind(attrs, ins, out):
        if len(ins) != 1 or not out or out[0] is None or (int_identity and ins[0][1].kind in "iub"):
            return None
        return ufunc, (out[0],)

    fn.__name__ = fn.__qualname__ = op.lower()
    fn.__doc__ = doc + " Writes into ``out`` when given; same shape and dtype as the input."
    fn.bind = bind
    kernel(op, out=True)(fn)
    return fn


exp = _register_unary("Exp", np.exp, "Exp: ``e**x`` element-wise.")
log = _register_unary("Log", np.log, "Log: natural logarithm element-wise (``log(0) = -inf``, negative -> nan).")
sqrt = _register_unary("Sqrt", np.sqrt, "Sqrt: square root element-wise (negative -> nan).")
abs_ = _register_unary("Abs", np.absolute, "Abs: absolute value element-wise (any numeric type).")
neg = _register_unary("Neg", np.negative, "Neg: ``-x`` element-wise (integers wrap).")
reciprocal = _register_unary("Reciprocal", np.reciprocal, "Reciprocal: ``1/x`` element-wise.")
floor = _register_unary("Floor", np.floor, "Floor: largest integer <= x (integers pass through).", True)
ceil = _register_unary("Ceil", np.ceil, "Ceil: smallest integer >= x (integers pass through).", True)
round_ = _register_unary(
    "Round", np.rint, "Round: nearest integer, halves to even (``rint``); integers pass through.", True
)
not_ = _register_unary("Not", np.logical_not, "Not: logical negation of a bool tensor.")


@kernel("Erf", out=True)
def erf(inputs, attrs, out=None):
    """Erf: the Gauss error function element-wise.

    Computed in float32 with a vectorised compiled loop (see ``erf_into``); integer
    inputs (ONNX allows them) are cast back to their type.
    """
    x = inputs[0]
    o = dest(out, x.shape, x.dtype)
    if o.size:
        erf_into(x, o)
    return [o]


# --------------------------------------------------------------------------- binary arithmetic


def _bshape(*arrays: np.ndarray):
    return np.broadcast_shapes(*(a.shape for a in arrays))


def _register_binary(op: str, ufunc, doc: str, bool_out: bool = False):
    def fn(inputs, attrs, out=None):
        a, b = inputs[0], inputs[1]
        o = out[0] if out is not None else np.empty(_bshape(a, b), np.bool_ if bool_out else a.dtype)
        with quiet():
            ufunc(a, b, out=o)
        return [o]

    fn.__name__ = fn.__qualname__ = op.lower()
    fn.__doc__ = doc + " Numpy broadcasting; writes into ``out`` when given."
    fn.bind = _bind_ufunc(ufunc)
    kernel(op, out=True)(fn)
    return fn


add = _register_binary("Add", np.add, "Add: ``a + b`` (integers wrap).")
sub = _register_binary("Sub", np.subtract, "Sub: ``a - b`` (integers wrap).")
mul = _register_binary("Mul", np.multiply, "Mul: ``a * b`` (integers wrap).")
equal = _register_binary("Equal", np.equal, "Equal: ``a == b`` as bool.", True)
greater = _register_binary("Greater", np.greater, "Greater: ``a > b`` as bool.", True)
less = _register_binary("Less", np.less, "Less: ``a < b`` as bool.", True)
greater_equal = _register_binary("GreaterOrEqual", np.greater_equal, "GreaterOrEqual: ``a >= b`` as bool.", True)
less_equal = _register_binary("LessOrEqual", np.less_equal, "LessOrEqual: ``a <= b`` as bool.", True)
and_ = _register_binary("And", np.logical_and, "And: logical and of bool tensors.", True)
or_ = _register_binary("Or", np.logical_or, "Or: logical or of bool tensors.", True)


@kernel("Div", out=True)
def div(inputs, attrs, out=None):
    """Div: ``a / b`` with numpy broadcasting.

    Floats: IEEE division (``x/0`` is +-inf or nan).  Integers: ONNX truncating
    division (rounds toward zero, unlike numpy's floor division), computed exactly
    as ``(a - fmod(a, b)) // b`` in the output buffer; integer division by zero
    yields 0 (ONNX leaves it undefined).
    """
    a, b = inputs[0], inputs[1]
    o = out[0] if out is not None else np.empty(_bshape(a, b), a.dtype)
    with quiet():
        if a.dtype.kind == "f":
            np.divide(a, b, out=o)
        elif a.dtype.kind == "u":
            np.floor_divide(a, b, out=o)
        else:
            # a - fmod(a, b) is an exact multiple of b, so floor division of it truncates.
            np.fmod(a, b, out=o)
            np.subtract(a, o, out=o)
            np.floor_divide(o, b, out=o)
    return [o]


def _bind_div(attrs, ins, out):
    if len(ins) != 2 or ins[0][1].kind != "f" or not out or out[0] is None:
        return None
    return np.divide, (out[0],)


div.bind = _bind_div


@kernel("Pow", out=True)
def pow_(inputs, attrs, out=None):
    """Pow: ``x ** y`` with numpy broadcasting; the output has the type of ``x``.

    Mixed types (float ``x`` with integer ``y`` or the reverse) compute in the
    promoted type (float64) element by element and cast into the output, as ONNX's
    reference does (``int ** float`` truncates toward zero).
    """
    x, y = inputs[0], inputs[1]
    o = out[0] if out is not None else np.empty(_bshape(x, y), x.dtype)
    with quiet():
        np.power(x, y, out=o, casting="unsafe")
    return [o]


# --------------------------------------------------------------------------- variadic


def _operands(op: str, inputs) -> List[np.ndarray]:
    xs = [x for x in inputs if x is not None]
    if not xs:
        raise ModelInvalidError("needs at least one input", op=op)
    return xs


def _variadic(op: str, ufunc, inputs, out) -> np.ndarray:
    xs = _operands(op, inputs)
    o = out[0] if out is not None else np.empty(_bshape(*xs), xs[0].dtype)
    with quiet():
        if len(xs) == 1:
            np.copyto(o, xs[0])
        else:
            ufunc(xs[0], xs[1], out=o)
            for x in xs[2:]:
                ufunc(o, x, out=o)
    return o


@kernel("Max", out=True)
def max_(inputs, attrs, out=None):
    """Max: element-wise maximum of 1..N broadcast inputs (nan propagates)."""
    return [_variadic("Max", np.maximum, inputs, out)]


max_.bind = _bind_ufunc(np.maximum, out_keyword=True)


@kernel("Min", out=True)
def min_(inputs, attrs, out=None):
    """Min: element-wise minimum of 1..N broadcast inputs (nan propagates)."""
    return [_variadic("Min", np.minimum, inputs, out)]


min_.bind = _bind_ufunc(np.minimum, out_keyword=True)


@kernel("Sum", out=True)
def sum_(inputs, attrs, out=None):
    """Sum: element-wise sum of 1..N broadcast inputs, accumulated left to right."""
    return [_variadic("Sum", np.add, inputs, out)]


sum_.bind = _bind_ufunc(np.add)


@kernel("Mean", out=True)
def mean(inputs, attrs, out=None):
    """Mean: element-wise sum of 1..N broadcast inputs divided by N."""
    o = _variadic("Mean", np.add, inputs, out)
    n = sum(1 for x in inputs if x is not None)
    if n > 1:
        np.divide(o, n, out=o, casting="unsafe")
    return [o]


# --------------------------------------------------------------------------- selection


@kernel("Where", out=True)
def where(inputs, attrs, out=None):
    """Where: ``x`` where ``condition`` else ``y`` (all three broadcast together).

    Written as ``out = y`` then ``out[condition] = x`` via ``np.copyto(where=)``:
    no temporaries.
    """
    c, x, y = inputs[0], inputs[1], inputs[2]
    o = out[0] if out is not None else np.empty(_bshape(c, x, y), x.dtype)
    np.copyto(o, y)
    np.copyto(o, x, where=c.astype(np.bool_, copy=False))
    return [o]


# --------------------------------------------------------------------------- Cast

#: ONNX ``TensorProto.DataType`` codes Cast can target: code -> (name, storage dtype).
#: Float targets are all stored as float32 (the runtime's float storage); FLOAT16,
#: BFLOAT16 and DOUBLE values are first rounded to their own precision.
ONNX_CAST_TARGETS = {
    1: ("FLOAT", np.float32),
    2: ("UINT8", np.uint8),
    3: ("INT8", np.int8),
    4: ("UINT16", np.uint16),
    5: ("INT16", np.int16),
    6: ("INT32", np.int32),
    7: ("INT64", np.int64),
    9: ("BOOL", np.bool_),
    10: ("FLOAT16", np.float32),
    11: ("DOUBLE", np.float32),
    12: ("UINT32", np.uint32),
    13: ("UINT64", np.uint64),
    16: ("BFLOAT16", np.float32),
}

_UNSUPPORTED_CAST = {
    8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ",
    19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1",
    24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2",
}

_CHUNK = 1 << 16  # elements per block when rounding through a narrower float type


def _cast_prepare(attrs, consts):
    to = attrs.get("to")
    if isinstance(to, bool) or not isinstance(to, (int, np.integer)):
        raise ModelInvalidError(f"attribute 'to' must be an ONNX data type code, got {to!r}", op="Cast")
    to = int(to)
    if to not in ONNX_CAST_TARGETS:
        what = _UNSUPPORTED_CAST.get(to, f"unknown code {to}")
        supported = ", ".join(name for name, _ in ONNX_CAST_TARGETS.values())
        raise ModelInvalidError(f"attribute 'to' = {what} is not supported (supported: {supported})", op="Cast")
    attrs = dict(attrs)
    attrs["to"] = to
    return attrs


def _round_through(x: np.ndarray, o: np.ndarray, narrow) -> None:
    """``o = float32(narrow(x))`` in blocks, so the narrow copy never exceeds one block."""
    if not (x.flags.c_contiguous and o.flags.c_contiguous):
        np.copyto(o, x.astype(narrow), casting="unsafe")
        return
    xf, of = x.reshape(-1), o.reshape(-1)
    n = xf.shape[0]
    tmp = np.empty(min(n, _CHUNK), narrow)
    for start in range(0, n, _CHUNK):
        stop = min(start + _CHUNK, n)
        t = tmp[: stop - start]
        np.copyto(t, xf[start:stop], casting="unsafe")
        np.copyto(of[start:stop], t, casting="unsafe")


def _round_bfloat16_inplace(o: np.ndarray) -> None:
    """Round float32 ``o`` to bfloat16 precision (nearest, ties to even), in place."""
    flat = o.reshape(-1) if o.flags.c_contiguous else None
    if flat is None:
        tmp = np.ascontiguousarray(o)
        _round_bfloat16_inplace(tmp)
        np.copyto(o, tmp)
        return
    bits = flat.view(np.uint32)
    n = bits.shape[0]
    scratch = np.empty(min(n, _CHUNK), np.uint32)
    for start in range(0, n, _CHUNK):
        stop = min(start + _CHUNK, n)
        b = bits[start:stop]
        s = scratch[: stop - start]
        keep = ~np.isnan(flat[start:stop])  # nan stays as it is (any payload is still nan)
        np.right_shift(b, 16, out=s)
        np.bitwise_and(s, 1, out=s)
        np.add(s, 0x7FFF, out=s)
        np.add(b, s, out=s)  # carries into the exponent when rounding up; inf stays inf
        np.bitwise_and(s, 0xFFFF0000, out=s)
        np.copyto(b, s, where=keep)


@kernel("Cast", out=True, prepare=_cast_prepare)
def cast(inputs, attrs, out=None):
    """Cast: convert to the type coded by attribute ``to`` (see ``ONNX_CAST_TARGETS``).

    * integer and bool targets: numpy's ``astype`` conversion (float -> int truncates
      toward zero, out-of-range or nan is undefined per ONNX; bool is ``x != 0``);
    * FLOAT16 / BFLOAT16 / DOUBLE targets: the value rounded to that type's precision,
      delivered as float32 (the runtime's float storage), so a Cast to float16 rounds
      even when the executor runs in float32 mode;
    * FLOAT: plain conversion.

    Always copies.  ``saturate`` only concerns float8 targets, which are unsupported.
    """
    x = inputs[0]
    to = attrs["to"]
    o = dest(out, x.shape, ONNX_CAST_TARGETS[to][1])
    with quiet():
        if to == 10 and x.dtype != np.float16:
            _round_through(x, o, np.float16)
        elif to == 11 and x.dtype.kind in "iu" and x.dtype.itemsize == 8:
            _round_through(x, o, np.float64)  # a 64-bit integer's double, as float32 would store it
        else:
            np.copyto(o, x, casting="unsafe")
            if to == 16:
                _round_bfloat16_inplace(o)
    return [o]
