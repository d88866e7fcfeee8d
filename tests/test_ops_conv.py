"""Conv, ConvTranspose, Gemm and MatMul kernels: official ONNX node cases, the ``out=``
path, every execution path of Conv (gather GEMM normal/transposed, depthwise, BLAS
fallback) against a float64 reference, and attribute validation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx_cases import assert_matches, kernel_params, run_with_kernels

from rknnlite.backends.software.ops import KERNELS
from rknnlite.backends.software.ops import conv as conv_mod
from rknnlite.errors import ModelInvalidError

OPS = ["Conv", "ConvTranspose", "Gemm", "MatMul"]


@pytest.mark.parametrize("case, k", kernel_params(OPS))
def test_node_case(case, k):
    inputs, expected = case.data_sets[k]
    assert_matches(case, run_with_kernels(case, inputs), expected)


def test_every_op_has_cases():
    ids = {p.values[0].model.graph.node[0].op_type for p in kernel_params(OPS)}
    assert ids == set(OPS)


# ---------------------------------------------------------------------------- helpers


def _run(op, inputs, attrs, consts=None, out=None, opset=17):
    spec = KERNELS[op]
    attrs = dict(attrs, _opset=opset)
    if spec.prepare is not None:
        attrs = spec.prepare(attrs, consts if consts is not None else [None] * len(inputs))
    return spec.fn(inputs, attrs, out=out)


def _ref_conv(x, w, b, strides, dilations, pads_begin, pads_end, group):
    """Direct float64 convolution, N-D."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    nd = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pads_begin, pads_end)))
    ks = w.shape[2:]
    out_sp = [(xp.shape[2 + a] - (ks[a] - 1) * dilations[a] - 1) // strides[a] + 1 for a in range(nd)]
    n, M = x.shape[0], w.shape[0]
    Cg, Mg = w.shape[1], M // group
    y = np.zeros((n, M) + tuple(out_sp))
    for tap in itertools.product(*[range(k) for k in ks]):
        sl = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, dilations, out_sp, strides))
        patch = xp[(slice(None), slice(None)) + sl]
        for g in range(group):
            wg = w[(slice(g * Mg, (g + 1) * Mg), slice(None)) + tap]
            y[:, g * Mg:(g + 1) * Mg] += np.einsum("nc...,mc->nm...", patch[:, g * Cg:(g + 1) * Cg], wg)
    if b is not None:
        y += b.reshape((1, M) + (1,) * nd)
    return y


def _ref_conv_transpose(x, w, b, strides, dilations, pads_begin, out_sp, group):
    """Direct float64 transposed convolution: scatter every input pixel through the kernel."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    nd = x.ndim - 2
    n, C = x.shape[:2]
    Cg, Mg = C // group, w.shape[1]
    ks = w.shape[2:]
    in_sp = x.shape[2:]
    # big canvas covering every tap, then crop [pads_begin, pads_begin + out)
    lo = [min(0, p) for p in pads_begin]
    canvas_sp = [(i - 1) * s + (k - 1) * d + 1 + max(0, o + p - ((i - 1) * s + (k - 1) * d + 1)) - l
                 for i, s, k, d, o, p, l in zip(in_sp, strides, ks, dilations, out_sp, pads_begin, lo)]
    canvas = np.zeros((n, Mg * group) + tuple(canvas_sp))
    for tap in itertools.product(*[range(k) for k in ks]):
        sl = tuple(slice(t * d - l, t * d - l + (i - 1) * s + 1, s)
                   for t, d, i, s, l in zip(tap, dilations, in_sp, strides, lo))
        for g in range(group):
            contrib = np.einsum("nc...,cm->nm...", x[:, g * Cg:(g + 1) * Cg],
                                w[(slice(g * Cg, (g + 1) * Cg), slice(None)) + tap])
            canvas[(slice(None), slice(g * Mg, (g + 1) * Mg)) + sl] += contrib
    crop = tuple(slice(p - l, p - l + o) for p, l, o in zip(pads_begin, lo, out_sp))
    y = canvas[(slice(None), slice(None)) + crop]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nd)
    return y


def _close(actual, expected, rtol=2e-5):
    scale = max(1.0, float(np.abs(expected).max()) if expected.size else 1.0)
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=rtol, atol=rtol * scale)


@pytest.fixture(params=["native", "avx2", "blas"])
def conv_path(request, set_kernel_isa):
    """Run Conv tests with the CPU's best micro-kernels, with the AVX2 ones (on AVX-512
    CPUs) and with the BLAS fallback."""
    from rknnlite._native import conv_kernels as ck

    native = ck.gemm_isa()
    if request.param == "blas":
        set_kernel_isa(0)
    elif request.param == "avx2":
        if native < 2:
            pytest.skip("the native run already covers AVX2 (or there is no micro-kernel)")
        set_kernel_isa(1)
    elif native == 0:
        pytest.skip("no AVX2/AVX-512 micro-kernel on this CPU")
    return request.param


# ---------------------------------------------------------------------------- Conv

#: a grid GEMM (K = 18) whose column blocks hold more panels than rk_conv.c keeps store plans for
#: on the stack (RK_SPLAN_CACHE): their plans go to the heap, made once per block
GRID_MANY_PANELS = ((1, 2, 90, 150), (5, 2, 3, 3))
SPLAN_STACK_PANELS = 128

CONV_CASES = [
    # (x shape, w shape, strides, dilations, pads, group, bias)
    ((1, 3, 11, 13), (5, 3, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, True),
    ((2, 4, 9, 10), (6, 4, 3, 2), (2, 1), (1, 1), (0, 1, 2, 0), 1, True),
    ((1, 6, 12, 12), (4, 3, 3, 3), (1, 2), (2, 1), (2, 0, 1, 3), 2, False),
    ((1, 8, 10, 7), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 8, True),     # depthwise
    ((2, 4, 11, 9), (8, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 4, True),     # depthwise, multiplier 2
    ((1, 5, 13, 12), (5, 1, 5, 3), (2, 3), (2, 1), (2, 1, 0, 2), 5, False),   # depthwise, generic taps
    ((1, 16, 7, 7), (40, 16, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, True),    # small N: transposed tiles
    ((1, 24, 14, 14), (33, 24, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, True),  # 1x1 direct
    ((1, 12, 15, 17), (20, 12, 1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1, False),  # 1x1 strided
    ((1, 3, 40, 41), (16, 3, 7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1, True),    # stem-like
    ((1, 20, 9, 9), (12, 5, 3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 4, True),     # grouped, dilated
    ((1, 2, 1, 1), (3, 2, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, True),       # N == 1
    ((1, 70, 20, 20), (130, 70, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, True),  # several K blocks... of 630
    ((1, 600, 6, 6), (9, 600, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, True),   # K = 600 split in 2 blocks
    ((1, 2, 5, 5), (3, 2, 7, 7), (1, 1), (1, 1), (3, 3, 3, 3), 1, False),      # kernel larger than input
    ((1, 4, 30, 70), (8, 4, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, True),     # grid columns (padded)
    ((2, 5, 61, 83), (7, 5, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1, True),     # grid columns (strided)
    (*GRID_MANY_PANELS, (1, 1), (1, 1), (1, 1, 1, 1), 1, True),
]


@pytest.mark.parametrize("xs, ws, strides, dil, pads, group, bias", CONV_CASES)
@pytest.mark.parametrize("const", [False, True], ids=["runtime-w", "const-w"])
def test_conv_2d(conv_path, xs, ws, strides, dil, pads, group, bias, const):
    rng = np.random.default_rng(abs(hash((xs, ws))) % 2 ** 32)
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal(ws, dtype=np.float32)
    b = rng.standard_normal(ws[0], dtype=np.float32) if bias else None
    inputs = [x, w] + ([b] if bias else [])
    attrs = {"strides": list(strides), "dilations": list(dil), "pads": list(pads), "group": group}
    consts = [None, w] + ([b] if bias else []) if const else None
    (y,) = _run("Conv", inputs, attrs, consts)
    ref = _ref_conv(x, w, b, strides, dil, pads[:2], pads[2:], group)
    assert y.dtype == np.float32 and y.shape == ref.shape
    _close(y, ref)
    # a second call (cached geometry and packed weights) gives the same result
    (y2,) = _run("Conv", inputs, attrs, consts)
    np.testing.assert_array_equal(y, y2)


def test_conv_large_k_blocks(conv_path):
    """K = 64*9*... > 512: several K blocks accumulate into the output tile."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 160, 9, 9), dtype=np.float32)
    w = rng.standard_normal((24, 160, 3, 3), dtype=np.float32) * 0.1
    b = rng.standard_normal(24, dtype=np.float32)
    (y,) = _run("Conv", [x, w, b], {"pads": [1, 1, 1, 1]}, [None, w, b])
    _close(y, _ref_conv(x, w, b, (1, 1), (1, 1), (1, 1), (1, 1), 1))


