"""Reader for Rockchip's own ``.rknn`` files (RKNN-Toolkit2 output).

Layout (little-endian; see ``shared/reference/rknn-file-format.md``)::

    0x00  "RKNN" + u32 0
    0x08  u64 format version (6 for toolkit2 >= 1.5; 2 for 1.3/1.4; 0x1004 for rv1106)
    0x10  u64 model_size
    0x18  40 reserved bytes (absent for versions 1 and 0x1001: 24-byte header)
    0x40  model_size bytes: a FlatBuffer with file identifier "RKNN" (versions 1-6)
    ...   u64 json_len, then json_len bytes of UTF-8 JSON; the file ends there

The JSON trailer names the inputs and outputs; the FlatBuffer root table
("Model") carries the compiler/toolkit versions, the target, the custom string,
the batch size, the dynamic shapes and, per subgraph, the tensors with their
int8 quantization parameters.  The rv1106 container (0x1004) packs tasks, register
commands and weights ahead of a FlatBuffer of another schema (:mod:`.packed`,
:data:`.schema.T3`); when its sections cannot be located (or for 0x1001-0x1003, never
observed) only the JSON trailer is read, the FlatBuffer fields are ``None`` and
``graph_error`` says why.

Nothing here executes the model; weights and the NPU command stream are left
in place.  Every structural problem raises :class:`ModelInvalidError` naming the
problem and the file; no length read from the file is trusted before it has been
checked against the file size.
"""

from __future__ import annotations

import ast
import json
import math
import struct
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..constants import MAX_DIMS, MAX_DYNAMIC_SHAPE_NUM
from ..errors import ModelInvalidError
from .flatbuf import FlatBuffer, Table
from .packed import PackedSections, locate_sections
from .schema import DTYPES, T3, V6, Schema
from .spec import QuantParams, TensorSpec

__all__ = [
    "RKNN_MAGIC",
    "CYPT_MAGIC",
    "FLATBUFFER_VERSIONS",
    "PACKED_VERSIONS",
    "is_rockchip",
    "is_rockchip_encrypted",
    "read_rockchip",
    "rockchip_encrypted_info",
    "RockchipModel",
    "RockchipEncryptedInfo",
]

RKNN_MAGIC = b"RKNN"
CYPT_MAGIC = b"CYPTRKNN"

#: Format versions whose model section is a FlatBuffer.
FLATBUFFER_VERSIONS = frozenset(range(1, 7))
#: Format versions of the rv1106-style container (sections ahead of a FlatBuffer, :mod:`.packed`).
PACKED_VERSIONS = frozenset(range(0x1001, 0x1005))
#: The one packed version whose sections were observed (and are located).
_PACKED_OBSERVED = 0x1004

HEADER_SIZE = 64
_SHORT_HEADER_SIZE = 24  # versions 1 and 0x1001: no reserved block
_MAX_DIM = 1 << 31
_MAX_BATCH = 1 << 16
_MAX_DESCRIPTION = 1 << 20  # bytes of Python-literal text we are willing to parse

# Tensor enum values (slots: :mod:`.schema`).
_T_DTYPE_INT8 = 3
_T_KIND_INPUT = 1
_T_KIND_OUTPUT = 2

#: dtype names in the JSON trailer / FlatBuffer info strings -> numpy-style names.
_DTYPE_ALIASES = {
    "int8": "int8",
    "uint8": "uint8",
    "int16": "int16",
    "uint16": "uint16",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "bool": "bool",
}


