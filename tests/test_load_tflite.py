"""RKNN.load_tflite: TFLite models written here (tests/tflite_builder.py) converted and run
on the software backend, checked against the TFLite interpreter (ai-edge-litert)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("onnx")

from rknnlite import Context, QntType, TensorFormat  # noqa: E402
from rknnlite.errors import ModelInvalidError  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.loaders.tflite import load_tflite  # noqa: E402

from tflite_builder import TFLiteBuilder, interpret, interpreter  # noqa: E402

SAME, VALID = 0, 1
NONE, RELU, RELU6 = 0, 1, 3


def _have_interpreter() -> bool:
    for mod in ("ai_edge_litert.interpreter", "tflite_runtime.interpreter"):
        try:
            __import__(mod)
            return True
        except ImportError:
            continue
    return False


needs_interpreter = pytest.mark.skipif(not _have_interpreter(), reason="no TFLite interpreter (ai-edge-litert)")


@pytest.fixture
def errors(caplog):
    caplog.set_level(logging.DEBUG, logger="rknnlite.toolkit")

    def messages():
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]

    return messages


def _rknn(data, quantize=False, tmp_path=None, **load_kw):
    r = RKNN()
    assert r.config(target_platform="rk3588", float_dtype="float32") == 0
    assert r.load_tflite(data, **load_kw) == 0
    assert r.build(do_quantization=quantize) == 0
    assert r.init_runtime() == 0
    return r


def _run(data, inputs, **kw):
    r = _rknn(data, **kw)
    try:
        return r.inference(inputs=list(inputs))
    finally:
        r.release()


def _conv_opts(padding=SAME, stride=1, act=NONE, dilation=1, **extra):
    return dict(Padding=padding, StrideW=stride, StrideH=stride, FusedActivationFunction=act,
                DilationWFactor=dilation, DilationHFactor=dilation, **extra)


# -- the float network of the brief ----------------------------------------------------------


def _float_network(rng) -> bytes:
    """conv (stride 2, SAME, fused RELU) -> depthwise (multiplier 2) -> RELU6 -> 1x1 conv, ADD
    -> AVERAGE_POOL -> RESHAPE -> FULLY_CONNECTED -> SOFTMAX; the pool output is a 2nd output."""
    b = TFLiteBuilder()
    f = lambda *s: rng.standard_normal(s).astype(np.float32) * 0.5  # noqa: E731
    x = b.tensor("input", [1, 9, 9, 3])
    c1 = b.tensor("conv1", [1, 5, 5, 4])
    b.op("CONV_2D", [x, b.tensor("w1", [4, 3, 3, 3], data=f(4, 3, 3, 3)), b.tensor("b1", [4], data=f(4))], [c1],
         "Conv2DOptions", **_conv_opts(SAME, 2, RELU))
    d1 = b.tensor("dw", [1, 5, 5, 8])
    b.op("DEPTHWISE_CONV_2D", [c1, b.tensor("wd", [1, 3, 3, 8], data=f(1, 3, 3, 8)), b.tensor("bd", [8], data=f(8))],
         [d1], "DepthwiseConv2DOptions", **_conv_opts(SAME, 1, NONE, DepthMultiplier=2))
    r6 = b.tensor("relu6", [1, 5, 5, 8])
    b.op("RELU6", [d1], [r6])
    c2 = b.tensor("conv2", [1, 5, 5, 8])
    b.op("CONV_2D", [r6, b.tensor("w2", [8, 1, 1, 8], data=f(8, 1, 1, 8)), b.tensor("b2", [8], data=f(8))], [c2],
         "Conv2DOptions",
         **_conv_opts(VALID))
    s = b.tensor("sum", [1, 5, 5, 8])
    b.op("ADD", [r6, c2], [s], "AddOptions", FusedActivationFunction=NONE)
    p = b.tensor("pool", [1, 2, 2, 8])
    b.op("AVERAGE_POOL_2D", [s], [p], "Pool2DOptions", Padding=VALID, StrideW=2, StrideH=2, FilterWidth=2,
         FilterHeight=2, FusedActivationFunction=NONE)
    flat = b.tensor("flat", [1, 32])
    b.op("RESHAPE", [p, b.tensor("shape", [2], data=np.array([1, 32], np.int32))], [flat])
    fc = b.tensor("fc", [1, 10])
    b.op("FULLY_CONNECTED", [flat, b.tensor("wf", [10, 32], data=f(10, 32)), b.tensor("bf", [10], data=f(10))],
         [fc], "FullyConnectedOptions", FusedActivationFunction=NONE)
    out = b.tensor("prob", [1, 10])
    b.op("SOFTMAX", [fc], [out], "SoftmaxOptions", Beta=1.0)
    return b.finish([x], [out, p])


@needs_interpreter
def test_float_network_matches_interpreter(tmp_path):
    rng = np.random.default_rng(1)
    data = _float_network(rng)
    x = rng.standard_normal((1, 9, 9, 3)).astype(np.float32)
    ref = interpret(data, [x])
    got = _run(data, [x])  # NHWC data, inference's default data_format
    assert [o.shape for o in got] == [(1, 10), (1, 2, 2, 8)]
    for g, e in zip(got, ref):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_io_layout_is_nchw_in_nhwc_out(tmp_path):
    rng = np.random.default_rng(2)
    path = tmp_path / "net.tflite"
    path.write_bytes(_float_network(rng))
    imported = load_tflite(str(path))
    assert [(s.name, s.shape, s.layout) for s in imported.input_specs] == [("input", (1, 3, 9, 9), "NCHW")]
    assert [(s.name, s.shape, s.layout) for s in imported.output_specs] == [
        ("prob", (1, 10), "UNDEFINED"), ("pool", (1, 2, 2, 8), "NHWC")]
    assert imported.graph.quant == {}
    r = _rknn(str(path))
    out = tmp_path / "net.rknn"
    assert r.export_rknn(str(out)) == 0
    r.release()
    with Context(str(out)) as ctx:
        # the model's input is NCHW; the context presents the image input as librknnrt does: NHWC
        assert ctx.inputs[0].fmt == TensorFormat.NHWC and ctx.inputs[0].dims == (1, 9, 9, 3)
        assert ctx.outputs[1].fmt == TensorFormat.NHWC and ctx.outputs[1].dims == (1, 2, 2, 8)
        # NCHW data given as such gives what NHWC data (the TFLite interpreter's) gives
        x = rng.standard_normal((1, 9, 9, 3)).astype(np.float32)
        a = ctx.run([x])
        b = ctx.run([np.ascontiguousarray(x.transpose(0, 3, 1, 2))], data_format="nchw")
        np.testing.assert_array_equal(a[1], b[1])


# -- one model per op ------------------------------------------------------------------------


def _single(opname, in_shapes, out_shape, options=None, consts=(), out_dtype=np.float32, **fields):
    """A model running one op on ``in_shapes`` activations plus constant ``consts``."""
    b = TFLiteBuilder()
    xs = [b.tensor(f"x{i}", s) for i, s in enumerate(in_shapes)]
    cs = [b.tensor(f"c{i}", np.shape(c), data=c) for i, c in enumerate(consts)]
    y = b.tensor("y", out_shape, dtype=out_dtype)
    b.op(opname, xs + cs, [y], options, **fields)
    return b.finish(xs, [y])


_W = np.random.default_rng(7).standard_normal((6, 3, 3, 4)).astype(np.float32)
_CASES = {
    "conv_valid_dilated_relu": lambda: _single("CONV_2D", [[1, 9, 8, 4]], [1, 5, 4, 6], "Conv2DOptions",
                                               [_W, np.arange(6, dtype=np.float32)],
                                               **_conv_opts(VALID, 1, RELU, 2)),
    "conv_same_stride2_odd": lambda: _single("CONV_2D", [[1, 7, 6, 4]], [1, 4, 3, 6], "Conv2DOptions",
                                             [_W, np.zeros(6, np.float32)], **_conv_opts(SAME, 2, RELU6)),
    "depthwise_same_stride2": lambda: _single("DEPTHWISE_CONV_2D", [[1, 7, 7, 3]], [1, 4, 4, 6],
                                              "DepthwiseConv2DOptions",
                                              [_W[:1, :, :, :].repeat(2, 3)[..., :6], np.ones(6, np.float32)],
                                              **_conv_opts(SAME, 2, NONE, DepthMultiplier=2)),
    "max_pool_same": lambda: _single("MAX_POOL_2D", [[1, 7, 7, 3]], [1, 4, 4, 3], "Pool2DOptions", Padding=SAME,
                                     StrideW=2, StrideH=2, FilterWidth=3, FilterHeight=3, FusedActivationFunction=0),
    "avg_pool_same_excludes_padding": lambda: _single(
        "AVERAGE_POOL_2D", [[1, 5, 5, 2]], [1, 3, 3, 2], "Pool2DOptions", Padding=SAME, StrideW=2, StrideH=2,
        FilterWidth=3, FilterHeight=3, FusedActivationFunction=RELU),
    "add_broadcast_const": lambda: _single("ADD", [[1, 4, 5, 3]], [1, 4, 5, 3], "AddOptions",
                                           [np.array([1.0, -2.0, 3.0], np.float32)], FusedActivationFunction=RELU),
    "sub_two_inputs": lambda: _single("SUB", [[1, 4, 5, 3], [1, 4, 5, 3]], [1, 4, 5, 3], "SubOptions",
                                      FusedActivationFunction=NONE),
    "mul_rank1_activation": lambda: _single("MUL", [[1, 2, 3, 4], [4]], [1, 2, 3, 4], "MulOptions",
                                            FusedActivationFunction=NONE),
    "concat_channels": lambda: _single("CONCATENATION", [[1, 3, 3, 2], [1, 3, 3, 5]], [1, 3, 3, 7],
                                       "ConcatenationOptions", Axis=-1, FusedActivationFunction=NONE),
    "concat_width": lambda: _single("CONCATENATION", [[1, 3, 2, 2], [1, 3, 4, 2]], [1, 3, 6, 2],
                                    "ConcatenationOptions", Axis=2, FusedActivationFunction=NONE),
    "mean_hw": lambda: _single("MEAN", [[1, 4, 5, 3]], [1, 3], "ReducerOptions", [np.array([1, 2], np.int32)],
                               KeepDims=False),
    "mean_keepdims": lambda: _single("MEAN", [[1, 4, 5, 3]], [1, 1, 1, 3], "ReducerOptions",
                                     [np.array([1, 2], np.int32)], KeepDims=True),
    "mean_batch_axis": lambda: _single("MEAN", [[2, 4, 5, 3]], [4, 5, 3], "ReducerOptions",
                                       [np.array([0], np.int32)], KeepDims=False),
    "pad": lambda: _single("PAD", [[1, 3, 3, 2]], [1, 4, 6, 2], None,
                           [np.array([[0, 0], [1, 0], [2, 1], [0, 0]], np.int32)]),
    "relu": lambda: _single("RELU", [[1, 3, 3, 2]], [1, 3, 3, 2]),
    "logistic": lambda: _single("LOGISTIC", [[1, 3, 3, 2]], [1, 3, 3, 2]),
    "tanh": lambda: _single("TANH", [[2, 5]], [2, 5]),
    "hard_swish": lambda: _single("HARD_SWISH", [[1, 3, 3, 2]], [1, 3, 3, 2]),
    "leaky_relu": lambda: _single("LEAKY_RELU", [[1, 3, 3, 2]], [1, 3, 3, 2], "LeakyReluOptions", Alpha=0.2),
    "softmax_beta_4d": lambda: _single("SOFTMAX", [[1, 2, 3, 5]], [1, 2, 3, 5], "SoftmaxOptions", Beta=0.5),
    "resize_nearest": lambda: _single("RESIZE_NEAREST_NEIGHBOR", [[1, 3, 5, 2]], [1, 7, 8, 2],
                                      "ResizeNearestNeighborOptions", [np.array([7, 8], np.int32)]),
    "resize_nearest_half_pixel": lambda: _single("RESIZE_NEAREST_NEIGHBOR", [[1, 3, 5, 2]], [1, 7, 8, 2],
                                                 "ResizeNearestNeighborOptions", [np.array([7, 8], np.int32)],
                                                 HalfPixelCenters=True),
    "resize_nearest_align_corners": lambda: _single("RESIZE_NEAREST_NEIGHBOR", [[1, 3, 5, 2]], [1, 7, 8, 2],
                                                    "ResizeNearestNeighborOptions", [np.array([7, 8], np.int32)],
                                                    AlignCorners=True),
    "resize_bilinear": lambda: _single("RESIZE_BILINEAR", [[1, 3, 5, 2]], [1, 6, 9, 2], "ResizeBilinearOptions",
                                       [np.array([6, 9], np.int32)]),
    "resize_bilinear_half_pixel": lambda: _single("RESIZE_BILINEAR", [[1, 3, 5, 2]], [1, 6, 9, 2],
                                                  "ResizeBilinearOptions", [np.array([6, 9], np.int32)],
                                                  HalfPixelCenters=True),
    "resize_bilinear_align_corners": lambda: _single("RESIZE_BILINEAR", [[1, 3, 5, 2]], [1, 6, 9, 2],
                                                     "ResizeBilinearOptions", [np.array([6, 9], np.int32)],
                                                     AlignCorners=True),
    "transpose_4d": lambda: _single("TRANSPOSE", [[1, 2, 3, 4]], [1, 4, 2, 3], None,
                                    [np.array([0, 3, 1, 2], np.int32)]),
    "transpose_to_3d_input": lambda: _single("TRANSPOSE", [[2, 3, 4]], [4, 2, 3], None,
                                             [np.array([2, 0, 1], np.int32)]),
    "reshape_to_4d": lambda: _single("RESHAPE", [[1, 24]], [1, 2, 3, 4], None, [np.array([1, 2, 3, 4], np.int32)]),
    "fully_connected_keep_num_dims": lambda: _single(
        "FULLY_CONNECTED", [[2, 3, 4]], [2, 3, 5], "FullyConnectedOptions",
        [np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)], FusedActivationFunction=RELU6,
        KeepNumDims=True),
    "fully_connected_from_4d": lambda: _single(
        "FULLY_CONNECTED", [[1, 2, 2, 3]], [1, 5], "FullyConnectedOptions",
        [np.random.default_rng(4).standard_normal((5, 12)).astype(np.float32)], FusedActivationFunction=NONE),
    "keras_dynamic_batch_reshape": lambda: _keras_dynamic_batch_reshape(),
    "pack_activations": lambda: _pack_activations(),
}


def _keras_dynamic_batch_reshape() -> bytes:
    """What Keras writes for ``Reshape((10,))`` in a model saved with a dynamic batch:
    SHAPE -> STRIDED_SLICE (the batch, shrunk to a scalar) -> PACK with 10 -> RESHAPE."""
    b = TFLiteBuilder()
    x = b.tensor("x", [1, 1, 1, 10])
    shape = b.tensor("shape", [4], dtype=np.int32)
    b.op("SHAPE", [x], [shape], "ShapeOptions", OutType=2)  # INT32
    batch = b.tensor("batch", [], dtype=np.int32)
    one = np.array([1], np.int32)
    b.op("STRIDED_SLICE", [shape, b.tensor("begin", [1], data=np.array([0], np.int32)),
                           b.tensor("end", [1], data=one), b.tensor("strides", [1], data=one)], [batch],
         "StridedSliceOptions", BeginMask=0, EndMask=0, ShrinkAxisMask=1)
    target = b.tensor("target", [2], dtype=np.int32)
    b.op("PACK", [batch, b.tensor("ten", [], data=np.array(10, np.int32))], [target], "PackOptions",
         ValuesCount=2, Axis=0)
    flat = b.tensor("flat", [1, 10])
    b.op("RESHAPE", [x, target], [flat])
    y = b.tensor("y", [1, 10])
    b.op("SOFTMAX", [flat], [y], "SoftmaxOptions", Beta=1.0)
    return b.finish([x], [y])


def _pack_activations() -> bytes:
    """PACK of two activations on a middle axis: [2, 3] and [2, 3] -> [2, 2, 3]."""
    b = TFLiteBuilder()
    x0, x1 = b.tensor("x0", [2, 3]), b.tensor("x1", [2, 3])
    r0 = b.tensor("r0", [2, 3])
    b.op("RELU", [x0], [r0])
    y = b.tensor("y", [2, 2, 3])
    b.op("PACK", [r0, x1], [y], "PackOptions", ValuesCount=2, Axis=-2)
    return b.finish([x0, x1], [y])


@needs_interpreter
@pytest.mark.parametrize("case", sorted(_CASES))
def test_single_op_matches_interpreter(case):
    data = _CASES[case]()
    import tflite as T

    m = T.Model.GetRootAsModel(data, 0)
    g = m.Subgraphs(0)
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal(tuple(g.Tensors(int(i)).ShapeAsNumpy())).astype(np.float32) * 4
              for i in g.InputsAsNumpy()]
    ref = interpret(data, inputs)
    r = _rknn(data)
    # 4-D inputs in NHWC (the default); other ranks as they are
    got = r.inference(inputs=inputs)
    r.release()
    assert got[0].shape == ref[0].shape
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-4)


# -- pre-quantized models --------------------------------------------------------------------


def _vendor_grid(q, s, axis):
    """int8 weight codes ``q`` with zero point 0 and scales ``s`` (per channel along ``axis``) put
    on the grid RKNN-Toolkit2 gives them (``rknnlite.toolkit.qdq.symmetric_grids``): scale x
    128/127, codes re-rounded (float32).  A file built with these is the model the vendor (and
    rknnlite) runs, the interpreter's reference for it."""
    s32 = np.asarray(s, np.float32).reshape(-1)
    s2 = s32 * np.float32(128) / np.float32(127)
    shape = [1] * q.ndim
    shape[axis] = -1
    codes = np.rint((q.astype(np.float32) * s32.reshape(shape)) / s2.reshape(shape))
    return np.clip(codes, -127, 127).astype(np.int8), s2.astype(np.float64)