@pytest.mark.parametrize("shape_x, shape_w, strides, pads", [
    ((2, 3, 20), (4, 3, 5), (2,), (2, 1)),
    ((1, 4, 17), (4, 1, 3), (1,), (1, 1)),  # with group=4 below: depthwise 1-D
])
def test_conv_1d(conv_path, shape_x, shape_w, strides, pads):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape_x, dtype=np.float32)
    w = rng.standard_normal(shape_w, dtype=np.float32)
    group = shape_x[1] // shape_w[1]
    (y,) = _run("Conv", [x, w], {"strides": list(strides), "pads": list(pads), "group": group})
    _close(y, _ref_conv(x, w, None, strides, (1,), pads[:1], pads[1:], group))


@pytest.mark.parametrize("group", [1, 2])
def test_conv_3d(conv_path, group):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 6, 7, 5), dtype=np.float32)
    w = rng.standard_normal((6, 4 // group, 3, 2, 3), dtype=np.float32)
    b = rng.standard_normal(6, dtype=np.float32)
    attrs = {"strides": [2, 1, 1], "dilations": [1, 2, 1], "pads": [1, 0, 1, 0, 1, 1], "group": group}
    (y,) = _run("Conv", [x, w, b], attrs, [None, w, b])
    _close(y, _ref_conv(x, w, b, (2, 1, 1), (1, 2, 1), (1, 0, 1), (0, 1, 1), group))


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("strides", [(1, 1), (2, 2), (3, 2)])
def test_conv_auto_pad(conv_path, auto_pad, strides):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 3, 10, 11), dtype=np.float32)
    w = rng.standard_normal((4, 3, 4, 3), dtype=np.float32)
    (y,) = _run("Conv", [x, w], {"auto_pad": auto_pad, "strides": list(strides)})
    if auto_pad == "VALID":
        pb = pe = (0, 0)
    else:
        pb, pe = [], []
        for size, k, s in zip((10, 11), (4, 3), strides):
            total = max(0, (-(-size // s) - 1) * s + k - size)
            small, big = total // 2, total - total // 2
            pb.append(small if auto_pad == "SAME_UPPER" else big)
            pe.append(big if auto_pad == "SAME_UPPER" else small)
        assert y.shape[2:] == tuple(-(-n // s) for n, s in zip((10, 11), strides))
    _close(y, _ref_conv(x, w, None, strides, (1, 1), pb, pe, 1))


def test_conv_paths_selected():
    """The shapes above reach the intended execution paths on this CPU."""
    if conv_mod._ISA == 0:
        pytest.skip("no micro-kernel")

    def path(xs, ws, **attrs):
        attrs = conv_mod._conv_prepare(dict(attrs, _opset=17), [None, None])
        plan = attrs["_conv"]
        plan.ca = conv_mod._ConvAttrs(attrs, "Conv", len(xs) - 2)
        g = conv_mod._geometry(plan, xs, ws)
        return g.path, g.transposed

    assert path((1, 64, 56, 56), (64, 64, 3, 3), pads=[1, 1, 1, 1])[0] == "winograd"
    assert path((1, 64, 56, 56), (64, 64, 3, 3), pads=[1, 1, 1, 1], strides=[2, 2]) == ("gather", False)
    assert path((1, 64, 56, 56), (64, 64, 1, 1)) == ("gather", False)
    assert path((1, 8, 10, 7), (8, 1, 3, 3), group=8) == ("depthwise", False)
    assert path((1, 2, 1, 1), (3, 2, 1, 1))[0] == "blas"

    def grid(xs, ws, **attrs):
        attrs = conv_mod._conv_prepare(dict(attrs, _opset=17), [None, None])
        plan = attrs["_conv"]
        plan.ca = conv_mod._ConvAttrs(attrs, "Conv", len(xs) - 2)
        return conv_mod._geometry(plan, xs, ws).grid

    if conv_mod._ISA >= 2:  # the padded-row grid and transposed tiles are AVX-512 paths
        assert grid((1, 4, 30, 70), (8, 4, 3, 3), pads=[1, 1, 1, 1]) == (30, 72, 70)
        assert grid(*GRID_MANY_PANELS, pads=[1, 1, 1, 1]) == (90, 152, 150)
        attrs = conv_mod._conv_prepare({"pads": [1, 1, 1, 1], "_opset": 17}, [None, None])
        attrs["_conv"].ca = conv_mod._ConvAttrs(attrs, "Conv", 2)
        g = conv_mod._geometry(attrs["_conv"], *GRID_MANY_PANELS)
        assert g.ncb // conv_mod._ck.panel_shape(False)[1] > SPLAN_STACK_PANELS  # test_conv_2d covers the heap plans
        assert grid((1, 3, 224, 224), (64, 3, 7, 7), pads=[3, 3, 3, 3], strides=[2, 2]) == (112, 115, 112)
        assert path((1, 512, 7, 7), (512, 512, 3, 3), pads=[1, 1, 1, 1]) == ("gather", True)
    else:
        assert grid((1, 4, 30, 70), (8, 4, 3, 3), pads=[1, 1, 1, 1]) is None
        assert path((1, 512, 7, 7), (512, 512, 3, 3), pads=[1, 1, 1, 1]) == ("gather", False)


@pytest.mark.parametrize("xs, m, pads", [
    ((1, 16, 16, 16), 16, (1, 1, 1, 1)),
    ((2, 20, 17, 22), 33, (1, 1, 1, 1)),
    ((1, 24, 19, 18), 17, (0, 2, 3, 1)),   # asymmetric pads, ragged last tiles
    ((1, 16, 18, 18), 24, (0, 0, 0, 0)),
    ((1, 32, 13, 30), 40, (4, 3, 2, 5)),   # pads larger than the kernel
])
def test_conv_winograd(xs, m, pads):
    """3x3 stride-1 convolutions large enough for Winograd F(4x4, 3x3) stay accurate."""
    rng = np.random.default_rng(15)
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal((m, xs[1], 3, 3), dtype=np.float32)
    b = rng.standard_normal(m, dtype=np.float32)
    attrs = {"pads": list(pads)}
    prepared = KERNELS["Conv"].prepare(dict(attrs, _opset=17), [None, w, b])
    g = conv_mod._geometry(prepared["_conv"], x.shape, w.shape)
    if conv_mod._ISA:
        assert g.path == "winograd"
    (y,) = KERNELS["Conv"].fn([x, w, b], prepared)
    ref = _ref_conv(x, w, b, (1, 1), (1, 1), pads[:2], pads[2:], 1)
    _close(y, ref, rtol=1e-5)
    (y2,) = _run("Conv", [x, w, b], attrs)  # runtime weights: transformed per call
    np.testing.assert_allclose(y2, y, rtol=1e-6, atol=1e-5)
    # opting out gives the direct path
    direct = KERNELS["Conv"].prepare(dict(attrs, _opset=17, _winograd=False), [None, w, b])
    assert conv_mod._geometry(direct["_conv"], x.shape, w.shape).path != "winograd"
    (y3,) = KERNELS["Conv"].fn([x, w, b], direct)
    _close(y3, ref, rtol=1e-5)


def test_conv_out_param(conv_path):
    rng = np.random.default_rng(5)
    for xs, ws, group in [((2, 8, 12, 12), (16, 8, 3, 3), 1), ((1, 8, 9, 9), (8, 1, 3, 3), 8),
                          ((1, 32, 7, 7), (64, 32, 3, 3), 1), ((1, 5, 6, 6), (7, 5, 1, 1), 1)]:
        x = rng.standard_normal(xs, dtype=np.float32)
        w = rng.standard_normal(ws, dtype=np.float32)
        b = rng.standard_normal(ws[0], dtype=np.float32)
        attrs = {"pads": [1, 1, 1, 1] if ws[2] == 3 else [0, 0, 0, 0], "group": group}
        (expected,) = _run("Conv", [x, w, b], attrs, [None, w, b])
        buf = np.full(expected.shape, np.nan, np.float32)
        res = _run("Conv", [x, w, b], attrs, [None, w, b], out=[buf])
        assert res[0] is buf
        np.testing.assert_array_equal(buf, expected)


def test_conv_out_non_contiguous():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 3, 8, 8), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    (expected,) = _run("Conv", [x, w], {})
    big = np.zeros((1, 4, 6, 12), np.float32)
    view = big[:, :, :, ::2]
    res = _run("Conv", [x, w], {}, out=[view])
    assert res[0] is view
    np.testing.assert_array_equal(view, expected)


def test_conv_does_not_modify_inputs():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 4, 9, 9), dtype=np.float32)
    w = rng.standard_normal((6, 4, 3, 3), dtype=np.float32)
    b = rng.standard_normal(6, dtype=np.float32)
    for a in (x, w, b):
        a.flags.writeable = False
    _run("Conv", [x, w, b], {"pads": [1, 1, 1, 1], "strides": [2, 2]}, [None, w, b])
    _run("Conv", [x[:, :2].copy(), w[:2, :1].copy()], {"group": 2})


def test_conv_non_contiguous_input():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 4, 10, 20), dtype=np.float32)[:, :, :, ::2]
    w = rng.standard_normal((3, 4, 3, 3), dtype=np.float32)
    (y,) = _run("Conv", [x, w], {"pads": [1, 1, 1, 1]})
    _close(y, _ref_conv(x, w, None, (1, 1), (1, 1), (1, 1), (1, 1), 1))