@dataclass(frozen=True)
class RockchipModel:
    """What a Rockchip ``.rknn`` file says about itself.

    Attributes:
        label: the file path or buffer description used in messages.
        format_version: u64 at 0x08 (6 for current toolkits, 0x1004 for rv1106).
        model_size: length of the model section (the FlatBuffer for versions 1-6).
        file_size: total length of the file.
        header_size: 64, or 24 for versions 1 and 0x1001.
        json: the parsed JSON trailer.
        inputs / outputs: the I/O tensors in I/O order (name, NCHW shape for 4-D,
            dtype as the NPU holds it: ``"int8"`` for quantized tensors,
            ``"float16"`` for float ones; ``quant`` for int8 tensors).
        target_platforms: JSON ``target_platform`` (e.g. ``["rk3588"]``).
        toolkit_version: JSON ``version`` (e.g. ``"2.5.0"``).
        flatbuffer: whether a FlatBuffer graph was read (the model section, or the graph
            section of an rv1106 container); when ``False`` every FlatBuffer field below is
            ``None``/empty.
        graph_offset / graph_size: where that FlatBuffer is in the file (the model section
            for versions 1-6).
        schema: its slot numbers (:data:`.schema.V6`, or :data:`.schema.T3` for rv1106).
        packed: the sections of an rv1106 container (:class:`.packed.PackedSections`), else
            ``None``.
        graph_error: why the graph of an rv1106 container could not be read (``None`` when it
            was, and for other files).
        npu_target: Model[1], e.g. ``"RKNPU v2"``.
        compiler_version: Model[6] decoded, e.g. 20500 -> ``"2.5.0"``.
        toolkit_full_version: Model[7], e.g. ``"2.5.0(compiler version: ...)"``.
        target_platform: Model[8], e.g. ``"rk3588"``.
        framework: Model[9], e.g. ``"ONNX"``.
        custom_string: Model[11] (``""`` when not set).
        batch_size: Model[14] as an int; the toolkit writes ``"0"`` for the
            default, read as 1.  The JSON shapes do not include the batch.
        inference_type: Model[16], ``"static_shape"`` or ``"dynamic_shape"``.
        dynamic_shapes: per input set, one shape per input:
            ``dynamic_shapes[s][i]`` is input ``i``'s shape in set ``s``; empty
            for a static model.
        num_subgraphs: number of compiled subgraphs (one per dynamic shape set).
        description: Model[3] (Python-literal dict: attrs, quant_tab,
            dynamic_shapes), or ``None`` when absent or unparsable.
        input_info / output_info: Model[12]/[13] JSON (per tensor: native dtype
            and layout), or ``None``.
    """

    label: str
    format_version: int
    model_size: int
    file_size: int
    header_size: int
    json: Dict[str, Any] = field(repr=False)
    inputs: List[TensorSpec]
    outputs: List[TensorSpec]
    target_platforms: List[str]
    toolkit_version: Optional[str]
    flatbuffer: bool = True
    graph_offset: int = 0
    graph_size: int = 0
    schema: Schema = field(default=V6, repr=False)
    packed: Optional[PackedSections] = None
    graph_error: Optional[str] = None
    npu_target: Optional[str] = None
    compiler_version: Optional[str] = None
    toolkit_full_version: Optional[str] = None
    target_platform: Optional[str] = None
    framework: Optional[str] = None
    custom_string: Optional[str] = None
    batch_size: Optional[int] = None
    inference_type: Optional[str] = None
    dynamic_shapes: List[List[Tuple[int, ...]]] = field(default_factory=list)
    num_subgraphs: int = 0
    description: Optional[Dict[str, Any]] = field(default=None, repr=False)
    input_info: Optional[Dict[str, Any]] = field(default=None, repr=False)
    output_info: Optional[Dict[str, Any]] = field(default=None, repr=False)

    @property
    def is_dynamic(self) -> bool:
        """Whether the model was built with several input shapes."""
        return bool(self.dynamic_shapes)

    @property
    def input_preprocess(self) -> Tuple[()]:
        """Empty (:class:`~rknnlite.model.info.ModelInfo`): the file's mean/std are applied by
        librknnrt, or by the lowered model off-board, never on the host side."""
        return ()

    def summary(self) -> dict:
        """A JSON-ready dict (used by ``rknnlite inspect --json``)."""
        return {
            "format": "rockchip-rknn",
            "format_version": f"{self.format_version:#x}" if self.format_version in PACKED_VERSIONS
            else str(self.format_version),
            "toolkit_version": self.toolkit_version,
            "toolkit_full_version": self.toolkit_full_version,
            "compiler_version": self.compiler_version,
            "npu_target": self.npu_target,
            "target_platforms": list(self.target_platforms),
            "target_platform": self.target_platform,
            "framework": self.framework,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "custom_string": self.custom_string,
            "inference_type": self.inference_type,
            "dynamic_shapes": [[list(s) for s in shapes] for shapes in self.dynamic_shapes],
            "batch_size": self.batch_size,
            "flatbuffer": self.flatbuffer,
            "packed": self.packed.to_dict() if self.packed is not None else None,
            "graph_error": self.graph_error,
            "size": self.file_size,
            "model_size": self.model_size,
        }


