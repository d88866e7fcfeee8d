"""TorchScript ``.pt`` -> ONNX -> :class:`~rknnlite.toolkit.onnx_import.ImportedModel`.

:func:`load_pytorch` loads a TorchScript model (saved by ``torch.jit.save``,
``torch.jit.trace(model, x).save(path)`` or ``torch.jit.script(model).save(path)``) on the
CPU, exports it in memory with PyTorch's own TorchScript-based ONNX exporter
(``torch.onnx.export(..., dynamo=False)``, opset :data:`OPSET`) and imports that ONNX model
with :func:`~rknnlite.toolkit.onnx_import.import_onnx`.  The ops supported are the ONNX
ops the software backend runs; an op the exporter emits that it lacks is reported by
name and node.

Model boundary:

* inputs: float32, one per shape in ``input_size_list``, named after the arguments of the
  module's ``forward`` (``"input<k>"`` where they cannot be read); 4-D inputs are NCHW.
* outputs: ``"output<k>"``, ``k`` = 0, 1, ... in the order ``forward`` returns them
  (nested tuples/lists flattened).

Needs ``torch`` (imported only here).  PyTorch's own warnings are caught (with
``warnings.catch_warnings``, so nothing is printed): deprecations of TorchScript and of this
exporter and routine exporter notices go to the ``rknnlite.toolkit.loaders.pytorch`` logger
at debug level; other warnings (tracer and exporter notices about the model, which can mean
the export differs from it) are passed to ``warn`` (the toolkit's log).
"""

from __future__ import annotations

import io
import logging
import numbers
import os
import warnings
from typing import List, Optional, Tuple

from ...errors import ModelInvalidError
from .common import require_onnx

__all__ = ["load_pytorch", "torchscript_to_onnx", "OPSET", "INSTALL_HINT"]

_OP = "load_pytorch"
_log = logging.getLogger("rknnlite.toolkit.loaders.pytorch")

#: ONNX opset the exporter is asked for (one the importer's kernels all handle).
OPSET = 17
#: What to install when torch is missing.
INSTALL_HINT = ("pip install torch (on x86_64, PyPI only has the CUDA builds; the CPU-only build comes from "
                "PyTorch's own index: pip install torch --index-url https://download.pytorch.org/whl/cpu)")
_HOW_TO_SCRIPT = ("save a TorchScript model with torch.jit.trace(model.eval(), example_input).save('model.pt') "
                  "or torch.jit.script(model).save('model.pt')")
# Warnings about PyTorch's own API (TorchScript and this exporter are deprecated upstream),
# and exporter notices every TorchScript export gives: logged at debug level only.
_QUIET = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
_NOISE = ("no signature found for",)


def _import_torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"load_pytorch needs PyTorch ({e}): {INSTALL_HINT}") from e
    require_onnx("load_pytorch")
    return torch


def _sizes(input_size_list) -> List[Tuple[int, ...]]:
    """The validated shapes (positive ints)."""
    hint = "give one shape per model input, e.g. input_size_list=[[1, 3, 224, 224]]"
    if input_size_list is None or isinstance(input_size_list, (str, bytes)):
        raise ModelInvalidError(f"input_size_list is required for a TorchScript model; {hint}", op=_OP)
    try:
        entries = list(input_size_list)
    except TypeError:
        raise ModelInvalidError(f"input_size_list must be a list of shapes, got {input_size_list!r}; {hint}",
                                op=_OP) from None
    if not entries:
        raise ModelInvalidError(f"input_size_list is empty; {hint}", op=_OP)
    sizes = []
    for k, s in enumerate(entries):
        if isinstance(s, (str, bytes)) or not hasattr(s, "__iter__"):
            raise ModelInvalidError(f"input_size_list[{k}] must be a list of dims, got {s!r}; {hint}", op=_OP)
        dims = list(s)
        if not dims or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d > 0 for d in dims):
            raise ModelInvalidError(f"input_size_list[{k}] must hold positive ints, got {s!r}; {hint}", op=_OP)
        sizes.append(tuple(int(d) for d in dims))
    return sizes


def _record(caught, warn) -> None:
    """Pass the relevant ones of PyTorch's warnings (tracer and exporter notices about the
    model) to ``warn``; log the rest (deprecations, routine notices) at debug level."""
    for w in caught:
        message = str(w.message).strip().splitlines()[0] if str(w.message).strip() else w.category.__name__
        if warn is None or issubclass(w.category, _QUIET) or any(n in message for n in _NOISE):
            _log.debug("torch %s: %s", w.category.__name__, message)
        else:
            warn(f"torch: {message}")