def test_conv_weights_change_between_calls():
    """Non-constant weights are re-read every call (no stale packed copy)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 8, 10, 10), dtype=np.float32)
    attrs = KERNELS["Conv"].prepare({"pads": [1, 1, 1, 1], "_opset": 17}, [None, None])
    for _ in range(2):
        w = rng.standard_normal((16, 8, 3, 3), dtype=np.float32)
        (y,) = KERNELS["Conv"].fn([x, w], attrs)
        _close(y, _ref_conv(x, w, None, (1, 1), (1, 1), (1, 1), (1, 1), 1))


def test_conv_batch_and_empty():
    rng = np.random.default_rng(10)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    b = rng.standard_normal(4, dtype=np.float32)
    x = rng.standard_normal((3, 3, 6, 6), dtype=np.float32)
    (y,) = _run("Conv", [x, w, b], {"pads": [1, 1, 1, 1]}, [None, w, b])
    for i in range(3):
        (yi,) = _run("Conv", [x[i:i + 1], w, b], {"pads": [1, 1, 1, 1]}, [None, w, b])
        np.testing.assert_allclose(y[i:i + 1], yi, rtol=1e-6, atol=1e-6)
    (e,) = _run("Conv", [np.zeros((0, 3, 6, 6), np.float32), w, b], {})
    assert e.shape == (0, 4, 4, 4)


@pytest.mark.parametrize("attrs, consts_w, match", [
    ({"group": 3}, (4, 1, 3, 3), "divisible"),
    ({"kernel_shape": [3, 2]}, (4, 3, 3, 3), "kernel_shape"),
    ({"auto_pad": "SAME"}, (4, 3, 3, 3), "auto_pad"),
    ({"pads": [1, 1, -1, 1]}, (4, 3, 3, 3), "pads"),
    ({"pads": [1, 1]}, (4, 3, 3, 3), "pads"),
    ({"strides": [0, 1]}, (4, 3, 3, 3), "strides"),
    ({"dilations": [1, 0]}, (4, 3, 3, 3), "dilations"),
    ({"group": 0}, (4, 3, 3, 3), "group"),
    ({"kernel_shape": [1, 1, 1, 1]}, None, "spatial axes"),
])
def test_conv_bad_attributes(attrs, consts_w, match):
    w = None if consts_w is None else np.zeros(consts_w, np.float32)
    with pytest.raises(ModelInvalidError, match=match) as info:
        KERNELS["Conv"].prepare(dict(attrs, _opset=17), [None, w])
    assert info.value.op == "Conv"


def test_conv_bad_bias():
    w = np.zeros((4, 3, 3, 3), np.float32)
    with pytest.raises(ModelInvalidError, match="bias"):
        KERNELS["Conv"].prepare({"_opset": 17}, [None, w, np.zeros(5, np.float32)])


# ---------------------------------------------------------------------------- ConvTranspose

CONVT_CASES = [
    # (x shape, w shape, attrs)
    ((1, 3, 5, 4), (3, 2, 3, 3), {"strides": [2, 2]}),
    ((2, 4, 3, 5), (4, 3, 2, 3), {"strides": [3, 2], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    ((1, 4, 4, 4), (4, 2, 3, 3), {"strides": [2, 2], "group": 2, "output_padding": [1, 0]}),
    ((1, 2, 3, 3), (2, 1, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ((1, 2, 3, 3), (2, 1, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3), (2, 1, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 4, 3), (2, 3, 2, 2), {"strides": [2, 2], "auto_pad": "VALID"}),
    ((1, 6, 4, 4), (6, 1, 3, 3), {"strides": [2, 2], "group": 6, "pads": [1, 1, 1, 1]}),
]


def _convt_expect(x, w, b, attrs):
    nd = x.ndim - 2
    ca = conv_mod._ConvAttrs(dict(attrs), "ConvTranspose", nd)
    pb, out_sp = conv_mod._convtranspose_geometry(ca, list(x.shape[2:]), list(w.shape[2:]))
    return _ref_conv_transpose(x, w, b, ca.strides, ca.dilations, pb, out_sp, ca.group)


@pytest.mark.parametrize("xs, ws, attrs", CONVT_CASES)
def test_conv_transpose(xs, ws, attrs):
    rng = np.random.default_rng(11)
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal(ws, dtype=np.float32)
    b = rng.standard_normal(ws[1] * attrs.get("group", 1), dtype=np.float32)
    (y,) = _run("ConvTranspose", [x, w, b], attrs, [None, w, b])
    _close(y, _convt_expect(x, w, b, attrs))
    buf = np.full(y.shape, np.nan, np.float32)
    res = _run("ConvTranspose", [x, w, b], attrs, [None, w, b], out=[buf])
    assert res[0] is buf
    np.testing.assert_array_equal(buf, y)


def test_conv_transpose_geometry():
    ca = conv_mod._ConvAttrs({"strides": [2, 2], "auto_pad": "SAME_UPPER"}, "ConvTranspose", 2)
    assert conv_mod._convtranspose_geometry(ca, [3, 3], [3, 3]) == ([0, 0], [6, 6])
    ca = conv_mod._ConvAttrs({"strides": [2, 2], "auto_pad": "SAME_LOWER"}, "ConvTranspose", 2)
    assert conv_mod._convtranspose_geometry(ca, [3, 3], [3, 3]) == ([1, 1], [6, 6])
    ca = conv_mod._ConvAttrs({"strides": [3, 2], "output_shape": [1, 1, 10, 8]}, "ConvTranspose", 2)
    assert conv_mod._convtranspose_geometry(ca, [3, 3], [3, 3])[1] == [10, 8]


def test_conv_transpose_1d_3d():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((1, 2, 5), dtype=np.float32)
    w = rng.standard_normal((2, 3, 3), dtype=np.float32)
    (y,) = _run("ConvTranspose", [x, w], {"strides": [2], "pads": [1, 0]})
    _close(y, _convt_expect(x, w, None, {"strides": [2], "pads": [1, 0]}))
    x = rng.standard_normal((1, 2, 3, 4, 2), dtype=np.float32)
    w = rng.standard_normal((2, 2, 2, 3, 2), dtype=np.float32)
    attrs = {"strides": [2, 1, 2], "dilations": [1, 2, 1]}
    (y,) = _run("ConvTranspose", [x, w], attrs)
    _close(y, _convt_expect(x, w, None, attrs))


@pytest.mark.parametrize("attrs, match", [
    ({"strides": [2, 2], "output_padding": [2, 0]}, "output_padding"),
    ({"group": 3}, "divisible"),
    ({"auto_pad": "FOO"}, "auto_pad"),
    ({"output_shape": [4]}, "output_shape"),
])
def test_conv_transpose_bad_attributes(attrs, match):
    w = np.zeros((4, 2, 3, 3), np.float32)
    with pytest.raises(ModelInvalidError, match=match) as info:
        KERNELS["ConvTranspose"].prepare(dict(attrs, _opset=17), [None, w])
    assert info.value.op == "ConvTranspose"


# ---------------------------------------------------------------------------- Gemm / MatMul


@pytest.mark.parametrize("c_shape", [None, (), (1,), (5,), (3, 1), (1, 5), (3, 5)])
@pytest.mark.parametrize("alpha, beta", [(1.0, 1.0), (0.5, 2.0), (2.0, 0.0)])
@pytest.mark.parametrize("ta, tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm(c_shape, alpha, beta, ta, tb):
    rng = np.random.default_rng(13)
    a = rng.standard_normal((4, 3) if ta else (3, 4), dtype=np.float32)
    b = rng.standard_normal((5, 4) if tb else (4, 5), dtype=np.float32)
    c = None if c_shape is None else rng.standard_normal(c_shape).astype(np.float32)
    attrs = {"alpha": alpha, "beta": beta, "transA": ta, "transB": tb}
    inputs = [a, b] + ([] if c is None else [c])
    (y,) = _run("Gemm", inputs, attrs)
    ref = alpha * ((a.T if ta else a).astype(np.float64) @ (b.T if tb else b))
    if c is not None:
        ref = ref + beta * c
    assert y.dtype == np.float32 and y.shape == (3, 5)
    _close(y, ref)
    buf = np.full((3, 5), np.nan, np.float32)
    res = _run("Gemm", inputs, attrs, out=[buf])
    assert res[0] is buf
    np.testing.assert_array_equal(buf, y)


def test_gemm_bad_attributes():
    with pytest.raises(ModelInvalidError, match="transA") as info:
        KERNELS["Gemm"].prepare({"transA": 2, "_opset": 13}, [None, None])
    assert info.value.op == "Gemm"
    with pytest.raises(ModelInvalidError, match="2-D"):
        KERNELS["Gemm"].prepare({"_opset": 13}, [None, np.zeros((2, 2, 2), np.float32)])


@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("MatMul", [(1, 768), (512, 10)], {},
     "MatMul: A of shape [1, 768] has 768 columns and B of shape [512, 10] 512 rows; they must be equal"),
    ("MatMul", [(1, 8, 16, 16), (8, 8, 1, 1)], {}, "A of shape [1, 8, 16, 16] has 16 columns and B of shape"),
    ("MatMul", [(1, 4), (3,)], {}, "B of shape [3] 3 rows"),
    ("MatMul", [(2, 3, 4), (3, 4, 5)], {}, "MatMul: the batch axes [2] of A and [3] of B do not broadcast"),
    ("Gemm", [(1, 4), (5, 3)], {"transB": 1},
     "Gemm: A' of shape [1, 4] has 4 columns and B' of shape [3, 5] 3 rows (after transA=0, transB=1)"),
    ("Gemm", [(1, 3), (5, 3), (4,)], {"transB": 1}, "Gemm: C of shape [4] does not broadcast to the product's [1, 5]"),
    ("Gemm", [(1, 3), (3, 5), (5, 1)], {}, "C of shape [5, 1] does not broadcast"),
])
def test_products_of_mismatched_shapes_say_which_axes_differ(op, inputs, attrs, message):
    """numpy's words were "matmul: Input operand 1 has a mismatch in its core dimension 0, with
    gufunc signature (n?,k),(k,m?)->(n?,m?)" and "operands could not be broadcast together"."""
    arrays = [np.ones(shape, np.float32) for shape in inputs]
    with pytest.raises(ValueError) as e:
        _run(op, arrays, attrs)
    assert message in str(e.value)