def _quant_network(rng, ranges=None, qtype=np.int8, vendor=False):
    """Float input -> QUANTIZE -> conv (stride 2, RELU) -> depthwise (RELU6) -> 1x1 conv -> ADD
    -> AVERAGE_POOL -> RESHAPE -> FULLY_CONNECTED -> DEQUANTIZE (and SOFTMAX -> DEQUANTIZE).
    ``ranges=None``: the float network (every tensor float32); otherwise each activation
    is ``qtype`` quantized over its ``ranges[name]`` and the weights per output channel
    (int8) or per tensor (uint8).  ``vendor``: the int8 weights on the vendor's grid
    (:func:`_vendor_grid`), their biases requantized to it."""
    rs = np.random.default_rng(5)
    weights = {"w1": rs.standard_normal((8, 3, 3, 3)) * 0.4, "b1": rs.standard_normal(8) * 0.1,
               "wd": rs.standard_normal((1, 3, 3, 8)) * 0.5, "bd": rs.standard_normal(8) * 0.1,
               "w2": rs.standard_normal((8, 1, 1, 8)) * 0.4, "wf": rs.standard_normal((10, 32)) * 0.3,
               "bf": rs.standard_normal(10) * 0.1}
    b = TFLiteBuilder()
    quant = ranges is not None
    lo, hi = (-128, 127) if qtype == np.int8 else (0, 255)
    params = {}

    def act(name, shape, like=None):
        if not quant:
            return b.tensor(name, shape)
        if like is not None:
            scale, zp = params[like]
        elif name in ("prob_q",):
            scale, zp = 1 / 256, lo
        else:
            mn, mx = min(ranges[name][0], 0.0), max(ranges[name][1], 0.0)
            scale = (mx - mn) / 255 or 1.0
            zp = int(np.clip(round(lo - mn / scale), lo, hi))
        params[name] = (scale, zp)
        return b.tensor(name, shape, qtype, scale=[scale], zero_point=[zp])

    def weight(name, axis, in_name):
        w = weights[name].astype(np.float32)
        if not quant:
            return b.tensor(name, w.shape, data=w)
        if qtype == np.int8:
            peak = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1)
            s = peak / 127
            shape = [1] * w.ndim
            shape[axis] = -1
            q = np.clip(np.round(w / s.reshape(shape)), -127, 127).astype(np.int8)
            if vendor:
                q, s = _vendor_grid(q, s, axis)
            return b.tensor(name, w.shape, data=q, scale=s, zero_point=np.zeros_like(s, np.int64), axis=axis)
        s = (w.max() - w.min()) / 255
        zp = int(round(-w.min() / s))
        q = np.clip(np.round(w / s) + zp, 0, 255).astype(np.uint8)
        return b.tensor(name, w.shape, data=q, scale=[s], zero_point=[zp])

    def bias(name, in_name, w_index):
        v = weights[name].astype(np.float32)
        if not quant:
            return b.tensor(name, v.shape, data=v)
        s = params[in_name][0] * np.asarray(b_scales[w_index])
        q = np.round(v / s).astype(np.int32)
        return b.tensor(name, v.shape, data=q, scale=np.broadcast_to(s, v.shape).copy(),
                        zero_point=np.zeros(v.size, np.int64))

    b_scales = {}

    def weight_scales(name, axis):
        w = weights[name]
        if qtype == np.int8:
            s = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1) / 127
            return np.asarray(s, np.float32) * np.float32(128) / np.float32(127) if vendor else s
        return (w.max() - w.min()) / 255

    x = b.tensor("input", [1, 9, 9, 3])
    if quant:
        xq = act("input_q", [1, 9, 9, 3])
        b.op("QUANTIZE", [x], [xq])
        for n, a in (("w1", 0), ("wd", 3), ("w2", 0), ("wf", 0)):
            b_scales[n] = weight_scales(n, a)
    else:
        xq = x
    c1 = act("conv1", [1, 5, 5, 8])
    b.op("CONV_2D", [xq, weight("w1", 0, "input_q"), bias("b1", "input_q", "w1")], [c1], "Conv2DOptions",
         **_conv_opts(SAME, 2, RELU))
    d1 = act("dw", [1, 5, 5, 8])
    b.op("DEPTHWISE_CONV_2D", [c1, weight("wd", 3, "conv1"), bias("bd", "conv1", "wd")], [d1],
         "DepthwiseConv2DOptions", **_conv_opts(SAME, 1, RELU6, DepthMultiplier=1))
    c2 = act("conv2", [1, 5, 5, 8])
    zero_bias = np.zeros(8, np.int32 if quant else np.float32)
    b2 = b.tensor("b2", [8], data=zero_bias, **({"scale": params["dw"][0] * np.broadcast_to(b_scales["w2"], 8),
                                                  "zero_point": np.zeros(8, np.int64)} if quant else {}))
    b.op("CONV_2D", [d1, weight("w2", 0, "dw"), b2], [c2], "Conv2DOptions", **_conv_opts(VALID))
    s = act("sum", [1, 5, 5, 8])
    b.op("ADD", [d1, c2], [s], "AddOptions", FusedActivationFunction=NONE)
    p = act("pool", [1, 2, 2, 8], like="sum")
    b.op("AVERAGE_POOL_2D", [s], [p], "Pool2DOptions", Padding=VALID, StrideW=2, StrideH=2, FilterWidth=2,
         FilterHeight=2, FusedActivationFunction=NONE)
    flat = act("flat", [1, 32], like="pool")
    b.op("RESHAPE", [p, b.tensor("shape", [2], data=np.array([1, 32], np.int32))], [flat])
    fc = act("fc_q", [1, 10])
    b.op("FULLY_CONNECTED", [flat, weight("wf", 0, "flat"), bias("bf", "flat", "wf")], [fc],
         "FullyConnectedOptions", FusedActivationFunction=NONE)
    prob = act("prob_q", [1, 10])
    b.op("SOFTMAX", [fc], [prob], "SoftmaxOptions", Beta=1.0)
    if not quant:
        return b.finish([x], [fc, prob])
    fc_out, prob_out = b.tensor("fc", [1, 10]), b.tensor("prob", [1, 10])
    b.op("DEQUANTIZE", [fc], [fc_out])
    b.op("DEQUANTIZE", [prob], [prob_out])
    return b.finish([x], [fc_out, prob_out]), params