def _load_script(torch, model, label: str):
    if isinstance(model, torch.jit.ScriptModule):
        return model
    if isinstance(model, torch.nn.Module):
        raise ModelInvalidError(f"the model is a plain torch.nn.Module ({type(model).__name__}); load_pytorch "
                                f"needs TorchScript: {_HOW_TO_SCRIPT}", op=_OP)
    if isinstance(model, (bytes, bytearray, memoryview)):
        source = io.BytesIO(bytes(model))
    elif isinstance(model, (str, os.PathLike)):
        source = os.fspath(model)
        if not os.path.isfile(source):
            raise ModelInvalidError(f"PyTorch model file not found: {source}", op=_OP)
    else:
        raise ModelInvalidError(f"model must be a path or bytes of a TorchScript .pt file, not "
                                f"{type(model).__name__}", op=_OP)
    try:
        return torch.jit.load(source, map_location="cpu")
    except Exception as e:  # torch raises RuntimeError/ValueError/... for non-TorchScript files
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelInvalidError(f"{label} is not a TorchScript model (torch.jit.load: {reason}); a state_dict "
                                f"or a module pickled with torch.save cannot be converted: {_HOW_TO_SCRIPT}",
                                op=_OP) from None


def _input_names(module, count: int) -> List[str]:
    """The forward's argument names when they can be read, else ``input<k>``."""
    try:
        args = [a.name for a in module.forward.schema.arguments[1:]]  # [0] is self
    except Exception:  # a module without a readable schema
        args = []
    names = [a.split(".")[0] for a in args[:count]]
    if len(names) == count and len(set(names)) == count and all(n.isidentifier() for n in names):
        return names
    return [f"input{k}" for k in range(count)]


def _forward_arity(module) -> Optional[Tuple[int, int]]:
    """``(required, total)`` forward arguments (without self), or None if unknown."""
    try:
        args = module.forward.schema.arguments[1:]
    except Exception:
        return None
    required = sum(1 for a in args if not a.has_default_value())
    return required, len(args)


def torchscript_to_onnx(model, input_size_list, dynamic_input=None, warn=None):
    """Export a TorchScript model (path, bytes or a loaded ``torch.jit.ScriptModule``) to
    an ``onnx.ModelProto`` with float32 inputs of the given shapes (see the module
    docstring for the names).  With ``dynamic_input`` shape sets, the dims that differ
    across the sets are exported as dynamic axes (whether the model's traced code
    allows that depends on the model).

    Raises:
        ImportError: torch (or onnx) is missing; the message says what to install.
        ModelInvalidError: not a TorchScript model, bad ``input_size_list``, or an export
            failure (with the exporter's reason).
    """
    torch = _import_torch()
    import onnx
    from onnx import helper

    label = os.fspath(model) if isinstance(model, (str, os.PathLike)) else "the model"
    sizes = _sizes(input_size_list)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = _load_script(torch, model, label)
    _record(caught, warn)
    arity = _forward_arity(module)
    if arity is not None and not arity[0] <= len(sizes) <= arity[1]:
        want = str(arity[0]) if arity[0] == arity[1] else f"{arity[0]} to {arity[1]}"
        raise ModelInvalidError(f"input_size_list gives {len(sizes)} shapes, but the model's forward takes {want} "
                                f"inputs", op=_OP)
    names = _input_names(module, len(sizes))
    dynamic_axes = _dynamic_axes(dynamic_input, names, sizes)
    module.eval()
    examples = tuple(torch.zeros(s, dtype=torch.float32) for s in sizes)
    buffer = io.BytesIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.no_grad():
                torch.onnx.export(module, examples, buffer, opset_version=OPSET, input_names=names,
                                  dynamic_axes=dynamic_axes or None, do_constant_folding=True,
                                  **_torchscript_exporter(torch))
        except Exception as e:  # the exporter raises many kinds (RuntimeError, SymbolicValueError, ...)
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelInvalidError(f"cannot export {label} to ONNX with input_size_list "
                                    f"{[list(s) for s in sizes]}: {type(e).__name__}: {reason}", op=_OP) from None
    _record(caught, warn)
    proto = onnx.load_from_string(buffer.getvalue())
    _float_biases(torch, module, proto)
    # Stable output names: an Identity per output (removed again by the optimizer).
    g = proto.graph
    for k, out in enumerate(g.output):
        new = f"output{k}"
        if out.name != new:
            g.node.append(helper.make_node("Identity", [out.name], [new], name=new))
            out.name = new
    return proto


_UNPACK = ("conv2d_unpack", "conv1d_unpack", "conv3d_unpack", "linear_unpack")