@dataclass(frozen=True)
class RockchipEncryptedInfo:
    """What can be said about a vendor-encrypted (``CYPTRKNN``) model without its key (a
    :class:`~rknnlite.model.info.ModelInfo` that names no platform and no custom string)."""

    size: int
    magic: str = CYPT_MAGIC.decode("ascii")
    note: str = (
        "Rockchip-encrypted RKNN model: its contents are undocumented and are only "
        "decrypted inside librknnrt on a board"
    )

    @property
    def target_platforms(self) -> Tuple[str, ...]:
        """Empty: only librknnrt reads the encrypted file."""
        return ()

    @property
    def custom_string(self) -> None:
        """``None``: only librknnrt reads the encrypted file (``RKNN_QUERY_CUSTOM_STRING``)."""
        return None

    @property
    def input_preprocess(self) -> Tuple[()]:
        """Empty: librknnrt applies the file's own mean/std."""
        return ()

    def summary(self) -> dict:
        """A JSON-ready dict (``rknnlite inspect --json``)."""
        return {"format": "rockchip-encrypted", "size": self.size, "note": self.note}


# ---------------------------------------------------------------------------
# Detection


def _as_view(buf) -> memoryview:
    view = getattr(buf, "view", None)  # a ModelSource
    if view is None:
        view = memoryview(buf)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


def is_rockchip(buf) -> bool:
    """Whether ``buf`` starts like a Rockchip ``.rknn`` file (``RKNN`` + 4 zero bytes)."""
    view = _as_view(buf)
    return len(view) >= 8 and bytes(view[:8]) == RKNN_MAGIC + b"\0\0\0\0"


def is_rockchip_encrypted(buf) -> bool:
    """Whether ``buf`` starts like a vendor-encrypted model (``CYPTRKNN``)."""
    view = _as_view(buf)
    return len(view) >= 8 and bytes(view[:8]) == CYPT_MAGIC


def rockchip_encrypted_info(buf) -> RockchipEncryptedInfo:
    """Describe a ``CYPTRKNN`` file; ``ModelInvalidError`` if ``buf`` is not one."""
    view = _as_view(buf)
    if not is_rockchip_encrypted(view):
        raise ModelInvalidError(f"{_label(buf, '<buffer>')}: not a CYPTRKNN encrypted model", op="load")
    return RockchipEncryptedInfo(size=len(view))


def _label(buf, label: str) -> str:
    if label == "<buffer>":
        src_label = getattr(buf, "label", None)
        if isinstance(src_label, str):
            return src_label
    return label


# ---------------------------------------------------------------------------
# Reading


def read_rockchip(buf, label: str = "<buffer>") -> RockchipModel:
    """Parse a Rockchip ``.rknn`` file held in ``buf`` (bytes, memoryview or ModelSource).

    Raises:
        ModelInvalidError: the file is truncated, malformed, encrypted or of an
            unknown format version; the message names the problem and ``label``.
    """
    view = _as_view(buf)
    label = _label(buf, label)
    return _Reader(view, label).read()


