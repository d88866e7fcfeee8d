"""``RKNN.load_caffe`` / :mod:`rknnlite.toolkit.loaders.caffe` (with the protobuf text and
wire readers it uses), without Caffe.

The prototxt texts are written here, the ``.caffemodel`` bytes are encoded by
``caffe_builder`` (an encoder independent of the reader), and the oracle is a numpy model
of Caffe's forward pass written here: explicit convolution loops, Caffe's pooling window
loop (ceil rounding, average divisor clipped to the padded extent), BatchNorm with its
scale-factor blob.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

pytest.importorskip("onnx")

import caffe_builder as cb  # noqa: E402

from rknnlite.errors import ModelInvalidError  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.loaders import protobuf_wire as wire  # noqa: E402
from rknnlite.toolkit.loaders.caffe import load_caffe, read_caffemodel  # noqa: E402
from rknnlite.toolkit.loaders.protobuf_text import Identifier, TextFormatError, parse_text  # noqa: E402

RNG = np.random.default_rng(11)


def rand(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# -- the numpy oracle (Caffe semantics) -----------------------------------------------------------


def ref_conv(x, w, b, stride=(1, 1), pad=(0, 0), dilation=(1, 1), group=1):
    n, c, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh = (h + 2 * pad[0] - (dilation[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (wd + 2 * pad[1] - (dilation[1] * (kw - 1) + 1)) // stride[1] + 1
    y = np.zeros((n, cout, oh, ow))
    per_group = cout // group
    for o in range(cout):
        g = o // per_group
        for ci in range(cin_g):
            for i in range(kh):
                for j in range(kw):
                    r0, c0 = i * dilation[0], j * dilation[1]
                    patch = xp[:, g * cin_g + ci, r0:r0 + stride[0] * (oh - 1) + 1:stride[0],
                               c0:c0 + stride[1] * (ow - 1) + 1:stride[1]]
                    y[:, o] += w[o, ci, i, j] * patch
        if b is not None:
            y[:, o] += b[o]
    return y


def ref_pool(x, k, s, p, method, ceil=True):
    """Caffe's PoolingLayer forward (MAX / AVE) for square parameters."""
    n, c, h, w = x.shape

    def out_size(size):
        if ceil:
            o = int(math.ceil((size + 2 * p - k) / s)) + 1
            if p and (o - 1) * s >= size + p:
                o -= 1
            return o
        return (size + 2 * p - k) // s + 1

    oh, ow = out_size(h), out_size(w)
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * s - p, j * s - p
            he, we = min(hs + k, h + p), min(ws + k, w + p)
            size = (he - hs) * (we - ws)
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
            window = x[:, :, hs:he, ws:we]
            y[:, :, i, j] = window.max(axis=(2, 3)) if method == "MAX" else window.sum(axis=(2, 3)) / size
    return y


def ref_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


# -- running through the toolkit ------------------------------------------------------------------


def run_caffe(prototxt: str, weights: bytes, feeds, input_name=None, dynamic_input=None):
    """Outputs of the built float32 model (NCHW feeds), and the imported model."""
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", float_dtype="float32", dynamic_input=dynamic_input) == 0
    assert rknn.load_caffe(prototxt.encode(), weights, input_name=input_name) == 0
    imported = rknn._imported
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    outs = rknn.inference(list(feeds), data_format="nchw")
    rknn.release()
    return outs, imported