def _ranges(data, samples):
    """min/max of every tensor over ``samples``, from the interpreter (all tensors kept)."""
    it = interpreter(data, keep_all=True)
    out = {}
    for x in samples:
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        for d in it.get_tensor_details():
            try:
                v = it.get_tensor(d["index"])
            except ValueError:
                continue
            mn, mx = float(v.min()), float(v.max())
            lo, hi = out.get(d["name"], (mn, mx))
            out[d["name"]] = (min(lo, mn), max(hi, mx))
    out["input_q"] = out["input"]
    return out


def _quant_model(qtype, vendor=False):
    rng = np.random.default_rng(9)
    samples = [rng.standard_normal((1, 9, 9, 3)).astype(np.float32) for _ in range(8)]
    ranges = _ranges(_quant_network(rng), samples)
    data, params = _quant_network(rng, ranges, qtype, vendor)
    return data, params, samples


def _cosine(a, b) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@needs_interpreter
@pytest.mark.parametrize("qtype", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_prequantized_model_matches_interpreter(qtype, tmp_path):
    data, params, samples = _quant_model(qtype)
    r = _rknn(data, quantize=False)  # no calibration: the file's own parameters
    # the vendor's grids: the int8 weights (zero point 0) on scale x 128/127; the reference
    # is the interpreter running the file with them (the uint8 file's weights keep theirs)
    reference = _quant_model(qtype, vendor=True)[0]
    for x in samples[:4]:
        ref = interpret(reference, [x])
        got = r.inference(inputs=[x])
        # one-step differences (rounding ties) inside the net add up in the FC: a few steps at most.
        # The ADD of the depthwise output and the 1x1 conv of it is one conv (W + I) in the
        # vendor's build and rknnlite's (optimize.fold_input_residual; RKNN-Toolkit2 2.5.0 on this
        # file: its sum tensor equals rknnlite's on every value), not in the interpreter's
        assert np.abs(got[0] - ref[0]).max() <= 3 * params["fc_q"][0]
        assert _cosine(got[0], ref[0]) >= 0.998
        assert _cosine(got[1], ref[1]) >= 0.998
    path = tmp_path / "q.rknn"
    assert r.export_rknn(str(path)) == 0
    r.release()
    shift = 128 if qtype == np.uint8 else 0
    with Context(str(path)) as ctx:
        a = ctx.inputs[0]
        assert a.qnt_type == QntType.AFFINE_ASYMMETRIC
        assert a.scale == pytest.approx(params["input_q"][0], rel=1e-6)
        assert a.zp == params["input_q"][1] - shift
        o = ctx.outputs[0]
        assert o.qnt_type == QntType.AFFINE_ASYMMETRIC and o.zp == params["fc_q"][1] - shift
        # the int8 values the model returns are the file's grid (uint8 shifted by 128)
        raw = ctx.run([samples[0]], data_format="nhwc", want_float=False)[0]
        ref = interpret(reference, [samples[0]])[0]
        expect = np.round(ref / params["fc_q"][0]) + params["fc_q"][1] - shift
        assert raw.dtype == np.int8 and np.abs(raw.astype(int) - expect).max() <= 3


def _quant_layer(kind: str, qtype, vendor=False) -> bytes:
    """One quantized layer with quantized input(s) and output, no (DE)QUANTIZE: its inputs
    are exact on both sides, so the outputs must agree within one step.  ``vendor``: the int8
    weights on the vendor's grid (:func:`_vendor_grid`), the biases requantized to it."""
    rs = np.random.default_rng(13)
    b = TFLiteBuilder()
    u8 = qtype == np.uint8
    shift = 128 if u8 else 0

    def act(name, shape, scale, zp):
        return b.tensor(name, shape, qtype, scale=[scale], zero_point=[zp + shift])

    def weight(shape, axis):
        w = rs.standard_normal(shape) * 0.3
        if u8:  # uint8: per tensor, asymmetric
            sc = (w.max() - w.min()) / 255
            zp = int(round(-w.min() / sc))
            q = np.clip(np.round(w / sc) + zp, 0, 255).astype(np.uint8)
            return b.tensor("w", shape, data=q, scale=[sc], zero_point=[zp]), np.full(shape[0 if axis == 0 else 3], sc)
        sc = np.abs(np.moveaxis(w, axis, 0).reshape(shape[axis], -1)).max(axis=1) / 127
        q = np.clip(np.round(w / sc.reshape([-1 if d == axis else 1 for d in range(len(shape))])), -127, 127)
        q = q.astype(np.int8)
        if vendor:
            q, sc = _vendor_grid(q, sc, axis)
        return b.tensor("w", shape, data=q, scale=sc, zero_point=np.zeros(sc.size, np.int64), axis=axis), sc

    def bias(n, in_scale, w_scales):
        sc = in_scale * np.broadcast_to(w_scales, (n,))
        q = np.round(rs.standard_normal(n) * 0.2 / sc).astype(np.int32)
        return b.tensor("b", [n], data=q, scale=sc.copy(), zero_point=np.zeros(n, np.int64))

    if kind in ("conv", "depthwise"):
        x = act("x", [1, 6, 6, 4], 0.05, -3)
        y = act("y", [1, 6, 6, 4], 0.08, 5)
        w, ws = weight([4, 3, 3, 4] if kind == "conv" else [1, 3, 3, 4], 0 if kind == "conv" else 3)
        if kind == "conv":
            b.op("CONV_2D", [x, w, bias(4, 0.05, ws)], [y], "Conv2DOptions", **_conv_opts(SAME, 1, RELU))
        else:
            b.op("DEPTHWISE_CONV_2D", [x, w, bias(4, 0.05, ws)], [y], "DepthwiseConv2DOptions",
                 **_conv_opts(SAME, 1, RELU6, DepthMultiplier=1))
        return b.finish([x], [y])
    if kind == "fully_connected":
        x = act("x", [1, 12], 0.05, 7)
        y = act("y", [1, 5], 0.07, -2)
        w, ws = weight([5, 12], 0)
        b.op("FULLY_CONNECTED", [x, w, bias(5, 0.05, ws)], [y], "FullyConnectedOptions", FusedActivationFunction=0)
        return b.finish([x], [y])
    if kind == "add":
        x1, x2 = act("x1", [1, 3, 3, 4], 0.05, -3), act("x2", [1, 3, 3, 4], 0.03, 10)
        y = act("y", [1, 3, 3, 4], 0.06, 1)
        b.op("ADD", [x1, x2], [y], "AddOptions", FusedActivationFunction=NONE)
        return b.finish([x1, x2], [y])
    if kind == "max_pool":
        x = act("x", [1, 4, 4, 3], 0.05, -3)
        y = act("y", [1, 2, 2, 3], 0.05, -3)
        b.op("MAX_POOL_2D", [x], [y], "Pool2DOptions", Padding=VALID, StrideW=2, StrideH=2, FilterWidth=2,
             FilterHeight=2, FusedActivationFunction=NONE)
        return b.finish([x], [y])
    raise AssertionError(kind)


@needs_interpreter
@pytest.mark.parametrize("qtype", [np.int8, np.uint8], ids=["int8", "uint8"])
@pytest.mark.parametrize("kind", ["conv", "depthwise", "fully_connected", "add", "max_pool"])
def test_prequantized_layer_within_one_step(kind, qtype):
    import tflite as T

    data = _quant_layer(kind, qtype)
    g = T.Model.GetRootAsModel(data, 0).Subgraphs(0)
    rng = np.random.default_rng(17)
    lo, hi = (-128, 127) if qtype == np.int8 else (0, 255)
    qs, reals = [], []
    for i in g.InputsAsNumpy():
        t = g.Tensors(int(i))
        q = rng.integers(lo, hi + 1, tuple(t.ShapeAsNumpy())).astype(qtype)
        qp = t.Quantization()
        qs.append(q)
        reals.append(((q.astype(np.float32) - qp.ZeroPoint(0)) * np.float32(qp.Scale(0))).astype(np.float32))
    ref = interpret(_quant_layer(kind, qtype, vendor=True), qs)[0]  # the file on the vendor's grids
    got = _run(data, reals, input_is_quant=False)[0]  # the output in the file's type and grid, as the interpreter gives it
    codes = _run(data, qs)[0]  # the default: the inputs take the file's codes, as the vendor's
    assert np.abs(codes.astype(int) - ref.astype(int)).max() <= 1
    assert got.dtype == ref.dtype == qtype
    assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1


@needs_interpreter
def test_prequantized_table_in_graph():
    data, params, _ = _quant_model(np.int8)
    imported = load_tflite(data)
    q = imported.graph.quant
    assert q["input"].scale == (pytest.approx(params["input_q"][0]),)  # QUANTIZE's grid, on the input
    assert q["conv1"].zero_point == (params["conv1"][1],)
    weights = {n: v for n, v in q.items() if n in imported.graph.constants}
    assert weights and all(v.axis == 0 and len(v.scale) == 8 for k, v in weights.items() if k in ("w1", "w2"))
    assert q["wd"].axis == 0 and len(q["wd"].scale) == 8  # 1HWO channel axis 3 -> axis 0 of O1HW


@needs_interpreter
def test_zero_point_0_grids_are_the_vendors_symmetric_ones():
    """RKNN-Toolkit2 2.5.0 builds Rockchip's tflite/mobilenet_v1_qat (rk3566) with its uint8
    input (zero point 128: int8 zero point 0) on 0.0078125 x 128/127, the 0.007874015718698502 its
    file stores, and every int8 weight with zero point 0 on scale x 128/127, codes re-rounded
    (decoded from its file, 2026-12-04); grids with other zero points keep
    theirs (``rknnlite.toolkit.qdq.symmetric_grids``)."""
    b = TFLiteBuilder()
    x = b.tensor("input", [1, 4, 4, 2])
    xq = b.tensor("input_q", [1, 4, 4, 2], np.uint8, scale=[0.0078125], zero_point=[128])
    b.op("QUANTIZE", [x], [xq])
    q_w = np.arange(-63, 81, 2, dtype=np.int64).reshape(4, 3, 3, 2) % 255 - 127
    q_w.reshape(-1)[:3] = [127, 64, -127]
    s_w = np.array([0.01, 0.02, 0.03, 0.04])
    w = b.tensor("w", [4, 3, 3, 2], data=q_w.astype(np.int8), scale=s_w, zero_point=np.zeros(4, np.int64), axis=0)
    bias = b.tensor("b", [4], data=np.array([10, -20, 30, 0], np.int32), scale=0.0078125 * s_w,
                    zero_point=np.zeros(4, np.int64))
    y = b.tensor("y", [1, 4, 4, 4], np.uint8, scale=[0.05], zero_point=[0])
    b.op("CONV_2D", [xq, w, bias], [y], "Conv2DOptions", **_conv_opts(SAME, 1, RELU))
    out = b.tensor("out", [1, 4, 4, 4])
    b.op("DEQUANTIZE", [y], [out])
    g = load_tflite(b.finish([x], [out])).graph
    q = g.quant
    assert q["input"].scale == (0.007874015718698502,) and q["input"].zero_point == (0,)
    assert q["y"].scale == (float(np.float32(0.05)),) and q["y"].zero_point == (-128,)
    (name,) = [k for k in q if k in g.constants]
    s2 = s_w.astype(np.float32) * np.float32(128) / np.float32(127)
    assert q[name].scale == tuple(float(v) for v in s2) and q[name].axis == 0
    codes = np.rint(g.constants[name] / s2[:, None, None, None]).transpose(0, 2, 3, 1)  # OIHW -> TFLite's OHWI
    assert codes.reshape(-1)[:3].tolist() == [126, 63, -126]
    assert np.abs(codes - q_w * 127 / 128).max() <= 0.5


@needs_interpreter  # _quant_model measures its ranges with the interpreter
def test_calibrating_a_prequantized_model_is_refused(tmp_path, monkeypatch, caplog):
    """RKNN-Toolkit2 2.5.0 returns -1 for build(do_quantization=True) after a full-integer
    TFLite file ("If a quantized model has been import, please set do_quantization = False.",
    probed with a Keras conv net, rk3566): calibration would replace the file's table."""
    data, params, samples = _quant_model(np.int8)
    monkeypatch.chdir(tmp_path)
    for i, x in enumerate(samples):
        np.save(f"s{i}.npy", x.transpose(0, 3, 1, 2))  # the model's layout: NCHW
    (tmp_path / "dataset.txt").write_text("".join(f"s{i}.npy\n" for i in range(len(samples))))
    r = RKNN()
    r.config(target_platform="rk3588", float_dtype="float32")
    assert r.load_tflite(data) == 0
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert r.build(do_quantization=True, dataset="dataset.txt") == -1
    assert any("please set do_quantization = False" in r.getMessage() for r in caplog.records)
    assert r.build(do_quantization=False) == 0
    assert r.export_rknn("c.rknn") == 0
    r.release()
    with Context("c.rknn") as ctx:
        a = ctx.inputs[0]
        assert a.qnt_type == QntType.AFFINE_ASYMMETRIC
        assert a.scale == pytest.approx(params["input_q"][0], rel=1e-6)  # the file's grid, not calibrated
        assert a.zp == params["input_q"][1]


@needs_interpreter
def test_float16_weights_through_dequantize():
    rng = np.random.default_rng(21)
    b = TFLiteBuilder()
    x = b.tensor("x", [1, 5, 5, 2])
    w16 = b.tensor("w16", [3, 3, 3, 2], data=rng.standard_normal((3, 3, 3, 2)).astype(np.float16))
    w = b.tensor("w", [3, 3, 3, 2])
    b.op("DEQUANTIZE", [w16], [w])
    y = b.tensor("y", [1, 5, 5, 3])
    b.op("CONV_2D", [x, w, b.tensor("bias", [3], data=np.zeros(3, np.float32))], [y], "Conv2DOptions",
         **_conv_opts(SAME))
    data = b.finish([x], [y])
    inp = rng.standard_normal((1, 5, 5, 2)).astype(np.float32)
    imported = load_tflite(data)
    assert imported.graph.quant == {} and [n.op for n in imported.graph.nodes] == ["Conv", "Transpose"]
    np.testing.assert_allclose(_run(data, [inp])[0], interpret(data, [inp])[0], rtol=1e-5, atol=1e-5)


def _int8_input_model():
    """An int8 input (scale 0.5, zero point 3) -> RELU -> int8 output."""
    b = TFLiteBuilder()
    x = b.tensor("x", [1, 4], np.int8, scale=[0.5], zero_point=[3])
    y = b.tensor("y", [1, 4], np.int8, scale=[0.5], zero_point=[3])
    b.op("RELU", [x], [y])
    return b.finish([x], [y])


def test_quantized_inputs_take_the_files_codes():
    """A quantized (int8/uint8) input takes the file's codes by default, as RKNN-Toolkit2 2.5.0
    feeds them (it has no ``input_is_quant``; a uint8 and an int8 full-integer TFLite file,
    rk3566, gave the interpreter's outputs when fed the codes, as uint8/int8 or float32
    arrays, and garbage when fed real values); ``input_is_quant=False`` makes it take real
    values.  The quantized output comes back in the file's type and grid (Rockchip's
    tflite/mobilenet_v1_qat dequantizes it itself)."""
    data = _int8_input_model()
    q = np.array([[-10, 0, 3, 20]], np.float32)  # quantized values
    for kw in ({}, {"input_is_quant": True}):
        raw = _run(data, [q], **kw)[0]
        assert raw.dtype == np.int8
        np.testing.assert_array_equal(raw, np.maximum(q, 3))  # Relu on the grid: max(q, zero point)
    got = _run(data, [np.array([[-2.0, 0.0, 1.5, 4.0]], np.float32)], input_is_quant=False)[0]
    np.testing.assert_array_equal(got, [[3, 3, 6, 11]])


def _uint8_input_model(out_zp=100):
    """A uint8 input on scale 1/128, zero point 128 (int8 zero point 0: the vendor's symmetric
    grid applies) -> RELU -> uint8 output on scale 1/128, zero point ``out_zp``."""
    b = TFLiteBuilder()
    x = b.tensor("x", [1, 6], np.uint8, scale=[1 / 128], zero_point=[128])
    y = b.tensor("y", [1, 6], np.uint8, scale=[1 / 128], zero_point=[out_zp])
    b.op("RELU", [x], [y])
    return b.finish([x], [y])


def test_codes_keep_their_values_on_the_symmetric_input_grid():
    """RKNN-Toolkit2 2.5.0 stores a uint8 input of zero point 128 as int8 on scale
    ``s * 128/127`` and feeds the codes unchanged (its file's input: 0.0079048667 for a
    0.0078431 input; its simulator's outputs equal the interpreter's within one step on a
    MobileNet-like net, ``tools/vendor_corpus/tflite_uint8_probe.py``): the input means
    ``(x - 128) * s * 128/127``, and rknnlite's follows (codes re-rounded onto the new grid
    gave outputs one step off the vendor's)."""
    data = _uint8_input_model()
    g = load_tflite(data).graph
    s2 = np.float32(1 / 128) * np.float32(128) / np.float32(127)
    (mul,) = [n for n in g.nodes if n.op == "Mul"]
    assert g.constants[mul.inputs[1]] == s2 and g.quant[mul.outputs[0]].scale == (float(s2),)
    x = np.array([[128, 200, 255, 100, 129, 191]], np.uint8)
    got = _run(data, [x])[0]
    assert got.dtype == np.uint8
    want = np.maximum(np.rint((x.astype(np.float64) - 128) * 128 / 127), 0) + 100
    np.testing.assert_array_equal(got, want)  # 200 -> 173 (the interpreter: 172), 255 -> 228 (227)


def test_mean_and_std_do_not_apply_to_an_input_taking_codes(caplog):
    """The vendor ignores mean_values/std_values on such an input (100/50 and none gave the
    same outputs); rknnlite does too, and says so unless they are the file's own grid
    (mean = zero point, std = 1/scale, as the mobilenet_v1_qat example sets 128/128)."""
    data = _uint8_input_model()
    x = np.array([[128, 200, 255, 100, 129, 191]], np.uint8)
    want = _run(data, [x])[0]
    for mean, std, warned in ((100, 50, True), (128, 128, False)):
        r = RKNN()
        assert r.config(target_platform="rk3588", mean_values=[[mean]], std_values=[[std]]) == 0
        assert r.load_tflite(data) == 0
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
            assert r.build(do_quantization=False) == 0
        msgs = [m.getMessage() for m in caplog.records if "are not applied" in m.getMessage()]
        assert bool(msgs) == warned and (not msgs or "input_is_quant=False" in msgs[0])
        assert r.init_runtime() == 0
        np.testing.assert_array_equal(r.inference([x])[0], want)
        r.release()


@needs_interpreter
def test_int8_input_model_matches_interpreter():
    data = _int8_input_model()
    q = np.array([[-10, 0, 3, 20]], np.int8)
    ref = interpret(data, [q])[0]
    got = _run(data, [q.astype(np.float32)], input_is_quant=True)[0]
    assert got.dtype == ref.dtype
    np.testing.assert_array_equal(got, ref)


# -- failures --------------------------------------------------------------------------------


def test_unsupported_op_is_named(errors):
    b = TFLiteBuilder()
    x = b.tensor("x", [1, 4])
    y = b.tensor("exp_out", [1, 4])
    b.op("EXP", [x], [y])
    r = RKNN()
    r.config(target_platform="rk3588")
    assert r.load_tflite(b.finish([x], [y])) == -1
    msg = errors()[-1]
    assert "op EXP (node 0: 'exp_out') is not supported" in msg and "CONV_2D" in msg
    # the object stays usable
    assert r.load_tflite(_single("RELU", [[1, 4]], [1, 4])) == 0
    with pytest.raises(ModelInvalidError, match="EXP"):
        load_tflite(_single("EXP", [[1, 4]], [1, 4]))


def test_custom_op_is_named():
    b = TFLiteBuilder()
    x = b.tensor("x", [1, 4])
    y = b.tensor("y", [1, 4])
    b.op("CUSTOM", [x], [y], custom_code="MyOp")
    with pytest.raises(ModelInvalidError, match=r"CUSTOM\(MyOp\)"):
        load_tflite(b.finish([x], [y]))


def test_malformed_files(tmp_path, errors):
    r = RKNN()
    r.config(target_platform="rk3588")
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"this is not a flatbuffer at all")
    assert r.load_tflite(str(bad)) == -1
    assert "bad.tflite is not a TFLite model" in errors()[-1]
    good = _single("RELU", [[1, 4]], [1, 4])
    cut = tmp_path / "cut.tflite"
    cut.write_bytes(good[:60])
    assert r.load_tflite(str(cut)) == -1
    assert "cut.tflite" in errors()[-1] and "malformed" in errors()[-1]
    assert r.load_tflite(str(tmp_path / "missing.tflite")) == -1
    assert "not found" in errors()[-1]
    with pytest.raises(ModelInvalidError, match="must be a path or bytes"):
        load_tflite(12)
    # a tensor index out of range
    b = TFLiteBuilder()
    x = b.tensor("x", [1, 4])
    b.op("RELU", [x], [7])
    with pytest.raises(ModelInvalidError, match="refers to tensor 7"):
        load_tflite(b.finish([x], [x]))
    assert r.load_tflite(good) == 0