class _Reader:
    def __init__(self, view: memoryview, label: str):
        self.view = view
        self.label = label
        self.size = len(view)

    def error(self, message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{self.label}: {message}", op="load")

    def u64(self, pos: int) -> int:
        return struct.unpack_from("<Q", self.view, pos)[0]

    # -- container -----------------------------------------------------------

    def read(self) -> RockchipModel:
        view, size = self.view, self.size
        if size >= 8 and bytes(view[:8]) == CYPT_MAGIC:
            raise self.error(
                "this is a Rockchip-encrypted model (CYPTRKNN); it can only be decrypted by "
                "librknnrt on a board"
            )
        if size < HEADER_SIZE:
            raise self.error(f"{size} bytes is shorter than the {HEADER_SIZE}-byte RKNN header")
        if bytes(view[:4]) != RKNN_MAGIC:
            raise self.error(f"bad magic {bytes(view[:4])!r}; expected {RKNN_MAGIC!r}")
        if bytes(view[4:8]) != b"\0\0\0\0":
            raise self.error(f"bytes 4..8 are {bytes(view[4:8]).hex()}, expected zero")

        version = self.u64(0x08)
        if version in FLATBUFFER_VERSIONS:
            is_fb = True
        elif version in PACKED_VERSIONS:
            is_fb = False
        else:
            raise self.error(
                f"unknown RKNN format version {version:#x} (supported: 1-6, and 0x1001-0x1004 "
                "without a FlatBuffer)"
            )
        header = _SHORT_HEADER_SIZE if version in (1, 0x1001) else HEADER_SIZE

        model_size = self.u64(0x10)
        if model_size > size - header - 8:
            raise self.error(
                f"model section of {model_size} bytes at {header:#x} runs past the end of the "
                f"{size}-byte file (no room for the JSON trailer)"
            )
        if is_fb and model_size < 8:
            raise self.error(f"model section of {model_size} bytes is too short for a FlatBuffer")
        json_pos = header + model_size
        json_len = self.u64(json_pos)
        avail = size - json_pos - 8
        if json_len > avail:
            raise self.error(
                f"JSON trailer of {json_len} bytes at {json_pos + 8:#x} runs past the end of the "
                f"{size}-byte file"
            )
        if json_len < avail:
            raise self.error(f"{avail - json_len} unexpected bytes after the JSON trailer")
        if json_len == 0:
            raise self.error("the JSON trailer is empty")
        info = self.parse_json(bytes(view[json_pos + 8 : json_pos + 8 + json_len]))

        inputs, outputs = self.io_tensors(info)
        target_platforms = info.get("target_platform", [])
        if not isinstance(target_platforms, list) or not all(isinstance(p, str) for p in target_platforms):
            raise self.error("JSON 'target_platform' is not a list of strings")
        toolkit_version = info.get("version")
        if toolkit_version is not None and not isinstance(toolkit_version, str):
            raise self.error("JSON 'version' is not a string")

        fields: Dict[str, Any] = {}
        if is_fb:
            fb = FlatBuffer(view, header, model_size, self.label)
            ident = fb.identifier()
            if ident != RKNN_MAGIC:
                raise self.error(
                    f"the model section has no FlatBuffer identifier 'RKNN' at {header + 4:#x} "
                    f"(found {ident!r})"
                )
            fields, inputs, outputs = self.read_flatbuffer(fb.root("Model"), inputs, outputs, V6)
            fields.update(graph_offset=header, graph_size=model_size)
        else:
            fields, inputs, outputs = self.read_packed(version, model_size, inputs, outputs)
            is_fb = fields.get("graph_error") is None

        return RockchipModel(
            label=self.label,
            format_version=version,
            model_size=model_size,
            file_size=size,
            header_size=header,
            json=info,
            inputs=inputs,
            outputs=outputs,
            target_platforms=list(target_platforms),
            toolkit_version=toolkit_version,
            flatbuffer=is_fb,
            **fields,
        )

    def read_packed(self, version: int, model_size: int, inputs: List[TensorSpec], outputs: List[TensorSpec]):
        """The FlatBuffer fields of an rv1106 container, read from its graph section; or, when
        that cannot be located or read, only ``graph_error`` saying why (on a board librknnrt
        still loads the file: nothing here refuses it)."""
        if version != _PACKED_OBSERVED:
            reason = f"format {version:#x} containers were never observed (only {_PACKED_OBSERVED:#x})"
        else:
            sections = locate_sections(self.view, model_size)
            reason = sections if isinstance(sections, str) else None
        if reason is None:
            offset, size = sections.graph
            try:
                fb = FlatBuffer(self.view, offset, size, self.label)
                ident = fb.identifier()
                if ident != RKNN_MAGIC:
                    raise self.error(f"no FlatBuffer identifier 'RKNN' at {offset + 4:#x} (found {ident!r})")
                fields, inputs, outputs = self.read_flatbuffer(fb.root("Model"), inputs, outputs, T3)
            except ModelInvalidError as e:
                reason = f"its graph section does not read as a FlatBuffer ({e})"
            else:
                fields.update(graph_offset=offset, graph_size=size, schema=T3, packed=sections)
                return fields, inputs, outputs
        fields = {"graph_error": reason}
        return fields, [_default_dtype(t) for t in inputs], [_default_dtype(t) for t in outputs]

    # -- JSON trailer --------------------------------------------------------

    def parse_json(self, raw: bytes) -> Dict[str, Any]:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(f"the JSON trailer is not valid UTF-8 ({e.reason} at byte {e.start})") from None
        try:
            info = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise self.error(f"the JSON trailer is not valid JSON ({_short(e)})") from None
        if not isinstance(info, dict):
            raise self.error("the JSON trailer is not a JSON object")
        return info

    def io_tensors(self, info: Dict[str, Any]) -> Tuple[List[TensorSpec], List[TensorSpec]]:
        for key in ("norm_tensor", "graph"):
            if key not in info:
                raise self.error(f"the JSON trailer has no '{key}' key")
            if not isinstance(info[key], list):
                raise self.error(f"JSON '{key}' is not a list")
        by_id: Dict[int, Dict[str, Any]] = {}
        for i, entry in enumerate(info["norm_tensor"]):
            if not isinstance(entry, dict):
                raise self.error(f"JSON norm_tensor[{i}] is not an object")
            tid = entry.get("tensor_id", i)
            if not _is_int(tid):
                raise self.error(f"JSON norm_tensor[{i}].tensor_id is not an integer")
            if tid in by_id:
                raise self.error(f"JSON norm_tensor has two entries with tensor_id {tid}")
            by_id[tid] = entry

        slots: Dict[str, Dict[int, TensorSpec]] = {"input": {}, "output": {}}
        for i, link in enumerate(info["graph"]):
            if not isinstance(link, dict):
                raise self.error(f"JSON graph[{i}] is not an object")
            side = link.get("left")
            if side not in slots:
                raise self.error(f"JSON graph[{i}].left is {side!r}, expected 'input' or 'output'")
            if link.get("right") != "norm_tensor":
                raise self.error(
                    f"JSON graph[{i}] links to {link.get('right')!r}; only 'norm_tensor' is supported"
                )
            index, tid = link.get("left_tensor_id"), link.get("right_tensor_id")
            if not _is_int(index) or not _is_int(tid):
                raise self.error(f"JSON graph[{i}] has a missing or non-integer tensor id")
            if index in slots[side]:
                raise self.error(f"JSON graph lists {side} {index} twice")
            if tid not in by_id:
                raise self.error(f"JSON graph[{i}] refers to norm_tensor {tid}, which does not exist")
            slots[side][index] = self.tensor_spec(by_id[tid], f"norm_tensor {tid}")

        result = []
        for side in ("input", "output"):
            found = slots[side]
            if sorted(found) != list(range(len(found))):
                raise self.error(f"JSON graph {side} indices {sorted(found)} are not 0..{len(found) - 1}")
            declared = info.get(f"{side}_num")
            if declared is not None and declared != len(found):
                raise self.error(f"JSON {side}_num is {declared!r} but the graph lists {len(found)} {side}s")
            result.append([found[k] for k in range(len(found))])
        if not result[0] or not result[1]:
            raise self.error("the JSON trailer lists no inputs or no outputs")
        return result[0], result[1]

    def tensor_spec(self, entry: Dict[str, Any], where: str) -> TensorSpec:
        name = entry.get("url")
        if not isinstance(name, str):
            raise self.error(f"JSON {where} has no tensor name ('url')")
        shape = self.check_shape(entry.get("size"), f"JSON {where} ({name!r}) size")
        dim_num = entry.get("dim_num")
        if dim_num is not None and dim_num != len(shape):
            raise self.error(f"JSON {where} ({name!r}): dim_num {dim_num!r} but {len(shape)} dims")
        dtype_info = entry.get("dtype", {})
        if not isinstance(dtype_info, dict):
            raise self.error(f"JSON {where} ({name!r}) dtype is not an object")
        dtype = ""
        for key in ("vx_type", "qnt_type"):
            value = dtype_info.get(key, "")
            if not isinstance(value, str):
                raise self.error(f"JSON {where} ({name!r}) dtype.{key} is not a string")
            if value and not dtype:
                dtype = value
        # An empty dtype means "not quantized": the FlatBuffer's I/O info may refine it later.
        return TensorSpec(
            name=name,
            shape=shape,
            dtype=self.dtype_name(dtype, name) if dtype else "",
            layout="NCHW" if len(shape) == 4 else "UNDEFINED",
        )

    def dtype_name(self, value: str, name: str) -> str:
        mapped = _DTYPE_ALIASES.get(value.strip().lower())
        if mapped is None:
            raise self.error(f"tensor {name!r} has unknown dtype {value!r}")
        return mapped

    def check_shape(self, dims, what: str) -> Tuple[int, ...]:
        if not isinstance(dims, (list, tuple)):
            raise self.error(f"{what} is not a list of dims")
        if len(dims) > MAX_DIMS:
            raise self.error(f"{what} has {len(dims)} dims; at most {MAX_DIMS} are allowed")
        for d in dims:
            if not _is_int(d):
                raise self.error(f"{what} has a non-integer dim {d!r}")
            if d < -1 or d > _MAX_DIM:
                raise self.error(f"{what} has an absurd dim {d}")
        return tuple(dims)

    # -- FlatBuffer ----------------------------------------------------------

    def read_flatbuffer(self, root: Table, inputs: List[TensorSpec], outputs: List[TensorSpec],
                        schema: Schema):
        compiler = root.i32(schema.m_compiler_version, 0)
        batch_text = _optional(root.string, schema.m_batch_size)
        batch = 1
        if batch_text is not None and batch_text.strip():
            try:
                batch = int(batch_text.strip(), 10)
            except ValueError:
                raise self.error(f"FlatBuffer batch size {batch_text[:32]!r} is not an integer") from None
            if batch < 0 or batch > _MAX_BATCH:
                raise self.error(f"FlatBuffer batch size {batch} is out of range")
            batch = max(batch, 1)

        subgraphs = root.vector(schema.m_subgraphs)
        if subgraphs is None or len(subgraphs) == 0:
            raise self.error("the FlatBuffer Model has no subgraphs")
        description = _literal_dict(root.bytes(schema.m_description))
        input_info = _json_dict(_optional(root.string, schema.m_input_info))
        output_info = _json_dict(_optional(root.string, schema.m_output_info))

        tensors = _index_tensors(subgraphs.table(0, "Subgraph"), schema)
        quant_tab = description.get("quant_tab") if description is not None else None
        if not isinstance(quant_tab, dict):
            quant_tab = {}
        inputs = [self.refine(t, input_info, tensors, quant_tab, _T_KIND_INPUT) for t in inputs]
        outputs = [self.refine(t, output_info, tensors, quant_tab, _T_KIND_OUTPUT) for t in outputs]

        fields = dict(
            npu_target=root.string(schema.m_target),
            compiler_version=_decode_compiler_version(compiler),
            toolkit_full_version=root.string(schema.m_toolkit_version),
            target_platform=root.string(schema.m_target_platform),
            framework=root.string(schema.m_framework),
            custom_string=_optional(root.string, schema.m_custom_string) or "",
            batch_size=batch,
            inference_type=_optional(root.string, schema.m_inference_type),
            dynamic_shapes=self.dynamic_shapes(root, inputs, schema),
            num_subgraphs=len(subgraphs),
            description=description,
            input_info=input_info,
            output_info=output_info,
        )
        return fields, inputs, outputs

    def refine(self, spec: TensorSpec, io_info, tensors, quant_tab, kind: int) -> TensorSpec:
        dtype = spec.dtype
        if not dtype:
            hint = io_info.get(spec.name) if io_info is not None else None
            value = hint.get("dtype") if isinstance(hint, dict) else None
            if isinstance(value, str) and value:
                dtype = self.dtype_name(value, spec.name)
            else:  # no I/O info (an rv1106 graph): the I/O tensor's own dtype, else the NPU's float16
                dtype = _dtype_from_tensors(tensors.get(spec.name, ()), kind) or "float16"
        quant = None
        if dtype == "int8":
            quant = _quant_from_tensors(tensors.get(spec.name, ()), kind)
            if quant is None:
                quant = _quant_from_tab(quant_tab.get(spec.name))
        return TensorSpec(spec.name, spec.shape, dtype, spec.layout, quant)

    def dynamic_shapes(self, root: Table, inputs: List[TensorSpec], schema: Schema) -> List[List[Tuple[int, ...]]]:
        ranges = _optional(root.vector, schema.m_dynamic_shapes)
        if ranges is None or len(ranges) == 0:
            return []
        # Observed: one ShapeRange per input, holding that input's shape in every set.
        per_range: List[List[Tuple[int, ...]]] = []
        for r, shape_range in enumerate(ranges.tables("ShapeRange")):
            shapes = shape_range.vector(0)
            count = len(shapes) if shapes is not None else 0
            if count > MAX_DYNAMIC_SHAPE_NUM:
                raise self.error(f"dynamic shape range {r} lists {count} shapes (max {MAX_DYNAMIC_SHAPE_NUM})")
            row = []
            for s in range(count):
                dims = shapes.table(s, "Shape").scalars(0, "i32")
                row.append(self.check_shape(list(dims or ()), f"dynamic shape {s} of range {r}"))
            per_range.append(row)
        n_inputs = len(inputs)
        if len(per_range) == n_inputs:
            n_sets = len(per_range[0])
            if any(len(row) != n_sets for row in per_range):
                raise self.error("the dynamic shape ranges hold different numbers of shapes")
            sets = [[per_range[i][s] for i in range(n_inputs)] for s in range(n_sets)]
        elif all(len(row) == n_inputs for row in per_range):
            sets = per_range  # one range per set instead (not observed)
        else:
            raise self.error(
                f"{len(per_range)} dynamic shape ranges do not match the model's {n_inputs} inputs"
            )
        for s, shapes in enumerate(sets):
            for spec, shape in zip(inputs, shapes):
                if len(shape) != len(spec.shape):
                    raise self.error(
                        f"dynamic shape set {s} gives input {spec.name!r} {len(shape)} dims, "
                        f"but it has {len(spec.shape)}"
                    )
        return sets


# ---------------------------------------------------------------------------
# Helpers


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _short(e: Exception) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) <= 120 else text[:117] + "..."