NET1 = """
name: "net1"  # a classic conv net, everything in place where Caffe nets usually are
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 16 dim: 16 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3 stride: 2 pad: 1
                            weight_filler { type: "xavier" } } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" batch_norm_param { eps: 0.001 } }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" relu_param { negative_slope: 0.1 } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "pool2" type: "Pooling" bottom: "pool1" top: "pool2"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "conv2" type: "Convolution" bottom: "pool2" top: "conv2"
        convolution_param { num_output: 4 kernel_h: 3 kernel_w: 1 pad_h: 2 pad_w: 0 dilation: 2
                            group: 2 bias_term: false } }
layer { name: "sig" type: "Sigmoid" bottom: "conv2" top: "sig" }
layer { name: "tanh" type: "TanH" bottom: "conv2" top: "tanh" }
layer { name: "sum" type: "Eltwise" bottom: "sig" bottom: "tanh" bottom: "conv2" top: "sum"
        eltwise_param { operation: SUM coeff: 1 coeff: -0.5 coeff: 2.0 } }
layer { name: "prod" type: "Eltwise" bottom: "sig" bottom: "tanh" top: "prod" eltwise_param { operation: PROD } }
layer { name: "max" type: "Eltwise" bottom: "sum" bottom: "prod" bottom: "tanh" top: "max"
        eltwise_param { operation: MAX } }
layer { name: "cat" type: "Concat" bottom: "max" bottom: "sum" top: "cat" concat_param { axis: 1 } }
layer { name: "flat" type: "Flatten" bottom: "cat" top: "flat" }
layer { name: "fc" type: "InnerProduct" bottom: "flat" top: "fc" inner_product_param { num_output: 10 } }
layer { name: "drop" type: "Dropout" bottom: "fc" top: "fc" dropout_param { dropout_ratio: 0.3 } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss"
        include { phase: TRAIN } }
"""


def net1_weights():
    return {
        "conv1": [rand(4, 3, 3, 3), rand(4)],
        # mean, variance, moving-average scale factor (Caffe stores sums scaled by it)
        "bn1": [rand(4) * 3, np.abs(rand(4)) * 3 + 0.5, np.array([3.0], np.float32)],
        "scale1": [rand(4) + 1, rand(4)],
        "conv2": [rand(4, 2, 3, 1)],
        "fc": [rand(10, 72, scale=0.2), rand(10)],
        "loss": [rand(2)],  # a layer the prototxt skips: its blobs are ignored
    }


def net1_reference(x, wts):
    y = ref_conv(x, *wts["conv1"], stride=(2, 2), pad=(1, 1))
    mean, var, sf = wts["bn1"]
    y = (y - (mean / sf[0])[None, :, None, None]) / np.sqrt((var / sf[0])[None, :, None, None] + 1e-3)
    y = y * wts["scale1"][0][None, :, None, None] + wts["scale1"][1][None, :, None, None]
    y = np.where(y > 0, y, 0.1 * y)
    assert y.shape == (1, 4, 8, 8)
    y = ref_pool(y, 3, 2, 0, "MAX")
    assert y.shape == (1, 4, 4, 4)  # ceil rounding: floor would give 3x3
    y = ref_pool(y, 3, 2, 1, "AVE")
    assert y.shape == (1, 4, 3, 3)
    conv2 = ref_conv(y, wts["conv2"][0], None, pad=(2, 0), dilation=(2, 2), group=2)
    sig, tanh = sigmoid(conv2), np.tanh(conv2)
    total = sig - 0.5 * tanh + 2.0 * conv2
    mx = np.maximum(np.maximum(total, sig * tanh), tanh)
    fc = np.concatenate([mx, total], axis=1).reshape(1, -1) @ wts["fc"][0].T.astype(np.float64) + wts["fc"][1]
    return ref_softmax(fc, 1)


@pytest.mark.parametrize("form", ["shape", "legacy", "unpacked", "double"])
def test_convnet_matches_caffe_semantics(form):
    wts = net1_weights()
    x = rand(1, 3, 16, 16, scale=1.0)
    (y,), imported = run_caffe(NET1, cb.caffemodel(wts, form=form), [x])
    assert [s.name for s in imported.input_specs] == ["data"]
    assert [s.name for s in imported.output_specs] == ["prob"]
    np.testing.assert_allclose(y, net1_reference(x, wts), rtol=1e-4, atol=1e-6)