def test_damage_a_byte_mutation_run_found_is_refused_by_name():
    """Found by mutating the uint8 fixture: one bit (byte 21651) sends a conv's options table past
    the file's end (struct.error escaped from the FlatBuffer accessor); a forged quantization
    (an infinite scale, a zero point of 10**9, a scale taking int8 codes beyond float32)."""
    data = bytearray((Path(__file__).parent / "data" / "vendor_tflite" / "mobilenet_like_uint8.tflite").read_bytes())
    data[21651] ^= 32
    with pytest.raises(ModelInvalidError, match=r"op CONV_2D \(node 7: .*\) is malformed: error: unpack_from"):
        load_tflite(bytes(data))
    for scale, zp, match in ((float("inf"), 0, "finite scales >= 0"), (0.5, 10**9, "zero points within"),
                             (3e38, 0, "beyond float32")):
        b = TFLiteBuilder()
        x = b.tensor("x", [1, 4])
        c = b.tensor("c", [1, 4], np.int8, data=np.full((1, 4), 100, np.int8), scale=[scale], zero_point=[zp])
        y = b.tensor("y", [1, 4])
        b.op("ADD", [x, c], [y], "AddOptions")
        with pytest.raises(ModelInvalidError, match=match):
            load_tflite(b.finish([x], [y]))