def test_gemm_int():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.arange(12, dtype=np.int32).reshape(3, 4)
    c = np.ones(4, np.int32)
    (y,) = _run("Gemm", [a, b, c], {})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, a @ b + 1)


@pytest.mark.parametrize("sa, sb", [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((1, 3, 4), (6, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4, 5)), ((2, 3, 4), (4,)), ((4,), (4,)), ((4,), (2, 4, 3)),
])
def test_matmul(sa, sb):
    rng = np.random.default_rng(14)
    a = rng.standard_normal(sa, dtype=np.float32)
    b = rng.standard_normal(sb, dtype=np.float32)
    (y,) = _run("MatMul", [a, b], {})
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert y.shape == ref.shape and y.dtype == np.float32
    _close(np.asarray(y), ref)
    buf = np.full(ref.shape, np.nan, np.float32)
    res = _run("MatMul", [a, b], {}, out=[buf])
    assert res[0] is buf
    np.testing.assert_array_equal(buf, y)


def test_matmul_int_and_views():
    a = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    b = np.arange(8, dtype=np.int64).reshape(4, 2)
    (y,) = _run("MatMul", [a, b], {})
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, a @ b)
    at = np.ascontiguousarray(np.arange(24, dtype=np.float32).reshape(2, 4, 3)).transpose(0, 2, 1)
    (y,) = _run("MatMul", [at, b.astype(np.float32)], {})
    np.testing.assert_allclose(y, at @ b.astype(np.float32))


def test_conv_blas_row_bands(monkeypatch):
    """The BLAS fallback unfolds big outputs in bands of rows; results do not change."""
    monkeypatch.setattr(conv_mod, "_ISA", 0)
    rng = np.random.default_rng(16)
    x = rng.standard_normal((2, 3, 23, 19), dtype=np.float32)
    w = rng.standard_normal((5, 3, 3, 4), dtype=np.float32)
    b = rng.standard_normal(5, dtype=np.float32)
    for strides, pads in [((1, 1), (1, 2, 1, 1)), ((2, 3), (3, 0, 2, 1))]:
        attrs = {"strides": list(strides), "pads": list(pads)}
        ref = _ref_conv(x, w, b, strides, (1, 1), pads[:2], pads[2:], 1)
        for cap in (10 ** 9, 200, 1):
            monkeypatch.setattr(conv_mod, "_MAX_COLS_FLOATS", cap)
            (y,) = _run("Conv", [x, w, b], attrs)
            _close(y, ref)