NET2 = """
name: "net2"
input: "a"
input_shape { dim: 1 dim: 6 dim: 4 dim: 4 }
input: "s"
input_shape { dim: 1 dim: 6 }
layer { name: "split" type: "Split" bottom: "a" top: "a1" top: "a2" }
layer { name: "scale" type: "Scale" bottom: "a1" bottom: "s" top: "scaled"
        scale_param { axis: 0 bias_term: true } }
layer { name: "gap" type: "Pooling" bottom: "scaled" top: "gap" pooling_param { pool: AVE global_pooling: true } }
layer { name: "reshape" type: "Reshape" bottom: "gap" top: "r" reshape_param { shape { dim: 0 dim: -1 dim: 2 } } }
layer { name: "fc" type: "InnerProduct" bottom: "r" top: "fc"
        inner_product_param { num_output: 4 axis: 2 transpose: true bias_term: false } }
layer { name: "sm" type: "Softmax" bottom: "fc" top: "sm" softmax_param { axis: -1 } }
layer { name: "pool" type: "Pooling" bottom: "a2" top: "pool"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 round_mode: FLOOR } }
layer { name: "relu" type: "ReLU" bottom: "pool" top: "pool" }
layer { name: "flat" type: "Flatten" bottom: "pool" top: "flat2" flatten_param { axis: 2 end_axis: 3 } }
layer { name: "drop" type: "Dropout" bottom: "flat2" top: "out2"
        dropout_param { dropout_ratio: 0.25 scale_train: false } }
"""


