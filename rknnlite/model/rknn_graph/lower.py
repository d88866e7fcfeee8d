"""Vendor op types -> the software executor's graph IR (:mod:`rknnlite.model.graph`).

:func:`lower_rockchip` turns a Rockchip ``.rknn`` file into a :class:`VendorModel`: the
``metadata`` and ``graph`` the software backend runs, chosen so that the vendor
simulator's semantics hold (``shared/reference/rknn-graph-execution.md`` §4, §5):

* **fp16 files** run in the executor's ``float16`` mode: each op computes in float from
  fp16 weights and float32 biases, and its output is rounded to fp16; the biases are not
  rounded (the graph's ``keep_float`` names, honoured by the executor), nor are the graph
  inputs (normalised with the file's mean/std in float32), which the executor reads as given
  in every graph.
* **int8 files** run in the executor's int8 mode (``graph.quant``): every int8 activation
  keeps the tensor's scale/zero point; convs and deconvs compute the NPU's exact integer
  accumulator from the input's codes and the integer weights and bias, then convert it per
  channel with the multiplier the node's DPU registers and bias blocks hold
  (:mod:`.accumulator`; rk3562 writes those registers in its own map,
  :func:`.regcmd.requant_t4`, and its fused activations and lookup tables too, :mod:`.t4act`;
  rk3576/rv1126b store the weight scales, :mod:`.f2act`); tensors the file keeps in fp16 (after
  ``exDataConvert``) are float32 here.

Lowering (one vendor node -> executor nodes):

=====================  =============================================================
InputOperator          none (its output is a graph input; NPU helper inputs ignored)
OutputOperator         none (its input is a graph output)
Conv, ConvRelu         Conv (``_activation="Relu"``); int8: VendorCodes, the integer
                       Conv, VendorRequant (Relu, Clip: its code range); a
                       compiler-inserted identity 1x1 conv (the NHWC -> NC1HWC2
                       "Pre_weight") -> Identity
ConvSigmoid,           Conv, then Sigmoid / x*Sigmoid(x) / HardSwish; int8 files (and
ConvExSwish,           int8 HardSigmoid): the integer accumulator, then the file's own
ConvHardSwish          lookup tables (VendorLutActivation, see :mod:`.lut`; rk3576/rv1126b:
                       Sigmoid and HardSigmoid only, their index map from :mod:`.f2act`)
ConvClip,              Conv, then Clip / LeakyRelu / HardSigmoid with the parameters
ConvLeakyRelu,         read from the node's DPU registers (rk3576/rv1126b: their own
ConvHardSigmoid        map and ``BnCfg`` / ``BsCfg`` tensors, :mod:`.f2act`); a Clip to
                       float16 bounds is the conv's own (fp16) or VendorRequant's code
                       range (int8)
ConvPRelu              Conv, then PRelu by the per-channel slopes of its (1, C, 1, 1) constant
                       (fp16: float16, read as the shortest decimals that round to them, the
                       ONNX values the simulator multiplies by; int8: int16 codes of 2^-14)
ConvAdd, ConvAddRelu   Conv, then Add of the residual (the extra activation input)
                       [, then Relu]; int8: the integer Conv, then VendorAddRequant;
                       ``auto_pad`` NOTSET, or VALID with pads 0 (a conv whose pads the
                       compiler moved into a Pad)
ConvReluAdd            Conv, Relu, then Add of the residual (fp16; int8 is refused)
ConvTranspose,         ConvTranspose (attributes from the BSON, checked against the CNA
ConvTranspose<act>     registers on rk3588/rk3566; a fused activation's node has only the
                       registers, :mod:`.deconv_regs`), then the fused part as a conv's (fp16:
                       all nine; int8: Relu and Clip, the others refused by name)
Add, Sub, Mul          Add, Sub, Mul (constant operands, plain or NC1HWC2: fp16-rounded
                       values in fp16 files, dequantized integers in int8 files)
Sigmoid, HardSwish     fp16: Sigmoid, HardSwish; int8: the input's integer codes, then the
                       file's own lookup tables (a DPU-only task; :func:`.lut.lower_lut_sigmoid`)
Relu                   Relu (standalone: on a graph input, for instance)
Tanh, Softplus, Elu,   fp16: the function (Elu's ``alpha`` from the BSON) [after the Conv,
ConvTanh               rounded to fp16 first]; int8: the file's own lookup tables, as Sigmoid
                       (rk3576/rv1126b ConvTanh: Tanh of the exact accumulator); int8 Elu refused
LeakyRelu, PRelu       LeakyRelu (``alpha`` from parameter table 9, checked against the BSON; ONNX
                       Abs compiles to slope -1), PRelu (slopes as ConvPRelu's): DPU-only tasks,
                       computed in float32, the output on its fp16 or int8 grid
Max, Min, Pow          Max, Min, Pow (Pow only as a square: a stored float32 exponent 2.0)
Clip, HardSigmoid      standalone: Clip by its two float32 constants; HardSigmoid (``alpha``,
                       ``beta`` from the BSON; int8 too: the simulator computes it so, not from
                       the lookup table the file loads; corpus standalone_hardsigmoid_*)
Exp, Erf, ReduceMax,   the ONNX op: the runtime's CPU ops (a node with NPU tasks is refused, but
ReduceMin, Sqrt        an fp16 Sqrt's, which the simulator computes as the rounded float function,
                       and rk3576/rv1126b's channel ReduceMax, whose scratch tensors .npu_reduce
                       checks); the reductions' axes from their int64 constant, keepdims from
                       parameter tables 53 / 54
Split                  Split (axis and sizes from the parameter table, checked against the
                       BSON and size constant; a part nothing reads, tensor index -1, is
                       computed under a name of its own; the compiler's channel split of a
                       wide conv has neither: its branch convs' partial sums stay float32
                       in fp16 files, as the simulator computes the unsplit conv)
MaxPool, AveragePool   MaxPool, AveragePool (attributes from the BSON; AveragePool's
                       count_include_pad and ceil_mode too)
Concat, Transpose      Concat (``axis``), Transpose (``perm``) from the BSON (a Concat without
                       BSON, the compiler's own after a grouped conv: its parameter table's axis)
Slice                  Slice (the stored int64 starts/ends/axes/steps)
Expand                 Expand (the stored int64 shape; the compiler's tiling of a
                       pooling window that covers the whole map)
Pad                    Pad (mode from parameter table 30, checked against the BSON: constant,
                       reflect, edge; the stored int64 pads; constant mode's float32 value.
                       The compiler's own Pads, which carry a conv's large pads, have no BSON)
exSDPAttention         Transpose, MatMul, Mul (``scale`` from the BSON), Softmax, MatMul
                       (YOLO11's and transformers' attention; fp16 files; float32 inside, the
                       output rounded)
exNorm                 Transpose, LayerNormalization (``eps`` from the parameter table, mode
                       ``layer`` over axes [1] of (N, C, 1, T)), Transpose: a LayerNorm (opset-13
                       chain or opset-17 op); the stored float16 scale and float32 bias (rounded
                       to fp16), the NPU's all-ones reduce-mean weights (float16 and bfloat16,
                       dtype code 16) checked; float32 inside, the output rounded; int8 files:
                       the scale and bias put on the int8 grids the file stores with them
exMatMul               Transpose, MatMul, Transpose: (H, K, 1, M) x (H, K, 1, N) -> (H, M, 1, N),
                       a MatMul of two activations; fp16 files: float32 inside; int8 files: the
                       operands' integer codes, the second converted as the CNA registers say
                       (``CVT_CON0..4``), the accumulator requantized (OUT_CVT)
exGelu, ConvExGelu     fp16: Gelu (exact, Erf form) [after the Conv, rounded to fp16 first];
                       int8 (rk3588 family): the file's own lookup tables, as Sigmoid (a MatMul
                       by a constant, PyTorch's Linear, is a 1x1 Conv; so is a Gather of tokens
                       by constant indices, with a 0/1 selection weight)
Resize                 Resize (parameters f0 coordinate mode, f4 mode, f5 nearest
                       mode; the stored float32 scales, or int64 sizes)
Gather                 Gather: an embedding lookup (a float16 constant table, int64 ids that are
                       a graph input; fp16 files)
exSoftmax13            Softmax (``axis`` from the parameter table)
BatchNormalization,    ChannelAffine [with Relu]: ``x * scale + bias`` per channel in float32 (the
BatchNormalizationRelu compiler's folded form: mean 0, variance 1, epsilon 0); fp16 files: the
                       stored float16 scale and float32 bias; int8 files: int16 scale codes and the
                       int32 bias in accumulator units (:mod:`.batchnorm`)
Reshape                Reshape (the stored int64 shape)
exDataConvert          Identity (int8 <-> float16 per its ``i_dtype``/``o_dtype``)
=====================  =============================================================

Every vendor op type not in :data:`SUPPORTED_OPS`, and every tensor, attribute or
parameter the lowering does not understand, raises
:class:`~rknnlite.errors.ModelInvalidError` naming it.  The file's weights are decoded
once here (new arrays in model layout); nothing else is copied.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

import numpy as np

from ...errors import ModelInvalidError
from ..graph import Graph, Node
from ..info import MetadataInfo
from ..metadata import ModelMetadata, Preprocess, build_metadata
from ..rockchip import RockchipModel
from ..spec import QuantParams, TensorSpec
from ..schema import T3
from .graph import UNREAD, VendorFile, VendorNode, VendorSubgraph, VendorTensor, attr_value, read_vendor_graph
from .graph import is_helper as _is_helper
from .batchnorm import lower_batch_norm
from .helpers import check_concat_selection, check_softmax_sum_weight
from .npu_reduce import check_reducemax_scratch
from .accumulator import Accumulator, emit_accumulator, emit_add_requant, emit_requant, fuse_codes, grid_code
from .f2act import (F2_ACT_LUT, F2_OUT_CVT_ACTIVATIONS, F2_PLATFORMS, clamp_from_zero, f2_activation, f2_conv_requant,
                    f2_fp16_activation, f2_slope_bits, f2_lut_stage, f2_lut_task, f2_plain_weight_zero_point,
                    f2_residual_shift, hard_sigmoid_slope)
from .lut import lower_lut_conv, lower_lut_sigmoid
from .recurrent import lower_lstm
from .deconv_regs import (RK3562_DECONV, RK3566_DECONV, RK3576_DECONV, RK3588_DECONV, RV1106_DECONV, DeconvEncoding,
                          deconv_params, input_fetch)
from .regcmd import (BN_CLIP_SHIFTED, BN_CLIP_SHIFTED_LITE, BN_LUT, BN_LUT_LITE, LEAKY_SLOPE_BITS, REG_CNA_CONV_CON1,
                     T4_BN_CFG_OF, T4_BN_LUT, TARGET_CNA, Requant, conv_bn_shift, fused_activation, node_registers,
                     read_tasks, requant_of, requant_t4)
from .t3conv import (T3_BN_LUT, T3_NPU, requant_t3, t3_clip_bound, t3_clip_low, t3_leaky_slope, t3_lut_stage,
                     t3_lut_task, t3_prelu_slope)
from .t3nodes import complete_t3_nodes, t3_unsupported_ops
from .t4act import t4_activation, t4_lut_stage, t4_lut_task
from .transformer import attention_grids, lower_gather, lower_gelu, lower_layer_norm, lower_matmul
from .regcmd import shortest_decimal as _shortest
from .regcmd import slope_decimal
from .validated import check_validated, toolkit_release
from .weights import (decode_compact_identity, decode_depthwise_weight, decode_float_bias, decode_int8_bias,
                      decode_int32_bias, decode_packed_identity, decode_weight, spare_lane_zero_point,
                      tiles_nbytes)

__all__ = ["SUPPORTED_OPS", "VendorGraph", "VendorModel", "lower_rockchip", "op_support", "vendor_op_counts"]

#: Vendor op types the lowering runs.
SUPPORTED_OPS: FrozenSet[str] = frozenset(
    "InputOperator OutputOperator Conv ConvRelu ConvClip ConvLeakyRelu ConvPRelu ConvHardSigmoid ConvSigmoid "
    "ConvExSwish ConvHardSwish ConvAdd ConvAddRelu ConvReluAdd ConvExGelu ConvTanh "
    "ConvTransposeRelu ConvTransposeClip ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeHardSigmoid "
    "ConvTransposeSigmoid ConvTransposeexSwish ConvTransposeHardSwish ConvTransposeTanh "
    "ConvTranspose Add Sub Mul AddRelu Sigmoid HardSwish Tanh Elu Softplus Exp Erf ReduceMax ReduceMin Sqrt Relu "
    "LeakyRelu PRelu Clip HardSigmoid Max Min Pow Expand exSDPAttention exNorm exMatMul exGelu Gather "
    "MaxPool AveragePool Concat Transpose Slice Split Resize exSoftmax13 Reshape exDataConvert exSwish ArgMax "
    "Pad BatchNormalization BatchNormalizationRelu exLSTM LSTM".split())

#: the fused part of each vendor conv op (None: a plain Conv)
_CONV_ACTIVATIONS = {"Conv": None, "ConvRelu": "Relu", "ConvClip": "Clip", "ConvLeakyRelu": "LeakyRelu",
                     "ConvPRelu": "PRelu", "ConvHardSigmoid": "HardSigmoid",
                     "ConvSigmoid": "Sigmoid", "ConvExSwish": "Swish", "ConvHardSwish": "HardSwish", "ConvAdd": "Add",
                     "ConvAddRelu": "AddRelu", "ConvReluAdd": "ReluAdd", "ConvExGelu": "Gelu",
                     "ConvTanh": "Tanh"}
#: the fused part of each vendor deconv op: a ConvTranspose followed by one of these has no BSON
#: and no parameter table, its attributes are in its registers (:mod:`.deconv_regs`)
_DECONV_ACTIVATIONS = {"ConvTranspose": None, "ConvTransposeRelu": "Relu", "ConvTransposeClip": "Clip",
                       "ConvTransposeLeakyRelu": "LeakyRelu", "ConvTransposePRelu": "PRelu",
                       "ConvTransposeHardSigmoid": "HardSigmoid", "ConvTransposeSigmoid": "Sigmoid",
                       "ConvTransposeexSwish": "Swish", "ConvTransposeHardSwish": "HardSwish",
                       "ConvTransposeTanh": "Tanh"}
#: the platforms per RKNN-Toolkit2 release before 2.5.0 whose depthwise deconvs' tap order (flipped, as
#: 2.5.0's on every platform, rv1106 and rv1103 too) was checked on an asymmetric kernel (corpus
#: deconv_depthwise*); elsewhere only a symmetric kernel runs
_DEPTHWISE_DECONV_TAPS_CHECKED = {"2.3.2": ("rk3588", "rk3566", "rk3568", "rk3562", "rk3576", "rv1106", "rv1103"),
                                  "2.3.0": ("rk3588", "rk3566", "rk3562", "rk3576", "rv1106", "rv1103"),
                                  "2.2.0": ("rk3588", "rk3566", "rk3562", "rk3576", "rv1106", "rv1103")}
#: fused parts that add the node's extra activation input (the residual; ReluAdd: Relu before the Add)
_RESIDUAL_ACTIVATIONS = ("Add", "AddRelu", "ReluAdd")
#: how far (relative to the largest) an rk3576/rv1126b conv's register weight scales may be from
#: the float16 ones its file stores
_STORED_SCALE_TOLERANCE = 1e-3
#: a bias-block channel multiplier below this (of a largest of 2^14 or 2^15) holds its channel's scale
#: to under 1 % (:meth:`_Lowering.note_coarse_multipliers`); the corpus's least is 95
_COARSE_MULTIPLIER = 64
#: how precisely (relative) an rk3576/rv1126b Tanh or Swish conv's weight scales must be held, by the
#: float16 copies its file stores or by its registers' multiplier ratios (float16 normals: 2^-12)
_TABLE_CONV_SCALE_PRECISION = 2.0 ** -7
#: fused activations an int8 file computes with the DPU lookup table (run from the file's tables: .lut)
_LUT_ACTIVATIONS = ("Sigmoid", "Swish", "HardSwish", "HardSigmoid", "Gelu", "Tanh")
#: standalone ops an int8 file runs on the DPU lookup table, an fp16 file as the function itself
_LUT_OPS = ("Sigmoid", "exSwish", "HardSwish", "HardSigmoid", "Tanh", "Elu", "Softplus")
#: fused activations whose parameters are DPU registers
_REGISTER_ACTIVATIONS = ("Clip", "LeakyRelu", "HardSigmoid")
# int8 lookup-table activations run from the tables on rk3576/rv1126b too, with the slopes beyond
# them (.f2act): HardSwish's match the simulator better so (hardswish_ops_rk3576: 90.6 -> 97.5 %
# exact); Swish computes the exact function, which matches its probe better (99.5 against 99.2 %)
_F2_LUT_ACTIVATIONS = ("Sigmoid", "HardSigmoid", "HardSwish", "Gelu")
#: the byte multiples an rk3576/rv1126b/rk3562 input conv's stated weight size rounds its output
#: channels' rows (``_ROW``) and then its whole kernel (``_KERNEL``) to (:meth:`_Lowering.stated_weight_size`)
_INPUT_CONV_ROW_ALIGN, _INPUT_CONV_KERNEL_ALIGN = 8, 16
#: ops the runtime runs on the CPU (no NPU task): float32 on the dequantized input, the result put on the
#: output's grid (int8) or rounded to fp16, as the simulator computes them
_CPU_OPS = ("Exp", "Erf", "ReduceMax", "ReduceMin", "Sqrt")
#: CPU ops an fp16 file runs as NPU tasks instead (Sqrt: dozens of DPU passes), which the simulator
#: computes as the float function rounded to float16 (corpus standalone_sqrt_*)
_FP16_NPU_FLOAT_OPS = ("Sqrt",)
#: Resize parameter values (strings in the table, as ONNX names them) the lowering passes on
_RESIZE_MODES = ("nearest", "linear")
_RESIZE_COORDS = ("asymmetric", "half_pixel", "align_corners", "pytorch_half_pixel")
_RESIZE_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
#: Pad modes the lowering runs (the vendor stores ONNX's mode string; "wrap" was never built)
_PAD_MODES = ("constant", "reflect", "edge")
#: the BSON attribute names each op's lowering reads or checks (the union of those the corpus and the
#: coverage builds hold; int8 exSDPAttention's q_matmul / q_softmax only name its grids, which its
#: registers give, and the older releases' q_add (2.2.0, 2.3.0) names one the simulator does not
#: apply: their int8 encoder layer's outputs are 2.5.0's bit for bit; Reshape's allowzero cannot
#: matter: the output shape is the tensor's); any other name is refused by name rather than
#: silently dropped
_BSON_ATTRIBUTES: Dict[str, FrozenSet[str]] = {op: frozenset(names.split()) for op, names in {
    "ArgMax": "axis keepdims select_last_index", "AveragePool": "ceil_mode count_include_pad kernel_shape pads strides",
    "Concat": "axis",
    "Conv": "auto_pad dilations group kernel_shape pads strides",
    "ConvTranspose": "auto_pad dilations group kernel_shape output_padding pads strides", "Gather": "axis",
    "MaxPool": "auto_pad ceil_mode dilations kernel_shape pads strides", "Pad": "mode", "Reshape": "allowzero",
    "Resize": "coordinate_transformation_mode mode nearest_mode", "Split": "axis", "Transpose": "perm",
    "exDataConvert": "i_dtype o_dtype", "exMatMul": "c_type", "exNorm": "axes eps mode",
    "exSDPAttention": "q_add q_matmul q_softmax scale",
    "exSoftmax13": "axis", "Elu": "alpha", "LeakyRelu": "alpha", "ReduceMax": "axes keepdims",
    "ReduceMin": "axes keepdims",
    "HardSigmoid": "alpha beta", "BatchNormalization": "epsilon momentum",
    "BatchNormalizationRelu": "epsilon momentum"}.items()}
_ACTIVATION_KINDS = ("input", "output", "activation")
_WEIGHT_KINDS = ("const", "generated")
#: an rv1106 container's weights end on a multiple of this many bytes
_T3_WEIGHT_ALIGN = 64
#: rk3562 and rk3576/rv1126b weights' NPU size may be rounded up to 16 bytes (a one-channel 3x3 deconv on
#: a graph input: tiles of 36 bytes, size 48; deconv_one_channel_input_rk3562, _rk3576_*_tk230/_tk220)
_T4_F2_WEIGHT_ALIGN = 16
#: an rv1106 depthwise weight: each channel's weight then its zero point, 64-byte aligned
_T3_DEPTHWISE = {"group": 1, "align": _T3_WEIGHT_ALIGN}
_IDENTITY_TOLERANCE = 1e-3


class VendorGraph(Graph):
    """A :class:`Graph` lowered from a vendor file.  ``keep_float`` names the tensors the
    executor keeps at float32 in float16 mode (float32 biases, fused-activation intermediates;
    graph inputs are kept in every graph), as the vendor simulator does."""

    #: the file's own Reshape / Transpose / identity-conv nodes convert an input's layout
    layout_rounds_inputs = False

    def __init__(self, *args, keep_float: Sequence[str] = (), round_fp16: Sequence[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.keep_float: FrozenSet[str] = frozenset(keep_float)
        self.round_fp16: FrozenSet[str] = frozenset(round_fp16)


@dataclass(frozen=True)
class VendorModel(MetadataInfo):
    """A vendor ``.rknn`` file ready for the software backend (a
    :class:`~rknnlite.model.info.ModelInfo`; ``input_preprocess`` is empty: the file's
    mean/std are :attr:`preprocess`, applied by :meth:`graph_inputs`).

    Attributes:
        metadata: I/O specs in the lowered graph's layout (the Rockchip reader's model order,
            e.g. NCHW; int8 inputs as float32 with their quantization), float dtype, dynamic
            shapes.  The software backend presents the inputs as librknnrt does (NHWC image
            inputs, :func:`rknnlite.backends.software.emulation.presented_input`), as for portable models.
        graph: the lowered :class:`VendorGraph`.
        rockchip: the file as :func:`~rknnlite.model.rockchip.read_rockchip` read it.
        preprocess: per input, the file's mean/std (``None`` when it is the identity),
            applied by :meth:`graph_inputs`.
        vendor_ops: the vendor op types of the file, in first-use order.
        feed_inputs: the inputs as the software backend takes them (float32 for the file's
            float16 inputs, which ``metadata.inputs`` reports as float16, as librknnrt does);
            see :attr:`rknnlite.backends.base.Backend.feed_inputs`.
        platform: the file's target platform (lower case; ``None`` when it names none).
        toolkit: the RKNN-Toolkit2 release that built it (``"2.5.0"``; ``None`` if unrecorded).
        precision: ``"fp16"``, ``"int8"`` (per-channel) or ``"int8-layer"`` (per-layer
            quantization), as the lowered convs showed.
        notes: what may keep a file that runs from the vendor simulator's outputs bit for bit,
            one sentence each naming the node (values the simulator takes from the source model
            that the file holds only rounded); ``rknnlite inspect`` shows them.
    """

    metadata: ModelMetadata
    graph: VendorGraph
    rockchip: RockchipModel
    preprocess: Tuple[Optional[Preprocess], ...] = ()
    vendor_ops: Tuple[str, ...] = field(default=())
    feed_inputs: Tuple[TensorSpec, ...] = field(default=())
    platform: Optional[str] = None
    toolkit: Optional[str] = None
    precision: str = "fp16"
    notes: Tuple[str, ...] = ()

    def summary(self) -> dict:
        """The file's JSON-ready description (:meth:`RockchipModel.summary`) with what the
        lowering made of it under ``"lowered"``: platform, toolkit release, precision and
        the vendor op types (first-use order)."""
        d = self.rockchip.summary()
        d["lowered"] = {"platform": self.platform, "toolkit": self.toolkit, "precision": self.precision,
                        "vendor_ops": list(self.vendor_ops), "notes": list(self.notes)}
        return d

    def graph_inputs(self, inputs: List[np.ndarray], pass_through: Optional[Sequence[bool]] = None) -> List[np.ndarray]:
        """``inputs`` (in the graph's layout, ``metadata.inputs``; float32 unless passed
        through) with the file's ``(x - mean[c]) / std[c]`` applied in float32, as the vendor
        runtime does before quantizing.  Passed-through inputs (already normalised) are
        returned as they are.  Normalised inputs are new arrays; the caller's are never
        changed."""
        out = list(inputs)
        for i, x in enumerate(out):
            p = self.preprocess[i] if i < len(self.preprocess) else None
            if p is None or (pass_through and pass_through[i]):
                continue
            shape = (1, len(p.mean)) + (1,) * (x.ndim - 2)
            y = np.empty(x.shape, np.float32)
            np.subtract(x, p.mean_array.reshape(shape), out=y, casting="unsafe")
            np.divide(y, p.std_array.reshape(shape), out=y)
            out[i] = y
        return out


def read_graph(payload, rockchip: RockchipModel) -> VendorFile:
    """The decoded graph of a vendor file: its model section, or the graph section of an rv1106
    container.

    Raises:
        ModelInvalidError: a file whose graph was not found (an rv1106 container whose
            sections could not be located: ``rockchip.graph_error``), or a malformed graph.
    """
    if not rockchip.flatbuffer:
        raise ModelInvalidError(f"{rockchip.label}: format {rockchip.format_version:#x} files (rv1106 container) "
                                f"keep their graph in a section that could not be read: {rockchip.graph_error}; such "
                                "a file cannot be run off-board", op="load")
    return read_vendor_graph(payload, rockchip.graph_offset, rockchip.graph_size, rockchip.label, rockchip.schema,
                             rockchip.packed)


def vendor_op_counts(payload, rockchip: RockchipModel) -> Dict[str, int]:
    """How many nodes of each vendor op type the file's first subgraph has (first-use order)."""
    return dict(Counter(node.op for node in read_graph(payload, rockchip).subgraphs[0].nodes))