@pytest.mark.parametrize("rows, cols", [(1, 1), (8, 8), (49, 2048), (13, 37), (64, 7), (7, 64)])
def test_transpose_into(rows, cols):
    from rknnlite._native import conv_kernels as ck

    src = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    big = np.full((cols, rows + 5), -1.0, np.float32)
    ck.transpose_into(src, big[:, 2:2 + rows])
    np.testing.assert_array_equal(big[:, 2:2 + rows], src.T)
    assert (big[:, :2] == -1).all() and (big[:, 2 + rows:] == -1).all()


# ---------------------------------------------------------------------------- fused activations

#: (name, attrs of the Conv node, reference: the activation kernel's op and its extra inputs/attrs)
FUSED = [
    ("relu", {"_activation": "Relu"}, "Relu", [], {}),
    ("relu6", {"_activation": "Clip", "_activation_min": 0.0, "_activation_max": 6.0}, "Clip", [0.0, 6.0], {}),
    ("clip-min", {"_activation": "Clip", "_activation_min": -0.75}, "Clip", [-0.75, None], {}),
    ("clip-max", {"_activation": "Clip", "_activation_max": 0.3}, "Clip", [None, 0.3], {}),
    ("clip-crossed", {"_activation": "Clip", "_activation_min": 1.0, "_activation_max": -1.0}, "Clip",
     [1.0, -1.0], {}),
    ("leaky", {"_activation": "LeakyRelu", "_activation_alpha": 0.1}, "LeakyRelu", [], {"alpha": 0.1}),
    ("leaky-default", {"_activation": "LeakyRelu"}, "LeakyRelu", [], {}),
    ("leaky-steep", {"_activation": "LeakyRelu", "_activation_alpha": 1.7}, "LeakyRelu", [], {"alpha": 1.7}),
]

#: one shape per Conv execution path: (x shape, w shape, Conv attrs, native path, transposed)
FUSED_PATHS = [
    ("gather", (1, 8, 20, 21), (24, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [1, 2]}, "gather", False),
    ("gather-1x1", (2, 24, 14, 14), (33, 24, 1, 1), {}, "gather", False),
    ("pointwise-wide", (2, 24, 24, 30), (40, 24, 1, 1), {}, "gather", False),  # BLAS path: 2 column bands
    ("gather-kblocks", (1, 600, 16, 16), (9, 600, 1, 1), {}, "gather", False),  # K = 600: 2 K blocks
    ("gather-grid", (1, 4, 30, 70), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}, "gather", False),
    ("gather-grouped", (1, 16, 12, 14), (32, 4, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2], "group": 4},
     "gather", False),
    ("blas-grouped", (1, 20, 9, 9), (12, 5, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2], "group": 4},
     "blas", False),
    ("transposed", (1, 64, 7, 7), (96, 64, 1, 1), {}, "gather", True),
    ("winograd", (2, 20, 17, 22), (33, 20, 3, 3), {"pads": [1, 1, 1, 1]}, "winograd", False),
    ("winograd-2x2", (1, 32, 7, 9), (24, 32, 3, 3), {"pads": [1, 1, 1, 1]}, "winograd", False),
    ("depthwise-3x3", (1, 8, 10, 37), (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 8}, "depthwise", False),
    ("depthwise-3x3-s2", (1, 4, 11, 9), (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 4},
     "depthwise", False),
    ("depthwise-generic", (1, 5, 13, 12), (5, 1, 5, 3), {"pads": [2, 1, 0, 2], "strides": [2, 3], "group": 5},
     "depthwise", False),
    ("blas-tiny", (1, 2, 1, 1), (3, 2, 1, 1), {}, "blas", False),
    ("conv-1d", (2, 6, 19), (7, 6, 4), {"pads": [1, 2]}, None, False),
    ("conv-3d", (1, 4, 5, 6, 7), (6, 2, 2, 3, 2), {"group": 2}, None, False),
]


def _activation_ref(op, extra, attrs, y):
    if op == "Clip":
        bounds = [None if v is None else np.array(v, np.float32) for v in extra]
        return _run(op, [y] + bounds, attrs)[0]
    return _run(op, [y], attrs)[0]


@pytest.mark.parametrize("act, act_attrs, ref_op, ref_extra, ref_attrs", FUSED, ids=[f[0] for f in FUSED])
@pytest.mark.parametrize("name, xs, ws, attrs, want_path, want_t", FUSED_PATHS, ids=[p[0] for p in FUSED_PATHS])
def test_conv_fused_activation(conv_path, act, act_attrs, ref_op, ref_extra, ref_attrs, name, xs, ws, attrs,
                               want_path, want_t):
    """Conv with a fused activation equals Conv then the activation kernel, bit for bit, on
    every execution path (with constant and with runtime weights, into ``out`` too)."""
    rng = np.random.default_rng(abs(hash((xs, ws, act))) % 2 ** 32)
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal(ws, dtype=np.float32)
    b = rng.standard_normal(ws[0], dtype=np.float32)
    (plain,) = _run("Conv", [x, w, b], attrs, [None, w, b])
    expected = _activation_ref(ref_op, ref_extra, ref_attrs, plain)
    fused_attrs = dict(attrs, **act_attrs)
    prepared = KERNELS["Conv"].prepare(dict(fused_attrs, _opset=17), [None, w, b])
    (y,) = KERNELS["Conv"].fn([x, w, b], prepared)
    np.testing.assert_array_equal(y, expected)
    g = next(iter(prepared["_conv"].geoms.values()))
    if conv_path == "native" and want_path is not None:
        assert (g.path, g.transposed) == (want_path, want_t and conv_mod._ISA >= 2)  # transposed tiles: AVX-512
    elif conv_path == "blas":
        assert g.path in ("blas", "depthwise")
    out = [np.full(expected.shape, np.nan, np.float32)]
    assert KERNELS["Conv"].fn([x, w, b], prepared, out=out) is out
    np.testing.assert_array_equal(out[0], expected)
    (y2,) = _run("Conv", [x, w], fused_attrs)  # runtime weights, no bias
    (plain2,) = _run("Conv", [x, w], attrs)
    np.testing.assert_array_equal(y2, _activation_ref(ref_op, ref_extra, ref_attrs, plain2))


@pytest.mark.parametrize("name, xs, ws, attrs, want_path, want_t",
                         [p for p in FUSED_PATHS if p[0] in ("gather", "transposed", "winograd", "depthwise-3x3",
                                                             "blas-tiny", "pointwise-wide")])