def test_two_inputs_second_bottom_scale_reshape_and_outputs():
    wts = {"scale": [rand(1, 6)], "fc": [rand(2, 4)]}
    a, s = rand(1, 6, 4, 4, scale=1.0), rand(1, 6, scale=1.0)
    outs, imported = run_caffe(NET2, cb.caffemodel(wts), [s, a], input_name=["s", "a"])
    assert [i.name for i in imported.input_specs] == ["s", "a"]
    assert [o.name for o in imported.output_specs] == ["sm", "out2"]
    scaled = a * s[:, :, None, None] + wts["scale"][0][:, :, None, None]
    r = scaled.mean(axis=(2, 3)).reshape(1, 3, 2)
    sm = ref_softmax(r @ wts["fc"][0], -1)
    pool = np.maximum(ref_pool(a, 3, 2, 0, "AVE", ceil=False), 0)
    assert pool.shape == (1, 6, 1, 1)
    out2 = pool.reshape(1, 6, 1) * 0.75
    np.testing.assert_allclose(outs[0], sm, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(outs[1], out2, rtol=1e-5, atol=1e-6)


V1_NET = """
name: "v1"
input: "data"
input_dim: 1 input_dim: 2 input_dim: 5 input_dim: 5
layers { name: "conv" type: CONVOLUTION bottom: "data" top: "conv"
         convolution_param { num_output: 3 kernel_size: 2 } }
layers { name: "relu" type: RELU bottom: "conv" top: "conv" }
layers { name: "pool" type: POOLING bottom: "conv" top: "pool" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layers { name: "fc" type: INNER_PRODUCT bottom: "pool" top: "fc" inner_product_param { num_output: 5 } }
"""


def test_deprecated_v1_layers_and_legacy_blobs():
    # old files keep every blob 4-D in num/channels/height/width
    wts = {"conv": [rand(3, 2, 2, 2), rand(3)], "fc": [rand(5, 12), rand(5)]}
    x = rand(1, 2, 5, 5, scale=1.0)
    (y,), _ = run_caffe(V1_NET, cb.caffemodel(wts, v1=True, form="legacy"), [x])
    conv = np.maximum(ref_conv(x, *wts["conv"]), 0)
    pool = ref_pool(conv, 2, 2, 0, "MAX")
    assert pool.shape == (1, 3, 2, 2)  # ceil((4 - 2) / 2) + 1
    np.testing.assert_allclose(y, pool.reshape(1, -1) @ wts["fc"][0].T + wts["fc"][1], rtol=1e-4, atol=1e-6)


def test_dynamic_input_sizes():
    text = """
    layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 dim: 8 dim: 8 } } }
    layer { name: "pool" type: "Pooling" bottom: "x" top: "y" pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
    """
    rknn = RKNN()
    sets = [[[1, 2, 8, 8]], [[1, 2, 5, 7]]]
    assert rknn.config(target_platform="rk3588", float_dtype="float32", dynamic_input=sets) == 0
    assert rknn.load_caffe(text.encode()) == 0
    assert rknn.build(do_quantization=False) == 0 and rknn.init_runtime() == 0
    for (shape,) in sets:
        x = rand(*shape, scale=1.0)
        (y,) = rknn.inference([x], data_format="nchw")
        np.testing.assert_allclose(y, ref_pool(x, 3, 2, 1, "AVE"), rtol=1e-5, atol=1e-6)
    rknn.release()


def test_paths_and_rknn_logging(tmp_path, caplog):
    wts = {"conv": [rand(3, 2, 2, 2), rand(3)], "fc": [rand(5, 12), rand(5)]}
    proto, model = tmp_path / "net.prototxt", tmp_path / "net.caffemodel"
    proto.write_text(V1_NET)
    model.write_bytes(cb.caffemodel(wts, v1=True))
    caplog.set_level(logging.ERROR, logger="rknnlite.toolkit")
    rknn = RKNN()
    assert rknn.load_caffe(str(proto), str(tmp_path / "absent.caffemodel")) == -1
    assert "Caffe caffemodel file not found" in caplog.records[-1].getMessage()
    assert rknn.load_caffe(model=str(proto), blobs=str(model)) == 0  # still usable
    rknn.release()


SSD_NET = """
name: "ssd"  # the layers of Rockchip's caffe/vgg-ssd example (VGG_VOC0712_SSD_300x300) around a head
layer { name: "input" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv4_3" type: "Convolution" bottom: "data" top: "conv4_3"
        convolution_param { num_output: 6 pad: 1 kernel_size: 3 } }
layer { name: "relu4_3" type: "ReLU" bottom: "conv4_3" top: "conv4_3" }
layer { name: "fc7" type: "Convolution" bottom: "conv4_3" top: "fc7"
        convolution_param { num_output: 4 kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "conv4_3_norm" type: "Normalize" bottom: "conv4_3" top: "conv4_3_norm"
        norm_param { across_spatial: false scale_filler { type: "constant" value: 20 } channel_shared: false } }
layer { name: "fc7_norm" type: "Normalize" bottom: "fc7" top: "fc7_norm" }
layer { name: "conv4_3_norm_mbox_loc" type: "Convolution" bottom: "conv4_3_norm" top: "conv4_3_norm_mbox_loc"
        convolution_param { num_output: 8 pad: 1 kernel_size: 3 } }
layer { name: "conv4_3_norm_mbox_loc_perm" type: "Permute" bottom: "conv4_3_norm_mbox_loc"
        top: "conv4_3_norm_mbox_loc_perm" permute_param { order: 0 order: 2 order: 3 order: 1 } }
layer { name: "conv4_3_norm_mbox_loc_flat" type: "Flatten" bottom: "conv4_3_norm_mbox_loc_perm"
        top: "conv4_3_norm_mbox_loc_flat" flatten_param { axis: 1 } }
layer { name: "conv4_3_norm_mbox_priorbox" type: "PriorBox" bottom: "conv4_3_norm" bottom: "data"
        top: "conv4_3_norm_mbox_priorbox"
        prior_box_param { min_size: 2.0 max_size: 4.0 flip: true clip: false variance: 0.1 variance: 0.1
                          variance: 0.2 variance: 0.2 step: 1 offset: 0.5 } }
layer { name: "fc7_mbox_loc_perm" type: "Permute" bottom: "fc7_norm" top: "fc7_mbox_loc_perm"
        permute_param { order: 0 order: 2 } }
layer { name: "fc7_mbox_loc_flat" type: "Flatten" bottom: "fc7_mbox_loc_perm" top: "fc7_mbox_loc_flat" }
layer { name: "fc7_mbox_priorbox" type: "PriorBox" bottom: "fc7" bottom: "data" top: "fc7_mbox_priorbox"
        prior_box_param { min_size: 4.0 step: 2 } }
layer { name: "mbox_loc" type: "Concat" bottom: "conv4_3_norm_mbox_loc_flat" bottom: "fc7_mbox_loc_flat"
        top: "mbox_loc" concat_param { axis: 1 } }
layer { name: "mbox_priorbox" type: "Concat" bottom: "conv4_3_norm_mbox_priorbox" bottom: "fc7_mbox_priorbox"
        top: "mbox_priorbox" concat_param { axis: 2 } }
layer { name: "mbox_conf_softmax" type: "Softmax" bottom: "conv4_3_norm" top: "mbox_conf_softmax" }
"""


def test_ssd_layers_and_removed_prior_boxes(caplog):
    caplog.set_level(logging.WARNING, logger="rknnlite.toolkit")
    wts = {"conv4_3": [rand(6, 3, 3, 3), rand(6)], "fc7": [rand(4, 6, 3, 3), rand(4)],
           "conv4_3_norm": [RNG.uniform(10, 30, 6).astype(np.float32)], "fc7_norm": [np.array([3.0], np.float32)],
           "conv4_3_norm_mbox_loc": [rand(8, 6, 3, 3), rand(8)]}
    x = rand(1, 3, 8, 8, scale=1.0)
    outs, imported = run_caffe(SSD_NET, cb.caffemodel(wts), [x])
    # the PriorBox layers and the Concat of their priors are gone: the heads are the outputs
    assert [o.name for o in imported.output_specs] == ["mbox_loc", "mbox_conf_softmax"]
    assert "conv4_3_norm_mbox_priorbox, fc7_mbox_priorbox, mbox_priorbox" in caplog.text
    c43 = np.maximum(ref_conv(x, *wts["conv4_3"], pad=(1, 1)), 0)
    fc7 = ref_conv(c43, *wts["fc7"], stride=(2, 2), pad=(1, 1))
    # Normalize: over the channels of each position times a scale per channel, or (the
    # defaults) over the whole sample times one scale
    norm = c43 / np.sqrt((c43 ** 2).sum(axis=1, keepdims=True) + 1e-10) * wts["conv4_3_norm"][0][:, None, None]
    fc7_norm = fc7 / np.sqrt((fc7 ** 2).sum() + 1e-10) * 3.0
    loc = ref_conv(norm, *wts["conv4_3_norm_mbox_loc"], pad=(1, 1)).transpose(0, 2, 3, 1).reshape(1, -1)
    # Permute order 0, 2: Caffe appends the axes left out (1, 3)
    fc7_loc = fc7_norm.transpose(0, 2, 1, 3).reshape(1, -1)
    np.testing.assert_allclose(outs[0], np.concatenate([loc, fc7_loc], axis=1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs[1], ref_softmax(norm, 1), rtol=1e-4, atol=1e-6)


def test_what_reads_prior_boxes_and_other_blobs_is_refused():
    msg = load_error(HEAD + 'layer { name: "p" type: "PriorBox" bottom: "data" bottom: "data" top: "p" '
                     'prior_box_param { min_size: 2.0 } }\n'
                     'layer { name: "cat" type: "Concat" bottom: "p" bottom: "data" top: "cat" }')
    assert "layer 'cat' (Concat, line 3)" in msg and "'p'" in msg and "PriorBox" in msg


# -- errors ----------------------------------------------------------------------------------------


def load_error(prototxt: str, weights=None, **kwargs) -> str:
    with pytest.raises(ModelInvalidError) as info:
        load_caffe(prototxt.encode(), weights, **kwargs)
    return str(info.value)


HEAD = 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }\n'


def test_unknown_layer_type_is_named():
    msg = load_error(HEAD + 'layer { name: "norm1" type: "LRN" bottom: "data" top: "norm1" }')
    assert "layer 'norm1' (LRN, line 2)" in msg and "Caffe layer type 'LRN' is not supported" in msg
    assert "supported: " in msg and "Convolution" in msg


def test_rknn_reports_errors_and_stays_usable(caplog):
    caplog.set_level(logging.ERROR, logger="rknnlite.toolkit")
    rknn = RKNN()
    text = HEAD + 'layer { name: "d" type: "DetectionOutput" bottom: "data" top: "d" }'
    assert rknn.load_caffe(text.encode()) == -1
    assert "load_caffe" in caplog.records[-1].getMessage() and "'DetectionOutput'" in caplog.records[-1].getMessage()
    assert rknn.load_caffe((HEAD + 'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }').encode()) == 0
    rknn.release()


@pytest.mark.parametrize("text, match", [
    (HEAD + 'layer { name: "c" type: "Convolution" bottom: "data" top: "c"\n', r"line 3, column 1: unexpected end"),
    (HEAD + 'layer { name: "c" type: "Convolution" bottom "data" }', r"line 2, .*expected ':' or '\{'"),
    (HEAD + 'layer { name: "c" type: @ }', r"line 2, column \d+: unexpected character '@'"),
    ('name: "empty"', r"has no layer"),
])
def test_malformed_prototxt(text, match):
    assert "is not valid protobuf text" in load_error(text) or "has no layer" in load_error(text)
    with pytest.raises(ModelInvalidError, match=match):
        load_caffe(text.encode())


def test_malformed_caffemodel_names_the_file(tmp_path):
    conv = HEAD + ('layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
                   'convolution_param { num_output: 2 kernel_size: 1 } }')
    good = cb.caffemodel({"c": [rand(2, 3, 1, 1), rand(2)]})
    path = tmp_path / "broken.caffemodel"
    path.write_bytes(good[:-7])
    with pytest.raises(ModelInvalidError, match=r"broken\.caffemodel.*(not a binary \.caffemodel|malformed)"):
        load_caffe(conv.encode(), str(path))
    bad_blob = cb.caffemodel({"c": []})[:-1] + b""  # a layer message cut short
    with pytest.raises(ModelInvalidError, match="not a binary .caffemodel"):
        load_caffe(conv.encode(), bad_blob)
    with pytest.raises(ModelInvalidError, match="holds no layers"):
        load_caffe(conv.encode(), cb.f_string(1, "only a name"))


@pytest.mark.parametrize("layer, weights, match", [
    ('layer { name: "c" type: "Convolution" bottom: "data" top: "c" convolution_param { num_output: 2 kernel_size: 3 } }',
     {"c": [rand(2, 3, 2, 2), rand(2)]}, r"layer 'c' \(Convolution, line 2\): blob 0 holds 24 values .* expected "
                                          r"2 x 3 x 3 x 3 = 54"),
    ('layer { name: "c" type: "Convolution" bottom: "data" top: "c" convolution_param { num_output: 2 kernel_size: 3 } }',
     None, r"has no weights in the model \(blobs=None\)"),
    ('layer { name: "c" type: "Convolution" bottom: "data" top: "c" convolution_param { num_output: 2 kernel_size: 3 } }',
     {"c": [rand(2, 3, 3, 3)]}, r"needs 2 blobs"),
    ('layer { name: "c" type: "Convolution" bottom: "data" top: "c" convolution_param { num_output: 2 } }',
     {}, r"kernel_size \(or kernel_h/kernel_w\) is required"),
    ('layer { name: "p" type: "Pooling" bottom: "data" top: "p" pooling_param { pool: STOCHASTIC kernel_size: 2 } }',
     {}, "STOCHASTIC pooling is not supported"),
    ('layer { name: "p" type: "Pooling" bottom: "data" top: "p" pooling_param { kernel_size: 1 stride: 3 } }',
     {}, "starts past the 8-long input"),
    ('layer { name: "r" type: "ReLU" bottom: "nothing" top: "r" }', {}, "bottom 'nothing' is not produced"),
    ('layer { name: "e" type: "Eltwise" bottom: "data" bottom: "data" top: "e" '
     'eltwise_param { operation: MAX coeff: 2 coeff: 1 } }', {}, "coeff is only allowed with operation SUM"),
    ('layer { name: "b" type: "BatchNorm" bottom: "data" top: "b" }',
     {"b": [rand(3), rand(3), rand(2)]}, "must hold 1 value"),
    ('layer { name: "s" type: "Reshape" bottom: "data" top: "s" reshape_param { shape { dim: 5 dim: -1 } } }',
     {}, r"cannot reshape \[1, 3, 8, 8\]"),
])
def test_bad_layers_are_named(layer, weights, match):
    blobs = cb.caffemodel(weights) if weights else None
    with pytest.raises(ModelInvalidError, match=match):
        load_caffe((HEAD + layer).encode(), blobs)


def test_input_problems():
    with pytest.raises(ModelInvalidError, match="input_name 'nope' is not an input"):
        load_caffe((HEAD + 'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }').encode(), input_name="nope")
    with pytest.raises(ModelInvalidError, match="input 'x' has no shape"):
        load_caffe(b'input: "x"\nlayer { name: "r" type: "ReLU" bottom: "x" top: "r" }')
    with pytest.raises(ModelInvalidError, match="input_dim needs 4 values per input"):
        load_caffe(b'input: "x" input_dim: 1 input_dim: 3\nlayer { name: "r" type: "ReLU" bottom: "x" top: "r" }')


# -- the protobuf readers --------------------------------------------------------------------------


def test_text_format_reader():
    msg = parse_text("""
        # comment
        name: "a\\"b\\101\\x42" 'c'   # escapes, concatenation
        num: -12 hex: 0x1F oct: 017 f: 1.5e-3 g: 2.0f h: .5 neg_inf: -inf word: MAX flag: true
        list: [1, 2, 3] empty: []
        sub { x: 1; y: 2, }
        sub: < x: 3 >
        sub: { nested { deep: "yes" } }
        msgs: [{ v: 1 }, { v: 2 }]
    """)
    assert msg.get("name") == 'a"bABc'
    assert (msg.get("num"), msg.get("hex"), msg.get("oct")) == (-12, 31, 15)
    assert (msg.get("f"), msg.get("g"), msg.get("h")) == (1.5e-3, 2.0, 0.5)
    assert msg.get("neg_inf") == -math.inf
    assert isinstance(msg.get("word"), Identifier) and msg.get("word") == "MAX" and msg.get("flag") == "true"
    assert msg.all("list") == [1, 2, 3] and msg.all("empty") == []
    subs = msg.all("sub")
    assert [s.get("x") for s in subs[:2]] == [1, 3] and subs[0].get("y") == 2
    assert subs[2].get("nested").get("deep") == "yes"
    assert [m.get("v") for m in msg.all("msgs")] == [1, 2]
    assert msg.get("absent", 7) == 7 and msg.all("absent") == []


@pytest.mark.parametrize("text, line, column", [
    ('a: 1\nb { c: 2', 2, 9),
    ('a: 1\n  b: "unterminated\n', 2, 6),
    ('a: [1, 2', 1, 9),
    ('a 5', 1, 3),
    ('a: }', 1, 4),
])
def test_text_format_errors_give_the_position(text, line, column):
    with pytest.raises(TextFormatError) as info:
        parse_text(text)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)