def op_support(payload, rockchip: RockchipModel) -> List[Tuple[str, int, bool]]:
    """``[(vendor op type, node count, runs off-board), ...]`` for ``rknnlite inspect`` (in an
    rv1106 container, only the op types whose attributes were decoded from its registers)."""
    counts = vendor_op_counts(payload, rockchip)
    blocked = set(t3_unsupported_ops(list(counts))) if rockchip.schema is T3 else set()
    return [(op, n, op in SUPPORTED_OPS and op not in blocked) for op, n in counts.items()]


def lower_rockchip(payload, rockchip: RockchipModel, validate: bool = True,
                   custom: Callable[[str], bool] = lambda op: False, fuse: bool = True) -> VendorModel:
    """Lower a Rockchip ``.rknn`` file (``payload``: its bytes, ``rockchip``: what the reader
    made of them) for the software backend.  ``validate=False`` skips the check that the
    file's platform, toolkit version, precision and op types were validated against the
    vendor simulator (:mod:`.validated`; for the tools that gather that evidence).
    ``custom(op_type)``: whether a registered custom operator runs that op type (asked for the
    file's op types the lowering does not run itself: a ``cst*`` op, or a standard type compiled
    as custom); their nodes are lowered to nodes of that type with the file's attributes, for
    the operator to compute.  ``fuse=False`` keeps every vendor tensor of an int8 file in the
    graph (no :func:`.accumulator.fuse_codes`: for the tools that compare each tensor with the
    simulator's).

    Raises:
        ModelInvalidError: an op type, tensor, attribute or register this lowering does not
            know, a file outside the validated table, or a file without a FlatBuffer; the
            message names it and the file.
    """
    label = rockchip.label
    vf = read_graph(payload, rockchip)
    custom = frozenset(op for op in {n.op for sg in vf.subgraphs for n in sg.nodes} - SUPPORTED_OPS if custom(op))
    _check_ops(vf, label, custom)
    if rockchip.schema is T3:  # its nodes' attributes are in the registers
        vf = complete_t3_nodes(vf)
    _check_subgraphs(vf, label)
    model = _Lowering(vf, rockchip, custom, fuse).run()
    if validate:  # a custom op runs the user's code: only the file's own ops need the evidence
        check_validated(label, model.platform, model.toolkit, model.precision,
                        [op for op in model.vendor_ops if op not in custom])
    return model


def _check_ops(vf: VendorFile, label: str, custom: FrozenSet[str] = frozenset()) -> None:
    for sg in vf.subgraphs:
        for node in sg.nodes:
            if node.op not in SUPPORTED_OPS and node.op not in custom:
                missing = sorted({n.op for s in vf.subgraphs for n in s.nodes} - SUPPORTED_OPS - custom)
                raise ModelInvalidError(
                    f"{label}: vendor op type {node.op!r} ({node.label} of subgraph {sg.index}) cannot run off-board; "
                    f"unsupported here: {', '.join(missing)}; {_custom_hint(node.op)}; "
                    f"supported: {', '.join(sorted(SUPPORTED_OPS))}", op="load")
    for sg in vf.subgraphs:
        for node in sg.nodes:
            node.check_params()


def _custom_hint(op: str) -> str:
    """How to run op type ``op`` with a custom operator (both ways librknnrt offers)."""
    kind = "a custom op" if op.startswith("cst") else "an op the software backend lacks"
    return (f"{op!r} is {kind}: register it with Context(model, custom_ops=[obj]) (RKNN-Toolkit2's class form: "
            f"op_type {op!r} and compute(self, node, inputs), attributes through get_node_attr), or install a "
            f"librkcst_{op}.so plugin (the rknn_custom_op C ABI) in $RKNNLITE_OP_PLUGIN_DIR or "
            "/usr/lib/rknpu/op_plugins")


def _check_subgraphs(vf: VendorFile, label: str) -> None:
    """Dynamic-shape files hold one subgraph per shape set; one lowered graph runs them all, so
    they must differ only in activation shapes."""
    first = vf.subgraphs[0]
    for sg in vf.subgraphs[1:]:
        if [n.op for n in sg.nodes] != [n.op for n in first.nodes] or \
                [n.params for n in sg.nodes] != [n.params for n in first.nodes]:
            raise ModelInvalidError(f"{label}: subgraph {sg.index} runs other ops than subgraph 0; files whose "
                                    "shape sets compile to different graphs are not supported off-board", op="load")
        for a, b in zip(first.nodes, sg.nodes):
            # tensor indices (and helper inputs) differ between subgraphs: match constants by name
            theirs = {sg.tensors[t].name: sg.tensors[t] for t in b.inputs}
            for t0 in (first.tensors[t] for t in a.inputs):
                t1 = theirs.get(t0.name)
                if t0.kind == "shape" and (t1 is None or t1.kind != "shape" or
                                           bytes(vf.tensor_data(first, t0)) != bytes(vf.tensor_data(sg, t1))):
                    raise ModelInvalidError(
                        f"{label}: shape constant {t0.name!r} of {a.label} differs between subgraphs 0 and {sg.index}; "
                        "such dynamic-shape files are not supported off-board", op="load")


