"""A small ``.tflite`` writer for the tests, built on the ``tflite`` package's generated
FlatBuffer builder functions (``Conv2DOptionsStart``, ``TensorAddShape``, ...).

Usage::

    b = TFLiteBuilder()
    x = b.tensor("x", [1, 8, 8, 3])
    w = b.tensor("w", [4, 3, 3, 3], data=weights)          # a constant (its own buffer)
    y = b.tensor("y", [1, 8, 8, 4])
    b.op("CONV_2D", [x, w, -1], [y], "Conv2DOptions", Padding=0, StrideW=1, StrideH=1)
    data = b.finish([x], [y])                                  # the file's bytes

Quantized tensors take ``scale``/``zero_point`` (one value, or one per channel along
``axis``); ``data`` of a quantized constant is given as the integer values.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

TYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.int32): 2, np.dtype(np.uint8): 3,
         np.dtype(np.int64): 4, np.dtype(np.bool_): 6, np.dtype(np.int16): 7, np.dtype(np.int8): 9}


class TFLiteBuilder:
    """Collects tensors and operators of one subgraph and writes a TFLite model."""

    def __init__(self):
        import flatbuffers

        self.fb = flatbuffers.Builder(1024)
        self.tensors: List[int] = []  # finished Tensor tables
        self.buffers: List[Optional[bytes]] = [None]  # buffer 0: the empty sentinel
        self.opcodes: Dict[str, int] = {}
        self.ops: List[int] = []

    def tensor(self, name: str, shape: Sequence[int], dtype=np.float32, data=None, scale=None, zero_point=None,
               axis: int = 0) -> int:
        """Add a tensor (a constant when ``data`` is given); returns its index."""
        import tflite as T

        b = self.fb
        dtype = np.dtype(dtype if data is None else np.asarray(data).dtype)
        buffer = 0
        if data is not None:
            buffer = len(self.buffers)
            self.buffers.append(np.ascontiguousarray(np.asarray(data).reshape(shape)).tobytes())
        quant = None
        if scale is not None:
            scales = np.asarray(scale, np.float32).reshape(-1)
            zps = np.asarray(zero_point if zero_point is not None else 0, np.int64).reshape(-1)
            if zps.size == 1 and scales.size > 1:
                zps = np.repeat(zps, scales.size)
            sv = b.CreateNumpyVector(scales)
            zv = b.CreateNumpyVector(zps)
            T.QuantizationParametersStart(b)
            T.QuantizationParametersAddScale(b, sv)
            T.QuantizationParametersAddZeroPoint(b, zv)
            T.QuantizationParametersAddQuantizedDimension(b, axis)
            quant = T.QuantizationParametersEnd(b)
        name_off = b.CreateString(name)
        shape_off = b.CreateNumpyVector(np.asarray(shape, np.int32))
        T.TensorStart(b)
        T.TensorAddShape(b, shape_off)
        T.TensorAddType(b, TYPES[dtype])
        T.TensorAddBuffer(b, buffer)
        T.TensorAddName(b, name_off)
        if quant is not None:
            T.TensorAddQuantization(b, quant)
        self.tensors.append(T.TensorEnd(b))
        return len(self.tensors) - 1

    def op(self, opname: str, inputs: Sequence[int], outputs: Sequence[int], options: Optional[str] = None,
           custom_code: Optional[str] = None, **fields) -> None:
        """Add an operator: ``opname`` a ``BuiltinOperator`` name; ``options`` the name of
        its options table (``"Conv2DOptions"``) with ``fields`` its scalar fields
        (``Padding=0``); a list value becomes an int32 vector."""
        import tflite as T

        b = self.fb
        key = opname if custom_code is None else f"{opname}:{custom_code}"
        if key not in self.opcodes:
            self.opcodes[key] = len(self.opcodes)
        opts = None
        if options is not None:
            vectors = {k: b.CreateNumpyVector(np.asarray(v, np.int32)) for k, v in fields.items()
                       if isinstance(v, (list, tuple))}
            getattr(T, f"{options}Start")(b)
            for k, v in fields.items():
                getattr(T, f"{options}Add{k}")(b, vectors.get(k, v))
            opts = getattr(T, f"{options}End")(b)
        ins = b.CreateNumpyVector(np.asarray(inputs, np.int32))
        outs = b.CreateNumpyVector(np.asarray(outputs, np.int32))
        T.OperatorStart(b)
        T.OperatorAddOpcodeIndex(b, self.opcodes[key])
        T.OperatorAddInputs(b, ins)
        T.OperatorAddOutputs(b, outs)
        if opts is not None:
            T.OperatorAddBuiltinOptionsType(b, getattr(T.BuiltinOptions, options))
            T.OperatorAddBuiltinOptions(b, opts)
        self.ops.append(T.OperatorEnd(b))

    def finish(self, inputs: Sequence[int], outputs: Sequence[int]) -> bytes:
        """The model's bytes (``TFL3`` identifier, schema version 3)."""
        import tflite as T

        b = self.fb
        codes = []
        for key in self.opcodes:
            opname, _, custom = key.partition(":")
            code = getattr(T.BuiltinOperator, opname)
            custom_off = b.CreateString(custom) if custom else None
            T.OperatorCodeStart(b)
            T.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            T.OperatorCodeAddBuiltinCode(b, code)
            T.OperatorCodeAddVersion(b, 1)
            if custom_off is not None:
                T.OperatorCodeAddCustomCode(b, custom_off)
            codes.append(T.OperatorCodeEnd(b))
        bufs = []
        for data in self.buffers:
            data_off = None
            if data:
                b.StartVector(1, len(data), 16)  # 16-byte aligned, as TFLite's writer does
                b.head = b.head - len(data)
                b.Bytes[b.head:b.head + len(data)] = data
                data_off = b.EndVector()
            T.BufferStart(b)
            if data_off is not None:
                T.BufferAddData(b, data_off)
            bufs.append(T.BufferEnd(b))

        def table_vector(start, items):
            start(b, len(items))
            for item in reversed(items):
                b.PrependUOffsetTRelative(item)
            return b.EndVector()

        tensors = table_vector(T.SubGraphStartTensorsVector, self.tensors)
        ops = table_vector(T.SubGraphStartOperatorsVector, self.ops)
        ins = b.CreateNumpyVector(np.asarray(inputs, np.int32))
        outs = b.CreateNumpyVector(np.asarray(outputs, np.int32))
        name = b.CreateString("main")
        T.SubGraphStart(b)
        T.SubGraphAddTensors(b, tensors)
        T.SubGraphAddOperators(b, ops)
        T.SubGraphAddInputs(b, ins)
        T.SubGraphAddOutputs(b, outs)
        T.SubGraphAddName(b, name)
        subgraph = T.SubGraphEnd(b)
        subgraphs = table_vector(T.ModelStartSubgraphsVector, [subgraph])
        opcodes = table_vector(T.ModelStartOperatorCodesVector, codes)
        buffers = table_vector(T.ModelStartBuffersVector, bufs)
        desc = b.CreateString("rknnlite test model")
        T.ModelStart(b)
        T.ModelAddVersion(b, 3)
        T.ModelAddOperatorCodes(b, opcodes)
        T.ModelAddSubgraphs(b, subgraphs)
        T.ModelAddDescription(b, desc)
        T.ModelAddBuffers(b, buffers)
        b.Finish(T.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())


def interpreter(data: bytes, keep_all: bool = False):
    """The TFLite reference interpreter (``ai-edge-litert``, else ``tflite-runtime``) for a
    model, tensors allocated: builtin kernels without the XNNPACK delegate (which refuses
    uint8 models); ``keep_all``: intermediate tensors stay readable."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        from tflite_runtime.interpreter import Interpreter, OpResolverType
    it = Interpreter(model_content=data, experimental_preserve_all_tensors=keep_all,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    return it


def interpret(data: bytes, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Run a model with :func:`interpreter`; returns copies of its outputs."""
    it = interpreter(data)
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]