def test_wire_format_reader():
    data = (cb.f_varint(1, 300) + cb.f_varint(2, -5) + cb.f_string(3, "héllo")
            + cb.f_packed_floats(4, [1.5, -2.0]) + cb.f_unpacked_floats(4, [3.25])
            + cb.key(5, cb.FIXED64) + b"\x00" * 8 + cb.f_packed_varints(6, [1, 128, 2 ** 40]))
    fields = wire.parse_message(data)
    assert fields[1] == [300] and wire.signed64(fields[2][0]) == -5
    assert wire.text(fields[3][0]) == "héllo"
    np.testing.assert_array_equal(wire.floats(fields[4]), np.array([1.5, -2.0, 3.25], np.float32))
    assert fields[5] == [b"\x00" * 8]
    assert wire.varints(fields[6]) == [1, 128, 2 ** 40]


@pytest.mark.parametrize("data, match", [
    (cb.key(1, cb.VARINT) + b"\x80", "truncated varint"),
    (cb.key(1, cb.LEN) + cb.varint(10) + b"abc", "runs past the end"),
    (cb.key(1, cb.FIXED32) + b"ab", "truncated fixed32"),
    (cb.key(1, 3), "unsupported wire type 3"),
    (b"\x00", "field number 0"),
])
def test_wire_format_errors(data, match):
    with pytest.raises(wire.WireFormatError, match=match):
        wire.parse_message(data)


def test_caffemodel_reader_shapes_and_forms():
    a = rand(2, 3, 1, 4)
    for form in ("shape", "legacy", "unpacked", "double"):
        out = read_caffemodel(cb.caffemodel({"l": [a, rand(7)], "empty": []}, form=form))
        assert set(out) == {"l"}
        np.testing.assert_array_equal(out["l"][0], a)
        assert out["l"][1].shape == ((1, 1, 1, 7) if form == "legacy" else (7,))
    bad_shape = cb.f_bytes(100, cb.f_string(1, "l") + cb.f_bytes(7, cb.f_bytes(7, cb.f_packed_varints(1, [2, 2]))
                                                                     + cb.f_packed_floats(5, [1, 2, 3])))
    with pytest.raises(ModelInvalidError, match=r"layer 'l' is malformed: .*shape \[2, 2\] does not match its 3"):
        read_caffemodel(bad_shape)