class _Lowering:
    def __init__(self, vf: VendorFile, rockchip: RockchipModel, custom: FrozenSet[str] = frozenset(),
                 fuse: bool = True):
        self.vf = vf
        self.custom = custom
        self.fuse = fuse
        self.rk = rockchip
        self.label = rockchip.label
        self.sg: VendorSubgraph = vf.subgraphs[0]
        self.names: Dict[int, str] = self._names()
        self.nodes: List[Node] = []
        self.constants: Dict[str, np.ndarray] = {}
        self.quant: Dict[str, QuantParams] = {}
        self.keep_float: List[str] = []
        #: :attr:`VendorModel.notes`, gathered by :meth:`note`
        self.notes: List[str] = []
        activations = [t for t in self.sg.tensors if t.kind in _ACTIVATION_KINDS]
        #: the int64 tensors an ArgMax writes (the only int64 activations observed)
        self.indices = {i for n in self.sg.nodes if n.op == "ArgMax" for i in n.outputs}
        #: int64 graph inputs that only a Gather's indices read (token ids of an embedding lookup)
        self.token_ids = {t.index for t in activations if t.kind == "input" and t.dtype == "int64" and
                          all(n.op == "Gather" and n.inputs[1:2] == (t.index,) for n in self.sg.nodes
                              if t.index in n.inputs)}
        #: the compiler's scratch copies of a ReduceMax's input (int16 in int8 files; rk3576/rv1126b:
        #: .npu_reduce), helper tensors among its inputs after the first
        self.reduce_scratch = {i for n in self.sg.nodes if n.op == "ReduceMax" for i in n.inputs[1:]
                               if 0 <= i < len(self.sg.tensors) and _is_helper(self.sg.tensors[i])}
        for t in activations:
            if t.dtype == "int64" and (t.index in self.indices or t.index in self.token_ids):
                continue
            if t.dtype == "int16" and t.index in self.reduce_scratch:  # checked by cpu_op
                continue
            if t.dtype not in ("float16", "float32", "int8"):
                raise self.error(f"activation tensor {t.index} ({t.name!r}) has dtype {t.dtype}; the lowering runs "
                                 "float16, float32 and int8 activations (and an ArgMax's int64 output, and int64 "
                                 "graph inputs that only a Gather's indices read)")
            if t.layout == "NHWC" and not _is_helper(t):  # seen only on rk3562's output helper tensors
                raise self.error(f"activation tensor {t.index} ({t.name!r}) has layout NHWC (code 1), which was "
                                 "observed only on NPU helper tensors, never on data the graph computes")
        self.int8 = any(t.dtype == "int8" for t in activations)
        #: the compiler's split of a wide conv (DeepLabV3's ASPP): a Split without size constant or BSON
        #: cuts the input channels into branches, one conv per branch, each adding the previous ones'
        #: result as its residual.  The simulator computes the unsplit conv, so in fp16 files the
        #: partial sums stay float32 and only the last conv's output is rounded.
        branches = {t for n in self.sg.nodes if n.op == "Split" and len(n.inputs) == 1 and not n.bson
                    for t in n.outputs}
        self.branch_convs = {n.index for n in self.sg.nodes
                             if n.op in _CONV_ACTIVATIONS and n.inputs and n.inputs[0] in branches}
        consumers: Dict[int, List[VendorNode]] = {}
        for n in self.sg.nodes:
            for t in n.inputs:
                consumers.setdefault(t, []).append(n)
        self.partial_sums = {n.outputs[0] for n in self.sg.nodes
                             if n.index in self.branch_convs and len(n.outputs) == 1 and consumers.get(n.outputs[0])
                             and all(c.index in self.branch_convs and c.inputs[0] != n.outputs[0]
                                     and _CONV_ACTIVATIONS[c.op] in _RESIDUAL_ACTIVATIONS
                                     for c in consumers[n.outputs[0]])}
        #: per int8 conv node: its quantization method, "channel" (bias blocks) or "layer" (plain bias)
        self.methods: Dict[int, str] = {}
        #: int8 tensor name -> the name of its integer codes (:func:`.accumulator.emit_codes`)
        self.codes: Dict[str, str] = {}
        #: per rk3576/rv1126b/rk3562 int8 depthwise conv node: the weight zero points its weight holds
        self.weight_zero_points: Dict[int, np.ndarray] = {}
        #: the compiler's own input convs whose weight is their tiles alone (:meth:`compiler_conv`)
        self.tiles_alone: Set[int] = set()
        #: per int8 deconv of one output channel (rk3576/rv1126b/rk3562): the weight zero point its
        #: weight tile's spare lanes hold (:func:`.weights.spare_lane_zero_point`)
        self.lane_zero_points: Dict[int, int] = {}
        self._tasks = None
        self._regcmd = None

    def error(self, message: str) -> ModelInvalidError:
        return ModelInvalidError(f"{self.label}: {message}", op="load")

    def _names(self) -> Dict[int, str]:
        counts = Counter(t.name for t in self.sg.tensors)
        return {t.index: t.name if t.name and counts[t.name] == 1 else f"{t.name or 'tensor'}#{t.index}"
                for t in self.sg.tensors}

    # -- driver ------------------------------------------------------------------------------

    def run(self) -> VendorModel:
        sg = self.sg
        in_names = [self.names[i] for i in sg.inputs]
        out_names = [self.names[i] for i in sg.outputs]
        specs_in, specs_out = list(self.rk.inputs), list(self.rk.outputs)
        if in_names != [s.name for s in specs_in] or out_names != [s.name for s in specs_out]:
            raise self.error(f"the graph's I/O tensors {in_names} -> {out_names} are not the JSON trailer's "
                             f"{[s.name for s in specs_in]} -> {[s.name for s in specs_out]}")
        for node in sg.nodes:
            self.lower(node)
        if self.fuse:
            self.nodes = fuse_codes(self.nodes, out_names)
        produced = set(in_names) | {name for node in self.nodes for name in node.outputs}
        for t in sg.tensors:
            if t.kind in _ACTIVATION_KINDS and t.dtype == "int8" and self.names[t.index] in produced:
                self.quant[self.names[t.index]] = self.activation_quant(t)
        # an int8 file's float16 tensors (after exDataConvert) are stored as float16 there too
        round_fp16 = [self.names[t.index] for t in sg.tensors if self.int8 and t.kind in _ACTIVATION_KINDS
                      and t.dtype == "float16" and self.names[t.index] in produced]
        graph = VendorGraph(self.nodes, in_names, out_names, self.constants, self.quant, keep_float=self.keep_float,
                            round_fp16=round_fp16)
        graph.validate()
        preprocess = tuple(self.preprocess(i, spec) for i, spec in enumerate(specs_in))
        batch = self.batch_size()
        attrs_in = [_batched(_input_spec(s, self.dynamic_dims(sg.inputs, k)), batch) for k, s in enumerate(specs_in)]
        metadata = build_metadata(
            attrs_in,
            [_batched(_with_dims(s, self.dynamic_dims(sg.outputs, k)), batch) for k, s in enumerate(specs_out)],
            producer="RKNN-Toolkit2", producer_version=self.rk.toolkit_version or "",
            target_platforms=tuple(self.rk.target_platforms) or ((self.rk.target_platform,) if self.rk.target_platform
                                                                 else ("rk3588",)),
            custom_string=self.rk.custom_string or "",
            float_dtype="float32" if self.int8 else "float16",
            quantization="int8" if self.int8 else None,
            dynamic_shapes=tuple(tuple(tuple(shape) for shape in shape_set) for shape_set in self.rk.dynamic_shapes),
            batch_size=batch,
        )
        ops = tuple(dict.fromkeys(n.op for n in sg.nodes))
        return VendorModel(metadata, graph, self.rk, preprocess, ops, tuple(_float32(s) for s in attrs_in),
                           platform=self.platform(),
                           toolkit=toolkit_release(self.rk.toolkit_version or self.rk.compiler_version),
                           precision=self.precision(), notes=tuple(self.notes))

    def batch_size(self) -> int:
        """``rknn_batch_size`` of the build.  Such a file stores the one-sample graph (every I/O
        tensor with axis 0 of 1) and the software backend runs it sample by sample, as it runs
        a portable multi-batch model; the I/O specs get axis 0 multiplied by the batch size,
        as librknnrt reports them."""
        batch = int(self.rk.batch_size or 1)
        if batch == 1:
            return 1
        if self.rk.dynamic_shapes or len(self.vf.subgraphs) > 1:
            raise self.error(f"built with rknn_batch_size={batch} and dynamic shapes; the two together are not "
                             "supported off-board")
        for t in [self.sg.tensor(i, "I/O") for i in tuple(self.sg.inputs) + tuple(self.sg.outputs)]:
            if not t.shape or t.shape[0] != 1:
                raise self.error(f"built with rknn_batch_size={batch}, but I/O tensor {t.name!r} has shape "
                                 f"{list(t.shape)}; a one-sample graph (axis 0 of 1) was expected")
        return batch

    def dynamic_dims(self, io: Tuple[int, ...], k: int) -> Tuple[int, ...]:
        """The model shape of I/O tensor ``k`` (``io``: subgraph 0's input or output list) with
        ``-1`` for each dim that differs between the subgraphs (the shape sets)."""
        which = "inputs" if io is self.sg.inputs else "outputs"
        shapes = []
        for sg in self.vf.subgraphs:
            ids = getattr(sg, which)
            if len(ids) != len(io):
                raise self.error(f"subgraph {sg.index} has {len(ids)} {which}, subgraph 0 has {len(io)}")
            shapes.append(sg.tensor(ids[k], f"{self.label}: subgraph {sg.index} {which}").shape)
        if any(len(shape) != len(shapes[0]) for shape in shapes):
            raise self.error(f"{which[:-1]} {k} has different ranks in the subgraphs: {shapes}")
        return tuple(d if all(shape[j] == d for shape in shapes) else -1 for j, d in enumerate(shapes[0]))

    def lower(self, node: VendorNode) -> None:
        if node.op == "InputOperator":
            self.check_io(node, node.outputs, "input", self.sg.inputs)
        elif node.op == "OutputOperator":
            self.check_io(node, node.inputs, "output", self.sg.outputs)
        elif node.op in _CONV_ACTIVATIONS:
            self.conv(node)
        elif node.op in _DECONV_ACTIVATIONS:
            self.deconv(node)
        elif node.op == "ArgMax":
            self.argmax(node)
        elif node.op in ("Add", "Sub", "Mul", "AddRelu", "Max", "Min", "Pow"):
            self.elementwise(node)
        elif node.op in _LUT_OPS:
            self.lut_activation(node)
        elif node.op == "Relu":
            self.emit(node, "Relu", [self.elementwise_input(node)[0]], {})
        elif node.op in ("LeakyRelu", "PRelu"):
            self.leaky_relu(node)
        elif node.op == "Clip":
            self.clip(node)
        elif node.op == "Split":
            self.split(node)
        elif node.op in ("MaxPool", "AveragePool"):
            self.pool(node)
        elif node.op == "Concat":
            rank = len(self.tensor(node.inputs[0], node).shape) if node.inputs else 0
            # the compiler's own Concat (of a grouped conv's per-group convs) has no BSON: its table's axis
            axis = self.bson_int(node, "axis") if node.attrs or "axis" not in node.params else node.params["axis"]
            if not -rank <= axis < rank:
                raise self.error(f"{node.label}: axis {axis} of a rank-{rank} input")
            if node.attrs and "axis" in node.params and (node.params["axis"] - axis) % rank:
                raise self.error(f"{node.label}: the BSON's axis {axis} and the parameter table's "
                                 f"{node.params['axis']} name different axes of a rank-{rank} input")
            inputs = self.activation_inputs(node, 1, 1 << 16)
            parts = [self.tensor(i, node) for i in node.inputs if self.names.get(i) in inputs]
            check_concat_selection(self, node, [int(t.shape[axis]) for t in parts])
            self.emit(node, "Concat", inputs, {"axis": axis})
        elif node.op == "Transpose":
            perm = self.bson_ints(node, "perm")
            rank = len(self.tensor(node.inputs[0], node).shape) if node.inputs else 0
            if sorted(perm) != list(range(rank)):
                raise self.error(f"{node.label}: perm {perm} is not a permutation of a rank-{rank} input's axes")
            self.emit(node, "Transpose", self.activation_inputs(node, 1, 1), {"perm": perm})
        elif node.op == "Slice":
            self.slice(node)
        elif node.op == "Expand":
            self.expand(node)
        elif node.op == "Pad":
            self.pad(node)
        elif node.op == "exSDPAttention":
            self.sdp_attention(node)
        elif node.op == "exNorm":
            lower_layer_norm(self, node)
        elif node.op == "exMatMul":
            lower_matmul(self, node)
        elif node.op in ("BatchNormalization", "BatchNormalizationRelu"):
            lower_batch_norm(self, node)
        elif node.op == "exGelu":
            lower_gelu(self, node)
        elif node.op == "Gather":
            lower_gather(self, node)
        elif node.op in ("exLSTM", "LSTM"):
            lower_lstm(self, node)
            return  # its blob is no BSON document (.recurrent)
        elif node.op == "Resize":
            self.resize(node)
        elif node.op == "exSoftmax13":
            axis = int(node.params.get("axis", 1))
            if attr_value(node, "axis", axis) != axis:
                raise self.error(f"{node.label}: BSON axis {attr_value(node, 'axis')} is not the parameter table's "
                                 f"{axis}")
            data = self.activation_inputs(node, 1, 1)
            check_softmax_sum_weight(self, node, int(self.tensor(node.inputs[0], node).shape[axis]))
            self.emit(node, "Softmax", data, {"axis": axis})
        elif node.op == "Reshape":
            self.reshape(node)
        elif node.op in _CPU_OPS:
            self.cpu_op(node)
        elif node.op == "exDataConvert":
            self.data_convert(node)
        elif node.op in self.custom:
            self.custom_node(node)
            return  # a custom op's attributes are its implementation's to read
        else:  # _check_ops let an op through that nothing lowers
            raise self.error(f"vendor op type {node.op!r} ({node.label}) has no lowering")
        if node.op not in ("InputOperator", "OutputOperator"):
            unread = sorted(set(node.attrs) - _BSON_ATTRIBUTES.get(node.op, frozenset()))
            if unread:  # e.g. exMatMul's c_type, which a lowering that does not read it would drop
                raise self.error(f"{node.label}: BSON attribute(s) {unread} of a {node.op}, whose meaning the lowering "
                                 f"does not read (it reads {sorted(_BSON_ATTRIBUTES.get(node.op, ())) or 'none'})")

    # -- helpers -----------------------------------------------------------------------------

    def tensor(self, index: int, node: VendorNode) -> VendorTensor:
        return self.sg.tensor(index, f"{self.label}: {node.label}")

    def single_output(self, node: VendorNode) -> VendorTensor:
        if len(node.outputs) != 1:
            raise self.error(f"{node.label} has {len(node.outputs)} outputs; the lowering expects one")
        out = self.tensor(node.outputs[0], node)
        if out.kind not in ("activation", "output"):
            raise self.error(f"{node.label} writes a {out.kind} tensor ({out.name!r}), expected an activation")
        return out

    def activation_inputs(self, node: VendorNode, least: int, most: int) -> List[str]:
        """The node's activation inputs (NPU helper inputs, constants the NPU made up, dropped)."""
        names = [self.names[i] for i in node.inputs
                 if self.tensor(i, node).kind in _ACTIVATION_KINDS and not _is_helper(self.tensor(i, node))]
        if not least <= len(names) <= most:
            raise self.error(f"{node.label} has {len(names)} activation inputs; {node.op} takes "
                             f"{least if least == most else f'{least}..{most}'}")
        return names

    def elementwise_input(self, node: VendorNode) -> Tuple[str, VendorTensor, VendorTensor]:
        """``(name, input tensor, output tensor)`` of an element-wise op of one activation input (an
        activation function), whose output must have the input's shape."""
        (data,) = self.activation_inputs(node, 1, 1)
        x, out = self.tensor(node.inputs[0], node), self.single_output(node)
        if list(x.shape) != list(out.shape):
            raise self.error(f"{node.label}: input shape {list(x.shape)} is not its output shape {list(out.shape)}")
        return data, x, out

    def emit(self, node: VendorNode, op: str, inputs: List[str], attrs: dict, output: Optional[str] = None) -> None:
        out = output or self.names[self.single_output(node).index]
        self.nodes.append(Node(op, node.name or f"{node.op}#{node.index}", inputs, [out], attrs))

    def bson(self, node: VendorNode, name: str, default=None):
        """ONNX attribute ``name`` from the node's BSON (``default`` when absent); ModelInvalidError
        when it is absent without a default."""
        value = attr_value(node, name, default)
        if value is None:
            raise self.error(f"{node.label} has no {name!r} attribute in its BSON")
        return value

    def bson_int(self, node: VendorNode, name: str, default: Optional[int] = None) -> int:
        """Integer ONNX attribute ``name`` (see :meth:`bson`); ModelInvalidError naming it when
        the BSON holds something else there."""
        return self._integer(node, name, self.bson(node, name, default))

    def bson_float(self, node: VendorNode, name: str, default: Optional[float] = None) -> float:
        """Finite real ONNX attribute ``name`` (see :meth:`bson`); ModelInvalidError naming it when
        the BSON holds something else there."""
        value = self.bson(node, name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not np.isfinite(value):
            raise self.error(f"{node.label}: BSON attribute {name!r} holds {value!r}, not a finite number")
        return float(value)

    def bson_ints(self, node: VendorNode, name: str, default: Optional[List[int]] = None) -> List[int]:
        """Integer-list ONNX attribute ``name`` (see :meth:`bson_int`)."""
        value = self.bson(node, name, default)
        if not isinstance(value, (list, tuple)):
            raise self.error(f"{node.label}: BSON attribute {name!r} is {value!r}, not a list of integers")
        return [self._integer(node, name, v) for v in value]

    def _integer(self, node: VendorNode, name: str, value) -> int:
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise self.error(f"{node.label}: BSON attribute {name!r} holds {value!r}, not an integer")

    def const_operand(self, node: VendorNode, t: VendorTensor) -> str:
        """A constant operand of an element-wise op (plain layout) as a float32 model-shape array:
        float values as stored (rounded to fp16 in an fp16 file, as the vendor simulator does),
        integer ones dequantized with the tensor's scale/zero point."""
        blocked = t.layout == "NC1HWC2"  # float constants beside NPU-layout activations (YOLOv8's anchor grid)
        if t.layout not in ("plain", "NCHW") and not blocked:
            raise self.error(f"{node.label}: constant {t.name!r} has layout {t.layout}; plain, NCHW or NC1HWC2 "
                             "constants only")
        if blocked and (len(t.shape) != 4 or len(t.npu_shape) != 5 or t.npu_shape[:1] != t.shape[:1]
                        or t.npu_shape[2:4] != t.shape[2:] or t.npu_shape[1] * t.npu_shape[4] < t.shape[1]
                        or t.dtype not in ("float16", "float32", "int8")):
            raise self.error(f"{node.label}: NC1HWC2 constant {t.name!r} ({t.dtype}, NPU shape {list(t.npu_shape)}) "
                             f"does not hold a float or int8 tensor of shape {list(t.shape)}")
        if blocked and t.dtype == "int8":
            # corpus dist2bbox_i8, layer by layer: with the ONNX's float constants every op equals the
            # simulator's output; with this int8 copy 60-75 % do (docs/vendor-format-notes.md)
            raise self.error(f"{node.label}: int8 constant {t.name!r} in NC1HWC2 layout (an int8 anchor grid or "
                             f"stride table, scale {t.scale[0] if t.scale else '?'}): the vendor simulator computes "
                             "with the ONNX model's float values, which the file does not hold (its int8 copy "
                             "rounds each by up to half a step), so off-board results would differ from the "
                             "simulator's (2-3 output steps on 4.8 % of values); refused")
        dtypes = {"float32": "<f4", "float16": "<f2", "int32": "<i4", "int8": "i1", "int16": "<i2"}
        if t.dtype not in dtypes:
            raise self.error(f"{node.label}: constant {t.name!r} has dtype {t.dtype}")
        stored = t.npu_shape if blocked else t.shape
        count = int(np.prod(stored)) if stored else 1
        item = np.dtype(dtypes[t.dtype])
        raw = self.vf.tensor_data(self.sg, t, need=count * item.itemsize)
        if len(raw) < count * item.itemsize:
            raise self.error(f"{node.label}: constant {t.name!r} needs {count * item.itemsize} bytes, has {len(raw)}")
        values = np.frombuffer(raw, item, count).reshape(stored)
        if blocked:  # (N, C1, H, W, C2) -> (N, C1 * C2, H, W), the padding channels dropped
            n, c1, h, w, c2 = stored
            values = np.ascontiguousarray(values.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c2, h, w)[:, :t.shape[1]])
        if item.kind == "f":
            array = values.astype(np.float32)
        else:
            if len(t.scale) != 1:
                raise self.error(f"{node.label}: integer constant {t.name!r} has no single scale to dequantize it")
            zp = t.zero_point[0] if t.zero_point else 0
            array = ((values.astype(np.float64) - zp) * t.scale[0]).astype(np.float32)
        return self.constant(self.names[t.index], array)  # an fp16 file rounds them (bit-exact that way)

    def float32_scalar(self, node: VendorNode, t: VendorTensor, what: str) -> float:
        """The one value of a float32 constant of one element (a PRelu's single slope, a Clip
        bound, a Pow exponent, a Pad's constant_value), exactly as stored: these stay float32 in fp16 and int8 files alike,
        unlike :meth:`const_operand`'s operands, which an fp16 file rounds."""
        raw = bytes(self.vf.tensor_data(self.sg, t)) if t.kind in ("shape", "const") else b""
        count = int(np.prod(t.shape)) if t.shape else 1
        if t.dtype != "float32" or count != 1 or len(raw) < 4:
            raise self.error(f"{node.label}: {what} {t.name!r} is a {t.dtype} {t.kind} {list(t.shape)} of "
                             f"{len(raw)} bytes; one float32 constant was expected")
        return float(np.frombuffer(raw, "<f4", 1)[0])

    def constant(self, name: str, value: np.ndarray, keep_float: bool = False) -> str:
        self.constants[name] = value
        if keep_float:
            self.keep_float.append(name)
        return name

    def check_io(self, node: VendorNode, tensors: Tuple[int, ...], kind: str, listed: Tuple[int, ...]) -> None:
        io = [t for t in tensors if t in listed]
        if len(io) != 1:
            raise self.error(f"{node.label} does not name exactly one of the subgraph's {kind} tensors")

    def activation_quant(self, t: VendorTensor) -> QuantParams:
        if len(t.scale) != 1 or len(t.zero_point) != 1 or not t.scale[0] > 0 or not -128 <= t.zero_point[0] <= 127:
            raise self.error(f"int8 tensor {t.index} ({t.name!r}) has scale {list(t.scale)} and zero point "
                             f"{list(t.zero_point)}; one positive scale and one int8 zero point were expected")
        return QuantParams("int8", (float(t.scale[0]),), (int(t.zero_point[0]),))

    def preprocess(self, index: int, spec: TensorSpec) -> Optional[Preprocess]:
        """The file's mean/std of input ``index`` (Description attrs, else the subgraph's
        Preproc table), ``None`` when it is the identity."""
        attrs = (self.rk.description or {}).get("attrs", {})
        entry = attrs.get(spec.name) if isinstance(attrs, dict) else None
        channels = spec.shape[1] if len(spec.shape) == 4 else 0
        if index < len(self.sg.preproc):
            order = self.sg.preproc[index][2]
            stored = min(channels, len(order))  # the table holds at most 4 channels
            if list(order[:stored]) != list(range(stored)):
                raise self.error(f"input {spec.name!r} has channel order {list(order)}; reordering is not "
                                 "supported off-board yet")
        if isinstance(entry, dict) and "mean" in entry and "std" in entry:
            # ``rgb2bgr`` (config(quant_img_RGB2BGR=True)) only reversed the calibration images: the
            # runtime and the simulator apply mean/std to the data as given, and the file's Preproc
            # channel order stays the identity, so the flag changes nothing here.
            mean, std = (self.one_value_per_channel(spec, index, entry[k], k) for k in ("mean", "std"))
        elif index < len(self.sg.preproc):
            mean, std, _ = self.sg.preproc[index]
            if channels > len(mean):
                raise self.error(f"input {spec.name!r}: the Preproc table holds {len(mean)} means for "
                                 f"{channels} channels and the Description has none")
            mean, std = mean[:channels], std[:channels]
        else:
            return None
        try:
            mean = tuple(float(v) for v in mean)
            std = tuple(float(v) for v in std)
        except (TypeError, ValueError):
            raise self.error(f"input {spec.name!r} has a non-numeric mean/std") from None
        if all(m == 0 for m in mean) and all(s == 1 for s in std):
            return None
        if len(spec.shape) != 4 or len(mean) != spec.shape[1] or len(std) != len(mean) or 0 in std:
            raise self.error(f"input {spec.name!r} of shape {list(spec.shape)} has {len(mean)} means and "
                             f"{len(std)} stds; per-channel values for axis 1 (no zero std) were expected")
        return Preprocess(mean, std)

    def one_value_per_channel(self, spec: TensorSpec, index: int, values, what: str):
        """The Description's ``mean`` or ``std`` of input ``index``, one value per channel.
        RKNN-Toolkit2 2.5.0 writes an all-zero mean as ``[0]`` whatever the channels (``mean_values=
        [[0, 0, 0]]``, Ultralytics' export, gives ``mean [0]`` beside ``std [255, 255, 255]``; 2.3.2
        wrote ``[0, 0, 0]``): a single value stands for every channel, and must be the subgraph's
        Preproc table's, which holds one per channel (up to 4)."""
        channels = spec.shape[1] if len(spec.shape) == 4 else 0
        if not isinstance(values, list) or len(values) != 1 or channels <= 1:
            return values
        if index < len(self.sg.preproc):
            table = self.sg.preproc[index][0 if what == "mean" else 1][:channels]
            if any(v != values[0] for v in table):
                raise self.error(f"input {spec.name!r}: the Description's one {what} value {values[0]!r} is not the "
                                 f"Preproc table's per-channel {what} {list(table)}")
        return values * channels

    # -- op lowerings ------------------------------------------------------------------------

    def conv(self, node: VendorNode) -> None:
        if node.param_type != 1:
            raise self.error(f"{node.label} has parameter-union type {node.param_type}; a conv table (1) was expected")
        out = self.single_output(node)
        if len(node.inputs) < 2:
            raise self.error(f"{node.label} has no weight input")
        x = self.tensor(node.inputs[0], node)
        w = self.tensor(node.inputs[1], node)
        b = self.tensor(node.inputs[2], node) if len(node.inputs) > 2 else None
        if b is not None and b.kind not in _WEIGHT_KINDS:
            b = None
        extra = [self.tensor(i, node) for i in node.inputs[3 if b is not None else 2:]]
        if x.kind not in _ACTIVATION_KINDS or w.kind not in _WEIGHT_KINDS or w.layout != "weight":
            raise self.error(f"{node.label}: inputs {x.kind} {x.name!r}, {w.kind}/{w.layout} {w.name!r} are not an "
                             "activation and a tiled weight")
        extra = [t for t in extra if t.kind in _ACTIVATION_KINDS and not _is_helper(t)]
        activation = _CONV_ACTIVATIONS[node.op]
        residuals = 1 if activation in _RESIDUAL_ACTIVATIONS else 0
        if len(extra) != residuals:
            raise self.error(f"{node.label} has {len(extra)} extra activation inputs "
                             f"{[t.name for t in extra]}; {node.op} takes {residuals}")
        p = node.params
        group = int(p.get("group", 1))
        kernel = list(p["kernel_shape"])
        where = f"{self.label}: {node.label} weight {w.name!r}"
        raw = self.vf.tensor_data(self.sg, w)
        # rk3576/rv1126b int8 convs on a graph input may store their weight packed, and their
        # depthwise convs (rk3562's too) the weight zero points beside the weights
        first = self.int8 and self.f2_platform() and x.kind == "input"
        packed = first and self.packed_weight(node, where, group)
        depthwise_zero_points = self.f2_platform() or self.t4_platform() or self.t3_platform()
        # a depthwise conv on a graph input (CONV_CON1 low bits 1) holds them too, but for the compiler's
        # own input conv, whose weight is the tiles alone (per layer: the zero point in its BScfgTensor,
        # on rk3562 and rv1106 in its registers: input_depthwise_*)
        if self.compiler_conv(node, w) and (first or self.t4_platform() or (self.t3_platform() and x.kind == "input"
                                                                             and group > 1)):
            self.tiles_alone.add(node.index)
        if (self.int8 and depthwise_zero_points and group > 1 and node.index not in self.tiles_alone
                and w.dtype == "int8"):
            weight, self.weight_zero_points[node.index] = decode_depthwise_weight(
                raw, w.npu_shape, w.shape, where, w.size, **(_T3_DEPTHWISE if self.t3_platform() else {}))
        elif not packed and self.compact_input_weight(node, w):
            weight = decode_compact_identity(raw, w.shape, w.dtype, w.size, where)
        elif packed and self.compiler_input_conv(node, w) and tuple(w.shape[2:]) == (1, 1):
            iblk = w.npu_shape[5] if len(w.npu_shape) == 6 else 0
            weight = decode_packed_identity(raw, w.shape, iblk, w.size, where)
        else:
            weight = decode_weight(raw, w.npu_shape, w.shape, w.dtype, where,
                                   self.stated_weight_size(x, w, raw, packed), packed=packed, align=self.weight_align())
        channels_in = x.shape[1] if len(x.shape) == 4 else -1
        if group > 1:
            if not (w.shape[0] == 1 and w.shape[1] == group == channels_in):
                raise self.error(f"{node.label}: a group-{group} conv with weight shape {list(w.shape)} on "
                                 f"{channels_in} channels; only depthwise weights [1, C, kh, kw] were decoded")
            weight = np.ascontiguousarray(weight.transpose(1, 0, 2, 3))
        elif weight.shape[1] != channels_in:
            raise self.error(f"{node.label}: weight {list(weight.shape)} does not match input channels {channels_in}")
        if list(weight.shape[2:]) != kernel:
            raise self.error(f"{node.label}: weight {list(weight.shape)} does not match kernel_shape {kernel}")
        attrs = {"kernel_shape": kernel, "pads": list(p["pads"]), "strides": list(p["strides"]),
                 "dilations": list(p["dilations"]), "group": group}
        # VALID (no padding) is what the compiler writes on a conv whose pads it moved into a Pad of its own
        if p.get("auto_pad", "NOTSET") not in ("NOTSET", "") and not (p["auto_pad"] == "VALID" and not any(p["pads"])):
            raise self.error(f"{node.label} has auto_pad {p['auto_pad']!r} with pads {list(p['pads'])}; only explicit "
                             "pads (NOTSET), or VALID with pads 0, are supported")
        _check_conv_shape(self, node, x, out, weight.shape, attrs)
        if self.int8 and self.t4_platform() and activation not in T4_BN_CFG_OF:
            raise self.error(f"{node.label}: {node.op} in an int8 rk3562 file: the registers of its fused "
                             f"{activation} were not decoded (plain, Relu, Clip, LeakyRelu, PRelu, lookup-table and "
                             "residual Add and AddRelu convs were)")
        if self.int8 and activation == "ReluAdd":
            raise self.error(f"{node.label}: an int8 ConvReluAdd: the simulator puts the Relu's output on an int8 "
                             "grid of its own before the Add, a scale the file does not hold (its registers add the "
                             "unrounded Relu), so no decoding of it was checked")
        if self.int8:
            if activation in _LUT_ACTIVATIONS and self.t4_platform():  # the file's tables, rk3562's map
                depthwise = node.index in self.weight_zero_points
                lower_lut_conv(self, node, x, out, w, weight, b, attrs, activation,
                               stage_of=lambda tables: t4_lut_stage(self, node, activation, depthwise))
                return
            if activation in _LUT_ACTIVATIONS and self.t3_platform():  # rk3588's table map, rv1106's requantization
                regs = node_registers(self.regcmd(), self.tasks(), node.index, f"{self.label}: {node.label}")
                depthwise = node.index in self.weight_zero_points
                lower_lut_conv(self, node, x, out, w, weight, b, attrs, activation, stage_of=lambda tables: t3_lut_stage(
                    regs, f"{self.label}: {node.label}", activation, depthwise))
                return
            if activation in _LUT_ACTIVATIONS and self.stored_scales_tensor(w) is None:
                lower_lut_conv(self, node, x, out, w, weight, b, attrs, activation)  # the file's tables, rk3588 map
                return
            if activation in _F2_LUT_ACTIVATIONS:  # rk3576/rv1126b: the file's tables, their own index map
                lower_lut_conv(self, node, x, out, w, weight, b, attrs, activation,
                               stage_of=lambda tables: f2_lut_stage(self, node, out, tables, activation))
                return
            unit, acc = self.int8_conv_constants(node, activation, x, out, w, weight, b, extra[0] if extra else None)
            weight_f = bias_f = params = None
            if self.f2_platform() and activation in _REGISTER_ACTIVATIONS:  # rk3576/rv1126b: their own map (.f2act)
                params = f2_activation(self, node, activation, x, out, b, weight.shape[0], unit)
            elif self.t4_platform() and activation in _REGISTER_ACTIVATIONS:  # rk3562: its own map (.t4act)
                params = t4_activation(self, node, activation, x, out, b, unit)
            elif self.t3_platform() and activation in ("LeakyRelu", "PRelu", "Clip"):  # rv1106: its registers
                params = self.t3_activation(node, activation, x, out, b, weight.shape[0], unit)
        else:
            params, acc = None, None
            if activation in _REGISTER_ACTIVATIONS and self.f2_platform():  # rk3576/rv1126b: their own map
                params = f2_fp16_activation(self, node, activation, out)
            elif activation in _REGISTER_ACTIVATIONS and self.t4_platform():  # rk3562: its own map
                params = t4_activation(self, node, activation, x, out, b, None)
            if w.dtype != "float16":
                raise self.error(f"{node.label}: weight {w.name!r} has dtype {w.dtype}; fp16 files store float16")
            weight_f = weight.astype(np.float32)
            bias_f, unit = None, None
            if b is not None:
                if b.dtype != "float32":
                    raise self.error(f"{node.label}: bias {b.name!r} has dtype {b.dtype}; fp16 files store float32")
                bias_f = decode_float_bias(self.vf.tensor_data(self.sg, b), weight.shape[0],
                                           f"{self.label}: {node.label} bias {b.name!r}")
        if activation is None and (not self.int8 or _same_quant(x, out)) and \
                _is_identity(node, attrs, weight.shape, lambda: acc.real() if acc is not None else (weight_f, bias_f)):
            self.methods.pop(node.index, None)  # compiler identity convs keep a plain bias in every file
            self.emit(node, "Identity", [self.names[x.index]], {})
            return
        if acc is not None:  # int8: the NPU's exact accumulator, then one conversion per channel
            total = emit_accumulator(self, node, x, out, w, b, acc, attrs)
            self.int8_fused(node, total, acc, out, activation, extra, unit, params)
            return
        inputs = [self.names[x.index], self.constant(self.names[w.index], weight_f)]
        if bias_f is not None:
            inputs.append(self.constant(self.names[b.index], bias_f, keep_float=True))
        branch = node.index in self.branch_convs and not self.int8
        if branch and out.index in self.partial_sums:  # a partial sum of a split conv (see __init__)
            self.keep_float.append(self.names[out.index])
        if activation in (None, "Relu"):
            if activation is not None:
                attrs["_activation"] = activation  # relu commutes with the rounding and the int8 grid
            self.emit(node, "Conv", inputs, attrs)
            return
        if activation == "Clip" and not branch:
            params = self.register_params(node, activation, unit, params)
            if all(float(np.float16(params[k])) == params[k] for k in ("min", "max")):
                # a clip to float16 values commutes with the float16 rounding: fused into the conv (Relu6)
                attrs.update(_activation="Clip", _activation_min=params["min"], _activation_max=params["max"])
                self.emit(node, "Conv", inputs, attrs)
                return
        # conv, rounded to fp16 (fp16 files; not a split conv's branch) or kept float (int8 files), then
        # the fused part
        conv = f"{self.names[out.index]}__conv"
        if branch:
            self.keep_float.append(conv)
        self.emit(node, "Conv", inputs, attrs, output=conv)
        self.fused(node, activation, conv, extra, unit, params)

    def int8_fused(self, node: VendorNode, total: str, acc: Accumulator, out: VendorTensor, activation: Optional[str],
                   extra: List[VendorTensor], unit: Optional[float], params: Optional[Dict[str, float]]) -> None:
        """An int8 conv's or deconv's accumulator ``total`` through its fused part onto the output's
        grid: none, Relu and Clip narrow the code range (they commute with the rounding), a residual
        Add [and Relu] is one pass, any other part reads the real conv output (:meth:`fused`)."""
        qo = self.activation_quant(out)
        s_out, zp_out = qo.scale[0], qo.zero_point[0]
        if activation in (None, "Relu", "Clip"):
            lo, hi = -128, 127
            if activation == "Relu":
                lo = max(lo, zp_out)
            elif activation == "Clip":
                params = self.register_params(node, activation, unit, params)
                lo, hi = grid_code(params["min"], s_out, zp_out), grid_code(params["max"], s_out, zp_out)
            emit_requant(self, node, total, acc, out, s_out, zp_out, lo, hi)
            return
        if activation in ("Add", "AddRelu"):  # the Mul, Add [and Relu] and the output's grid in one pass
            emit_add_requant(self, node, total, acc, self.names[extra[0].index], out, s_out, zp_out,
                             relu=activation == "AddRelu")
            return
        conv = f"{self.names[out.index]}__conv"
        self.emit_scaled(node, total, acc, conv)
        self.fused(node, activation, conv, extra, unit, params)

    def fused(self, node: VendorNode, activation: str, conv: str, extra: List[VendorTensor],
              unit: Optional[float], params: Optional[Dict[str, float]] = None) -> None:
        """The nodes of a conv's fused part, reading the conv output ``conv``; ``unit``: an int8
        file's accumulator unit (for register parameters); ``params``: the activation's
        parameters when already decoded (rk3576/rv1126b int8, :func:`.f2act.f2_activation`),
        else they are read from the rk3588-family registers."""
        out_name = self.names[self.single_output(node).index]
        if activation == "PRelu":
            slopes = self.constant(f"{out_name}__slope", self.prelu_slopes(node), keep_float=True)
            self.emit(node, "PRelu", [conv, slopes], {})
        elif activation in _REGISTER_ACTIVATIONS:
            params = self.register_params(node, activation, unit, params)
            if activation == "LeakyRelu":
                # The register holds the slope rounded (float16, or round(alpha * 2^14)); the simulator uses
                # the ONNX value, taken to be the shortest decimal rounding to it (0.1, not 0.0999756).
                stored = params["alpha"]
                alpha = _float16_decimal(stored) if not self.int8 else slope_decimal(stored)
                self.emit(node, "LeakyRelu", [conv], {"alpha": alpha})
            elif activation == "HardSigmoid":
                alpha, beta = (params["alpha"], params["beta"]) if "beta" in params else \
                    _hard_sigmoid_params(params["lut_scale"], params["lut_offset"])
                self.emit(node, "HardSigmoid", [conv], {"alpha": alpha, "beta": beta})
            else:
                bounds = [self.constant(f"{out_name}__{k}", np.array(params[k], np.float32), keep_float=True)
                          for k in ("min", "max")]
                self.emit(node, "Clip", [conv] + bounds, {})
        elif activation == "Swish":
            sig = f"{out_name}__sigmoid"
            self.keep_float.append(sig)  # x * sigmoid(x) is one op: its sigmoid is not rounded
            self.emit(node, "Sigmoid", [conv], {}, output=sig)
            self.emit(node, "Mul", [conv, sig], {})
        elif activation == "Add":
            self.emit(node, "Add", [conv, self.names[extra[0].index]], {})
        elif activation == "AddRelu":
            # relu commutes with the fp16 rounding and the int8 grid: the sum needs no quantization of its own
            added = f"{out_name}__add"
            self.emit(node, "Add", [conv, self.names[extra[0].index]], {}, output=added)
            self.emit(node, "Relu", [added], {})
        elif activation == "ReluAdd":  # a residual added to the conv's Relu (YOLOv5-style bottlenecks with Relu)
            rectified = f"{out_name}__relu"
            self.emit(node, "Relu", [conv], {}, output=rectified)
            self.emit(node, "Add", [rectified, self.names[extra[0].index]], {})
        else:
            self.emit(node, activation, [conv], {})

    def prelu_slopes(self, node: VendorNode) -> np.ndarray:
        """A PRelu's or ConvPRelu's per-channel slopes, (C, 1, 1) float32: its (1, C, 1, 1) constant
        input (after a conv's weight and bias; RKNN-Toolkit2 2.3.2 keeps the ONNX slope's own (C, 1, 1)),
        float16 in fp16 files, int16 codes of ``2^-14`` in int8 files (the LeakyRelu slope's fixed
        point); a single slope, a float32 (1, 1, 1, 1) (2.3.2: (1, 1, 1)) constant, is repeated for every
        channel."""
        out = self.single_output(node)
        channels = out.shape[1] if len(out.shape) == 4 else -1
        found = [t for t in (self.tensor(i, node) for i in node.inputs) if t.kind == "shape"]
        if channels > 0 and len(found) == 1 and found[0].dtype == "float32" and list(found[0].shape) in ([1, 1, 1, 1],
                                                                                                        [1, 1, 1]):
            # one slope for every channel (PyTorch's nn.PReLU() default), stored float32 in fp16 and int8
            # files alike: the ONNX value
            return np.full((channels, 1, 1), self.float32_scalar(node, found[0], "slope"), np.float32)
        expected = "int16" if self.int8 else "float16"
        if len(found) != 1 or found[0].dtype != expected or list(found[0].shape) not in ([1, channels, 1, 1],
                                                                                         [channels, 1, 1]):
            raise self.error(f"{node.label}: slope inputs {[(t.name, t.dtype, list(t.shape)) for t in found]}; one "
                             f"{expected} (1, {channels}, 1, 1) or ({channels}, 1, 1) constant was expected")
        slope = found[0]
        raw = bytes(self.vf.tensor_data(self.sg, slope))
        if len(raw) < 2 * channels:
            raise self.error(f"{node.label}: slope {slope.name!r} holds {len(raw)} bytes for {channels} channels")
        if not self.int8:
            values = np.frombuffer(raw, "<f2", channels).astype(np.float32)
            # the simulator multiplies by the ONNX slopes, as a LeakyRelu's: the shortest decimals that round
            # to the stored float16 values
            values = np.array([_float16_decimal(float(v)) for v in values], np.float32)
        else:
            quant = self.activation_quant(slope)
            if quant.scale[0] != 2.0 ** -14 or quant.zero_point[0] != 0:
                raise self.error(f"{node.label}: slope {slope.name!r} on grid {quant.scale[0]!r} / "
                                 f"{quant.zero_point[0]}; 2^-14 / 0 was expected")
            values = np.frombuffer(raw, "<i2", channels).astype(np.float32) * np.float32(2.0 ** -14)
        return values.reshape(channels, 1, 1)

    def t3_activation(self, node: VendorNode, activation: str, x: VendorTensor, out: VendorTensor,
                      b: VendorTensor, channels: int, unit: float) -> Optional[Dict[str, object]]:
        """The parameters of an rv1106 int8 conv's fused LeakyRelu (rk3588's slope, its own BN_CFG),
        PRelu (``None``: its stored slopes, checked against what BN_MUL says) or Clip (a bound in
        channel 0's accumulator unit; a lower bound below 0 is the output grid's lowest value, see
        :func:`.t3conv.t3_clip_low`), from the node's registers."""
        where = f"{self.label}: {node.label}"
        regs = node_registers(self.regcmd(), self.tasks(), node.index, where)
        if activation == "LeakyRelu":
            return {"alpha": t3_leaky_slope(regs, where)}
        if activation == "PRelu":
            self.check_t3_prelu(node, t3_prelu_slope(regs, where))
            return None
        _, _, mul = self.bias_blocks(node, x, out, b, channels)
        params = clamp_from_zero(t3_clip_bound(regs, where), unit, mul,
                                 lambda what: self.error(f"{node.label}: an rv1106 int8 ConvClip: {what}"))
        low = t3_clip_low(regs, where)
        if low is None:
            return params
        # The Clip's calibrated output grid starts at its lower bound when that is below 0 (or at 0 when the
        # data never went below), where the simulator's clip and the grid's saturation agree; a bound above
        # 0, on a grid from 0, clips where no register says (probe Clip(0.25, 1.5): its outputs from 0.247)
        q = self.activation_quant(out)
        lowest = float((-128 - q.zero_point[0]) * q.scale[0])
        if low > 0 or (low == 0 and lowest == 0) or lowest <= low - 1:
            raise self.error(f"{node.label}: an rv1106 int8 ConvClip with BN_CFG 0x20010 (a lower bound other than 0, "
                             f"truncated to {low}) whose output grid starts at {lowest:.6g}: only a bound below 0 "
                             "where the grid starts, whose saturation then clips as the simulator does, was decoded "
                             "(a bound above 0 is in no register)")
        return dict(params, min=lowest)

    def check_t3_prelu(self, node: VendorNode, one: Optional[float]) -> None:
        """Refuse an rv1106 ConvPRelu whose BN_MUL register (``one``: its one slope, ``None``: the
        slopes read from memory) does not say what its stored slopes are (:meth:`prelu_slopes`)."""
        tensors = [self.tensor(i, node) for i in node.inputs]
        stored_one = any(t.kind == "shape" and t.dtype == "float32" for t in tensors)
        slopes = self.prelu_slopes(node).ravel()
        unit = 2.0 ** LEAKY_SLOPE_BITS
        if one is None:
            agree = not stored_one
        else:
            agree = stored_one and bool(np.all(np.round(slopes * unit) == round(one * unit)))
        if not agree:
            given = "per-channel slopes" if one is None else f"one slope {one}"
            raise self.error(f"{node.label}: an rv1106 int8 ConvPRelu whose BN_MUL gives {given}, where its stored "
                             f"slopes are {sorted(set(slopes.tolist()))}")

    def leaky_relu(self, node: VendorNode) -> None:
        """A standalone LeakyRelu (``alpha`` from the parameter table, equal to the BSON's; ``Abs``
        compiles to one of slope -1) or PRelu (:meth:`prelu_slopes`): a DPU-only task on the
        NPU; computed in float32 on the input, the output rounded to fp16 or put on its int8 grid."""
        data, _, out = self.elementwise_input(node)
        if node.op == "PRelu":
            slopes = self.constant(f"{self.names[out.index]}__slope", self.prelu_slopes(node), keep_float=True)
            self.emit(node, "PRelu", [data, slopes], {})
            return
        alpha = self.bson_float(node, "alpha", 0.01)  # ONNX's default, which neither the BSON nor the table stores
        if np.float32(node.params.get("alpha", np.nan)) != np.float32(alpha):  # the table's is a float32
            raise self.error(f"{node.label}: parameter-table alpha {node.params.get('alpha')!r} is not the BSON's "
                             f"{alpha!r}")
        self.emit(node, "LeakyRelu", [data], {"alpha": alpha})

    def clip(self, node: VendorNode) -> None:
        """A standalone Clip (one no conv absorbed: after an Add or a Concat): a DPU-only task whose
        bounds are the node's two float32 (1,) constants; computed in float32, the output rounded to
        fp16 or put on its int8 grid."""
        data, _, out = self.elementwise_input(node)
        bounds = [self.tensor(i, node) for i in node.inputs[1:]]
        values = [self.float32_scalar(node, t, "bound") for t in bounds]
        if len(values) != 2 or not values[0] <= values[1]:
            raise self.error(f"{node.label}: bounds {values}; a min and a max, min <= max, were expected")
        names = [self.constant(self.names[t.index], np.array(v, np.float32), keep_float=True)
                 for t, v in zip(bounds, values)]
        self.emit(node, "Clip", [data] + names, {})

    def register_params(self, node: VendorNode, activation: str, unit: Optional[float],
                        params: Optional[Dict[str, float]]) -> Dict[str, float]:
        """A fused Clip / LeakyRelu / HardSigmoid's parameters (``activation``, of a conv or a deconv:
        the same registers, corpus deconv_acts): ``params`` when already decoded (rk3576/rv1126b),
        else read from the node's rk3588-family registers (``unit``: an int8 file's accumulator unit)."""
        if params is not None:
            return params
        where = f"{self.label}: {node.label}"
        regs = node_registers(self.regcmd(), self.tasks(), node.index, where)
        shifted = BN_CLIP_SHIFTED_LITE if self.lite_platform() else BN_CLIP_SHIFTED
        return fused_activation(regs, activation, where, unit if self.int8 else None, self.lut_bn_cfg(), shifted)

    def int8_conv_constants(self, node: VendorNode, activation: Optional[str], x: VendorTensor, out: VendorTensor,
                            w: VendorTensor, q: np.ndarray, b: Optional[VendorTensor],
                            residual: Optional[VendorTensor] = None) -> Tuple[Optional[float], Accumulator]:
        """For an int8 conv or deconv and its fused ``activation`` (a deconv's is in a conv's
        registers): the accumulator unit (the real value of one accumulator step at the largest weight
        scale, ``s_out * OUT_CVT_SCALE / 2^OUT_CVT_SHIFT``, for register parameters; ``None`` for
        an rk3576/rv1126b conv whose OUT_CVT converts its lookup table's output) and the
        :class:`.accumulator.Accumulator` of an int8 conv:
        the integer weight ``q - zp_w[c]``, the bias ``bias_i32 + zp_in * sum(q - zp_w)`` and the
        real value of one accumulator step per channel, ``s_in * s_w[c]``, with
        ``s_w[c] = OUT_CVT_SCALE / 2^OUT_CVT_SHIFT * mul[c] / 2^mul_shift * s_out / s_in`` (no
        ``mul[c]`` factor when the multiplier stage is bypassed; rk3562 writes OUT_CVT and the
        multipliers' shift in its own map, :func:`.regcmd.requant_t4`, and its bias blocks hold 4
        channels, :meth:`bias_block`; rk3576/rv1126b at their own addresses too,
        :func:`.f2act.f2_conv_requant`, checked against the float16 weight scales their files
        also store, :meth:`check_stored_weight_scales`, which stand in when OUT_CVT converts a
        lookup table's output instead: a conv Swish).  A conv of a tiny accumulator step adds to the
        OUT_CVT shift what its registers say: a residual conv's BN-stage shift (``residual``: its
        residual input, whose BnCfg tensor holds it on rk3576/rv1126b; :func:`.regcmd.conv_bn_shift`,
        :func:`.f2act.f2_residual_shift`) and rk3576/rv1126b's truncation by ``k`` bits
        (:func:`.f2act.f2_truncation`), whose bias is in units of 2^k steps.  A lookup-table conv of
        the other platforms is lowered by :func:`.lut.lower_lut_conv` instead."""
        if x.dtype != "int8" or out.dtype != "int8" or q.dtype != np.int8:
            raise self.error(f"{node.label}: an int8 file's conv needs int8 input, weight and output "
                             f"(got {x.dtype}, {q.dtype}, {out.dtype})")
        if b is None or b.dtype != "int32":
            raise self.error(f"{node.label} has no int32 bias; its weight quantization cannot be recovered")
        where = f"{self.label}: {node.label}"
        channels = q.shape[0]
        s_in, zp_in = self.activation_quant(x).scale[0], self.activation_quant(x).zero_point[0]
        regs = node_registers(self.regcmd(), self.tasks(), node.index, where)
        deconv = node.op in _DECONV_ACTIVATIONS
        # a deconv fetching the graph's input (rk3562, rv1106: its multiplier stage in another form)
        input_deconv = deconv and x.kind == "input" and \
            bool(input_fetch(regs, RV1106_DECONV if self.t3_platform() else self.deconv_encoding()))
        # the compiler's depthwise input conv and a one-channel deconv: a plain bias, the tiles alone
        plain_tiles = node.index in self.tiles_alone or node.index in self.lane_zero_points
        if self.t4_platform():  # rk3562: its own DPU map, the rk3588 values moved (regcmd.requant_t4)
            requant = requant_t4(regs, where, activation, node.index in self.weight_zero_points,
                                 depthwise_plain=plain_tiles, input_deconv=input_deconv)
            requant = replace(requant, weight_zp=self.lane_zero_point(node, requant.weight_zp))
        elif self.t3_platform():
            requant = requant_t3(regs, where, activation, node.index in self.weight_zero_points,
                                 input_depthwise=plain_tiles, input_deconv=input_deconv)
            requant = replace(requant, weight_zp=self.lane_zero_point(node, requant.weight_zp))
        elif self.f2_platform():  # rk3576/rv1126b: OUT_CVT at their own addresses; a deconv has bias blocks
            # (but one of a single channel: deconv_one_channel)
            slope_bits = f2_slope_bits(self, out, where, activation) if activation in ("LeakyRelu", "PRelu") else 0
            requant = f2_conv_requant(regs, where, activation, plain=not deconv or channels == 1,
                                      slope_bits=slope_bits)
            # the BN stage's shift of a residual conv's accumulator scales its unit
            bn_shift = f2_residual_shift(self, residual, regs, where) if activation in ("Add", "AddRelu") else 0
            requant = replace(requant, shift=requant.shift + bn_shift)
            if not requant.bias_blocks:
                requant = replace(requant, weight_zp=self.f2_plain_weight_zero_point(node, out, where))
            if activation not in F2_OUT_CVT_ACTIVATIONS:  # OUT_CVT converts a table's output: the stored scales
                bias_i32, w_zp, mul = self.int8_bias(node, x, out, b, requant, channels)
                return None, Accumulator.of(q, w_zp, bias_i32 << requant.truncated, zp_in, s_in,
                                            self.table_conv_weight_scales(node, w, mul))
        else:  # rk3588, rk3566: a residual conv's BN stage may shift its accumulator (regcmd.conv_bn_shift)
            requant = requant_of(regs, where, activation)
            requant = replace(requant, shift=requant.shift + conv_bn_shift(regs, where, activation))
        bias_i32, w_zp, mul = self.int8_bias(node, x, out, b, requant, channels)
        # the untruncated accumulator: the bias in its steps, OUT_CVT's shift the longer
        bias_i32 = bias_i32 << requant.truncated
        requant = replace(requant, shift=requant.shift + requant.truncated)
        qo = self.activation_quant(out)
        s_out, zp_out = qo.scale[0], qo.zero_point[0]
        if requant.offset != zp_out:
            raise self.error(f"{node.label}: OUT_CVT_OFFSET is {requant.offset} but the output's zero point is "
                             f"{zp_out}; the register layout is not the one decoded")
        if requant.mul_shift is None:
            m = np.full(channels, requant.multiplier)
        elif np.all(mul > 0):
            m = requant.multiplier * mul.astype(np.float64) / float(1 << requant.mul_shift)
        else:
            raise self.error(f"{node.label}: the bias block's channel multipliers {mul.tolist()} are not all positive")
        s_w = m * s_out / s_in
        if self.f2_platform():
            self.check_stored_weight_scales(node, w, s_w)
        return s_out * requant.multiplier, Accumulator.of(q, w_zp, bias_i32, zp_in, s_in, s_w)

    def emit_scaled(self, node: VendorNode, total: str, acc: Accumulator, output: str) -> None:
        """``output`` = the accumulator tensor ``total`` times the real value of one accumulator
        step per channel: the real conv output a fused part that needs it reads."""
        step = self.constant(f"{output}__step", acc.step.reshape(1, -1, 1, 1).astype(np.float32))
        self.emit(node, "Mul", [total, step], {}, output=output)

    def f2_plain_weight_zero_point(self, node: VendorNode, out: VendorTensor, where: str) -> int:
        """The one weight zero point of an rk3576/rv1126b int8 conv or deconv with a plain int32 bias:
        a conv's from its BScfgTensor (:func:`.f2act.f2_plain_weight_zero_point`), a one-channel
        deconv's from its weight tile (:meth:`lane_zero_point`)."""
        return self.lane_zero_point(node, f2_plain_weight_zero_point(self, out, where))

    def lane_zero_point(self, node: VendorNode, stated: int) -> int:
        """``stated`` (the weight zero point a plain-bias conv's BScfgTensor or registers give), or
        for a one-channel int8 deconv the one in its weight tile's spare lanes, where ``stated`` is 0
        (as observed on rk3576, rv1126b and rk3562)."""
        if node.index not in self.lane_zero_points:
            return stated
        if stated != 0:
            raise self.error(f"{node.label}: its weight tile's spare lanes hold zero point "
                             f"{self.lane_zero_points[node.index]} and its BScfgTensor or registers {stated}; "
                             "only the first with the second 0 was observed")
        return self.lane_zero_points[node.index]

    def int8_bias(self, node: VendorNode, x: VendorTensor, out: VendorTensor, b: VendorTensor, requant: Requant,
                  channels: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(bias_i32, w_zp, mul)`` per output channel of an int8 conv: from the per-channel
        bias blocks, or (per-layer quantization: a plain int32 bias) the layer's one weight
        zero point from the registers and multipliers of 0.  Records which quantization
        method the file uses (:attr:`methods`) and notes coarse channel multipliers
        (:meth:`note_coarse_multipliers`: once per conv, here, as the fused Clips read the blocks again)."""
        if requant.bias_blocks:
            self.methods[node.index] = "channel"
            blocks = self.bias_blocks(node, x, out, b, channels)
            self.note_coarse_multipliers(node, blocks[2])
            return blocks
        if channels > 1:  # one output channel: per-layer and per-channel are the same (e.g. a DFL conv)
            self.methods[node.index] = "layer"
        where = f"{self.label}: {node.label} bias {b.name!r}"
        return (decode_int32_bias(self.vf.tensor_data(self.sg, b), channels, where), np.full(channels, requant.weight_zp, np.int64),
                np.zeros(channels, np.int64))

    def compact_input_weight(self, node: VendorNode, w: VendorTensor) -> bool:
        """Whether ``w`` is the compact weight of the conv an rk3576/rv1126b file inserts on a graph
        input (unnamed, ``Pre_weight<input>``: :func:`.weights.decode_compact_identity`), stored in
        fewer bytes than its tiles."""
        return self.compiler_input_conv(node, w) and w.size < tiles_nbytes(w.npu_shape, w.dtype)

    def stated_weight_size(self, x: VendorTensor, w: VendorTensor, raw, packed: bool) -> Optional[int]:
        """The NPU size :func:`.weights.decode_weight` checks a conv's tiles against: the weight's,
        but ``None`` (no check) for a conv on a graph input in an rk3576, rv1126b or rk3562 file
        whose stated size is its real output channels' rows of ``iblk`` input lanes, rounded up to 8
        bytes, times ``kh * kw``, rounded up to 16 bytes, whatever its tiles
        (:data:`_INPUT_CONV_ROW_ALIGN`): a pool or ReduceMean the compiler splits into one-channel
        convs on the input (``(kh * kw + 1) * 8``: 7x7, 5x5 and 1x1, fp16 and int8), a grouped conv
        it makes dense (6 and 9 channels of a 7x7: ``grouped_input_*``, fp16 and int8), read as the
        tiles the buffer holds: bit-exact against the simulator.  A ``packed`` weight's size has a rule of its own
        (:func:`.weights.decode_weight`)."""
        if (packed or x.kind != "input" or not (self.f2_platform() or self.t4_platform()) or len(w.shape) != 4
                or len(w.npu_shape) % 6 or not w.npu_shape or w.dtype not in ("int8", "float16")):
            return w.size
        o, kh, kw = int(w.shape[0]), int(w.shape[2]), int(w.shape[3])
        row = -(-o * w.npu_shape[5] * np.dtype(w.dtype).itemsize // _INPUT_CONV_ROW_ALIGN) * _INPUT_CONV_ROW_ALIGN
        stated = -(-row * kh * kw // _INPUT_CONV_KERNEL_ALIGN) * _INPUT_CONV_KERNEL_ALIGN
        tiles = tiles_nbytes(w.npu_shape, w.dtype)
        if w.size == stated != tiles and 0 < tiles <= len(raw):
            return None
        return w.size

    def weight_align(self) -> int:
        """Bytes the NPU size of a weight may be rounded up to (rv1106 weights end on 64 bytes, rk3562's
        and rk3576/rv1126b's on 16)."""
        if self.t3_platform():
            return _T3_WEIGHT_ALIGN
        return _T4_F2_WEIGHT_ALIGN if self.t4_platform() or self.f2_platform() else 1

    @staticmethod
    def compiler_conv(node: VendorNode, w: VendorTensor) -> bool:
        """Whether ``node`` is the unnamed conv a file inserts on a graph input (weight
        ``Pre_weight<input>``) to move it into the NPU layout or apply mean/std."""
        return not node.name and w.name.startswith("Pre_weight")

    def compiler_input_conv(self, node: VendorNode, w: VendorTensor) -> bool:
        """:meth:`compiler_conv` in an rk3576/rv1126b file (their weight layouts of it)."""
        return self.f2_platform() and self.compiler_conv(node, w)

    def packed_weight(self, node: VendorNode, where: str, group: int) -> bool:
        """Whether an rk3576/rv1126b int8 conv on a graph input stores its weight packed
        (:func:`.weights.decode_packed_weight`) or in tiles: the low four bits of its
        CNA_CONV_CON1, 6 or 2 on an image (the compiler picks tiles for small images), 0 on an
        input that is no image, read as any feature map (``input_wide``), 1 for a depthwise conv
        (``group``: the conv's) on 8 or 16 channels (``input_depthwise``, ``input_gap``)."""
        con1 = node_registers(self.regcmd(), self.tasks(), node.index, where).get((TARGET_CNA, REG_CNA_CONV_CON1))
        if con1 is None or con1 & 0xF not in (0, 2, 6) and not (con1 & 0xF == 1 and group > 1):
            raise self.error(f"{node.label}: CNA_CONV_CON1 (0x100c) = {con1 if con1 is None else hex(con1)} on an int8 "
                             f"{self.platform()} conv reading a graph input; its weight layout is known for low bits "
                             "6 (packed), 2 and 0 (tiles), and 1 on a depthwise conv, only")
        return con1 & 0xF == 6

    def bias_blocks(self, node: VendorNode, x: VendorTensor, out: VendorTensor, b: VendorTensor,
                    channels: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(bias_i32, w_zp, mul)`` per output channel from an int8 conv's per-channel bias blocks
        (:func:`.weights.decode_int8_bias`); the weight zero points come from the weight where it
        holds them (rk3576/rv1126b/rk3562 depthwise convs, :attr:`weight_zero_points`)."""
        in_weight = self.weight_zero_points.get(node.index)
        bias_i32, w_zp, mul = decode_int8_bias(self.vf.tensor_data(self.sg, b), channels,
                                               f"{self.label}: {node.label} bias {b.name!r}",
                                               self.bias_block(node, x, out), zero_points=in_weight is None)
        return bias_i32, (w_zp if in_weight is None else in_weight), mul

    def note_coarse_multipliers(self, node: VendorNode, mul: np.ndarray) -> None:
        """Note a channel whose bias-block multiplier (normalised to the largest channel's) is below
        :data:`_COARSE_MULTIPLIER`: its weights a few ten-thousandths of the largest channel's, its
        scale held to a few bits, which the NPU computes with and the simulator does not (its exact
        scale): that channel's outputs may lie several steps from the simulator's (a channel 1e-4 of
        the others under a bias, multiplier 1 of 16384: 39 steps)."""
        if len(mul) and 0 < mul.min() < _COARSE_MULTIPLIER <= mul.max():
            c = int(np.argmin(mul))
            self.note(f"{node.label}: channel {c}'s multiplier is {int(mul[c])} of the largest channel's "
                      f"{int(mul.max())}: the registers hold its weight scale to about {int(mul[c]).bit_length()} "
                      "bits, which the NPU computes with and the simulator does not (its exact scale); that "
                      "channel's outputs may lie several steps from the simulator's")

    def bias_block(self, node: VendorNode, x: VendorTensor, out: VendorTensor) -> int:
        """Channels per int8 bias block: half the C2 of the conv's NC1HWC2 activations, except
        on rk3562, whose int8 activations have C2 = 16 and whose bias blocks hold 4 channels (as
        rk3566's, whose C2 is 8)."""
        if self.int8 and (self.t4_platform() or self.t3_platform()):
            return 4
        c2 = [t.npu_shape[-1] for t in (out, x) if t.layout == "NC1HWC2" and len(t.npu_shape) == 5]
        if not c2:
            raise self.error(f"{node.label}: neither its input nor its output is NC1HWC2, so the channels per "
                             "bias block (half the C2) are not known")
        return c2[0] // 2

    def platform(self) -> Optional[str]:
        """The file's one target platform (``None`` when it names none)."""
        platforms = tuple(self.rk.target_platforms) or ((self.rk.target_platform,) if self.rk.target_platform else ())
        if len(platforms) > 1:
            raise self.error(f"the file targets {len(platforms)} platforms {list(platforms)}; one was expected")
        return platforms[0].lower() if platforms else None

    def precision(self) -> str:
        """``"fp16"``, ``"int8"`` (per-channel quantization) or ``"int8-layer"`` (per layer), as
        the lowered convs of the model showed (once they are lowered)."""
        if not self.int8:
            return "fp16"
        # the compiler's own unnamed convs do not tell the build's method: its depthwise 1x1 applying
        # mean/std to an input whose first op is no conv is per-layer in per-channel files (input_odd);
        # a file with no other conv is read as per-channel (its other ops quantize per tensor either way)
        named = {n.index for n in self.sg.nodes if n.name}
        methods = {m for i, m in self.methods.items() if i in named}
        if len(methods) > 1:
            raise self.error("its convs mix per-channel and per-layer quantization, which no observed file does")
        return "int8-layer" if methods == {"layer"} else "int8"

    def f2_platform(self) -> bool:
        """Whether the file targets rk3576 or rv1126b, whose DPU registers follow the map of
        :mod:`.f2act` (for fp16 files, where no stored weight scale tells it)."""
        return self.platform() in F2_PLATFORMS

    def lite_platform(self) -> bool:
        """Whether the file targets rk3566/rk3568 ("RKNPU lite"): rk3588's DPU map but for the
        ``BN_CFG`` of a lookup table (:data:`.regcmd.BN_LUT_LITE`), and its tables loaded by two
        tasks (:mod:`.lut`)."""
        return self.platform() in ("rk3566", "rk3568")

    def lut_bn_cfg(self) -> int:
        """The ``BN_CFG`` value of a conv that indexes a lookup table, in the file's DPU map."""
        if self.f2_platform():
            return F2_ACT_LUT  # its ACT_CFG, at rk3588's BN_CFG address
        if self.t3_platform():
            return T3_BN_LUT
        return BN_LUT_LITE if self.lite_platform() else T4_BN_LUT if self.t4_platform() else BN_LUT

    def t3_platform(self) -> bool:
        """Whether the file was compiled for the "RKNPU t3" (rv1106/rv1103: its container, or a
        dynamic-shape build's FlatBuffer), whose convs take their requantization and fused
        activations from the registers of :mod:`.t3conv`."""
        return self.rk.schema is T3 or self.rk.npu_target == T3_NPU

    def t4_platform(self) -> bool:
        """Whether the file targets rk3562 ("RKNPU t4"), whose int8 convs follow the DPU map of
        :func:`.regcmd.requant_t4`."""
        return self.platform() == "rk3562"

    def stored_scales_tensor(self, w: VendorTensor) -> Optional[VendorTensor]:
        """The tensor of float16 weight scales rk3576/rv1126b files store beside an int8 weight
        (``<weight>_w4a16_weight``), or ``None``: what tells their files' lookup-table convs from the
        rk3588 family's."""
        found = [t for t in self.sg.tensors if t.name == f"{w.name}_w4a16_weight"]
        return found[0] if found else None

    def stored_weight_scales(self, w: VendorTensor, channels: int) -> Optional[np.ndarray]:
        """The per-channel weight scales rk3576/rv1126b files store next to an int8 weight
        (``<weight>_w4a16_weight``, float16; a per-layer file's one scale for every channel), or
        ``None`` when the file has none.  A scale below 2^-25 (weights of about 1e-6,
        ``weight_underflow_*``) is stored as 0: the callers check the registers' scales against
        these (:meth:`check_stored_weight_scales`) or fall back on the registers' ratios where they
        are imprecise (:meth:`table_conv_weight_scales`)."""
        t = self.stored_scales_tensor(w)
        if t is None:
            return None
        raw = self.vf.tensor_data(self.sg, t)
        if t.dtype == "float16" and len(raw) == 2 and channels > 1:  # per-layer quantization: one scale
            raw = bytes(raw) * channels
        if t.dtype != "float16" or len(raw) < 2 * channels:
            raise self.error(f"weight scales {t.name!r} ({t.dtype}, {len(raw)} bytes) are not {channels} float16 values")
        scales = np.frombuffer(raw, "<f2", channels).astype(np.float64)
        if not np.all(scales >= 0):
            raise self.error(f"weight scales {t.name!r} are not all positive or 0: {scales.tolist()}")
        return scales

    def table_conv_weight_scales(self, node: VendorNode, w: VendorTensor, mul: np.ndarray) -> np.ndarray:
        """The per-channel weight scales of an rk3576/rv1126b int8 conv whose OUT_CVT converts a
        lookup table's output (a Tanh or Swish conv), so that its registers give no accumulator
        unit: the float16 ones its file stores, each to half a float16 step, or where that is
        coarser than :data:`_TABLE_CONV_SCALE_PRECISION` of it (a channel of tiny weights, whose
        scale is a float16 subnormal: 6 % off at 1e-6, up to 3 output steps from the simulator,
        silently, until 2026-12-07), the largest channel's times the ratio of their bias-block
        multipliers ``mul``, the registers' 14-bit ratio of the two scales (``table_conv_scales_*``).

        Raises:
            ModelInvalidError: no stored scales, or a channel whose scale neither holds that
                precisely: nothing in the file gives its accumulator's unit (the simulator computes
                with the exact one)."""
        channels = len(mul)
        stored = self.stored_weight_scales(w, channels)
        if stored is None:
            raise self.error(f"{node.label}: an rk3576/rv1126b int8 {node.op} without the float16 weight scales "
                             f"{w.name + '_w4a16_weight'!r}, the only unit of its accumulator the file holds")
        with np.errstate(divide="ignore"):  # a 0 (a scale below 2^-25) holds nothing: infinitely imprecise
            half_step = np.spacing(stored.astype(np.float16)).astype(np.float64) / 2 / stored
        if np.all(half_step <= _TABLE_CONV_SCALE_PRECISION):
            return stored
        largest = int(np.argmax(mul))
        ratio = mul.astype(np.float64) / max(float(mul[largest]), 1.0)
        by_ratio = half_step[largest] + 0.5 / np.maximum(mul, 1)
        coarse = (half_step > _TABLE_CONV_SCALE_PRECISION) & (by_ratio > _TABLE_CONV_SCALE_PRECISION)
        if coarse.any():
            c = int(np.argmax(coarse))
            held = "stored as 0" if stored[c] == 0 else f"{stored[c]:.3g}, a subnormal to {half_step[c]:.2%}"
            raise self.error(f"{node.label}: an rk3576/rv1126b int8 {node.op} whose channel {c} has a weight scale "
                             f"which neither its float16 copy {w.name + '_w4a16_weight'!r} ({held}) "
                             f"nor its bias-block multiplier {int(mul[c])} "
                             f"against the largest's {int(mul[largest])} holds within "
                             f"{_TABLE_CONV_SCALE_PRECISION:.2%} (the simulator computes with the exact scale)")
        return np.where(half_step > _TABLE_CONV_SCALE_PRECISION, stored[largest] * ratio, stored)

    def check_stored_weight_scales(self, node: VendorNode, w: VendorTensor, s_w: np.ndarray) -> None:
        """Check the per-channel weight scales an rk3576/rv1126b int8 conv's registers give
        (``s_w``) against the float16 ones its file stores beside the weight, when it does (a
        ConvTranspose does not): each within ``_STORED_SCALE_TOLERANCE`` of the largest (float16
        rounding is 4.9e-4 of a value, the 14-bit multipliers' 3e-5 of the largest) plus half a
        float16 step at its value (a scale below 6.1e-5, e.g. of the compiler's ReduceMean conv
        with its 1/N weights, is a float16 subnormal, stored to 2^-25).

        Raises:
            ModelInvalidError: the two disagree: the registers are not the map decoded."""
        stored = self.stored_weight_scales(w, len(s_w))
        if stored is None:
            return
        half_step = np.spacing(stored.astype(np.float16)).astype(np.float64) / 2
        allowed = _STORED_SCALE_TOLERANCE * float(stored.max()) + half_step
        worst = int(np.argmax(np.abs(s_w - stored) - allowed))
        if abs(s_w[worst] - stored[worst]) > allowed[worst]:
            raise self.error(f"{node.label}: its registers (OUT_CVT 0x40ac..0x40b4 and the bias blocks' multipliers) "
                             f"give channel {worst} a weight scale of {s_w[worst]:.6g}, the file stores "
                             f"{stored[worst]:.6g}; the register map is not the one decoded")

    def note(self, text: str) -> None:
        """Record what may keep the file's outputs from the simulator's bit for bit (text naming
        the node; :attr:`VendorModel.notes`)."""
        self.notes.append(f"{self.label}: {text}")

    def tasks(self):
        if self._tasks is None:
            self._tasks = read_tasks(self.vf.tensor_data(self.sg, self.kind_tensor("task")), f"{self.label}: tasks")
        return self._tasks

    def regcmd(self) -> memoryview:
        if self._regcmd is None:
            self._regcmd = self.vf.tensor_data(self.sg, self.kind_tensor("regcmd"))
        return self._regcmd

    def kind_tensor(self, kind: str) -> VendorTensor:
        found = [t for t in self.sg.tensors if t.kind == kind]
        if len(found) != 1:
            raise self.error(f"subgraph 0 has {len(found)} {kind} tensors; int8 requantization needs exactly one")
        return found[0]

    def reshape(self, node: VendorNode) -> None:
        (data,) = self.activation_inputs(node, 1, 1)
        shapes = [self.tensor(i, node) for i in node.inputs if self.tensor(i, node).kind == "shape"]
        out = self.single_output(node)
        if not shapes and node.recovered is not None:  # an rv1106 file stores no shape constant (.t3nodes)
            self.emit(node, "Reshape", [data, self.output_shape(out)], {})
            return
        if len(shapes) != 1 or shapes[0].dtype != "int64":
            raise self.error(f"{node.label} needs one int64 shape constant")
        t = shapes[0]
        shape = self.int64_const(node, t)
        if list(shape) != list(out.shape) and -1 not in shape.tolist() and 0 not in shape.tolist():
            raise self.error(f"{node.label}: shape constant {shape.tolist()} is not the output shape {list(out.shape)}")
        self.emit(node, "Reshape", [data, self.constant(self.names[t.index], shape)], {})

    def elementwise(self, node: VendorNode) -> None:
        """Add, Sub, Mul, AddRelu, Max, Min and Pow of two operands (activations or constants),
        computed in float32 and rounded to the output's fp16 or int8 grid.  Pow only squares: its
        exponent must be a stored 2.0, the one exponent checked against the simulator."""
        operands = []
        for i in node.inputs:
            t = self.tensor(i, node)
            if t.kind in _ACTIVATION_KINDS and not _is_helper(t):
                operands.append(self.names[t.index])
            elif t.kind in ("const", "shape", "generated") and t.layout != "weight":
                if node.op == "Pow" and len(operands) == 1:
                    self.check_square(node, t)
                operands.append(self.const_operand(node, t))
        if len(operands) != 2:
            raise self.error(f"{node.label} has {len(operands)} operands; {node.op} takes 2")
        if node.op == "Pow" and operands[1] not in self.constants:
            raise self.error(f"{node.label}: a Pow whose exponent is an activation; only a constant 2 was checked")
        if node.op == "AddRelu":  # relu commutes with the fp16 rounding and the int8 grid (as a fused one)
            added = f"{self.names[self.single_output(node).index]}__add"
            self.emit(node, "Add", operands, {}, output=added)
            self.emit(node, "Relu", [added], {})
            return
        self.emit(node, node.op, operands, {})

    def check_square(self, node: VendorNode, exponent: VendorTensor) -> None:
        """Refuse a Pow whose exponent (a float32 constant) is not exactly 2."""
        value = self.float32_scalar(node, exponent, "exponent")
        if value != 2.0:
            raise self.error(f"{node.label}: a Pow with exponent {value}; only the square (a float32 2.0) was "
                             "checked against the simulator")

    def int8_lut_op(self, node: VendorNode, x: VendorTensor, out: VendorTensor) -> None:
        """A standalone int8 lookup-table op (Sigmoid, exSwish, HardSwish, exGelu) on the DPU
        table the file loads (:func:`.lut.lower_lut_sigmoid`, whose tables are the file's own
        whatever the function), its task's index map decoded in the platform's register map;
        a mixed int8/float16 activation is refused."""
        decode = (lambda regs, where, tables: t4_lut_task(regs, where)) if self.t4_platform() else \
            (lambda regs, where, tables: f2_lut_task(self, node, out, regs, tables)) if self.f2_platform() else \
            (lambda regs, where, tables: t3_lut_task(regs, where)) if self.t3_platform() else None
        lower_lut_sigmoid(self, node, x, out, decode=decode)

    def lut_activation(self, node: VendorNode) -> None:
        """A standalone Sigmoid, exSwish (``x * sigmoid(x)``), HardSwish, HardSigmoid, Tanh, Elu (their
        ``alpha`` / ``beta`` from the BSON) or Softplus: fp16 files compute it in float (output rounded
        to fp16; exSwish's inner sigmoid is not rounded, as in a fused one); int8 files run it on the
        DPU lookup table the file loads (:func:`.lut.lower_lut_sigmoid`, whose tables are the file's
        own whatever the function), but for Elu, refused, and HardSigmoid, computed in float32 on the
        dequantized input, the output on its grid: the simulator's values bit for bit on rk3588,
        rk3576 and rk3562, where the table gave 60-88 % of them (the rest one step away; corpus
        ``standalone_hardsigmoid_*``).  An rv1106/rv1103 file stores no alpha and beta: its
        HardSigmoid runs on the file's table, as the NPU does (the same 60-88 % exact)."""
        data, x, out = self.elementwise_input(node)
        if "int8" in (x.dtype, out.dtype) and (node.op != "HardSigmoid" or self.t3_platform()):
            if node.op == "Elu":  # tools/vendor_corpus/models.py, _STANDALONE_OPS_BY_PLATFORM
                raise self.error(f"{node.label}: an int8 Elu: its lookup table's index map was not decoded (an "
                                 "alpha of 0.7 read the table about 0.3 too low against the simulator)")
            self.int8_lut_op(node, x, out)
            return
        if node.op == "Elu":
            self.emit(node, "Elu", [data], {"alpha": self.bson_float(node, "alpha", 1.0)})
            return
        if node.op == "HardSigmoid":
            self.emit(node, "HardSigmoid", [data], {"alpha": self.bson_float(node, "alpha", 0.2),
                                                    "beta": self.bson_float(node, "beta", 0.5)})
            return
        if node.op != "exSwish":
            self.emit(node, node.op, [data], {})
            return
        sig = f"{self.names[out.index]}__sigmoid"
        self.keep_float.append(sig)
        self.emit(node, "Sigmoid", [data], {}, output=sig)
        self.emit(node, "Mul", [data, sig], {})

    def deconv(self, node: VendorNode) -> None:
        """ConvTranspose, with a fused activation or not: attributes from the BSON (the parameter
        table's kernel and dilations, and on rk3588/rk3566 the registers, must agree), or from
        the registers alone where the file stores none (a fused activation: :mod:`.deconv_regs`);
        the weight tiles hold the spatially flipped kernel in ``[Cout][Cin]`` blocks (the conv a
        deconvolution runs as), the bias as a conv's.  fp16: float weights; int8: the exact
        integer accumulator of a conv's (:mod:`.accumulator`), scaled per channel; the fused part
        as a conv's (corpus ``deconv_acts``)."""
        activation = _DECONV_ACTIVATIONS[node.op]
        out = self.single_output(node)
        if len(node.inputs) < 2:
            raise self.error(f"{node.label} has no weight input")
        x, w = self.tensor(node.inputs[0], node), self.tensor(node.inputs[1], node)
        b = self.tensor(node.inputs[2], node) if len(node.inputs) > 2 else None
        if b is not None and b.kind not in _WEIGHT_KINDS:  # no bias: a PRelu's slopes follow the weight
            b = None
        if x.kind not in _ACTIVATION_KINDS or w.kind not in _WEIGHT_KINDS or w.layout != "weight" or len(w.shape) != 4:
            raise self.error(f"{node.label}: inputs {x.kind} {x.name!r}, {w.kind}/{w.layout} {w.name!r} are not an "
                             "activation and a tiled 4-D weight")
        encoding = self.deconv_encoding()
        if node.attrs or node.param_type:
            attrs = self.deconv_bson_attrs(node)
            if encoding is not None:  # the registers, which stand alone for a fused deconv, say the same
                found = self.deconv_register_attrs(node, x, w, out, encoding)
                for key, part in (("kernel_shape", slice(None)), ("strides", slice(None)), ("pads", slice(0, 2))):
                    if found[key][part] != attrs[key][part]:
                        raise self.error(f"{node.label}: its registers give {key} {found[key][part]}, its BSON "
                                         f"{attrs[key][part]}; the register map is not the one decoded")
        elif encoding is None:
            raise self.error(f"{node.label}: a {node.op} without BSON or parameter table in an "
                             f"{'int8' if self.int8 else 'fp16'} {self.platform()} file: its attributes are only in "
                             "its registers, which were not decoded there")
        else:
            attrs = self.deconv_register_attrs(node, x, w, out, encoding)
        if self.int8 and activation not in (None, "Relu", "Clip"):
            # corpus deconv_acts built int8 (layer_evidence.py on it): the simulator runs the ConvTranspose
            # and the activation as two layers with an int8 tensor between them, its scale from the
            # calibration; for Relu and Clip it is the output's grid
            raise self.error(f"{node.label}: an int8 ConvTranspose with a fused {activation}: the vendor simulator "
                             "puts the deconv's output on an int8 grid of its own before the activation (a scale "
                             "the file does not hold: its registers feed the accumulator to the activation), so "
                             "off-board results differ from the simulator's by up to 3 output steps (a Sigmoid: "
                             "96 % within one step); only a fused Relu or Clip, whose grid is the output's, runs")
        group = attrs["group"]
        if group not in (1, x.shape[1]) or attrs["dilations"] != [1, 1]:
            raise self.error(f"{node.label}: a grouped or dilated ConvTranspose (group {group}, dilations "
                             f"{attrs['dilations']}) was never observed")
        cin, cout, kh, kw = (int(d) for d in w.shape)
        where = f"{self.label}: {node.label} weight {w.name!r}"
        raw = self.vf.tensor_data(self.sg, w)
        if group == 1:
            # the tiles hold the kernel flipped in both spatial axes (the conv a deconvolution runs as)
            tiles = decode_weight(raw, w.npu_shape, (cout, cin, kh, kw), w.dtype, where, w.size,
                                  align=self.weight_align())[:, :, ::-1, ::-1]
            weight = np.ascontiguousarray(tiles.transpose(1, 0, 2, 3))  # ONNX [Cin, Cout, kh, kw]
            # one output channel: a plain bias, the weight zero point in the tile (deconv_one_channel_*;
            # rv1106/rv1103: from one channel, in conv mode 3, whose registers requant_t3 checks)
            if self.int8 and cout == 1 and (self.f2_platform() or self.t4_platform() or
                                            self.t3_platform() and cin == 1):
                self.lane_zero_points[node.index] = spare_lane_zero_point(raw, w.npu_shape, (cout, cin, kh, kw), where)
        else:
            # depthwise (RKNN-Toolkit2 2.2.0/2.3.0 compile a bilinear Resize to one): a depthwise conv's
            # tiles, [1, C, kh, kw], holding the kernel flipped as group 1's (corpus deconv_depthwise*: an
            # asymmetric kernel on five platforms; read unflipped, cosine 0.78 against the simulator)
            if cout != 1:
                raise self.error(f"{node.label}: a depthwise ConvTranspose with weight {list(w.shape)} in an "
                                 f"{'int8' if self.int8 else 'fp16'} {self.platform()} file; only weights [C, 1, kh, "
                                 "kw] were observed")
            if self.int8 and (self.t4_platform() or self.f2_platform() or self.t3_platform()):
                # a depthwise conv's tiles, the zero points beside the weights
                dw, self.weight_zero_points[node.index] = decode_depthwise_weight(
                    raw, w.npu_shape, (1, cin, kh, kw), where, w.size, **(_T3_DEPTHWISE if self.t3_platform() else {}))
            else:
                dw = decode_weight(raw, w.npu_shape, (1, cin, kh, kw), w.dtype, where, w.size)
            # [C, 1, kh, kw] is at once the deconv's weight and the conv view (one channel per group)
            weight = tiles = np.ascontiguousarray(dw.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
            release = toolkit_release(self.rk.toolkit_version or self.rk.compiler_version)
            checked = release == "2.5.0" or self.platform() in _DEPTHWISE_DECONV_TAPS_CHECKED.get(release, ())
            if not checked and not np.array_equal(tiles, tiles[:, :, ::-1, ::-1]):
                raise self.error(f"{node.label}: a depthwise ConvTranspose whose kernel is not symmetric under a "
                                 f"half turn in an {self.platform()} file from RKNN-Toolkit2 {release}; the order of "
                                 "its taps was checked on RKNN-Toolkit2 2.5.0's files of every platform and "
                                 + "; ".join(f"{done}'s of {', '.join(platforms)}" for done, platforms
                                             in _DEPTHWISE_DECONV_TAPS_CHECKED.items()) + " only (deconv_depthwise*)")
            cout = cin
        expected = [x.shape[0], cout] + [(x.shape[2 + k] - 1) * attrs["strides"][k] - attrs["pads"][k] -
                                         attrs["pads"][k + 2] + attrs["kernel_shape"][k] + attrs["output_padding"][k]
                                         for k in range(2)]
        if list(weight.shape[2:]) != attrs["kernel_shape"] or x.shape[1] != cin or expected != list(out.shape):
            raise self.error(f"{node.label}: weight {list(weight.shape)} and attributes give output {expected}, the "
                             f"file says {list(out.shape)} from input {list(x.shape)}")
        if group == 1:
            attrs.pop("group")
        if self.int8:
            # the conv formula per output channel, on the [Cout, Cin, kh, kw] view of the weight
            unit, acc = self.int8_conv_constants(node, activation, x, out, w, tiles, b)
            total = emit_accumulator(self, node, x, out, w, b, acc, attrs, transposed=True)
            self.int8_fused(node, total, acc, out, activation, [], unit,
                            self.deconv_activation_params(node, activation, x, out, b, unit, cout))
            return
        if w.dtype != "float16":
            raise self.error(f"{node.label}: weight {w.name!r} has dtype {w.dtype}; fp16 files store float16")
        weight_f = weight.astype(np.float32)
        bias_f = None
        if b is not None:
            if b.dtype != "float32":
                raise self.error(f"{node.label}: bias {b.name!r} has dtype {b.dtype}; fp16 files store float32")
            bias_f = decode_float_bias(self.vf.tensor_data(self.sg, b), cout,
                                       f"{self.label}: {node.label} bias {b.name!r}")
        inputs = [self.names[x.index], self.constant(self.names[w.index], weight_f)]
        if bias_f is not None:
            inputs.append(self.constant(self.names[b.index], bias_f, keep_float=True))
        if activation is None:
            self.emit(node, "ConvTranspose", inputs, attrs)
            return
        conv = f"{self.names[out.index]}__conv"  # rounded to fp16, then the fused part
        self.emit(node, "ConvTranspose", inputs, attrs, output=conv)
        params = self.deconv_activation_params(node, activation, x, out, b, None, cout)
        self.fused(node, activation, conv, [], None, params)

    def deconv_activation_params(self, node: VendorNode, activation: Optional[str], x: VendorTensor,
                                 out: VendorTensor, b: Optional[VendorTensor], unit: Optional[float],
                                 channels: int) -> Optional[Dict[str, float]]:
        """A deconv's fused Clip / LeakyRelu / HardSigmoid parameters from rk3562's or
        rk3576/rv1126b's map (a conv's: :func:`.t4act.t4_activation`, :func:`.f2act.f2_activation`,
        :func:`.f2act.f2_fp16_activation`); ``None`` elsewhere (the rk3588-family registers are
        read by :meth:`register_params`) and for the other activations."""
        if activation not in _REGISTER_ACTIVATIONS:
            return None
        if self.t4_platform():
            return t4_activation(self, node, activation, x, out, b, unit)
        if self.f2_platform():
            return f2_activation(self, node, activation, x, out, b, channels, unit) if self.int8 else \
                f2_fp16_activation(self, node, activation, out)
        return None

    def deconv_bson_attrs(self, node: VendorNode) -> Dict[str, object]:
        """A plain ConvTranspose's ONNX attributes from its BSON, checked against its deconv
        parameter table (type 2)."""
        if node.param_type != 2:
            raise self.error(f"{node.label} has parameter-union type {node.param_type}; a deconv table (2) was expected")
        attrs = {"kernel_shape": self.bson_ints(node, "kernel_shape"),
                 "strides": self.bson_ints(node, "strides"),
                 "pads": self.bson_ints(node, "pads"),
                 "dilations": self.bson_ints(node, "dilations", [1, 1]),
                 "group": self.bson_int(node, "group", 1),
                 "output_padding": self.bson_ints(node, "output_padding", [0, 0])}
        for key in ("kernel_shape", "dilations"):
            if list(node.params.get(key, ())) != attrs[key]:
                raise self.error(f"{node.label}: parameter table {key} {node.params[key]} disagrees with the BSON "
                                 f"{attrs[key]}")
        if node.params.get("auto_pad") not in ("NOTSET", ""):
            raise self.error(f"{node.label}: auto_pad {node.params.get('auto_pad')!r}; only explicit pads were "
                             "observed")
        return attrs

    def deconv_encoding(self) -> Optional[DeconvEncoding]:
        """How the file's CNA registers encode a ConvTranspose (:mod:`.deconv_regs`): rk3588's,
        rk3566/rk3568's, rk3562's or rk3576/rv1126b's; ``None`` in an rv1106 container, whose nodes
        carry the attributes recovered already."""
        if self.t3_platform():
            return None
        if self.t4_platform():
            return RK3562_DECONV
        if self.f2_platform():
            return RK3576_DECONV
        return RK3566_DECONV if self.lite_platform() else RK3588_DECONV

    def deconv_register_attrs(self, node: VendorNode, x: VendorTensor, w: VendorTensor, out: VendorTensor,
                              encoding: DeconvEncoding) -> Dict[str, object]:
        """A ConvTranspose's ONNX attributes from its CNA registers."""
        where = f"{self.label}: {node.label}"
        regs = node_registers(self.regcmd(), self.tasks(), node.index, where)
        zero_point = self.activation_quant(x).zero_point[0] if self.int8 else 0
        return deconv_params(regs, w.shape, x.shape, out.shape, where, encoding, self.int8, zero_point,
                             graph_input=x.kind == "input")

    def argmax(self, node: VendorNode) -> None:
        """ArgMax (a CPU op in the file): axis and keepdims from the BSON, int64 indices of the
        first maximum, as ONNX's (on an int8 file, of the int8 codes' values)."""
        (data,) = self.activation_inputs(node, 1, 1)
        x, out = self.tensor(node.inputs[0], node), self.single_output(node)
        axis, keepdims = self.bson_int(node, "axis"), self.bson_int(node, "keepdims", 1)
        if attr_value(node, "select_last_index", 0) not in (0, None):
            raise self.error(f"{node.label}: select_last_index=1 was never observed")
        if out.dtype != "int64" or not -len(x.shape) <= axis < len(x.shape):
            raise self.error(f"{node.label}: an ArgMax over axis {axis} of {list(x.shape)} into a {out.dtype} tensor; "
                             "int64 indices over one of the input's axes were expected")
        shape = list(x.shape)
        shape[axis] = 1
        if not keepdims:
            del shape[axis]
        if shape != list(out.shape):
            raise self.error(f"{node.label}: axis {axis}, keepdims {keepdims} give {shape}, the file says "
                             f"{list(out.shape)}")
        self.emit(node, "ArgMax", [data], {"axis": axis, "keepdims": keepdims})

    def custom_node(self, node: VendorNode) -> None:
        """A node a registered custom operator runs: its activation inputs, its plain constant
        inputs (as :meth:`const_operand` decodes them), every output, and the file's BSON
        attributes as the node's attributes (what ``get_node_attr`` reads)."""
        inputs = []
        for i in node.inputs:
            t = self.tensor(i, node)
            if t.kind in _ACTIVATION_KINDS:
                if not _is_helper(t):
                    inputs.append(self.names[t.index])
            elif t.kind in ("const", "shape", "generated") and t.layout != "weight":
                inputs.append(self.const_operand(node, t))
            else:
                raise self.error(f"{node.label}: custom op input {t.name!r} is a {t.kind} tensor in layout {t.layout}; "
                                 "only activations and plain constants are passed to a custom operator")
        attrs = {name: attr_value(node, name) for name in node.attrs}
        self.nodes.append(Node(node.op, node.name or f"{node.op}#{node.index}", inputs,
                               [self.names[o] for o in node.outputs], attrs))

    def split(self, node: VendorNode) -> None:
        """Split along the parameter table's axis into the sizes of its int64 shape constant
        (the table repeats both; they must agree).  int8 outputs keep their own scale and zero
        point, so each part is requantized to its output's grid, as the NPU writes it."""
        (data,) = self.activation_inputs(node, 1, 1)
        x = self.tensor(node.inputs[0], node)
        consts = [self.tensor(i, node) for i in node.inputs[1:]]
        axis = int(node.params.get("axis", -1))
        if not consts and not node.attrs:
            # the compiler's own split of a wide conv's input channels into branches (DeepLabV3's ASPP):
            # no size constant, no BSON, only the parameter table (axis 1 seen); or an rv1106 file's
            # Split, its axis and sizes recovered from its shapes and table (.t3nodes), on any axis
            sizes = np.array(node.params.get("split", []), np.int64)
            if axis != 1 and node.recovered is None:
                raise self.error(f"{node.label}: a Split without size constant or BSON on axis {axis}; only the "
                                 "compiler's channel split (axis 1) was decoded")
            size_name = self.constant(f"{self.names[node.outputs[0]]}__split_sizes", sizes)
        else:
            if len(consts) != 1 or consts[0].kind != "shape":
                raise self.error(f"{node.label} needs one int64 split-size constant, has {[t.kind for t in consts]}")
            sizes = self.int64_const(node, consts[0])
            bson_axis = self.bson_int(node, "axis")
            if sizes.tolist() != list(node.params.get("split", [])) or bson_axis != axis:
                raise self.error(f"{node.label}: split sizes {sizes.tolist()} / axis {axis} disagree with its "
                                 f"parameter table {node.params} or BSON axis {bson_axis}")
            size_name = self.constant(self.names[consts[0].index], sizes)
        # a part nothing reads has no tensor (UNREAD): it is computed under a name of its own and dropped
        outs = [None if i == UNREAD else self.tensor(i, node) for i in node.outputs]
        if all(o is None for o in outs):
            raise self.error(f"{node.label}: none of its outputs {list(node.outputs)} is a tensor")
        if not 0 <= axis < len(x.shape) or len(outs) != len(sizes) or sum(sizes.tolist()) != x.shape[axis] or any(
                o is not None and list(o.shape) != list(x.shape[:axis]) + [int(n)] + list(x.shape[axis + 1:])
                for o, n in zip(outs, sizes)):
            raise self.error(f"{node.label}: sizes {sizes.tolist()} on axis {axis} of {list(x.shape)} do not give its "
                             f"outputs {[None if o is None else list(o.shape) for o in outs]}")
        name = node.name or f"Split#{node.index}"
        names = [f"{name}/unread_part{k}" if o is None else self.names[o.index] for k, o in enumerate(outs)]
        self.nodes.append(Node("Split", name, [data, size_name], names, {"axis": axis}))

    def pool(self, node: VendorNode) -> None:
        (data,) = self.activation_inputs(node, 1, 1)
        x, out = self.tensor(node.inputs[0], node), self.single_output(node)
        kernel = self.bson_ints(node, "kernel_shape")
        attrs = {"kernel_shape": kernel,
                 "strides": self.bson_ints(node, "strides", [1] * len(kernel)),
                 "pads": self.bson_ints(node, "pads", [0] * 2 * len(kernel))}
        ceil_mode = self.bson_int(node, "ceil_mode", 0)
        if ceil_mode:
            attrs["ceil_mode"] = 1
        if node.op == "MaxPool":
            attrs["dilations"] = self.bson_ints(node, "dilations", [1] * len(kernel))
        else:
            # count_include_pad (PyTorch's AvgPool2d default), ceil_mode and both: corpus avgpool_attrs
            include = self.bson_int(node, "count_include_pad", 0)
            if include not in (0, 1) or ceil_mode not in (0, 1):
                raise self.error(f"{node.label}: count_include_pad {include}, ceil_mode {ceil_mode}; 0 or 1 expected")
            if include:
                attrs["count_include_pad"] = 1
        n = len(kernel)
        if not (n and len(x.shape) == 2 + n and len(attrs["strides"]) == n and len(attrs["pads"]) == 2 * n
                and len(attrs.get("dilations", kernel)) == n and min(kernel + attrs["strides"]) >= 1
                and min(attrs.get("dilations", kernel)) >= 1 and min(attrs["pads"]) >= 0):
            raise self.error(f"{node.label}: pooling attributes {attrs} do not fit a {list(x.shape)} input")
        dims = []
        for k in range(len(kernel)):
            span = attrs.get("dilations", [1] * len(kernel))[k] * (kernel[k] - 1) + 1
            size = x.shape[2 + k] + attrs["pads"][k] + attrs["pads"][k + len(kernel)] - span
            dims.append(-(-size // attrs["strides"][k]) + 1 if ceil_mode else size // attrs["strides"][k] + 1)
        if list(x.shape[:2]) + dims != list(out.shape):
            raise self.error(f"{node.label}: its attributes {attrs} give output shape {list(x.shape[:2]) + dims}, "
                             f"the file says {list(out.shape)}")
        self.emit(node, node.op, [data], attrs)

    def output_shape(self, out: VendorTensor) -> str:
        """An int64 constant holding ``out``'s shape: the target of a node whose file stores no
        shape constant (an rv1106 container's Reshape, Expand or Resize)."""
        return self.constant(f"{self.names[out.index]}__shape", np.array(out.shape, np.int64))

    def cpu_op(self, node: VendorNode) -> None:
        """An op the runtime runs on the CPU (:data:`_CPU_OPS`): the ONNX op itself, in float32 on
        the (dequantized) input, its output rounded to the output tensor's fp16 or int8 grid by the
        executor.  Exp and Erf are element-wise; ReduceMax/Min take their axes from the int64 constant and
        ``keepdims`` from the BSON (checked against the parameter table).  A node the file gives NPU
        tasks is refused: the NPU's numerics for it were never decoded (but an fp16 file's
        :data:`_FP16_NPU_FLOAT_OPS` and rk3576/rv1126b's channel ReduceMax, the ONNX op once its
        scratch tensors are checked: :mod:`.npu_reduce`)."""
        x, out = self.tensor(node.inputs[0], node), self.single_output(node)
        on_npu = any(task.op_idx == node.index for task in self.tasks())
        npu_reduce = on_npu and node.op == "ReduceMax" and self.f2_platform()
        if on_npu and not npu_reduce and (self.int8 or node.op not in _FP16_NPU_FLOAT_OPS):
            raise self.error(f"{node.label}: a {node.op} with NPU tasks; only the runtime's CPU {node.op} (no "
                             "task) was checked against the simulator")
        inputs = [self.tensor(i, node) for i in node.inputs[1:]]
        scratch = [t for t in inputs if npu_reduce and t.index in self.reduce_scratch]
        (data,) = self.activation_inputs(node, 1, 1)
        attrs = {}
        got = list(x.shape)
        if node.op in ("ReduceMax", "ReduceMin"):
            consts = [t for t in inputs if t not in scratch]
            if node.recovered is not None and not consts:  # an rv1106 file's, from its shapes (.t3nodes)
                stored, keepdims = self.bson_ints(node, "axes"), self.bson_int(node, "keepdims")
            elif len(consts) != 1:
                raise self.error(f"{node.label} has {len(consts)} constant inputs; {node.op} takes one int64 axes")
            else:
                stored, keepdims = self.int64_const(node, consts[0]), self.bson_int(node, "keepdims", 1)
                if "axes" in node.attrs and self.bson_ints(node, "axes") != stored.tolist():
                    raise self.error(f"{node.label}: BSON axes {self.bson_ints(node, 'axes')} are not its constant's "
                                     f"{stored.tolist()}")
            axes = [int(a) + len(got) if a < 0 else int(a) for a in stored]
            if node.recovered is None and node.params.get("keepdims") != [keepdims]:
                raise self.error(f"{node.label}: its parameter table's keepdims {node.params.get('keepdims')} is not "
                                 f"the BSON's {keepdims}")
            if not axes or any(not 0 <= a < len(got) for a in axes) or len(set(axes)) != len(axes) \
                    or keepdims not in (0, 1):
                raise self.error(f"{node.label}: axes {axes}, keepdims {keepdims} on a rank-{len(got)} input")
            got = [1 if a in axes else d for a, d in enumerate(got)] if keepdims else \
                [d for a, d in enumerate(got) if a not in axes]
            attrs = {"axes": axes, "keepdims": keepdims}
            if npu_reduce:
                check_reducemax_scratch(x, out, scratch, axes, f"{self.label}: {node.label}")
        if got != list(out.shape):
            raise self.error(f"{node.label}: {node.op} of {list(x.shape)} gives {got}; the file says {list(out.shape)}")
        self.emit(node, node.op, [data], attrs)

    def int64_const(self, node: VendorNode, t: VendorTensor) -> np.ndarray:
        if t.dtype != "int64" or t.kind != "shape":
            raise self.error(f"{node.label}: {t.name!r} is a {t.dtype} {t.kind} tensor; an int64 constant was expected")
        raw = self.vf.tensor_data(self.sg, t)
        count = int(np.prod(t.shape)) if t.shape else 0
        if min(t.shape, default=0) < 0 or len(raw) < 8 * count:
            raise self.error(f"{node.label}: constant {t.name!r} needs {8 * count} bytes, has {len(raw)}")
        return np.frombuffer(raw, "<i8", count).astype(np.int64)

    def slice(self, node: VendorNode) -> None:
        (data,) = self.activation_inputs(node, 1, 1)
        consts = [self.tensor(i, node) for i in node.inputs[1:]]
        if not 2 <= len(consts) <= 4:
            raise self.error(f"{node.label} has {len(consts)} constant inputs; Slice takes starts, ends[, axes[, steps]]")
        values = [self.int64_const(node, t) for t in consts]
        x, out = self.tensor(node.inputs[0], node), self.single_output(node)
        axes = values[2] if len(values) > 2 else np.arange(len(values[0]))
        steps = values[3] if len(values) > 3 else np.ones(len(values[0]), np.int64)
        got = list(x.shape)
        for start, end, axis, step in zip(values[0], values[1], axes, steps):
            if not -len(got) <= axis < len(got) or step == 0:
                raise self.error(f"{node.label}: axis {axis} with step {step} on a rank-{len(got)} input")
            got[axis] = len(range(*slice(int(start), int(end), int(step)).indices(max(x.shape[axis], 0))))
        if got != list(out.shape):
            raise self.error(f"{node.label}: starts/ends/axes/steps {[v.tolist() for v in values]} give shape {got}, "
                             f"the file says {list(out.shape)}")
        names = [self.constant(self.names[t.index], v) for t, v in zip(consts, values)]
        self.emit(node, "Slice", [data] + names, {})

    def expand(self, node: VendorNode) -> None:
        (data,) = self.activation_inputs(node, 1, 1)
        if len(node.inputs) == 1 and node.recovered is not None:  # an rv1106 file stores no shape (.t3nodes)
            self.emit(node, "Expand", [data, self.output_shape(self.single_output(node))], {})
            return
        if len(node.inputs) != 2:
            raise self.error(f"{node.label} has {len(node.inputs)} inputs; Expand takes data and an int64 shape")
        t = self.tensor(node.inputs[1], node)
        shape = self.int64_const(node, t)
        x, out = self.tensor(node.inputs[0], node), self.single_output(node)
        try:  # ONNX Expand: numpy broadcasting of the input against the shape
            got = list(np.broadcast_shapes(tuple(x.shape), tuple(int(d) for d in shape)))
        except ValueError:
            got = None
        if got != list(out.shape):
            raise self.error(f"{node.label}: expanding {list(x.shape)} to {shape.tolist()} gives "
                             f"{got if got is not None else 'no broadcast shape'}; the file says {list(out.shape)}")
        self.emit(node, "Expand", [data, self.constant(self.names[t.index], shape)], {})

    def pad(self, node: VendorNode) -> None:
        """ONNX Pad as the compiler keeps it (parameter table 30: the mode string, also in the
        BSON): data, the int64 ``pads`` constant and, for a constant pad given one, a float32
        ``constant_value`` (stored float32 in int8 files too; it lands on the output's int8 grid
        or is rounded to float16, as every value the op writes)."""
        (data,) = self.activation_inputs(node, 1, 1)
        where = f"{node.label} (platform {self.platform()}, toolkit {self.rk.toolkit_version or '?'})"
        mode = node.params.get("mode")
        stored = attr_value(node, "mode")  # none in the compiler's own Pads (their BSON is empty)
        if mode not in _PAD_MODES or stored not in (None, mode):
            raise self.error(f"{where}: Pad mode {mode!r} (parameter table; BSON "
                             f"{'none' if stored is None else repr(stored)}); the lowering runs modes "
                             f"{', '.join(_PAD_MODES)}")
        x, out = self.tensor(node.inputs[0], node), self.single_output(node)
        consts = [self.tensor(i, node) for i in node.inputs[1:]]
        if not 1 <= len(consts) <= 2 or (len(consts) == 2 and mode != "constant"):
            raise self.error(f"{where}: {len(consts)} constant inputs {[t.name for t in consts]} to a {mode!r} Pad; "
                             "pads and (constant mode) a constant_value were expected")
        pads = self.int64_const(node, consts[0])
        rank = len(x.shape)
        if len(pads) != 2 * rank or np.any(pads < 0):
            raise self.error(f"{where}: pads {pads.tolist()} for a rank-{rank} input; {2 * rank} non-negative "
                             "values were expected (negative pads, crops, were never built)")
        got = [d + int(b) + int(e) for d, b, e in zip(x.shape, pads[:rank], pads[rank:])]
        if got != list(out.shape):
            raise self.error(f"{where}: pads {pads.tolist()} on {list(x.shape)} give {got}; the file says "
                             f"{list(out.shape)}")
        if mode == "reflect" and any(max(b, e) >= d for d, b, e in zip(x.shape, pads[:rank], pads[rank:])):
            raise self.error(f"{where}: reflect pads {pads.tolist()} reach beyond an axis of {list(x.shape)}")
        if x.dtype != out.dtype or x.dtype not in ("float16", "int8") or \
                (x.dtype == "int8" and not _same_quant(x, out)):
            raise self.error(f"{where}: Pad input {x.dtype} (scale {list(x.scale)}, zero point {list(x.zero_point)}), "
                             f"output {out.dtype} (scale {list(out.scale)}, zero point {list(out.zero_point)}); only "
                             "float16, or int8 keeping its quantization, was decoded")
        inputs = [data, self.constant(self.names[consts[0].index], pads)]
        if len(consts) == 2:
            t = consts[1]
            value = np.array([self.float32_scalar(node, t, "constant_value")], np.float32)
            if not np.isfinite(value[0]):
                raise self.error(f"{where}: constant_value {float(value[0])!r} is not finite")
            # int8: beyond the output's grid, the value saturates to its end code as every value the op
            # writes (the Pad keeps its input's grid, which need not hold the constant: pad_saturated*)
            inputs.append(self.constant(self.names[t.index], value))
        self.emit(node, "Pad", inputs, {"mode": mode})

    def sdp_attention(self, node: VendorNode) -> None:
        """The compiler's fused scaled dot-product attention (YOLO11's C2PSA: ``v softmax(q^T k *
        scale)^T``) over 4-D tensors (heads, channels, 1, tokens), as ONNX nodes whose
        intermediates stay float32: only the output is rounded, as by one NPU op.  In int8 files
        the scores and the probabilities are put on the int8 grids the registers give
        (:func:`.transformer.attention_grids`), as the simulator does."""
        q, k, v = self.activation_inputs(node, 3, 3)
        tq, tk, tv = (self.tensor(i, node) for i in node.inputs[:3])
        out = self.single_output(node)
        dtypes = [t.dtype for t in (tq, tk, tv, out)]
        if dtypes != (["int8"] * 4 if self.int8 else ["float16"] * 4):
            raise self.error(f"{node.label}: exSDPAttention on {dtypes} tensors in "
                             f"{'an int8' if self.int8 else 'an fp16'} file; only int8 attention in int8 files and "
                             "float16 attention in fp16 files were decoded")
        shapes = [list(t.shape) for t in (tq, tk, tv, out)]
        if (any(len(sh) != 4 or sh[2] != 1 for sh in shapes) or shapes[0] != shapes[1] or shapes[2] != shapes[3]
                or shapes[2][0] != shapes[0][0] or shapes[2][3] != shapes[0][3]):
            raise self.error(f"{node.label}: q, k, v and output shapes {shapes} are not (heads, d, 1, tokens), "
                             "(heads, d, 1, tokens), (heads, c, 1, tokens), (heads, c, 1, tokens)")
        scale = self.bson(node, "scale")
        if not isinstance(scale, float) or not np.isfinite(scale):
            raise self.error(f"{node.label}: attribute 'scale' is {scale!r}; a finite float was expected")
        grids = attention_grids(self, node, scale) if self.int8 else None
        base = self.names[out.index]
        step = self.float_steps(node, base)
        q_t = step("Transpose", [q], {"perm": [0, 2, 3, 1]}, "q_t")  # (heads, 1, tokens, d)
        k_t = step("Transpose", [k], {"perm": [0, 2, 1, 3]}, "k_t")  # (heads, 1, d, tokens)
        scores = step("MatMul", [q_t, k_t], {}, "scores")
        scaled = step("Mul", [scores, self.constant(f"{base}__scale", np.array(scale, np.float32), keep_float=True)],
                      {}, "scaled")
        attn = step("Softmax", [scaled], {"axis": -1}, "attn")
        if grids is not None:  # the grids of the BSON's q_matmul and q_softmax
            self.quant[scores], self.quant[attn] = grids
        v_t = step("Transpose", [v], {"perm": [0, 2, 1, 3]}, "v_t")  # (heads, 1, c, tokens)
        mixed = step("MatMul", [v_t, step("Transpose", [attn], {"perm": [0, 1, 3, 2]}, "attn_t")], {}, "mixed")
        self.emit(node, "Transpose", [mixed], {"perm": [0, 2, 1, 3]})

    def float16_only(self, node: VendorNode, tensors: Sequence[VendorTensor], what: str) -> None:
        """Refuse ``node`` unless it is in an fp16 file on float16 tensors (``what``: the op in words)."""
        if self.int8 or any(t.dtype != "float16" for t in tensors):
            raise self.error(f"{node.label}: {node.op} ({what}) on {[t.dtype for t in tensors]} tensors in "
                             f"{'an int8' if self.int8 else 'an fp16'} file; only its float16 form (fp16 files) "
                             "was decoded")

    def float_steps(self, node: VendorNode, base: str):
        """``step(op, inputs, attrs, suffix)``: emit one executor node of vendor ``node`` whose
        output (``<base>__<suffix>``) stays float32, as inside one NPU op; returns its name."""
        def step(op: str, inputs: List[str], attrs: dict, suffix: str) -> str:
            name = f"{base}__{suffix}"
            self.keep_float.append(name)
            self.emit(node, op, inputs, attrs, output=name)
            return name
        return step

    def resize(self, node: VendorNode) -> None:
        (data,) = self.activation_inputs(node, 1, 1)
        p = node.params
        mode, coord, nearest = p.get("mode"), p.get("coordinate_transformation_mode"), p.get("nearest_mode")
        if mode not in _RESIZE_MODES or coord not in _RESIZE_COORDS or nearest not in _RESIZE_NEAREST:
            raise self.error(f"{node.label}: Resize parameters {p} are not understood (known: modes {_RESIZE_MODES}, "
                             f"coordinate modes {_RESIZE_COORDS}, nearest modes {_RESIZE_NEAREST})")
        consts = [self.tensor(i, node) for i in node.inputs[1:] if self.tensor(i, node).kind == "shape"]
        # ONNX's empty "roi" input is an "empty_placeholder" tensor without data (shape (0,) or, from
        # toolkit 2.3.2, (1,))
        scales = [t for t in consts if t.dtype == "float32" and t.shape and t.shape[0] > 0
                  and not (t.buffer == 0 and t.name.startswith("empty_placeholder"))]
        sizes = [t for t in consts if t.dtype == "int64"]
        x, out = self.tensor(node.inputs[0], node), self.single_output(node)
        attrs = {"mode": mode, "coordinate_transformation_mode": coord, "nearest_mode": nearest}
        if not consts and node.recovered is not None:  # an rv1106 file stores no scales (.t3nodes): its output size
            self.emit(node, "Resize", [data, "", "", self.output_shape(out)], attrs)
            return
        if not scales and len(sizes) == 1:  # ONNX's sizes input (torchvision's interpolate(size=...))
            values = self.int64_const(node, sizes[0])
            if values.tolist() != list(out.shape) or len(values) != len(x.shape):
                raise self.error(f"{node.label}: sizes {values.tolist()} of a rank-{len(x.shape)} input are not the "
                                 f"output shape {list(out.shape)}")
            self.emit(node, "Resize", [data, "", "", self.constant(self.names[sizes[0].index], values)], attrs)
            return
        if len(scales) != 1 or sizes:
            raise self.error(f"{node.label} needs one float32 scales constant or one int64 sizes constant, has "
                             f"{[t.name for t in consts]}")
        t = scales[0]
        raw = self.vf.tensor_data(self.sg, t)
        if len(raw) < 4 * t.shape[0]:
            raise self.error(f"{node.label}: scales {t.name!r} needs {4 * t.shape[0]} bytes, has {len(raw)}")
        values = np.frombuffer(raw, "<f4", t.shape[0]).astype(np.float32)
        if [int(np.floor(d * s)) for d, s in zip(x.shape, values)] != list(out.shape):
            raise self.error(f"{node.label}: scales {values.tolist()} do not give the output shape {list(out.shape)}")
        self.emit(node, "Resize", [data, "", self.constant(self.names[t.index], values)], attrs)

    def data_convert(self, node: VendorNode) -> None:
        (data,) = self.activation_inputs(node, 1, 1)
        src, dst = attr_value(node, "i_dtype"), attr_value(node, "o_dtype")
        known = ("int8", "float16")
        x, out = self.tensor(node.inputs[0], node), self.single_output(node)
        if not node.bson and node.recovered is None and {x.dtype, out.dtype} == set(known):
            # corpus wide_dilated_i8: the compiler's split of a wide conv runs in float16 between two such
            # nodes; computed as the unsplit float conv (or with the branches rounded), 77-84 % of the
            # outputs of three such builds were the simulator's, the rest 1-2 steps away
            raise self.error(f"{node.label}: an exDataConvert without BSON ({x.dtype} tensor {x.name!r} to "
                             f"{out.dtype}), the compiler's own around a float16 split conv in an int8 file; "
                             "those branches do not match the vendor simulator off-board (77-84 % of outputs "
                             "exact, the rest 1-2 steps away), so they are refused")
        if src not in known or dst not in known or x.dtype != src or out.dtype != dst:
            raise self.error(f"{node.label} converts {src!r} ({x.dtype} tensor) to {dst!r} ({out.dtype} tensor); "
                             f"the lowering converts between {' and '.join(known)}")
        self.emit(node, "Identity", [data], {})


def _with_dims(spec: TensorSpec, dims: Tuple[int, ...]) -> TensorSpec:
    """``spec`` with the subgraphs' dims (``-1`` where the shape sets differ) when they are
    the JSON shape's; the JSON shape otherwise."""
    if len(dims) != len(spec.shape) or any(d != -1 and d != e for d, e in zip(dims, spec.shape)):
        return spec
    return TensorSpec(spec.name, dims, spec.dtype, spec.layout, spec.quant)


def _batched(spec: TensorSpec, batch: int) -> TensorSpec:
    """``spec`` (one sample) with axis 0 multiplied by ``batch``."""
    if batch == 1:
        return spec
    return TensorSpec(spec.name, (spec.shape[0] * batch,) + tuple(spec.shape[1:]), spec.dtype, spec.layout, spec.quant)


def _input_spec(spec: TensorSpec, dims: Tuple[int, ...]) -> TensorSpec:
    """An input spec in the graph's layout, with ``-1`` for the dims the shape sets vary;
    float16 inputs stay float16; int8 inputs are float32 with their quantization (the
    attribute says INT8 with its scale and zero point, and the Context takes int8, uint8 or
    float32 data for it)."""
    spec = _with_dims(spec, dims)
    return _float32(spec) if spec.dtype == "int8" else spec


def _float32(spec: TensorSpec) -> TensorSpec:
    """``spec`` as the software backend takes its data: float32 for a float16 or int8 input
    (raw values, normalised in float32 by :meth:`VendorModel.graph_inputs` before any rounding)."""
    if spec.dtype in ("int8", "float16"):
        return TensorSpec(spec.name, spec.shape, "float32", spec.layout, spec.quant)
    return spec


def _check_conv_shape(lowering: _Lowering, node: VendorNode, x: VendorTensor, out: VendorTensor, w_shape, attrs) -> None:
    """The output shape the attributes give must be the file's: a check that they were read right."""
    if len(x.shape) != 4 or len(out.shape) != 4:
        raise lowering.error(f"{node.label}: conv tensors of shapes {list(x.shape)} -> {list(out.shape)} are not 4-D")
    dims = []
    for k in range(2):
        span = attrs["dilations"][k] * (attrs["kernel_shape"][k] - 1) + 1
        size = x.shape[2 + k] + attrs["pads"][k] + attrs["pads"][k + 2] - span
        dims.append(size // attrs["strides"][k] + 1)
    expected = [x.shape[0], w_shape[0]] + dims
    if expected != list(out.shape):
        raise lowering.error(f"{node.label}: its attributes give output shape {expected}, the file says "
                             f"{list(out.shape)}")


def _float16_decimal(stored: float) -> float:
    """The ONNX value behind a float16 a file stores for it, taken to be the shortest decimal
    that rounds to it (0.1, not 0.0999756): what the simulator computes with."""
    return _shortest(stored, lambda a: float(np.float16(a)) == stored)


def _is_identity(node: VendorNode, attrs: dict, shape: Tuple[int, ...], values) -> bool:
    """A compiler-inserted (unnamed) 1x1 conv whose weight is the identity and bias zero
    (``shape``: the weight's; ``values()``: its float ``(weight, bias)``, asked for only when
    the node and shape could be one)."""
    if node.name or shape[0] != shape[1] or tuple(shape[2:]) != (1, 1) or attrs["group"] != 1:
        return False
    if attrs["strides"] != [1, 1] or any(attrs["pads"]):
        return False
    weight, bias = values()
    eye = np.eye(weight.shape[0], dtype=np.float32)
    if not np.allclose(weight[:, :, 0, 0], eye, rtol=0, atol=_IDENTITY_TOLERANCE):
        return False
    return bias is None or bool(np.all(np.abs(bias) <= _IDENTITY_TOLERANCE))


def _hard_sigmoid_params(scale: float, offset: float) -> Tuple[float, float]:
    """HardSigmoid ``(alpha, beta)`` from its lookup-table index map ``u = x * scale + offset``,
    ``scale = f16(alpha * 32768)``, ``offset = f32(scale * (beta - 0.5) / alpha)``."""
    alpha = hard_sigmoid_slope(scale)
    beta = _shortest(0.5 + offset * alpha / scale,
                     lambda b: float(np.float32(scale * (b - 0.5) / alpha)) == float(np.float32(offset)))
    return alpha, beta


def _same_quant(a: VendorTensor, b: VendorTensor) -> bool:
    return a.scale == b.scale and a.zero_point == b.zero_point