def _default_dtype(spec: TensorSpec) -> TensorSpec:
    """An unquantized tensor without a FlatBuffer to say more is float16 on the NPU."""
    if spec.dtype:
        return spec
    return TensorSpec(spec.name, spec.shape, "float16", spec.layout, spec.quant)


def _decode_compiler_version(value: int) -> Optional[str]:
    """20500 -> "2.5.0" (major*10000 + minor*100 + patch)."""
    if value <= 0:
        return None
    return f"{value // 10000}.{value // 100 % 100}.{value % 100}"


def _literal_dict(raw: Optional[bytes]) -> Optional[Dict[str, Any]]:
    """Model[3]: a Python-literal dict, parsed with ``ast.literal_eval`` only."""
    if not raw or len(raw) > _MAX_DESCRIPTION:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. SyntaxWarning for odd literals in corrupt text
            value = ast.literal_eval(raw.decode("utf-8"))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _json_dict(text: Optional[str]) -> Optional[Dict[str, Any]]:
    if not text:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _optional(read, slot: Optional[int]):
    """``read(slot)``, or ``None`` for a slot the schema does not have."""
    return None if slot is None else read(slot)


def _index_tensors(subgraph: Table, schema: Schema) -> Dict[str, List[Tuple[Table, Schema]]]:
    """Subgraph tensors by name (only names; their fields are read on demand)."""
    out: Dict[str, List[Tuple[Table, Schema]]] = {}
    vec = subgraph.vector(schema.sg_tensors)
    if vec is None:
        return out
    for tensor in vec.tables("Tensor"):
        name = tensor.string(schema.t_name)
        if name:
            out.setdefault(name, []).append((tensor, schema))
    return out