def test_conv_fused_activation_keeps_nan(conv_path, name, xs, ws, attrs, want_path, want_t):
    """nan and inf in the input reach the fused output as with the separate kernels."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs, dtype=np.float32)
    x.reshape(-1)[:: max(1, x.size // 3)] = np.nan
    x.reshape(-1)[1] = np.inf
    w = rng.standard_normal(ws, dtype=np.float32)
    for act_name, act_attrs, ref_op, ref_extra, ref_attrs in FUSED:
        with np.errstate(invalid="ignore"):  # inf * 0 in the BLAS path
            (plain,) = _run("Conv", [x, w], attrs, [None, w])
            (y,) = _run("Conv", [x, w], dict(attrs, **act_attrs), [None, w])
        np.testing.assert_array_equal(y, _activation_ref(ref_op, ref_extra, ref_attrs, plain), err_msg=act_name)


def test_conv_fused_activation_empty_output():
    x = np.zeros((1, 3, 0, 4), np.float32)
    w = np.ones((2, 3, 1, 1), np.float32)
    b = np.float32([-1.0, 2.0])
    (y,) = _run("Conv", [x, w, b], {"_activation": "Relu"})
    assert y.shape == (1, 2, 0, 4)
    x = np.zeros((1, 0, 3, 3), np.float32)  # no input channels: the output is the bias
    w = np.ones((2, 0, 1, 1), np.float32)
    (y,) = _run("Conv", [x, w, b], {"_activation": "Clip", "_activation_min": 0.0, "_activation_max": 1.5})
    np.testing.assert_array_equal(y[0, :, 0, 0], [0.0, 1.5])


def test_conv_fused_activations_declared():
    assert set(conv_mod.FUSED_ACTIVATIONS) == {"Relu", "Clip", "LeakyRelu"}
    from rknnlite.toolkit.optimize import conv_fusable_activations

    assert set(conv_fusable_activations()) == set(conv_mod.FUSED_ACTIVATIONS)


@pytest.mark.parametrize("attrs, match", [
    ({"_activation": "Sigmoid"}, "_activation"),
    ({"_activation": "Clip", "_activation_min": "zero"}, "_activation_min"),
    ({"_activation": "Clip", "_activation_max": float("nan")}, "_activation_max"),
    ({"_activation": "LeakyRelu", "_activation_alpha": [0.1]}, "_activation_alpha"),
])
def test_conv_fused_activation_bad_attributes(attrs, match):
    w = np.ones((2, 3, 1, 1), np.float32)
    with pytest.raises(ModelInvalidError, match=match):
        KERNELS["Conv"].prepare(dict(attrs, _opset=17), [None, w])


@pytest.mark.parametrize("hw, strides, pads, mult", [
    ((14, 14), (1, 1), (1, 1, 1, 1), 1),
    ((7, 7), (1, 1), (1, 1, 1, 1), 2),
    ((9, 37), (1, 2), (2, 0, 1, 2), 1),    # sw 2 only, wide rows: several 16-lane blocks
    ((40, 19), (2, 1), (0, 2, 2, 0), 1),   # sh 2 only
    ((56, 56), (2, 2), (1, 1, 1, 1), 1),
    ((5, 33), (2, 2), (0, 0, 0, 0), 3),    # no padding, multiplier 3
    ((3, 3), (1, 1), (2, 2, 2, 2), 1),     # padding wider than the image
    ((11, 12), (3, 1), (1, 1, 1, 1), 1),   # sh 3: the generic loop
])
def test_conv_depthwise_3x3(conv_path, hw, strides, pads, mult):
    """The direct 3x3 depthwise loops (padding rows and columns handled without a copy)."""
    rng = np.random.default_rng(hash((hw, strides, pads)) % 2 ** 32)
    C = 6
    x = rng.standard_normal((1, C) + hw, dtype=np.float32)
    w = rng.standard_normal((C * mult, 1, 3, 3), dtype=np.float32)
    b = rng.standard_normal(C * mult, dtype=np.float32)
    attrs = {"strides": list(strides), "pads": list(pads), "group": C}
    (y,) = _run("Conv", [x, w, b], attrs, [None, w, b])
    _close(y, _ref_conv(x, w, b, strides, (1, 1), pads[:2], pads[2:], C))


def _depthwise_in_tap_order(x, w, b, strides, pads):
    """A depthwise conv summed as the few-column kernel sums it: per output, the bias, then each
    tap's product added in row-major tap order, every step rounded to float32 (a product, then
    a sum); padding taps add ``w * 0``."""
    C, (kh, kw), (sh, sw) = x.shape[1], w.shape[2:], strides
    xp = np.pad(x[0], ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    acc = np.broadcast_to(b[:, None, None], (C, oh, ow)).astype(np.float32)
    for i in range(kh):
        for j in range(kw):
            taps = xp[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
            acc = acc + w[:, 0, i, j][:, None, None] * taps  # float32 throughout
    return acc[None]


@pytest.mark.parametrize("hw, kernel, strides, pads", [
    ((13, 13), (7, 7), (7, 7), (0, 0, 1, 1)),   # a split 13x13 pool's first stage
    ((2, 2), (2, 2), (1, 1), (0, 0, 0, 0)),     # ... and its second
    ((10, 10), (7, 7), (7, 7), (2, 2, 2, 2)),
    ((9, 5), (5, 3), (2, 1), (1, 0, 1, 2)),     # uneven taps, padding on every side
])
def test_conv_depthwise_of_few_columns_sums_in_tap_order(conv_path, hw, kernel, strides, pads):
    """Outputs narrower than 8 columns take 16 channels side by side (37 channels: two blocks and
    a part), each output summed in tap order without fused multiply-adds: the same bits on every
    kernel path; a fused Relu applies after."""
    rng = np.random.default_rng(23)
    C = 37
    x = rng.standard_normal((1, C) + hw, dtype=np.float32)
    w = rng.standard_normal((C, 1) + kernel, dtype=np.float32)
    b = rng.standard_normal(C, dtype=np.float32)
    attrs = {"strides": list(strides), "pads": list(pads), "group": C, "kernel_shape": list(kernel)}
    (y,) = _run("Conv", [x, w, b], attrs, [None, w, b])
    assert y.shape[-1] < 8
    want = _depthwise_in_tap_order(x, w, b, strides, pads)
    np.testing.assert_array_equal(y, want)
    (yr,) = _run("Conv", [x, w, b], dict(attrs, _activation="Relu"), [None, w, b])
    np.testing.assert_array_equal(yr, np.maximum(want, 0))
    _close(y, _ref_conv(x, w, b, strides, (1, 1), pads[:2], pads[2:], C))


@pytest.mark.parametrize("xs, m, pads", [
    ((1, 256, 14, 14), 256, (1, 1, 1, 1)),  # F(4x4) weights would pass the cap: F(2x2)
    ((2, 32, 7, 7), 40, (1, 1, 1, 1)),      # 7x7: too few 4x4 tiles
    ((1, 24, 9, 8), 17, (0, 2, 1, 1)),      # asymmetric pads, odd output width
    ((1, 16, 10, 11), 16, (0, 0, 0, 0)),
])
def test_conv_winograd_2x2(xs, m, pads):
    """Winograd F(2x2, 3x3) where F(4x4) does not fit or has too few tiles."""
    rng = np.random.default_rng(17)
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal((m, xs[1], 3, 3), dtype=np.float32)
    b = rng.standard_normal(m, dtype=np.float32)
    attrs = {"pads": list(pads)}
    prepared = KERNELS["Conv"].prepare(dict(attrs, _opset=17), [None, w, b])
    g = conv_mod._geometry(prepared["_conv"], x.shape, w.shape)
    if conv_mod._ISA:
        assert (g.path, g.wtile) == ("winograd", 2)
        assert 16 * m * xs[1] <= conv_mod._WINO_MAX_U_FLOATS
    (y,) = KERNELS["Conv"].fn([x, w, b], prepared)
    ref = _ref_conv(x, w, b, (1, 1), (1, 1), pads[:2], pads[2:], 1)
    _close(y, ref, rtol=5e-6)
    (y2,) = _run("Conv", [x, w, b], attrs)  # runtime weights: transformed per call
    np.testing.assert_allclose(y2, y, rtol=1e-6, atol=1e-5)
    for act in ("Relu", "LeakyRelu"):
        fused = KERNELS["Conv"].prepare(dict(attrs, _opset=17, _activation=act), [None, w, b])
        (yf,) = KERNELS["Conv"].fn([x, w, b], fused)
        np.testing.assert_array_equal(yf, np.maximum(y, 0) if act == "Relu" else np.maximum(y, y * np.float32(0.01)))


# ---------------------------------------------------------------------------- fused residual add


def _conv_residual(x, w, b, r, attrs, consts=None, out=None):
    """Conv with the fused residual ``r`` (attrs may add a fused activation)."""
    inputs = [x, w, b, r]
    prepared = KERNELS["Conv"].prepare(dict(attrs, _opset=17, _residual=True),
                                       consts if consts is not None else [None] * 4)
    return KERNELS["Conv"].fn(inputs, prepared, out=out), prepared


@pytest.mark.parametrize("act", [None, "relu", "relu6", "leaky"])
@pytest.mark.parametrize("name, xs, ws, attrs, want_path, want_t", FUSED_PATHS, ids=[p[0] for p in FUSED_PATHS])
def test_conv_fused_residual(conv_path, act, name, xs, ws, attrs, want_path, want_t):
    """Conv with a fused residual (and activation) equals Conv, then Add, then the
    activation kernel, bit for bit, on every execution path: constant and runtime
    weights, with and without bias, allocating and into ``out``."""
    act_row = None if act is None else next(f for f in FUSED if f[0] == act)
    rng = np.random.default_rng(abs(hash((xs, ws, act, "res"))) % 2 ** 32)
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal(ws, dtype=np.float32)
    b = rng.standard_normal(ws[0], dtype=np.float32)
    fused_attrs = dict(attrs, **({} if act_row is None else act_row[1]))
    for bias in (b, None):
        (plain,) = _run("Conv", [x, w, bias], attrs, [None, w, bias])
        r = rng.standard_normal(plain.shape, dtype=np.float32)
        (summed,) = _run("Add", [plain, r], {})
        expected = summed if act_row is None else _activation_ref(act_row[2], act_row[3], act_row[4], summed)
        (y,), prepared = _conv_residual(x, w, bias, r, fused_attrs, [None, w, bias, None])
        np.testing.assert_array_equal(y, expected)
        g = next(iter(prepared["_conv"].geoms.values()))
        if conv_path == "native" and want_path is not None:
            assert (g.path, g.transposed) == (want_path, want_t and conv_mod._ISA >= 2)
        out = [np.full(expected.shape, np.nan, np.float32)]
        res, _ = _conv_residual(x, w, bias, r, fused_attrs, [None, w, bias, None], out=out)
        assert res is out
        np.testing.assert_array_equal(out[0], expected)
        (y2,), _ = _conv_residual(x, w, bias, r, fused_attrs)  # runtime weights
        np.testing.assert_array_equal(y2, expected)
        # residual in the other operand order of the Add: same values
        (summed2,) = _run("Add", [r, plain], {})
        np.testing.assert_array_equal(summed2, summed)


def test_conv_fused_residual_threads(conv_path):
    """Several threads split the gather GEMM's columns; the residual follows its columns."""
    from rknnlite.backends.software.parallel import WorkerPool, using

    rng = np.random.default_rng(11)
    for xs, ws, attrs in [((1, 24, 30, 31), (40, 24, 1, 1), {}), ((1, 8, 20, 21), (24, 8, 3, 3), {"pads": [1] * 4}),
                          ((1, 64, 7, 7), (96, 64, 1, 1), {}), ((1, 32, 20, 20), (32, 32, 3, 3), {"pads": [1] * 4})]:
        x = rng.standard_normal(xs, dtype=np.float32)
        w = rng.standard_normal(ws, dtype=np.float32)
        (plain,) = _run("Conv", [x, w], attrs, [None, w])
        r = rng.standard_normal(plain.shape, dtype=np.float32)
        expected = np.maximum(plain + r, np.float32(0))
        pool = WorkerPool(3)
        try:
            with using(pool):
                (y,), _ = _conv_residual(x, w, None, r, dict(attrs, _activation="Relu"), [None, w, None, None])
        finally:
            pool.close()
        np.testing.assert_array_equal(y, expected)


