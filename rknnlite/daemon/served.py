"""One model as the daemon serves it: its protocol-facing tensors, input checks and runs.

A :class:`ServedModel` wraps a loaded :class:`~rknnlite.Context` and its runner (a pool of
contexts), maps the model's tensors to the names, layouts and datatypes clients see
(config ``inputs``/``outputs``), checks requests against them, and runs them, directly
or through a :class:`~rknnlite.daemon.batching.DynamicBatcher`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..constants import QntType, TensorFormat, TensorType
from ..runtime.io import reorder_shape
from .batching import BatcherClosedError, DynamicBatcher
from .protocol import InferInput, ProtocolError, datatype_of
from .runner import QueueRunner
from .security import ConcurrencyLimit

__all__ = ["ServedTensor", "ServedModel", "PLATFORM"]

#: The ``platform`` reported in model metadata.
PLATFORM = "rknnlite_rknn"

_FLOATISH = (TensorType.FLOAT32, TensorType.FLOAT16)


@dataclass(frozen=True)
class ServedTensor:
    """A model tensor as clients see it.

    Attributes:
        name: the protocol name.
        index: the model tensor's position.
        tensor: the model tensor's own name.
        datatype: the datatype reported in metadata (and sent for outputs).
        accepts: datatypes accepted for an input.
        shape: the protocol shape; ``-1`` marks the batch axis of a batched model and
            dynamic dims.
        layout: ``"nchw"``/``"nhwc"`` for 4-D tensors (the data layout clients use: the config's
            ``format``, else the tensor attribute's own, e.g. NHWC for an image input), else None.
    """

    name: str
    index: int
    tensor: str
    datatype: str
    accepts: Tuple[str, ...]
    shape: Tuple[int, ...]
    layout: Optional[str]

    def to_dict(self) -> dict:
        """``{"name", "datatype", "shape"}`` as model metadata lists it."""
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


def _own_layout(attr) -> str:
    """The layout of a 4-D tensor's data as its attribute states it: "nhwc" or "nchw"."""
    return "nhwc" if attr.fmt == TensorFormat.NHWC else "nchw"


def _served_tensors(attrs, entries, is_input: bool, batched: bool, what: str) -> List[ServedTensor]:
    """Protocol tensors for the model's ``attrs`` and the config ``entries`` (already checked
    by the repository: ``name``/``tensor``/``format`` per entry, or None for defaults)."""
    by_tensor = {a.name: a for a in attrs}
    chosen = []
    if entries:
        for k, entry in enumerate(entries):
            tensor = entry.get("tensor", entry.get("name"))
            if tensor not in by_tensor:
                if "tensor" not in entry and k < len(attrs):
                    tensor = attrs[k].name
                else:
                    raise ProtocolError(f"{what}[{k}]: the model has no tensor {tensor!r}; its tensors are "
                                        f"{', '.join(by_tensor)}")
            chosen.append((by_tensor[tensor], entry.get("name", tensor), entry.get("format")))
        if is_input and len(chosen) != len(attrs):
            raise ProtocolError(f"{what} lists {len(chosen)} input(s) but the model has {len(attrs)}")
    else:
        chosen = [(a, a.name, None) for a in attrs]
    out = []
    for attr, name, fmt in chosen:
        dims = tuple(int(d) for d in attr.dims)
        layout = None
        if len(dims) == 4:
            layout = fmt or _own_layout(attr)
            dims = reorder_shape(dims, _own_layout(attr), layout)
        elif fmt is not None:
            raise ProtocolError(f"{what}: 'format' applies to 4-D tensors only; {attr.name!r} has {len(dims)} dims")
        if batched:
            dims = (-1,) + dims[1:]
        if attr.type in _FLOATISH or attr.qnt_type == QntType.AFFINE_ASYMMETRIC:
            datatype = "FP32"
            accepts = ("FP32", "FP16", "UINT8") + (("INT8",) if attr.qnt_type == QntType.AFFINE_ASYMMETRIC else ())
        else:
            datatype = datatype_of(attr.dtype)
            accepts = (datatype,)
        out.append(ServedTensor(name, attr.index, attr.name, datatype, accepts if is_input else (datatype,),
                                dims, layout))
    return out


class ServedModel:
    """A model ready to serve (or an unavailable one, with ``reason``).

    Build it with :meth:`open` (blocking: loads the model and its contexts) or
    :meth:`unavailable`.  :meth:`infer` runs on the event loop; ``close`` releases the
    contexts after the requests in flight.
    """

    def __init__(self, name: str, version: str, *, reason: Optional[str] = None, source: str = ""):
        self.name = name
        self.version = version
        self.reason = reason
        self.source = source
        self.inputs: List[ServedTensor] = []
        self.outputs: List[ServedTensor] = []
        self.limit = ConcurrencyLimit(64, f"model {name!r}")
        self.batch: Optional[dict] = None
        self.metrics = None
        self._runner = None
        self._batcher: Optional[DynamicBatcher] = None
        self._input_of: Dict[str, Tuple[int, ServedTensor]] = {}  # name -> (position, tensor)
        self._output_of: Dict[str, ServedTensor] = {}
        self._closed = False

    @property
    def ready(self) -> bool:
        """True when the model can run requests."""
        return self._runner is not None and not self._closed

    @property
    def state(self) -> str:
        """``"READY"`` or ``"UNAVAILABLE"`` (repository index state)."""
        return "READY" if self.ready else "UNAVAILABLE"

    @classmethod
    def unavailable(cls, name: str, version: str, reason: str, source: str = "") -> "ServedModel":
        """A placeholder for a model that failed to load; ``reason`` says why."""
        return cls(name, version, reason=reason, source=source)

    @classmethod
    def open(cls, name: str, config) -> "ServedModel":
        """Load ``config``'s model (blocking) and make its runner.

        Raises:
            RKNNError, ProtocolError, OSError: the model cannot be served (the repository
                turns this into an unavailable model with the message as its reason).
        """
        from ..runtime.context import Context

        self = cls(name, config.version, source=config.model_file)
        ctx = Context(config.model_file, key=config.key_file, backend=config.backend)
        try:
            attrs_in, attrs_out = ctx.inputs, ctx.outputs
            capacity = None
            if config.max_batch_size:
                capacity = int(attrs_in[0].dims[0])
                if any(int(a.dims[0]) != capacity for a in attrs_in + attrs_out):
                    raise ProtocolError(f"{config.path}: dynamic_batching needs every input and output to have the "
                                        f"model's batch on axis 0; dims are "
                                        + ", ".join(f"{a.name} {list(a.dims)}" for a in attrs_in + attrs_out))
                if config.max_batch_size > capacity:
                    raise ProtocolError(f"{config.path}: dynamic_batching.max_batch_size {config.max_batch_size} "
                                        f"exceeds the model's batch size {capacity} (axis 0 of its inputs)")
            batched = capacity is not None
            self.inputs = _served_tensors(attrs_in, config.inputs, True, batched, f"{config.path}: inputs")
            self.outputs = _served_tensors(attrs_out, config.outputs, False, batched, f"{config.path}: outputs")
            self.inputs.sort(key=lambda t: t.index)
            self._input_of = {t.name: (k, t) for k, t in enumerate(self.inputs)}
            self._output_of = {t.name: t for t in self.outputs}
            formats = [t.layout for t in self.inputs]
            self.limit = ConcurrencyLimit(config.max_concurrency, f"model {name!r}")
            self._runner = QueueRunner(ctx, config.instances, config.core_mask,
                                       formats if any(formats) else None)
            #: per output: the axes that put it in the layout clients get (None: as it is)
            self._out_axes = [None if t.layout in (None, _own_layout(attrs_out[t.index])) else
                              ((0, 2, 3, 1) if t.layout == "nhwc" else (0, 3, 1, 2)) for t in self.outputs]
        except BaseException:
            ctx.close()
            raise
        if batched:
            self.batch = {"max_batch_size": config.max_batch_size, "max_queue_delay_us": config.max_queue_delay_us}
            self._batcher = DynamicBatcher(self._runner.run, capacity, config.max_batch_size, config.max_queue_delay_us,
                                           slots=config.instances, on_batch=self._observe_batch)
        return self

    # -- description -------------------------------------------------------------------

    def metadata(self) -> dict:
        """The protocol's model metadata, plus ``state`` (and ``reason`` when unavailable)."""
        doc = {"name": self.name, "versions": [self.version], "platform": PLATFORM,
               "inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
               "state": self.state}
        if self.reason:
            doc["reason"] = self.reason
        return doc

    def config(self) -> dict:
        """A Triton-style model configuration (``GET .../config``) describing this model."""
        batch = self.batch["max_batch_size"] if self.batch else 0

        def tensors(ts):
            return [{"name": t.name, "data_type": "TYPE_STRING" if t.datatype == "BYTES" else "TYPE_" + t.datatype,
                     "dims": list(t.shape[1:] if batch else t.shape)} for t in ts]

        doc = {"name": self.name, "platform": PLATFORM, "max_batch_size": batch,
               "input": tensors(self.inputs), "output": tensors(self.outputs)}
        if self.batch:
            doc["dynamic_batching"] = {"max_queue_delay_microseconds": self.batch["max_queue_delay_us"]}
        return doc

    # -- running -----------------------------------------------------------------------

    def check_inputs(self, inputs: Sequence[InferInput]) -> Tuple[List[np.ndarray], int]:
        """The request's arrays in model order, checked against :attr:`inputs`, and the
        number of rows (batch) they carry.

        Raises:
            ProtocolError: (400) a missing, unknown or repeated input, a datatype the
                input does not take, or a shape that does not fit (each named).
        """
        arrays: List[Optional[np.ndarray]] = [None] * len(self.inputs)
        rows = None
        for item in inputs:
            found = self._input_of.get(item.name)
            if found is None:
                raise ProtocolError(f"unknown input {item.name!r} for model {self.name!r}; its inputs are "
                                    f"{', '.join(repr(t.name) for t in self.inputs)}")
            k, spec = found
            if arrays[k] is not None:
                raise ProtocolError(f"input {item.name!r} is given twice")
            if item.datatype not in spec.accepts:
                raise ProtocolError(f"input {item.name!r} has datatype {item.datatype}; model {self.name!r} "
                                    f"takes {' or '.join(spec.accepts)}")
            shape = item.shape
            if shape != spec.shape and (len(shape) != len(spec.shape)
                                        or any(w != -1 and d != w for d, w in zip(shape, spec.shape))):
                raise ProtocolError(f"input {item.name!r} has shape {list(shape)}; model {self.name!r} expects "
                                    f"{list(spec.shape)}" + (" (-1: any)" if -1 in spec.shape else ""))
            if self._batcher is not None:
                n = shape[0]
                if not 1 <= n <= self._batcher.max_batch_size:
                    raise ProtocolError(f"input {item.name!r} has {n} rows on its batch axis; model {self.name!r} "
                                        f"takes 1..{self._batcher.max_batch_size} per request")
                if rows is not None and n != rows:
                    raise ProtocolError(f"inputs disagree on the batch size ({rows} vs {n} for {item.name!r})")
                rows = n
            arrays[k] = item.data
        missing = [t.name for t, a in zip(self.inputs, arrays) if a is None]
        if missing:
            raise ProtocolError(f"missing input(s) {', '.join(map(repr, missing))} for model {self.name!r}")
        return arrays, rows if rows is not None else 1

    def output_spec(self, name: str) -> ServedTensor:
        """The protocol output called ``name``.

        Raises:
            ProtocolError: (400) no such output (the message lists them).
        """
        spec = self._output_of.get(name)
        if spec is None:
            raise ProtocolError(f"unknown output {name!r} for model {self.name!r}; its outputs are "
                                f"{', '.join(repr(t.name) for t in self.outputs)}")
        return spec

    def _observe_batch(self, rows: int) -> None:
        if self.metrics is not None:
            self.metrics.labels(self.metrics.batch_size, self.name).observe(rows)

    async def infer(self, arrays: List[np.ndarray], rows: int) -> Dict[str, np.ndarray]:
        """Run one request's checked inputs (from :meth:`check_inputs`); returns every
        protocol output by name, in the client's layout (arrays owned by the caller).

        Raises:
            RKNNError: the runtime refused the inputs (e.g. dtype, dynamic shape) or failed.
            ProtocolError: (400) the model is not ready.
        """
        if not self.ready:
            raise ProtocolError(f"model {self.name!r} is not ready" + (f": {self.reason}" if self.reason else ""))
        start = time.perf_counter()
        if self._batcher is not None:
            try:
                outputs = await self._batcher.submit(arrays, rows)
            except BatcherClosedError:
                raise ProtocolError(f"model {self.name!r} is being unloaded or replaced; retry", status=503,
                                    headers={"Retry-After": "1"}) from None
        else:
            outputs = await self._runner.run(arrays)
        if self.metrics is not None:
            self.metrics.labels(self.metrics.inference_seconds, self.name).observe(time.perf_counter() - start)
        result = {}
        for spec, axes in zip(self.outputs, self._out_axes):
            y = outputs[spec.index]
            if axes is not None:
                y = y.transpose(axes)
            result[spec.name] = y
        return result

    def flush(self) -> None:
        """Run requests waiting for a dynamic batch at once from now on, without waiting for
        more rows (see :meth:`DynamicBatcher.flush`); a no-op without dynamic batching."""
        if self._batcher is not None:
            self._batcher.flush()

    async def close(self) -> None:
        """Stop taking requests, wait for those in flight, release the contexts."""
        self._closed = True
        if self._batcher is not None:
            await self._batcher.close()
        while self.limit.active > 0:
            await asyncio.sleep(0.01)
        runner, self._runner = self._runner, None
        if runner is not None:
            await asyncio.get_running_loop().run_in_executor(None, runner.close)
