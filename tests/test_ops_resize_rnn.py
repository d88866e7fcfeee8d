"""Resize, Upsample, LSTM and GRU kernels: official ONNX node cases, the ``out=`` path,
Resize against the ONNX reference implementation over every mode / coordinate mode /
option, the legacy (opset 7-10) forms, input conventions, LSTM/GRU against
onnxruntime over directions, sequence_lens, peepholes, clip, activations and layouts,
and attribute validation.

Deliberate differences from the ONNX reference implementation (not exercised by the
official cases): ``pytorch_half_pixel`` maps a length-1 output to coordinate 0 as the
operator text says (the reference uses -0.5), and ``exclude_outside`` does not apply
to nearest mode (the reference can then return 0)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx_cases import assert_matches, kernel_params, onnx_version, run_with_kernels

from rknnlite.backends.software.ops import KERNELS
from rknnlite.errors import ModelInvalidError

OPS = ["Resize", "Upsample", "LSTM", "GRU"]


@pytest.mark.parametrize("case, k", kernel_params(OPS))
def test_node_case(case, k):
    inputs, expected = case.data_sets[k]
    assert_matches(case, run_with_kernels(case, inputs), expected)


def test_every_op_has_cases():
    ids = {p.values[0].model.graph.node[0].op_type for p in kernel_params(OPS)}
    assert ids == set(OPS)


# ---------------------------------------------------------------------------- helpers


def _run(op, inputs, attrs, out=None, opset=19):
    spec = KERNELS[op]
    attrs = dict(attrs, _opset=opset)
    if spec.prepare is not None:
        attrs = spec.prepare(attrs, [None] * len(inputs))
    return spec.fn(inputs, attrs, out=out)


def _resize_model(attrs, roi, scales, sizes, opset=19):
    from onnx import TensorProto, helper

    inits = [helper.make_tensor("roi", TensorProto.FLOAT, roi.shape, roi),
             helper.make_tensor("scales", TensorProto.FLOAT, scales.shape, scales)]
    names = ["X", "roi", "scales"]
    if sizes is not None:
        inits.append(helper.make_tensor("sizes", TensorProto.INT64, sizes.shape, sizes))
        names.append("sizes")
    node = helper.make_node("Resize", names, ["Y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


#: onnx's reference Resize before 1.20 crashes on several of these configurations
needs_recent_reference = pytest.mark.skipif(
    onnx_version() < (1, 20), reason="the oracle, onnx.reference's Resize, is broken before onnx 1.20")


def _reference_resize(x, attrs, roi, scales, sizes):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(_resize_model(attrs, roi, scales, sizes)).run(None, {"X": x})[0]


def _resize(x, attrs, roi=None, scales=None, sizes=None, out=None, opset=19):
    roi = np.array([], np.float32) if roi is None else np.asarray(roi, np.float32)
    scales = np.array([], np.float32) if scales is None else np.asarray(scales, np.float32)
    sizes = None if sizes is None else np.asarray(sizes, np.int64)
    return _run("Resize", [x, roi, scales, sizes], attrs, out=out, opset=opset)[0], (roi, scales, sizes)


# ---------------------------------------------------------------------------- Resize vs reference

COORD_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_crop_and_resize"]
GEOMETRIES = [
    ((1, 2, 5, 7), dict(scales=[1, 1, 1.7, 0.6])),
    ((1, 2, 6, 4), dict(sizes=[1, 2, 13, 3])),
    ((2, 1, 3, 8), dict(scales=[1, 1, 2.0, 0.25])),
]
MODE_OPTIONS = (
    [("nearest", dict(nearest_mode=m)) for m in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")]
    + [(m, o) for m in ("linear", "cubic") for o in (dict(), dict(antialias=1), dict(exclude_outside=1))]
    + [("cubic", dict(cubic_coeff_a=-0.5, exclude_outside=1, antialias=1))]
)


def _grid():
    for (mode, opts), cm, (shape, geo) in itertools.product(MODE_OPTIONS, COORD_MODES, GEOMETRIES):
        name = f"{mode}-{cm}-{'-'.join(f'{k}{v}' for k, v in opts.items())}-{'x'.join(map(str, shape))}"
        yield pytest.param(mode, opts, cm, shape, geo, id=name)


@needs_recent_reference
@pytest.mark.parametrize("mode, opts, coord_mode, shape, geo", list(_grid()))
def test_resize_matches_reference(mode, opts, coord_mode, shape, geo):
    pytest.importorskip("onnx.reference")
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    attrs = dict(mode=mode, coordinate_transformation_mode=coord_mode, **opts)
    roi = None
    if coord_mode == "tf_crop_and_resize":
        roi = [0, 0, 0.13, -0.21, 1, 1, 0.83, 1.07]
        attrs["extrapolation_value"] = -3.0
    y, (roi_a, scales_a, sizes_a) = _resize(x, attrs, roi=roi, **geo)
    expected = _reference_resize(x, attrs, roi_a, scales_a, sizes_a)
    assert y.shape == expected.shape
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


@needs_recent_reference
@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("axes", [[1, 2, 3], [-1, -3]])
def test_resize_axes_and_aspect_policy(policy, axes):
    pytest.importorskip("onnx.reference")
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 6)).astype(np.float32)
    sizes = [5, 9, 7][:len(axes)]
    attrs = dict(mode="linear", axes=axes, keep_aspect_ratio_policy=policy)
    y, (roi, scales, sizes_a) = _resize(x, attrs, sizes=sizes)
    ref_attrs = dict(attrs, axes=[a % 4 for a in axes])
    expected = _reference_resize(x, ref_attrs, roi, scales, sizes_a)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def _exact_nearest_floor(n_in, n_out, coord_mode):
    """Source index of each output position with the coordinate in exact rational arithmetic."""
    from fractions import Fraction

    if coord_mode == "asymmetric":
        coords = [Fraction(y * n_in, n_out) for y in range(n_out)]
    elif coord_mode == "half_pixel":
        coords = [Fraction((2 * y + 1) * n_in, 2 * n_out) - Fraction(1, 2) for y in range(n_out)]
    else:  # align_corners
        coords = [Fraction(y * (n_in - 1), n_out - 1) for y in range(n_out)]
    return [min(max(c.numerator // c.denominator, 0), n_in - 1) for c in coords]


@pytest.mark.parametrize("n_in, n_out, coord_mode, position, source", [
    (36, 44, "asymmetric", 33, 27),     # 33 / (44 / 36) = 26.999999999999996 in float64
    (35, 10, "asymmetric", 2, 7),
    (25, 30, "asymmetric", 18, 15),
    (25, 27, "half_pixel", 13, 12),
    (39, 21, "half_pixel", 10, 19),
    (39, 55, "align_corners", 27, 19),
    (39, 55, "align_corners", 54, 38),  # the last output row is the last input row
])
def test_nearest_by_sizes_lands_on_the_exact_source_pixel(n_in, n_out, coord_mode, position, source):
    """With ``sizes`` the scale is the exact ratio: an output position whose coordinate is a
    whole input pixel takes that pixel under ``floor``.  Computed through the float ratio the
    coordinate could fall a hair below and take the pixel before it (found by a differential
    run of random graphs: 36 -> 44 took pixel 26 for position 33).  PyTorch's nearest
    (``floor(y * in / out)``) gives the exact pixel too; onnxruntime's float32 arithmetic misses
    some of these (35 -> 10 takes pixel 6 for position 2)."""
    x = np.arange(n_in, dtype=np.float32).reshape(1, 1, n_in, 1)
    attrs = dict(mode="nearest", coordinate_transformation_mode=coord_mode, nearest_mode="floor")
    y, _ = _resize(x, attrs, sizes=[1, 1, n_out, 1])
    got = y.reshape(-1).astype(int).tolist()
    assert got[position] == source
    assert got == _exact_nearest_floor(n_in, n_out, coord_mode)


def test_pytorch_half_pixel_single_output_uses_coordinate_zero():
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 1, 8)
    for mode in ("nearest", "linear", "cubic"):
        y, _ = _resize(x, dict(mode=mode, coordinate_transformation_mode="pytorch_half_pixel"), sizes=[1, 1, 1, 1])
        assert y.shape == (1, 1, 1, 1) and y[0, 0, 0, 0] == 0.0, mode


def test_nearest_ignores_exclude_outside():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)
    plain, _ = _resize(x, dict(mode="nearest", nearest_mode="ceil"), scales=[1, 1, 1, 2.5])
    excl, _ = _resize(x, dict(mode="nearest", nearest_mode="ceil", exclude_outside=1), scales=[1, 1, 1, 2.5])
    np.testing.assert_array_equal(plain, excl)
    assert plain[0, 0, 0, -1] == 3


# ---------------------------------------------------------------------------- Resize conventions


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.int64, np.bool_, np.float16, np.float64])
def test_nearest_is_exact_for_any_dtype(dtype):
    x = np.random.default_rng(2).integers(0, 2 if dtype == np.bool_ else 100, (2, 3, 4, 5)).astype(dtype)
    attrs = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    y, _ = _resize(x, attrs, scales=[1, 1, 2, 3])
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, x.repeat(2, axis=2).repeat(3, axis=3))
    # Also on a leading axis (not the fused 2-D path).
    y, _ = _resize(x, attrs, scales=[2, 1, 1, 1])
    np.testing.assert_array_equal(y, x.repeat(2, axis=0))


def test_linear_on_integers_rounds_and_saturates():
    x = np.array([[[[0, 255, 10, 11]]]], np.uint8)
    y, _ = _resize(x, dict(mode="linear", coordinate_transformation_mode="align_corners"), sizes=[1, 1, 1, 7])
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, [[[[0, 128, 255, 132, 10, 10, 11]]]])
    y, _ = _resize(x, dict(mode="cubic"), scales=[1, 1, 1, 2])
    assert y.dtype == np.uint8 and y.min() >= 0  # cubic overshoot saturates


@needs_recent_reference
def test_resize_rank_1_and_5():
    x1 = np.arange(5, dtype=np.float32)
    y1, _ = _resize(x1, dict(mode="linear", coordinate_transformation_mode="align_corners"), sizes=[9])
    np.testing.assert_allclose(y1, np.arange(9) / 2, rtol=1e-6)
    x5 = np.random.default_rng(3).standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    y5, (roi, scales, sizes) = _resize(x5, dict(mode="linear"), scales=[1, 1, 2, 0.5, 1.5])
    assert y5.shape == (1, 2, 6, 2, 7)
    pytest.importorskip("onnx.reference")
    np.testing.assert_allclose(y5, _reference_resize(x5, dict(mode="linear"), roi, scales, sizes), rtol=1e-4,
                               atol=1e-5)


def test_identity_resize_is_a_copy():
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 4)).astype(np.float32)
    for mode in ("nearest", "linear", "cubic"):
        y, _ = _resize(x, dict(mode=mode), scales=[1, 1, 1, 1])
        np.testing.assert_array_equal(y, x)
        assert not np.shares_memory(y, x)


def test_opset11_empty_scales_with_sizes_and_opset13_omitted_inputs():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    y11, _ = _resize(x, dict(mode="nearest"), sizes=[1, 1, 4, 4], opset=11)
    (y13,) = _run("Resize", [x, None, None, np.array([1, 1, 4, 4], np.int64)], dict(mode="nearest"), opset=13)
    (y13s,) = _run("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)], dict(mode="nearest"), opset=13)
    expected = x.repeat(2, axis=2).repeat(2, axis=3)
    for y in (y11, y13, y13s):
        np.testing.assert_array_equal(y, expected)


def test_resize_needs_exactly_one_of_scales_and_sizes():
    x = np.zeros((1, 1, 2, 2), np.float32)
    with pytest.raises(ValueError, match="one of scales and sizes"):
        _resize(x, dict(mode="nearest"))
    with pytest.raises(ValueError, match="only one"):
        _resize(x, dict(mode="nearest"), scales=[1, 1, 2, 2], sizes=[1, 1, 4, 4])
    with pytest.raises(ValueError, match="scales"):
        _resize(x, dict(mode="nearest"), scales=[1, 1, 0, 2])


def test_resize_opset10_and_upsample():
    # Values from onnxruntime: asymmetric coordinates, nearest truncates when enlarging
    # and rounds up when shrinking.
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 1, 8)
    down = np.array([1, 1, 1, 0.6], np.float32)
    up = np.array([1, 1, 1, 1.5], np.float32)
    (y,) = _run("Resize", [x, down], dict(mode="nearest"), opset=10)
    np.testing.assert_array_equal(y, [[[[1, 3, 5, 6]]]])
    (y,) = _run("Resize", [x, down], dict(mode="linear"), opset=10)
    np.testing.assert_allclose(y, [[[[1, 8 / 3, 13 / 3, 6]]]], rtol=1e-6)
    (y,) = _run("Upsample", [x, up], dict(mode="nearest"), opset=9)
    np.testing.assert_array_equal(y, [[[[1, 1, 2, 3, 3, 4, 5, 5, 6, 7, 7, 8]]]])
    x2 = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2)
    (y,) = _run("Upsample", [x2], dict(mode="linear", scales=[1.0, 1.0, 2.0, 2.0]), opset=7)
    np.testing.assert_allclose(y, [[[[1, 1.5, 2, 2], [2, 2.5, 3, 3], [3, 3.5, 4, 4], [3, 3.5, 4, 4]]]])
    (y,) = _run("Upsample", [x2], dict(mode="bilinear", scales=[1.0, 1.0, 2.0, 2.0]), opset=7)
    assert y.shape == (1, 1, 4, 4)


def test_resize_zero_sized_output():
    x = np.ones((1, 1, 2, 2), np.float32)
    y, _ = _resize(x, dict(mode="linear"), scales=[1, 1, 0.25, 1])
    assert y.shape == (1, 1, 0, 2)


# ---------------------------------------------------------------------------- out= path


def _resize_out_cases():
    rng = np.random.default_rng(5)
    xf = rng.standard_normal((1, 3, 5, 6)).astype(np.float32)
    xi = rng.integers(0, 255, (1, 3, 5, 6)).astype(np.uint8)
    sizes = np.array([1, 3, 10, 12], np.int64)
    empty = np.array([], np.float32)
    return [
        ("Resize", [xf, empty, np.array([1, 1, 2, 2], np.float32)], dict(mode="nearest")),
        ("Resize", [xi, empty, empty, sizes], dict(mode="nearest", nearest_mode="floor")),
        ("Resize", [xf, empty, np.array([1, 1, 2, 0.5], np.float32)], dict(mode="linear")),
        ("Resize", [xf, empty, empty, sizes], dict(mode="cubic", antialias=1)),
        ("Resize", [xf, np.array([0, 0, -0.1, 0, 1, 1, 1.2, 0.5], np.float32), empty, sizes],
         dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=9.0)),
        ("Upsample", [xf, np.array([1, 1, 2, 3], np.float32)], dict(mode="linear")),
    ]


@pytest.mark.parametrize("op, inputs, attrs", _resize_out_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_resize_out_path_identical(op, inputs, attrs):
    (expected,) = _run(op, inputs, attrs)
    out = np.zeros(expected.shape, expected.dtype)
    (got,) = _run(op, inputs, attrs, out=[out])
    assert got is out
    np.testing.assert_array_equal(got, expected)
    strided = np.zeros(expected.shape[:-1] + (2 * expected.shape[-1],), expected.dtype)[..., ::2]
    (got,) = _run(op, inputs, attrs, out=[strided])
    assert got is strided
    np.testing.assert_array_equal(got, expected)


# ---------------------------------------------------------------------------- LSTM / GRU


def _rnn_feeds(op, cfg, rng):
    gates = 4 if op == "LSTM" else 3
    nd = 2 if cfg.get("direction") == "bidirectional" else 1
    seq, batch, isz, hid = cfg["dims"]
    layout = cfg.get("layout", 0)
    x = rng.standard_normal((batch, seq, isz) if layout else (seq, batch, isz)).astype(np.float32)
    feeds = {"X": x,
             "W": (rng.standard_normal((nd, gates * hid, isz)) * 0.5).astype(np.float32),
             "R": (rng.standard_normal((nd, gates * hid, hid)) * 0.5).astype(np.float32)}
    names = ["X", "W", "R", "", "", ""]
    if cfg.get("bias"):
        feeds["B"] = (rng.standard_normal((nd, 2 * gates * hid)) * 0.5).astype(np.float32)
        names[3] = "B"
    if "lens" in cfg:
        feeds["L"] = np.array(cfg["lens"], np.int32)
        names[4] = "L"
    state_shape = (batch, nd, hid) if layout else (nd, batch, hid)
    if cfg.get("h0"):
        feeds["H0"] = rng.standard_normal(state_shape).astype(np.float32)
        names[5] = "H0"
    if op == "LSTM":
        names += ["", ""]
        if cfg.get("c0"):
            feeds["C0"] = rng.standard_normal(state_shape).astype(np.float32)
            names[6] = "C0"
        if cfg.get("peep"):
            feeds["P"] = rng.standard_normal((nd, 3 * hid)).astype(np.float32)
            names[7] = "P"
    while names[-1] == "":
        names.pop()
    return feeds, names


def _ort_rnn(op, attrs, feeds, names, layout):
    """Run the node in onnxruntime (which only has layout 0: transpose around it)."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    feeds = dict(feeds)
    if layout:
        feeds["X"] = np.ascontiguousarray(feeds["X"].transpose(1, 0, 2))
        for k in ("H0", "C0"):
            if k in feeds:
                feeds[k] = np.ascontiguousarray(feeds[k].transpose(1, 0, 2))
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, **{k: v for k, v in attrs.items() if k != "layout"})

    def info(k, v):
        return helper.make_tensor_value_info(k, TensorProto.INT32 if v.dtype == np.int32 else TensorProto.FLOAT,
                                             v.shape)

    graph = helper.make_graph([node], "g", [info(k, v) for k, v in feeds.items()],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    res = sess.run(None, feeds)
    if layout:
        res = [res[0].transpose(2, 0, 1, 3)] + [r.transpose(1, 0, 2) for r in res[1:]]
    return res


RNN_CONFIGS = [
    dict(dims=(4, 3, 2, 3), direction="forward", bias=True),
    dict(dims=(4, 3, 2, 3), direction="reverse", bias=True, h0=True, c0=True),
    dict(dims=(5, 3, 3, 4), direction="bidirectional", bias=True, lens=[5, 2, 3], h0=True, c0=True),
    dict(dims=(5, 4, 3, 2), direction="reverse", lens=[1, 5, 0, 3], h0=True, peep=True),
    dict(dims=(3, 2, 2, 3), direction="forward", lens=[2, 3], clip=0.7, peep=True, bias=True),
    dict(dims=(4, 2, 3, 3), direction="bidirectional", layout=1, lens=[4, 1], h0=True, c0=True, bias=True),
    dict(dims=(3, 2, 2, 4), direction="forward", input_forget=1, linear_before_reset=1, bias=True),
    dict(dims=(3, 2, 2, 3), direction="bidirectional", bias=True,
         activations={"LSTM": ["HardSigmoid", "LeakyRelu", "Softsign", "Sigmoid", "Elu", "Softplus"],
                      "GRU": ["HardSigmoid", "LeakyRelu", "Sigmoid", "Relu"]},
         activation_alpha=[0.3, 0.05, 0.8], activation_beta=[0.4]),
    dict(dims=(3, 2, 2, 3), direction="forward", bias=True,
         activations={"LSTM": ["Sigmoid", "ScaledTanh", "Affine"], "GRU": ["Sigmoid", "ScaledTanh"]},
         activation_alpha=[0.9, 0.5], activation_beta=[1.2, 0.1]),
]


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("cfg", RNN_CONFIGS, ids=lambda c: "-".join(f"{k}" for k in c if k != "dims"))
def test_rnn_matches_onnxruntime(op, cfg):
    rng = np.random.default_rng(11)
    feeds, names = _rnn_feeds(op, cfg, rng)
    attrs = dict(hidden_size=cfg["dims"][3], direction=cfg["direction"], layout=cfg.get("layout", 0))
    for key in ("clip", "activation_alpha", "activation_beta"):
        if key in cfg:
            attrs[key] = cfg[key]
    if "activations" in cfg:
        attrs["activations"] = cfg["activations"][op]
    if op == "LSTM" and "input_forget" in cfg:
        attrs["input_forget"] = cfg["input_forget"]
    if op == "GRU" and "linear_before_reset" in cfg:
        attrs["linear_before_reset"] = cfg["linear_before_reset"]
    expected = _ort_rnn(op, attrs, feeds, names, cfg.get("layout", 0))
    got = _run(op, [feeds.get(n) if n else None for n in names], attrs, opset=14)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("layout", [0, 1])
def test_rnn_out_path_identical(op, layout):
    cfg = dict(dims=(4, 3, 2, 3), direction="bidirectional", layout=layout, lens=[4, 2, 3], h0=True, bias=True)
    feeds, names = _rnn_feeds(op, cfg, np.random.default_rng(12))
    inputs = [feeds.get(n) if n else None for n in names]
    attrs = dict(hidden_size=3, direction="bidirectional", layout=layout)
    expected = _run(op, inputs, attrs)
    out = [np.full(e.shape, np.nan, np.float32) for e in expected]
    got = _run(op, inputs, attrs, out=out)
    for g, o, e in zip(got, out, expected):
        assert g is o
        np.testing.assert_array_equal(g, e)
    # Undeclared outputs may come as None.
    got = _run(op, inputs, attrs, out=[None] + out[1:])
    np.testing.assert_array_equal(got[1], expected[1])


def test_rnn_default_activation_alphas_follow_onnx_ops():
    # ThresholdedRelu defaults to alpha=1 (the ONNX operator's default).
    cfg = dict(dims=(2, 1, 2, 2), direction="forward")
    feeds, names = _rnn_feeds("GRU", cfg, np.random.default_rng(13))
    inputs = [feeds.get(n) if n else None for n in names]
    base = dict(hidden_size=2, activations=["Sigmoid", "ThresholdedRelu"])
    a = _run("GRU", inputs, base)
    b = _run("GRU", inputs, dict(base, activation_alpha=[1.0]))
    np.testing.assert_array_equal(a[0], b[0])


BAD_RNN_ATTRS = [
    ("LSTM", dict(hidden_size=3, direction="sideways"), "direction"),
    ("GRU", dict(hidden_size=3, layout=2), "layout"),
    ("LSTM", dict(hidden_size=0), "hidden_size"),
    ("LSTM", dict(hidden_size=3, activations=["Sigmoid", "Tanh"]), "activations"),
    ("GRU", dict(hidden_size=3, activations=["Sigmoid", "Swish"]), "Swish"),
    ("LSTM", dict(hidden_size=3, clip=-1.0), "clip"),
    ("LSTM", dict(hidden_size=3, input_forget=2), "input_forget"),
    ("GRU", dict(hidden_size=3, linear_before_reset=3), "linear_before_reset"),
    ("Resize", dict(mode="area"), "mode"),
    ("Resize", dict(coordinate_transformation_mode="center"), "coordinate_transformation_mode"),
    ("Resize", dict(nearest_mode="nearest"), "nearest_mode"),
    ("Resize", dict(keep_aspect_ratio_policy="fit"), "keep_aspect_ratio_policy"),
    ("Resize", dict(antialias=2), "antialias"),
    ("Resize", dict(exclude_outside=-1), "exclude_outside"),
    ("Resize", dict(axes=[2, 2]), "axes"),
    ("Upsample", dict(mode="cubic"), "mode"),
    ("Upsample", dict(scales=[1.0, -2.0]), "scales"),
]


@pytest.mark.parametrize("op, attrs, word", BAD_RNN_ATTRS, ids=[f"{o}-{w}" for o, _, w in BAD_RNN_ATTRS])
def test_bad_attributes(op, attrs, word):
    spec = KERNELS[op]
    with pytest.raises(ModelInvalidError, match=word) as info:
        spec.prepare(dict(attrs, _opset=19), [None] * 8)
    assert info.value.op == op


def test_rnn_weight_shape_mismatch():
    x = np.zeros((2, 1, 3), np.float32)
    w = np.zeros((1, 12, 3), np.float32)
    r = np.zeros((1, 12, 3), np.float32)
    with pytest.raises(ValueError, match="hidden_size"):
        _run("LSTM", [x, w, r], dict(hidden_size=4))
    with pytest.raises(ValueError, match="directions"):
        _run("LSTM", [x, w, r], dict(hidden_size=3, direction="bidirectional"))


def test_registration_flags():
    for op in OPS:
        spec = KERNELS[op]
        assert spec.out, op
        assert not spec.data_dependent, op