def _dtype_from_tensors(candidates, kind: int) -> Optional[str]:
    """The dtype of the I/O tensor of ``kind`` with this name (``None`` when there is none, or
    its dtype is not a tensor element type)."""
    for tensor, schema in candidates:
        if tensor.u8(schema.t_kind) == kind:
            name = DTYPES.get(tensor.u8(schema.t_dtype))
            return name if name in _DTYPE_ALIASES else None
    return None


def _quant_from_tensors(candidates, kind: int) -> Optional[QuantParams]:
    """Scale/zero point of the int8 tensor with this name, preferring the I/O kind."""
    ordered = sorted(candidates, key=lambda ts: ts[0].u8(ts[1].t_kind) != kind)
    for tensor, schema in ordered:
        if tensor.u8(schema.t_dtype) != _T_DTYPE_INT8:
            continue
        scale = tensor.scalars(schema.t_scale, "f32")
        zero_point = tensor.scalars(schema.t_zero_point, "i32")
        quant = _make_quant(scale, zero_point)
        if quant is not None:
            return quant
    return None


def _quant_from_tab(entry) -> Optional[QuantParams]:
    """Model[3] quant_tab entry (toolkit 2.5.0 leaves scale/zero_point empty there)."""
    if not isinstance(entry, dict):
        return None
    return _make_quant(entry.get("scale"), entry.get("zero_point"))


def _make_quant(scale, zero_point) -> Optional[QuantParams]:
    if not isinstance(scale, (list, tuple)) or not isinstance(zero_point, (list, tuple)):
        return None
    if len(scale) != 1 or len(zero_point) != 1:
        return None
    s, z = scale[0], zero_point[0]
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not _is_int(z):
        return None
    s = float(s)
    if not math.isfinite(s) or s <= 0 or not -128 <= z <= 127:
        return None
    return QuantParams("int8", (s,), (int(z),))