def _packed_bias(torch, module):
    """The float bias a quantized conv / linear module keeps in its packed parameters, or
    None (not such a module, no bias, or a packing this PyTorch cannot unpack)."""
    packed = getattr(module, "_packed_params", None)
    packed = getattr(packed, "_packed_params", packed)  # quantized Linear nests it one level down
    if packed is None:
        return None
    for name in _UNPACK:
        try:
            _, bias = getattr(torch.ops.quantized, name)(packed)
        except Exception:  # noqa: BLE001 - a wrong unpacker for this packing raises whatever it raises
            continue
        return None if bias is None else bias.detach().float().numpy()
    return None


def _float_biases(torch, module, proto) -> None:
    """Give each quantized conv / linear of the exported graph the float bias of its module.

    PyTorch's exporter writes a quantized layer's bias as an int32 ``DequantizeLinear`` on the
    input and weight scales of the file, a rounding of the float bias the module holds.
    RKNN-Toolkit2 2.5.0 reads the float bias and quantizes it once, on the scales of its own
    build (which can differ: the symmetric grids): its int32 biases equal
    ``rint(bias / (s_x * s_w))`` of the float bias on every channel of a quantized MobileNet-like
    probe (``tools/vendor_corpus/torch_qat_probe.py``), not the exported ones (half of them one
    unit off).  The node is matched to its module by the exporter's node name
    (``/body/0/Conv`` -> ``body.0``); the replaced ``DequantizeLinear`` goes when nothing else
    reads it."""
    from onnx import numpy_helper

    modules = dict(module.named_modules())
    g = proto.graph
    producers = {o: n for n in g.node for o in n.output}
    inits = {i.name for i in g.initializer}
    readers: dict = {}
    for n in g.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    dead = []
    for node in g.node:
        if node.op_type not in ("Conv", "Gemm", "MatMul", "ConvTranspose") or len(node.input) < 3:
            continue
        dq = producers.get(node.input[2])
        if dq is None or dq.op_type != "DequantizeLinear":
            continue
        codes = producers.get(dq.input[0])  # the exporter writes them as a Constant node
        if dq.input[0] not in inits and (codes is None or codes.op_type != "Constant"):
            continue
        path = ".".join(node.name.strip("/").split("/")[:-1])
        bias = _packed_bias(torch, modules.get(path)) if path in modules else None
        if bias is None:
            continue
        name = f"{path}.float_bias"
        g.initializer.append(numpy_helper.from_array(bias.astype("float32"), name))
        if readers.get(node.input[2], 0) == 1:
            dead.append(dq)
            if codes is not None and readers.get(dq.input[0], 0) == 1:
                dead.append(codes)
        node.input[2] = name
    for dq in dead:
        g.node.remove(dq)


def _torchscript_exporter(torch) -> dict:
    """The ``torch.onnx.export`` argument that selects the TorchScript-based exporter
    (``dynamo=False``; PyTorch before 2.5 has no such argument and only that exporter)."""
    import inspect

    try:
        params = inspect.signature(torch.onnx.export).parameters
    except (TypeError, ValueError):
        return {"dynamo": False}
    return {"dynamo": False} if "dynamo" in params else {}


def _dynamic_axes(dynamic_input, names, sizes):
    if dynamic_input is None:
        return {}
    from ..shapes import validate_shape_sets

    try:
        sets = validate_shape_sets(dynamic_input)
    except ValueError as e:
        raise ModelInvalidError(str(e), op=_OP) from None
    axes = {}
    for k, name in enumerate(names):
        shapes = {tuple(s[k]) for s in sets if k < len(s)}
        if any(len(s) != len(sizes[k]) for s in shapes):
            raise ModelInvalidError(f"dynamic_input shapes of input {name!r} must have the rank of "
                                    f"input_size_list[{k}] {list(sizes[k])}", op=_OP)
        varying = {d: f"{name}_dim{d}" for d in range(len(sizes[k])) if len({s[d] for s in shapes}) > 1}
        if varying:
            axes[name] = varying
    return axes


def load_pytorch(model, input_size_list, dynamic_input=None, custom_ops=None, warn=None):
    """Convert a TorchScript model (``.pt`` path, bytes or a ``torch.jit.ScriptModule``)
    to an :class:`~rknnlite.toolkit.onnx_import.ImportedModel` (see
    :func:`torchscript_to_onnx`; ``dynamic_input``, ``custom_ops`` and ``warn`` also go
    to :func:`~rknnlite.toolkit.onnx_import.import_onnx`).

    Raises:
        ImportError: torch (or onnx) is missing; the message says what to install.
        ModelInvalidError: as :func:`torchscript_to_onnx`, plus ops the backend lacks
            (naming the op and node).
    """
    from ..onnx_import import import_onnx

    proto = torchscript_to_onnx(model, input_size_list, dynamic_input=dynamic_input, warn=warn)
    return import_onnx(proto, dynamic_input=dynamic_input, custom_ops=custom_ops, warn=warn)