def test_non_constant_weights_are_refused():
    b = TFLiteBuilder()
    x = b.tensor("x", [1, 4, 4, 2])
    w = b.tensor("w", [3, 1, 1, 2])
    y = b.tensor("y", [1, 4, 4, 3])
    b.op("CONV_2D", [x, w, -1], [y], "Conv2DOptions", **_conv_opts())
    with pytest.raises(ModelInvalidError, match="weights must be a constant"):
        load_tflite(b.finish([x, w], [y]))


def test_missing_tflite_package(monkeypatch, errors):
    monkeypatch.setitem(sys.modules, "tflite", None)  # import tflite -> ImportError
    r = RKNN()
    r.config(target_platform="rk3588")
    assert r.load_tflite(b"TFL3") == -1
    msg = errors()[-1]
    assert "tflite" in msg and "pip install" in msg


def test_uint8_file_equals_the_vendors_simulator():
    """A full-integer uint8 file written by TensorFlow's converter, fed its uint8 image as the
    vendor's scripts and the TFLite interpreter feed it: rknnlite's feature map equals
    RKNN-Toolkit2 2.5.0's simulator on every value (the vendor's symmetric grids included,
    which the interpreter does not have: about half its values differ), the scores within one
    step (tests/data/vendor_tflite/README.md).  Before the input took the codes, the default
    gave garbage here (scores' cosine 0.93)."""
    here = Path(__file__).parent / "data" / "vendor_tflite"
    ref = np.load(here / "mobilenet_like_uint8_sim.npz")
    r = RKNN()
    assert r.config(target_platform="rk3566") == 0
    assert r.load_tflite(str(here / "mobilenet_like_uint8.tflite")) == 0
    assert r.build(do_quantization=False) == 0
    assert r.init_runtime() == 0
    scores, features = r.inference(inputs=[ref["x"]])
    r.release()
    assert scores.dtype == features.dtype == np.uint8
    np.testing.assert_array_equal(features.reshape(ref["features"].shape), ref["features"])
    assert (features.reshape(ref["features"].shape) != ref["tflite_features"]).mean() > 0.3
    d = np.abs(scores.reshape(ref["scores"].shape).astype(int) - ref["scores"].astype(int))
    assert d.max() <= 1 and (d == 0).mean() >= 0.9


def test_load_tflite_takes_the_vendors_input_is_nchw(errors):
    """RKNN-Toolkit2 2.5.0's load_tflite(model, input_is_nchw=False): the keyword was a TypeError."""
    r = RKNN()
    assert r.config(target_platform="rk3588") == 0
    assert r.load_tflite(_single("RELU", [[1, 4]], [1, 4]), input_is_nchw=False) == 0
    assert r.load_tflite(_single("RELU", [[1, 4]], [1, 4]), input_is_nchw=True) == -1
    assert errors()[-1].startswith("load_tflite: input_is_nchw=True is not supported yet by rknnlite")
    r.release()
