"""The ``META`` section of a portable model: what the runtime needs before it looks at the graph.

Keys (JSON)::

    producer, producer_version      who wrote the file ("rknnlite-toolkit", "0.1.0")
    target_platforms                ["rk3588", ...] the build was made for
    custom_string                   free text from config(custom_string=...)
    float_dtype                     "float16" (NPU default) or "float32" (exact reference)
    quantization                    null, or "int8" (asymmetric, per-tensor activations)
    inputs, outputs                 [{name, shape, dtype, layout, quant?}]  (TensorSpec.to_dict)
    dynamic_shapes                  [[shape of input 0, shape of input 1, ...], ...]  ([] = static)
    batch_size                      rknn_batch_size of the build (1 = none)
    preprocess                      [{mean: [...], std: [...], reorder: [2,1,0] | null}] per input, or []
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import ModelInvalidError
from .spec import IO_DTYPES, QuantParams, TensorSpec

__all__ = ["ModelMetadata", "Preprocess", "parse_metadata", "MAX_DIM", "MAX_RANK"]

MAX_RANK = 16
MAX_DIM = 2**31 - 1
LAYOUTS = ("NCHW", "NHWC", "UNDEFINED")
FLOAT_DTYPES = ("float16", "float32")


@dataclass(frozen=True)
class Preprocess:
    """Per-input normalisation the runtime applies: ``(x[reorder] - mean) / std`` per channel."""

    mean: Tuple[float, ...]
    std: Tuple[float, ...]
    reorder: Optional[Tuple[int, ...]] = None

    @property
    def mean_array(self) -> np.ndarray:
        """``mean`` as a float32 array (one per channel)."""
        return np.asarray(self.mean, np.float32)

    @property
    def std_array(self) -> np.ndarray:
        """``std`` as a float32 array (one per channel)."""
        return np.asarray(self.std, np.float32)


@dataclass(frozen=True)
class ModelMetadata:
    """The validated ``META`` section (see the module docstring for each key)."""

    producer: str
    producer_version: str
    target_platforms: Tuple[str, ...]
    custom_string: str
    float_dtype: str
    quantization: Optional[str]
    inputs: Tuple[TensorSpec, ...]
    outputs: Tuple[TensorSpec, ...]
    dynamic_shapes: Tuple[Tuple[Tuple[int, ...], ...], ...]
    batch_size: int
    preprocess: Tuple[Preprocess, ...]

    def to_dict(self) -> dict:
        """The JSON form written to a file (inverse of :func:`parse_metadata`)."""
        return {
            "producer": self.producer,
            "producer_version": self.producer_version,
            "target_platforms": list(self.target_platforms),
            "custom_string": self.custom_string,
            "float_dtype": self.float_dtype,
            "quantization": self.quantization,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "dynamic_shapes": [[list(s) for s in shape_set] for shape_set in self.dynamic_shapes],
            "batch_size": self.batch_size,
            "preprocess": [
                {"mean": list(p.mean), "std": list(p.std), "reorder": list(p.reorder) if p.reorder else None}
                for p in self.preprocess
            ],
        }


def parse_metadata(d: Mapping[str, Any]) -> ModelMetadata:
    """Validate a ``META`` dict; :class:`ModelInvalidError` names the first bad field."""
    try:
        inputs = tuple(_tensor(t, f"inputs[{i}]") for i, t in enumerate(_list(d["inputs"], "inputs")))
        outputs = tuple(_tensor(t, f"outputs[{i}]") for i, t in enumerate(_list(d["outputs"], "outputs")))
        if not outputs:
            raise ValueError("the model has no outputs")
        float_dtype = d.get("float_dtype", "float16")
        if float_dtype not in FLOAT_DTYPES:
            raise ValueError(f"float_dtype {float_dtype!r} is not one of {FLOAT_DTYPES}")
        quantization = d.get("quantization")
        if quantization not in (None, "int8"):
            raise ValueError(f"quantization {quantization!r} is not null or 'int8'")
        dynamic = tuple(
            tuple(_shape(s, f"dynamic_shapes[{i}]", allow_dynamic=False) for s in _list(shape_set, "dynamic_shapes entry"))
            for i, shape_set in enumerate(_list(d.get("dynamic_shapes", []), "dynamic_shapes"))
        )
        for i, shape_set in enumerate(dynamic):
            if len(shape_set) != len(inputs):
                raise ValueError(f"dynamic_shapes[{i}] has {len(shape_set)} shapes for {len(inputs)} inputs")
        batch = d.get("batch_size", 1)
        if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= 4096:
            raise ValueError(f"batch_size {batch!r} is not an integer in 1..4096")
        preprocess = tuple(_preprocess(p, i) for i, p in enumerate(_list(d.get("preprocess", []), "preprocess")))
        if preprocess and len(preprocess) != len(inputs):
            raise ValueError(f"preprocess has {len(preprocess)} entries for {len(inputs)} inputs")
        return ModelMetadata(
            producer=_str(d.get("producer", ""), "producer"),
            producer_version=_str(d.get("producer_version", ""), "producer_version"),
            target_platforms=tuple(_str(t, "target_platforms") for t in _list(d.get("target_platforms", []), "target_platforms")),
            custom_string=_str(d.get("custom_string", ""), "custom_string"),
            float_dtype=float_dtype,
            quantization=quantization,
            inputs=inputs,
            outputs=outputs,
            dynamic_shapes=dynamic,
            batch_size=batch,
            preprocess=preprocess,
        )
    except ModelInvalidError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        detail = f"missing key {e}" if isinstance(e, KeyError) else str(e)
        raise ModelInvalidError(f"invalid metadata: {detail}", op="load") from None


def _list(v, what: str) -> list:
    if not isinstance(v, list):
        raise TypeError(f"{what} must be a list")
    return v


def _str(v, what: str) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a string")
    return v


def _number(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{what} must be a number")
    return float(v)


def _shape(v, what: str, allow_dynamic: bool = True) -> Tuple[int, ...]:
    dims = _list(v, what)
    if len(dims) > MAX_RANK:
        raise ValueError(f"{what} has {len(dims)} dims; at most {MAX_RANK} are supported")
    low = -1 if allow_dynamic else 0
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or not low <= d <= MAX_DIM:
            raise ValueError(f"absurd dim {d!r} in {what} {dims}; dims are integers in {low}..{MAX_DIM}")
    return tuple(dims)


def _tensor(t, what: str) -> TensorSpec:
    if not isinstance(t, dict):
        raise TypeError(f"{what} must be an object")
    dtype = _str(t["dtype"], f"{what}.dtype")
    if dtype not in IO_DTYPES:
        raise ValueError(f"{what}.dtype {dtype!r} is not one of {', '.join(IO_DTYPES)}")
    layout = t.get("layout", "UNDEFINED")
    if layout not in LAYOUTS:
        raise ValueError(f"{what}.layout {layout!r} is not one of {LAYOUTS}")
    quant = None
    if t.get("quant") is not None:
        q = t["quant"]
        if not isinstance(q, dict):
            raise TypeError(f"{what}.quant must be an object")
        scale = tuple(_number(s, f"{what}.quant.scale") for s in _list(q["scale"], f"{what}.quant.scale"))
        zp = tuple(int(_number(z, f"{what}.quant.zero_point")) for z in _list(q["zero_point"], f"{what}.quant.zero_point"))
        if not scale or len(scale) != len(zp):
            raise ValueError(f"{what}.quant needs as many zero points as scales (at least one)")
        axis = q.get("axis")
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
            raise TypeError(f"{what}.quant.axis must be an integer or null")
        quant = QuantParams(_str(q.get("dtype", "int8"), f"{what}.quant.dtype"), scale, zp, axis)
    return TensorSpec(_str(t["name"], f"{what}.name"), _shape(t["shape"], f"{what}.shape"), dtype, layout, quant)


def _preprocess(p, i: int) -> Preprocess:
    if not isinstance(p, dict):
        raise TypeError(f"preprocess[{i}] must be an object")
    mean = tuple(_number(v, f"preprocess[{i}].mean") for v in _list(p["mean"], f"preprocess[{i}].mean"))
    std = tuple(_number(v, f"preprocess[{i}].std") for v in _list(p["std"], f"preprocess[{i}].std"))
    if len(mean) != len(std) or any(s == 0 for s in std):
        raise ValueError(f"preprocess[{i}]: mean and std need the same length and std no zeros")
    reorder = p.get("reorder")
    if reorder is not None:
        reorder = tuple(int(_number(v, f"preprocess[{i}].reorder")) for v in _list(reorder, f"preprocess[{i}].reorder"))
        if sorted(reorder) != list(range(len(reorder))):
            raise ValueError(f"preprocess[{i}].reorder {list(reorder)} is not a permutation")
    return Preprocess(mean, std, reorder)


def build_metadata(inputs: List[TensorSpec], outputs: List[TensorSpec], **fields) -> ModelMetadata:
    """A :class:`ModelMetadata` with this runtime as producer and defaults for the rest."""
    from .._version import __version__

    defaults = dict(
        producer="rknnlite-toolkit",
        producer_version=__version__,
        target_platforms=("rk3588",),
        custom_string="",
        float_dtype="float16",
        quantization=None,
        dynamic_shapes=(),
        batch_size=1,
        preprocess=(),
    )
    defaults.update(fields)
    return parse_metadata(ModelMetadata(inputs=tuple(inputs), outputs=tuple(outputs), **defaults).to_dict())