def test_conv_fused_residual_read_only_and_views():
    """A read-only or non-contiguous residual works and is never modified."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 8, 12, 12), dtype=np.float32)
    w = rng.standard_normal((16, 8, 3, 3), dtype=np.float32)
    (plain,) = _run("Conv", [x, w], {"pads": [1, 1, 1, 1]})
    big = rng.standard_normal((1, 16, 12, 24), dtype=np.float32)
    r = big[:, :, :, ::2]  # a strided view
    r_copy = r.copy()
    big.flags.writeable = False
    (y,), _ = _conv_residual(x, w, None, r, {"pads": [1, 1, 1, 1]})
    np.testing.assert_array_equal(y, plain + r_copy)
    np.testing.assert_array_equal(r, r_copy)


def test_conv_fused_residual_out_aliases_residual(conv_path):
    """``out`` sharing memory with the residual (never planned by the executor) still
    gives the right result: computed into a temporary, then copied."""
    rng = np.random.default_rng(9)
    for xs, ws, attrs in [((1, 16, 14, 14), (16, 16, 1, 1), {}), ((1, 16, 20, 20), (16, 16, 3, 3), {"pads": [1] * 4}),
                          ((1, 600, 8, 8), (8, 600, 1, 1), {})]:
        x = rng.standard_normal(xs, dtype=np.float32)
        w = rng.standard_normal(ws, dtype=np.float32)
        (plain,) = _run("Conv", [x, w], attrs)
        r = rng.standard_normal(plain.shape, dtype=np.float32)
        expected = plain + r
        out = [r]
        res, _ = _conv_residual(x, w, None, r, attrs, out=out)
        assert res is out
        np.testing.assert_array_equal(out[0], expected)


def test_conv_fused_residual_batch_and_empty():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 9, 9), dtype=np.float32)
    w = rng.standard_normal((6, 4, 3, 3), dtype=np.float32)
    b = rng.standard_normal(6, dtype=np.float32)
    (plain,) = _run("Conv", [x, w, b], {})
    r = rng.standard_normal(plain.shape, dtype=np.float32)
    (y,), _ = _conv_residual(x, w, b, r, {"_activation": "Relu"})
    np.testing.assert_array_equal(y, np.maximum(plain + r, 0))
    # no input channels: bias + residual, then the activation
    x = np.zeros((1, 0, 3, 3), np.float32)
    w = np.ones((2, 0, 1, 1), np.float32)
    b = np.float32([-1.0, 2.0])
    r = rng.standard_normal((1, 2, 3, 3), dtype=np.float32)
    (y,), _ = _conv_residual(x, w, b, r, {"_activation": "Relu"})
    np.testing.assert_array_equal(y, np.maximum(b[None, :, None, None] + r, 0))
    (y,), _ = _conv_residual(np.zeros((1, 3, 0, 4), np.float32), np.ones((2, 3, 1, 1), np.float32), None,
                             np.zeros((1, 2, 0, 4), np.float32), {})
    assert y.shape == (1, 2, 0, 4)


def test_conv_fused_residual_errors():
    x = np.ones((1, 2, 4, 4), np.float32)
    w = np.ones((3, 2, 1, 1), np.float32)
    with pytest.raises(ModelInvalidError, match="_residual"):  # a 4th input without the flag
        KERNELS["Conv"].prepare({"_opset": 17}, [None, w, None, None])
    with pytest.raises(ModelInvalidError, match="_residual"):
        KERNELS["Conv"].prepare({"_opset": 17, "_residual": "yes"}, [None, w, None, None])
    prepared = KERNELS["Conv"].prepare({"_opset": 17, "_residual": True}, [None, w, None, None])
    with pytest.raises(ModelInvalidError, match="residual"):
        KERNELS["Conv"].fn([x, w, None], prepared)
    with pytest.raises(ValueError, match="residual"):  # broadcasting is not the fused Add's job
        KERNELS["Conv"].fn([x, w, None, np.ones((1, 3, 1, 1), np.float32)], prepared)
    # a plain Conv ignores nothing and is unchanged: 3 inputs, no residual
    (y,) = _run("Conv", [x, w], {})
    np.testing.assert_array_equal(y, np.full((1, 3, 4, 4), 2, np.float32))


def test_conv_fused_residual_keeps_nan(conv_path):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 16, 9, 9), dtype=np.float32)
    w = rng.standard_normal((24, 16, 1, 1), dtype=np.float32)
    (plain,) = _run("Conv", [x, w], {})
    r = rng.standard_normal(plain.shape, dtype=np.float32)
    r.reshape(-1)[::7] = np.nan
    r.reshape(-1)[3] = np.inf
    (y,), _ = _conv_residual(x, w, None, r, {"_activation": "Relu"})
    np.testing.assert_array_equal(y, _run("Relu", [plain + r], {})[0])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("xs, ws", [((2, 24, 23, 29), (20, 24, 3, 3)), ((1, 16, 17, 9), (24, 16, 3, 3))])
def test_winograd_bands_equal_one_pass(monkeypatch, threads, xs, ws):
    """Banded Winograd (bands of tile rows, each transformed and multiplied on its own)
    gives exactly the one-pass result, with bias, residual and activation, per image of a
    batch, with the last band shorter and the output not a multiple of the tile."""
    if conv_mod._ISA == 0:
        pytest.skip("no micro-kernel")
    from rknnlite.backends.software.parallel import WorkerPool, using

    rng = np.random.default_rng(7)
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal(ws, dtype=np.float32)
    b = rng.standard_normal(ws[0], dtype=np.float32)
    shape = (xs[0], ws[0]) + xs[2:]
    r = rng.standard_normal(shape, dtype=np.float32)
    attrs = {"pads": [1, 1, 1, 1], "_activation": "Relu", "_residual": True, "_opset": 17}
    results = []
    pool = WorkerPool(threads)
    try:
        for banded in (False, True):
            monkeypatch.setattr(conv_mod, "_WINO_V_CACHE", 0 if banded else 1 << 40)
            monkeypatch.setattr(conv_mod, "_WINO_BAND_MIN_TILES", 1)
            monkeypatch.setattr(conv_mod, "_WINO_V_BAND", 1)
            monkeypatch.setattr(conv_mod, "_WINO_MT_BAND_MIN_TILES", 1 if banded else 1 << 30)
            prepared = KERNELS["Conv"].prepare(dict(attrs), [None, w, b, None])
            out = [np.full(shape, np.nan, np.float32)]
            with using(pool):
                KERNELS["Conv"].fn([x, w, b, r], prepared, out=out)
            g = next(iter(prepared["_conv"].geoms.values()))
            bands = g.wbands_mt if threads > 1 else g.wbands
            assert g.path == "winograd" and (bands is not None) == banded
            if banded:
                assert len(bands) == g.tiles[0] > 2
            results.append(out[0])
    finally:
        pool.close()
    np.testing.assert_array_equal(results[1], results[0])
    (plain,) = _run("Conv", [x, w, b], {"pads": [1, 1, 1, 1]}, [None, w, b])
    np.testing.assert_allclose(results[1], np.maximum(plain + r, 0), rtol=1e-4, atol=1e-4)


_WINO_BT = {
    4: np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                 [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
    2: np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
}


@pytest.mark.parametrize("isa", [None, 1, 0])
@pytest.mark.parametrize("tile, xs, pads, th, tw", [
    (4, (5, 14, 14), (1, 1), 4, 4),
    (4, (3, 9, 23), (0, 2), 3, 6),
    (2, (7, 7, 7), (1, 1), 4, 4),
    (2, (2, 5, 11), (2, 0), 3, 6),
])
def test_winograd_input_layout(isa, tile, xs, pads, th, tw):
    """winograd_input's V holds B^T d B of every tile's zero-padded patch, component
    ``xi`` ``v_stride`` floats apart and channel c at ``c * (TH+1) * (TW+1)`` (as
    winograd_scratch says), whole or by channel ranges, on every instruction set."""
    from rknnlite._native import conv_kernels as ck

    native = ck.gemm_isa()
    if isa is not None and isa >= native:
        pytest.skip("the native run covers this level")
    rng = np.random.default_rng(41)
    x = rng.standard_normal(xs, dtype=np.float32)
    C, H, W = xs
    pt, pl = pads
    a = tile + 2
    nv, vstride, nsplit, nbuf = ck.winograd_scratch(C, th, tw, tile)
    xp = np.zeros((C, tile * th + a, tile * tw + a), np.float64)
    xp[:, pt:pt + H, pl:pl + W] = x[:, :xp.shape[1] - pt, :xp.shape[2] - pl]
    bt = _WINO_BT[tile]
    plane = (th + 1) * (tw + 1)
    try:
        if isa is not None:
            ck.limit_isa(isa)
        for ranges in ([(0, C)], [(0, C // 2), (C // 2, C)]):
            v = np.full(nv, np.nan, np.float32)
            split = np.empty(nsplit, np.float32)
            for c0, c1 in ranges:
                ck.winograd_input(x, pt, pl, th, tw, v, split, np.empty(nbuf, np.float32), c0, c1, tile=tile)
            for c in range(C):
                for ty in range(th):
                    for tx in range(tw):
                        d = xp[c, tile * ty:tile * ty + a, tile * tx:tile * tx + a]
                        ref = (bt @ d @ bt.T).reshape(-1)
                        got = v[np.arange(a * a) * vstride + c * plane + ty * (tw + 1) + tx]
                        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
    finally:
        ck.limit_isa(native)


@pytest.mark.parametrize("tile", [4, 2])
def test_winograd_weights_round_as_one_multiply_and_two_fused_adds(tile):
    """winograd_weights: ``G k G^T`` in float64, every sum of three products as a multiply and
    two fused multiply-adds in index order (what numpy's einsum over OpenBLAS gave), then
    rounded to float32: checked against exact rational arithmetic, one rounding per step."""
    from fractions import Fraction

    from rknnlite._native import conv_kernels as ck

    def fma(a, b, c):
        return float(Fraction(a) * Fraction(b) + Fraction(c))

    g = {4: np.array([[1.0, 0.0, 0.0], [-2.0 / 3.0, -2.0 / 3.0, -2.0 / 3.0], [-2.0 / 3.0, 2.0 / 3.0, -2.0 / 3.0],
                      [1.0 / 6.0, 1.0 / 3.0, 2.0 / 3.0], [1.0 / 6.0, -1.0 / 3.0, 2.0 / 3.0], [0.0, 0.0, 4.0]]) / 4.0,
         2: np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])}[tile].tolist()
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((3, 2, 3, 3)) * 0.1).astype(np.float32)
    w[0, 0, 0, 0], w[2, 1, 1, 2] = np.inf, np.nan
    u = ck.winograd_weights(w, tile)
    a = tile + 2
    assert u.shape == (a * a, 3, 2) and u.dtype == np.float32
    for m in range(3):
        for c in range(2):
            k = w[m, c].astype(np.float64).tolist()
            if not np.isfinite(w[m, c]).all():
                assert not np.isfinite(u[:, m, c]).all()
                continue
            t = [[fma(k[2][j], g[r][2], fma(k[1][j], g[r][1], k[0][j] * g[r][0])) for j in range(3)] for r in range(a)]
            for r in range(a):
                for s in range(a):
                    want = np.float32(fma(t[r][2], g[s][2], fma(t[r][1], g[s][1], t[r][0] * g[s][0])))
                    assert u[r * a + s, m, c].tobytes() == want.tobytes(), (m, c, r, s)
