"""Pooling and normalisation kernels: official ONNX node cases, the ``out=`` path,
MaxPool/AveragePool against a direct loop reference (1-3 spatial axes, pads, auto_pad,
ceil_mode, dilations, Indices with both storage orders), the native loops' fast 2-D
paths against their generic form and a numpy reference (bit-exact; see the section's
comment for the one documented difference), splitting across threads, edge cases and
attribute validation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx_cases import assert_matches, kernel_params, run_with_kernels

from rknnlite.backends.software.isa import ISA_LEVELS
from rknnlite.backends.software.ops import KERNELS
from rknnlite.errors import ModelInvalidError

OPS = ["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpNormalization",
       "BatchNormalization", "LayerNormalization", "InstanceNormalization"]

# Official cases left out on purpose, with the reason.
EXCLUDED = {
    # Training-mode BatchNormalization (batch statistics, running-mean outputs) is out of
    # scope for an inference runtime: the kernel rejects it with ModelInvalidError
    # (checked by test_batchnorm_training_mode_is_rejected).
    "test_batchnorm_example_training_mode": "training_mode=1 is not supported (inference runtime)",
    "test_batchnorm_epsilon_training_mode": "training_mode=1 is not supported (inference runtime)",
}


def _params():
    out = []
    for p in kernel_params(OPS):
        case = p.values[0]
        if case.name in EXCLUDED:
            continue
        out.append(p)
    return out


@pytest.mark.parametrize("case, k", _params())
def test_node_case(case, k):
    inputs, expected = case.data_sets[k]
    assert_matches(case, run_with_kernels(case, inputs), expected)


def test_every_op_has_cases():
    ids = {p.values[0].model.graph.node[0].op_type for p in _params()}
    assert ids == set(OPS)


def test_excluded_cases_exist():
    names = {p.values[0].name for p in kernel_params(OPS)}
    assert set(EXCLUDED) <= names


@pytest.mark.parametrize("name", sorted(EXCLUDED))
def test_batchnorm_training_mode_is_rejected(name):
    case = next(p.values[0] for p in kernel_params(OPS) if p.values[0].name == name)
    inputs, _ = case.data_sets[0]
    with pytest.raises(ModelInvalidError, match="training_mode"):
        run_with_kernels(case, inputs)


# ---------------------------------------------------------------------------- helpers


def _run(op, inputs, attrs, consts=None, out=None, opset=19):
    spec = KERNELS[op]
    attrs = dict(attrs, _opset=opset)
    if spec.prepare is not None:
        attrs = spec.prepare(attrs, consts if consts is not None else [None] * len(inputs))
    return spec.fn(inputs, attrs, out=out)


def _geometry(in_sp, ks, strides, dilations, pads, auto_pad, ceil_mode):
    """Per axis (pad_begin, pad_end, n_out), straight from the ONNX operator text."""
    nd = len(in_sp)
    res = []
    for a in range(nd):
        size, k, s, d = in_sp[a], ks[a], strides[a], dilations[a]
        ext = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            n_out = int(np.ceil(size / s))
            total = max(0, (n_out - 1) * s + ext - size)
            lo, hi = total // 2, total - total // 2
            pb, pe = (lo, hi) if auto_pad == "SAME_UPPER" else (hi, lo)
        else:
            pb, pe = (pads[a], pads[nd + a]) if auto_pad == "NOTSET" else (0, 0)
            v = (size + pb + pe - ext) / s + 1
            n_out = int(np.ceil(v)) if ceil_mode else int(np.floor(v))
            if ceil_mode and (n_out - 1) * s >= size + pb:
                n_out -= 1
        res.append((pb, pe, n_out))
    return res


def _ref_pool(x, kind, kernel_shape, strides=None, dilations=None, pads=None, auto_pad="NOTSET", ceil_mode=0,
              count_include_pad=0, storage_order=0):
    """Direct loops over every window: (Y, Indices)."""
    ks = kernel_shape
    nd = len(ks)
    strides = strides or [1] * nd
    dilations = dilations or [1] * nd
    pads = pads or [0] * (2 * nd)
    in_sp = x.shape[2:]
    geo = _geometry(in_sp, ks, strides, dilations, pads, auto_pad, ceil_mode)
    out_sp = tuple(g[2] for g in geo)
    n, c = x.shape[:2]
    y = np.zeros((n, c) + out_sp, np.float64 if kind == "avg" else x.dtype)
    idx = np.zeros((n, c) + out_sp, np.int64)
    for b, ch in itertools.product(range(n), range(c)):
        for o in itertools.product(*[range(m) for m in out_sp]):
            vals, where, padded_taps = [], [], 0
            for t in itertools.product(*[range(k) for k in ks]):
                pos = [o[a] * strides[a] - geo[a][0] + t[a] * dilations[a] for a in range(nd)]
                if all(-geo[a][0] <= pos[a] < in_sp[a] + geo[a][1] for a in range(nd)):
                    padded_taps += 1
                if all(0 <= pos[a] < in_sp[a] for a in range(nd)):
                    vals.append(x[(b, ch) + tuple(pos)])
                    where.append(pos)
            if kind == "max":
                j = int(np.argmax(vals))
                y[(b, ch) + o] = vals[j]
                pos = where[j]
                if storage_order:
                    flat = sum(pos[a] * int(np.prod(in_sp[:a])) for a in range(nd))
                else:
                    flat = int(np.ravel_multi_index(pos, in_sp))
                idx[(b, ch) + o] = (b * c + ch) * int(np.prod(in_sp)) + flat
            else:
                y[(b, ch) + o] = np.sum(vals, dtype=np.float64) / (padded_taps if count_include_pad else len(vals))
    return y, idx


POOL_CONFIGS = [
    # (input shape, attrs)
    ((2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 2])),
    ((1, 2, 10), dict(kernel_shape=[2], dilations=[3], ceil_mode=1)),
    ((2, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 3, 8, 9), dict(kernel_shape=[2, 3], strides=[2, 1], ceil_mode=1)),
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[3, 3], pads=[1, 0, 2, 1], ceil_mode=1)),
    ((1, 2, 9, 8), dict(kernel_shape=[2, 2], dilations=[2, 3], strides=[1, 2], pads=[2, 1, 0, 3])),
    ((1, 2, 6, 7), dict(kernel_shape=[3, 2], strides=[2, 3], auto_pad="SAME_UPPER")),
    ((1, 2, 6, 7), dict(kernel_shape=[4, 3], strides=[1, 2], auto_pad="SAME_LOWER")),
    ((1, 2, 6, 7), dict(kernel_shape=[2, 3], strides=[2, 2], auto_pad="VALID", ceil_mode=1)),
    ((1, 1, 5, 5), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2])),
    ((1, 1, 4, 4), dict(kernel_shape=[1, 1], strides=[3, 3], ceil_mode=1)),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1])),
    ((1, 1, 7, 6, 5), dict(kernel_shape=[2, 2, 2], dilations=[2, 1, 2], strides=[2, 2, 1], ceil_mode=1)),
]


def _config_id(cfg):
    shape, attrs = cfg
    return "x".join(map(str, shape)) + "-" + "-".join(f"{k}{v}" for k, v in sorted(attrs.items()))


@pytest.mark.parametrize("cfg", POOL_CONFIGS, ids=_config_id)
@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_matches_loops(cfg, storage_order):
    shape, attrs = cfg
    rng = np.random.default_rng(len(shape) * 7 + storage_order)
    x = rng.permutation(np.prod(shape)).reshape(shape).astype(np.float32)  # distinct: argmax is unique
    y, idx = _run("MaxPool", [x], dict(attrs, storage_order=storage_order))
    ry, ridx = _ref_pool(x, "max", storage_order=storage_order, **attrs)
    np.testing.assert_array_equal(y, ry)
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(idx, ridx)


@pytest.mark.parametrize("cfg", POOL_CONFIGS, ids=_config_id)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool_matches_loops(cfg, count_include_pad):
    shape, attrs = cfg
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    (y,) = _run("AveragePool", [x], dict(attrs, count_include_pad=count_include_pad))
    ry, _ = _ref_pool(x, "avg", count_include_pad=count_include_pad, **attrs)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cfg", POOL_CONFIGS, ids=_config_id)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_an_integer_output_averagepool_sums_in_row_major_order(cfg, count_include_pad):
    """An AveragePool whose output the executor keeps on an integer grid (``_int_output``)
    adds each window's float32 taps one by one in row-major order and divides by the count
    in float32, as RKNN-Toolkit2's simulator does (tests/test_qdq_import.py pins that
    against the vendor): bit-exact against a direct loop doing that."""
    shape, attrs = cfg
    rng = np.random.default_rng(len(shape) + 11)
    x = (rng.integers(-60, 60, shape) * np.float32(0.0388743)).astype(np.float32)
    (y,) = _run("AveragePool", [x], dict(attrs, count_include_pad=count_include_pad, _int_output=True))
    ks = attrs["kernel_shape"]
    nd = len(ks)
    strides, dilations = attrs.get("strides", [1] * nd), attrs.get("dilations", [1] * nd)
    geo = _geometry(x.shape[2:], ks, strides, dilations, attrs.get("pads", [0] * 2 * nd),
                    attrs.get("auto_pad", "NOTSET"), attrs.get("ceil_mode", 0))
    want = np.zeros(x.shape[:2] + tuple(g[2] for g in geo), np.float32)
    for b, ch in itertools.product(*map(range, x.shape[:2])):
        for o in itertools.product(*[range(g[2]) for g in geo]):
            acc, count = None, 0
            for t in itertools.product(*map(range, ks)):
                pos = [o[a] * strides[a] - geo[a][0] + t[a] * dilations[a] for a in range(nd)]
                real = all(0 <= pos[a] < x.shape[2 + a] for a in range(nd))
                count += real or (count_include_pad and all(-geo[a][0] <= pos[a] < x.shape[2 + a] + geo[a][1]
                                                            for a in range(nd)))
                if real:
                    v = x[(b, ch) + tuple(pos)]
                    acc = v if acc is None else np.float32(acc + v)
            want[(b, ch) + o] = np.float32(acc) / np.float32(count) if count and acc is not None else 0
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.int64, np.float64])
def test_maxpool_keeps_dtype(dtype):
    x = np.random.default_rng(0).integers(-100 if dtype != np.uint8 else 0, 100, (1, 2, 6, 6)).astype(dtype)
    y, idx = _run("MaxPool", [x], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]))
    ry, _ = _ref_pool(x, "max", [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, ry)


def test_maxpool_non_contiguous_input():
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 10)).astype(np.float32)
    view = x[:, ::-1, :, ::2]
    y, _ = _run("MaxPool", [view], dict(kernel_shape=[2, 2], strides=[2, 2]))
    ry, _ = _ref_pool(np.ascontiguousarray(view), "max", [2, 2], strides=[2, 2])
    np.testing.assert_array_equal(y, ry)


def test_maxpool_window_entirely_in_padding():
    # pads larger than the kernel: the corner windows see no real element.
    x = np.ones((1, 1, 2, 2), np.float32)
    y, idx = _run("MaxPool", [x], dict(kernel_shape=[1, 1], pads=[1, 1, 1, 1]))
    assert y.shape == (1, 1, 4, 4)
    assert np.isneginf(y[0, 0, 0, 0]) and idx[0, 0, 0, 0] == -1
    np.testing.assert_array_equal(y[0, 0, 1:3, 1:3], 1)


def test_averagepool_window_entirely_in_padding_is_zero():
    x = np.ones((1, 1, 2, 2), np.float32)
    (y,) = _run("AveragePool", [x], dict(kernel_shape=[1, 1], pads=[1, 1, 1, 1]))
    assert y[0, 0, 0, 0] == 0 and y[0, 0, 1, 1] == 1


def test_maxpool_output_count_controls_indices():
    x = np.random.default_rng(2).standard_normal((1, 2, 6, 6)).astype(np.float32)
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    assert len(_run("MaxPool", [x], attrs)) == 2
    assert len(_run("MaxPool", [x], dict(attrs, _num_outputs=1))) == 1
    y = np.empty((1, 2, 3, 3), np.float32)
    res = _run("MaxPool", [x], attrs, out=[y])
    assert len(res) == 1 and res[0] is y


# ---------------------------------------------------------------------------- fast 2-D paths
#
# The native MaxPool/AveragePool loops have shape-specialised variants (kernel 2/3 with
# stride 1/2, stride-1 "same" pooling run over whole planes, windows covering the whole
# plane) and a generic form (pool._SPECIALISE = False).  Max must be bit-exact against
# both the generic form and a numpy reference.  Average is bit-exact against the generic
# form and against a numpy float32 reference that adds in the documented order (the
# window's real rows top to bottom, then the columns left to right with padding as 0.0,
# times the float32 reciprocal of the count), except for windows covering the whole
# plane, which sum in 8 interleaved lanes (compared within float32 rounding).


def _np_pool_2d(x, kind, kernel_shape, strides, dilations, pads, ceil_mode=0, count_include_pad=0,
                auto_pad="NOTSET"):
    """2-D pooling in numpy, float32 arithmetic in the native loops' order (see above)."""
    ks = kernel_shape
    kh, kw = ks
    sh, sw = strides
    dh, dw = dilations
    (ph, pe_h, oh_n), (pw, pe_w, ow_n) = _geometry(x.shape[2:], ks, strides, dilations, pads, auto_pad, ceil_mode)
    n, c, h, w = x.shape
    if kind == "max":
        empty = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        op = np.maximum
    else:
        empty = np.float32(0)
        op = np.add
    y = np.empty((n, c, oh_n, ow_n), x.dtype if kind == "max" else np.float32)
    width = max(pw + w, (ow_n - 1) * sw + (kw - 1) * dw + 1)
    for oh in range(oh_n):
        rows = [oh * sh - ph + j * dh for j in range(kh)]
        real = [r for r in rows if 0 <= r < h]
        padded_rows = sum(-ph <= r < h + pe_h for r in rows)
        if not real:
            y[:, :, oh, :] = empty
            continue
        v = x[:, :, real[0], :].copy()
        for r in real[1:]:
            v = op(v, x[:, :, r, :])
        t = np.full((n, c, width), empty, dtype=v.dtype)
        t[:, :, pw:pw + w] = v
        for ow in range(ow_n):
            acc = t[:, :, ow * sw].copy()
            for k in range(1, kw):
                acc = op(acc, t[:, :, ow * sw + k * dw])
            if kind == "avg":
                cols = [ow * sw - pw + k * dw for k in range(kw)]
                if count_include_pad:
                    count = padded_rows * sum(-pw <= q < w + pe_w for q in cols)
                else:
                    count = len(real) * sum(0 <= q < w for q in cols)
                acc = acc * (np.float32(1.0 / count) if count else np.float32(0))
            y[:, :, oh, ow] = acc
    return y


def _bits(a):
    """The array's raw bytes as unsigned ints (compares signed zeros and NaN payloads too)."""
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _whole_plane(shape, attrs):
    """True when the single window covers the whole plane (the lane-summed case)."""
    ks = attrs["kernel_shape"]
    strides = attrs.get("strides", [1, 1])
    dil = attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    geo = _geometry(shape[2:], ks, strides, dil, pads, attrs.get("auto_pad", "NOTSET"), attrs.get("ceil_mode", 0))
    if any(g[2] != 1 for g in geo):
        return False
    for a, size in enumerate(shape[2:]):
        taps = [-geo[a][0] + t * dil[a] for t in range(ks[a])]
        if sorted(t for t in taps if 0 <= t < size) != list(range(size)):
            return False
    return True


FAST_2D = [
    # (input shape, attrs): the light models' configurations, then every border case.
    ((2, 3, 14, 14), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 4, 15, 15), dict(kernel_shape=[3, 3], strides=[2, 2])),
    ((1, 4, 16, 16), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 4, 15, 13), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 3, 14, 14), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])),
    ((1, 3, 13, 13), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ((2, 3, 7, 7), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ((1, 3, 13, 9), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ((1, 2, 28, 28), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ((1, 2, 9, 11), dict(kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])),
    ((1, 2, 8, 9), dict(kernel_shape=[4, 2], strides=[1, 1], pads=[1, 0, 2, 1])),
    ((1, 2, 8, 9), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[0, 2, 2, 0])),
    ((1, 2, 9, 10), dict(kernel_shape=[3, 3], strides=[1, 1], auto_pad="SAME_UPPER")),
    ((1, 2, 9, 10), dict(kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_LOWER")),
    ((1, 2, 9, 10), dict(kernel_shape=[3, 3], strides=[1, 1])),
    ((2, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 3, 9, 7), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 9, 7), dict(kernel_shape=[2, 2], strides=[1, 1])),
    ((1, 2, 9, 7), dict(kernel_shape=[1, 1], strides=[2, 2])),
    ((1, 2, 11, 12), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 0, 1])),
    ((1, 2, 11, 12), dict(kernel_shape=[4, 5], strides=[3, 3], pads=[2, 1, 2, 3], ceil_mode=1)),
    # the narrow-plane limits (pool_kernels.narrow_fits): padded row 64, 32 outputs, long kernels
    # (AVX-512); padded row 32, 16 outputs, stride 1 up to 8 outputs (AVX2)
    ((1, 2, 5, 31), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 5, 32), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 6, 8), dict(kernel_shape=[3, 9], strides=[1, 1], pads=[1, 4, 1, 4])),
    ((1, 2, 6, 9), dict(kernel_shape=[2, 5], strides=[1, 1], pads=[0, 2, 1, 2])),
    ((1, 2, 7, 30), dict(kernel_shape=[3, 16], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 5, 63), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 5, 64), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 6, 32), dict(kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])),
    ((1, 2, 6, 33), dict(kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])),
    ((1, 2, 4, 20), dict(kernel_shape=[2, 17], strides=[1, 1], pads=[0, 8, 1, 8])),
    ((1, 2, 4, 20), dict(kernel_shape=[2, 18], strides=[1, 1], pads=[0, 8, 1, 9])),
    ((1, 2, 7, 40), dict(kernel_shape=[3, 9], strides=[2, 2], pads=[1, 4, 1, 4], ceil_mode=1)),
    ((1, 2, 9, 31), dict(kernel_shape=[3, 4], strides=[3, 2], pads=[1, 3, 2, 0])),
    # dilations: the generic loops
    ((1, 2, 11, 12), dict(kernel_shape=[3, 3], strides=[1, 1], dilations=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 2, 11, 12), dict(kernel_shape=[2, 3], strides=[2, 1], dilations=[3, 2], ceil_mode=1)),
    # windows covering the whole plane
    ((2, 5, 7, 7), dict(kernel_shape=[7, 7], strides=[1, 1])),
    ((1, 5, 6, 6), dict(kernel_shape=[7, 7], strides=[1, 1], pads=[0, 0, 1, 1])),
    ((1, 3, 3, 5), dict(kernel_shape=[5, 5], strides=[2, 2], pads=[1, 0, 1, 0])),
    ((1, 3, 13, 13), dict(kernel_shape=[13, 13], strides=[13, 13])),
    # tiny inputs, kernels larger than the input, windows entirely in the padding
    ((1, 2, 1, 1), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ((1, 2, 2, 2), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ((1, 2, 1, 9), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ((1, 2, 9, 1), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 2, 3), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ((1, 1, 2, 2), dict(kernel_shape=[1, 1], strides=[1, 1], pads=[2, 1, 1, 2])),
    ((1, 1, 3, 3), dict(kernel_shape=[2, 2], strides=[3, 3], pads=[2, 2, 2, 2])),
]


@pytest.fixture(params=sorted(ISA_LEVELS, key=ISA_LEVELS.get))
def pool_isa(request, set_kernel_isa):
    """Each SIMD level of the float32 pooling passes (``RKNNLITE_ISA`` names: generic, avx2 and
    avx512 on x86-64, neon on aarch64), set for the test; a level this CPU lacks skips."""
    level = ISA_LEVELS[request.param]
    if set_kernel_isa(level) != level:
        pytest.skip(f"this CPU cannot execute the {request.param} path")
    return request.param


@pytest.fixture(params=[True, False], ids=["fast", "generic"])
def specialise(request, monkeypatch):
    from rknnlite.backends.software.ops import pool

    monkeypatch.setattr(pool, "_SPECIALISE", request.param)
    return request.param


def _x_for(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)


def _full_attrs(attrs):
    return dict(dict(strides=[1, 1], dilations=[1, 1], pads=[0, 0, 0, 0]), **attrs)


@pytest.mark.parametrize("cfg", FAST_2D, ids=_config_id)
def test_maxpool_2d_bit_exact(cfg, specialise, pool_isa):
    shape, attrs = cfg
    # Many ties; no -0.0 (between -0.0 and +0.0 the first in the loops' order wins).
    x = np.round(_x_for(shape) * 2) / 2 + np.float32(0)
    (y,) = _run("MaxPool", [x], dict(attrs, _num_outputs=1))
    ref = _np_pool_2d(x, "max", **_full_attrs(attrs))
    assert y.shape == ref.shape and y.dtype == np.float32
    np.testing.assert_array_equal(_bits(y), _bits(ref))
    if not np.isneginf(ref).any():  # the loop reference needs a real element in every window
        ry, _ = _ref_pool(x, "max", **attrs)
        np.testing.assert_array_equal(y, ry)


@pytest.mark.parametrize("cfg", FAST_2D[::3], ids=_config_id)
def test_every_simd_path_gives_the_baseline_s_bits_with_nan_and_inf(cfg, pool_isa, set_kernel_isa):
    shape, attrs = cfg
    x = _x_for(shape, seed=2)
    x.flat[::5] = np.nan
    x.flat[1::7] = np.inf
    x.flat[2::11] = -np.inf
    path = [_run(op, [x], dict(attrs, _num_outputs=1))[0] for op in ("MaxPool", "AveragePool")]
    set_kernel_isa(0)
    baseline = [_run(op, [x], dict(attrs, _num_outputs=1))[0] for op in ("MaxPool", "AveragePool")]
    for got, want in zip(path, baseline):
        # the same nan positions; a nan's sign and payload are not values (inf + -inf makes the
        # CPU's default nan, and which of two nans an add keeps follows the instruction's operand order)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        real = ~np.isnan(want)
        np.testing.assert_array_equal(_bits(got[real]), _bits(want[real]))


@pytest.mark.parametrize("cfg", FAST_2D, ids=_config_id)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool_2d_matches_numpy_order(cfg, count_include_pad, specialise, pool_isa):
    shape, attrs = cfg
    x = _x_for(shape)
    (y,) = _run("AveragePool", [x], dict(attrs, count_include_pad=count_include_pad))
    ref = _np_pool_2d(x, "avg", count_include_pad=count_include_pad, **_full_attrs(attrs))
    assert y.shape == ref.shape and y.dtype == np.float32
    if specialise and _whole_plane(shape, attrs):
        # lane-summed: the same sum grouped differently
        np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(_bits(y), _bits(ref))
    if not np.isneginf(_np_pool_2d(x, "max", **_full_attrs(attrs))).any():
        ry, _ = _ref_pool(x, "avg", count_include_pad=count_include_pad, **attrs)
        np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-6)


def test_the_narrow_plane_layout_takes_the_light_models_small_planes(set_kernel_isa):
    """On AVX-512 the 7x7-28x28 planes of the light models run as whole planes in one C call,
    the limits as documented; AVX2 takes half the widths, stride 1 only up to 8 outputs (its
    taps cost more than the row loops' flat passes past that); the baseline never."""
    import platform

    from rknnlite._native import pool_kernels as pk

    if platform.machine().lower() not in ("x86_64", "amd64"):
        assert set_kernel_isa(1) <= 1 and not pk.narrow_fits(14, 7, 3, 2, 1, 0)
        pytest.skip("the narrow-plane layout is x86-64 only")
    if set_kernel_isa(2) == 2:
        assert pk.narrow_fits(14, 7, 3, 2, 1, 0) and pk.narrow_fits(28, 28, 3, 1, 1, 1)
        assert pk.narrow_fits(63, 32, 3, 2, 1, 1) and not pk.narrow_fits(64, 32, 3, 2, 1, 1)
        assert pk.narrow_fits(32, 32, 5, 1, 1, 2) and not pk.narrow_fits(33, 33, 5, 1, 1, 2)
        assert pk.narrow_fits(20, 20, 17, 1, 1, 8) and not pk.narrow_fits(20, 20, 18, 1, 1, 8)
        assert not pk.narrow_fits(14, 5, 3, 3, 1, 0) and not pk.narrow_fits(14, 10, 3, 1, 2, 0)
        assert pk.narrow_fits(56, 28, 3, 2, 1, 0) and not pk.narrow_fits(112, 56, 3, 2, 1, 1)
    if set_kernel_isa(1) == 1:
        assert pk.narrow_fits(14, 7, 3, 2, 1, 0) and pk.narrow_fits(27, 13, 3, 2, 1, 0)
        assert pk.narrow_fits(31, 16, 3, 2, 1, 1) and not pk.narrow_fits(32, 16, 3, 2, 1, 1)
        assert pk.narrow_fits(7, 7, 3, 1, 1, 1) and not pk.narrow_fits(14, 14, 3, 1, 1, 1)
        assert pk.narrow_fits(8, 8, 9, 1, 1, 4) and not pk.narrow_fits(8, 8, 10, 1, 1, 4)
        assert not pk.narrow_fits(14, 10, 3, 1, 2, 0)
    set_kernel_isa(0)
    assert not pk.narrow_fits(14, 7, 3, 2, 1, 0)


@pytest.mark.parametrize("cfg", FAST_2D, ids=_config_id)
def test_fast_and_generic_loops_agree(cfg, monkeypatch):
    from rknnlite.backends.software.ops import pool

    shape, attrs = cfg
    x = _x_for(shape, seed=1)
    fast = [_run(op, [x], dict(attrs, _num_outputs=1))[0] for op in ("MaxPool", "AveragePool")]
    monkeypatch.setattr(pool, "_SPECIALISE", False)
    generic = [_run(op, [x], dict(attrs, _num_outputs=1))[0] for op in ("MaxPool", "AveragePool")]
    np.testing.assert_array_equal(_bits(fast[0]), _bits(generic[0]))
    if _whole_plane(shape, attrs):
        np.testing.assert_allclose(fast[1], generic[1], rtol=2e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(_bits(fast[1]), _bits(generic[1]))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.int64, np.float64])
@pytest.mark.parametrize("cfg", [FAST_2D[0], FAST_2D[6], FAST_2D[9], FAST_2D[15], FAST_2D[23], FAST_2D[28]],
                         ids=_config_id)
def test_maxpool_2d_other_dtypes(cfg, dtype, specialise):
    shape, attrs = cfg
    x = _x_for(shape, dtype)
    (y,) = _run("MaxPool", [x], dict(attrs, _num_outputs=1))
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, _np_pool_2d(x, "max", **_full_attrs(attrs)))


@pytest.mark.parametrize("shape, attrs", [
    ((1, 3, 10), dict(kernel_shape=[3], strides=[1], pads=[1, 1])),  # 1-D "same"
    ((2, 2, 9), dict(kernel_shape=[9], strides=[1])),  # 1-D whole plane
    ((1, 2, 4, 5, 6), dict(kernel_shape=[4, 5, 6], strides=[1, 1, 1])),  # 3-D whole plane
    ((1, 2, 5, 6, 7), dict(kernel_shape=[3, 3, 3], strides=[1, 1, 1], pads=[1, 1, 1, 1, 1, 1])),
], ids=["1d-same", "1d-plane", "3d-plane", "3d-same-size"])
def test_other_ranks_fast_and_generic(shape, attrs, specialise):
    x = _x_for(shape, seed=2)
    (ymax,) = _run("MaxPool", [x], dict(attrs, _num_outputs=1))
    (yavg,) = _run("AveragePool", [x], attrs)
    rmax, _ = _ref_pool(x, "max", **attrs)
    ravg, _ = _ref_pool(x, "avg", **attrs)
    np.testing.assert_array_equal(ymax, rmax)
    np.testing.assert_allclose(yavg, ravg, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, attrs", [
    ((1, 2, 130, 130), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 1, 4, 4500), dict(kernel_shape=[2, 3], strides=[1, 2], ceil_mode=1)),
    ((1, 2, 70, 70), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
], ids=["many-row-groups", "row-wider-than-scratch", "large-same"])
def test_large_planes(shape, attrs, specialise):
    # The row loops work on groups of scratch rows of about 16 KB: several groups per plane.
    x = _x_for(shape, seed=5)
    (ymax,) = _run("MaxPool", [x], dict(attrs, _num_outputs=1))
    (yavg,) = _run("AveragePool", [x], attrs)
    np.testing.assert_array_equal(_bits(ymax), _bits(_np_pool_2d(x, "max", **_full_attrs(attrs))))
    np.testing.assert_array_equal(_bits(yavg), _bits(_np_pool_2d(x, "avg", **_full_attrs(attrs))))


def test_average_padding_adds_positive_zero():
    # Documented signed-zero detail: padding adds +0.0, so a border window of -0.0
    # values averages to +0.0, an interior one to -0.0 (max keeps -0.0 everywhere).
    x = np.full((1, 1, 5, 5), -0.0, np.float32)
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    (y,) = _run("AveragePool", [x], attrs)
    assert np.signbit(y[0, 0, 2, 2]) and not np.signbit(y[0, 0, 0, 0]) and not np.signbit(y[0, 0, 4, 4])
    (m,) = _run("MaxPool", [x], dict(attrs, _num_outputs=1))
    assert np.signbit(m).all()


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("op, shape, attrs", [
    ("MaxPool", (2, 9, 15, 15), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", (1, 7, 14, 14), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    ("AveragePool", (3, 5, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], count_include_pad=1, ceil_mode=1)),
    ("GlobalAveragePool", (2, 9, 6, 5), {}),
    ("GlobalMaxPool", (2, 9, 6, 5), {}),
], ids=["max", "avg-same", "avg-ceil", "gap", "gmp"])
def test_threads_split_planes_without_changing_results(op, shape, attrs, threads, monkeypatch):
    """Split by planes over the native workers (every plane counted once, in ranges the
    threads share), with the one-thread result bit for bit."""
    from rknnlite.backends.software import parallel
    from rknnlite.backends.software.ops import pool

    x = _x_for(shape, seed=3)
    attrs = dict(attrs, _num_outputs=1)
    serial = _run(op, [x], attrs)[0]
    monkeypatch.setattr(pool, "_PARALLEL_MIN_ELEMENTS", 64)
    workers = parallel.WorkerPool(threads)
    recorder = parallel.WorkRecorder(workers)
    try:
        with parallel.using(recorder):
            out = [np.full(serial.shape, np.nan, np.float32)]
            split = _run(op, [x], attrs, out=out)[0]
            counts = recorder.take()
    finally:
        workers.close()
    assert sum(counts) == shape[0] * shape[1] and len(counts) == threads
    assert split is out[0]
    np.testing.assert_array_equal(_bits(split), _bits(serial))


def test_the_split_runs_on_every_thread_without_the_gil():
    """A 128-plane 3x3 average pool split in two: both threads run planes (native ranges, so
    a worker never waits for the interpreter), the one-thread result bit for bit."""
    from conv_threads import assert_every_thread_takes_part, run_kernel

    from rknnlite.backends.software.ops import KERNELS

    ap = KERNELS["AveragePool"]
    x = _x_for((1, 128, 56, 56), seed=4)
    attrs = ap.prepare({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [None])
    one = run_kernel(ap, [x], attrs, (1, 128, 56, 56), 1)
    assert_every_thread_takes_part(ap, [x], attrs, (1, 128, 56, 56), one)


def test_small_tensors_stay_on_the_calling_thread():
    from rknnlite.backends.software import parallel

    x = _x_for((1, 8, 14, 14))
    workers = parallel.WorkerPool(4)
    recorder = parallel.WorkRecorder(workers)
    try:
        with parallel.using(recorder):
            _run("MaxPool", [x], dict(kernel_shape=[3, 3], strides=[2, 2], _num_outputs=1))
            _run("AveragePool", [x], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
            counts = recorder.take()
    finally:
        workers.close()
    assert not any(counts[1:])  # no worker ran a plane


@pytest.mark.parametrize("shape", [(2, 3, 7, 7), (1, 4, 13, 13), (2, 3, 1, 1), (1, 2, 3, 4, 5), (1, 3, 1, 17)])
def test_global_pools_native_path(shape):
    x = _x_for(shape, seed=4)
    (a,) = _run("GlobalAveragePool", [x], {})
    (m,) = _run("GlobalMaxPool", [x], {})
    axes = tuple(range(2, len(shape)))
    np.testing.assert_allclose(a, x.astype(np.float64).mean(axis=axes, keepdims=True), rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(m, x.max(axis=axes, keepdims=True))
    assert a.dtype == m.dtype == np.float32


def test_plan_cache_follows_the_input_shape():
    spec = KERNELS["AveragePool"]
    attrs = spec.prepare(dict(kernel_shape=[3, 3], strides=[2, 2], _opset=19), [None])
    for shape in [(1, 2, 9, 9), (1, 2, 12, 10), (1, 2, 9, 9), (2, 1, 5, 7)] * 4:
        x = _x_for(shape)
        (y,) = spec.fn([x], attrs)
        np.testing.assert_allclose(y, _ref_pool(x, "avg", [3, 3], strides=[2, 2])[0], rtol=1e-5, atol=1e-6)
    assert 0 < len(attrs["_pool_plans"]) <= 8


# ---------------------------------------------------------------------------- out= path

def _out_cases():
    rng = np.random.default_rng(3)
    x4 = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    x3 = rng.standard_normal((2, 3, 5)).astype(np.float32)
    c = 3
    scale, bias = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    mean, var = rng.standard_normal(c).astype(np.float32), rng.random(c).astype(np.float32) + 0.1
    return [
        ("MaxPool", [x4], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        ("MaxPool", [x3], dict(kernel_shape=[2], strides=[1], storage_order=1)),
        ("AveragePool", [x4], dict(kernel_shape=[3, 2], strides=[2, 1], ceil_mode=1, count_include_pad=1)),
        ("GlobalAveragePool", [x4], {}),
        ("GlobalMaxPool", [x3], {}),
        ("LpNormalization", [x4], dict(axis=1, p=1)),
        ("LpNormalization", [x4], dict(axis=-1, p=2)),
        ("BatchNormalization", [x4, scale, bias, mean, var], dict(epsilon=1e-3)),
        ("LayerNormalization", [x4, rng.standard_normal((7, 6)).astype(np.float32),
                                rng.standard_normal(6).astype(np.float32)], dict(axis=2)),
        ("InstanceNormalization", [x4, scale, bias], dict(epsilon=1e-4)),
    ]


@pytest.mark.parametrize("op, inputs, attrs", _out_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_out_path_identical(op, inputs, attrs):
    expected = _run(op, inputs, attrs)
    out = [np.full(e.shape, np.nan, e.dtype) if e.dtype.kind == "f" else np.full(e.shape, -7, e.dtype)
           for e in expected]
    got = _run(op, inputs, attrs, out=out)
    assert len(got) == len(expected)
    for g, o, e in zip(got, out, expected):
        assert g is o
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("op, inputs, attrs", _out_cases()[:6], ids=lambda v: v if isinstance(v, str) else "")
def test_out_path_non_contiguous_target(op, inputs, attrs):
    expected = _run(op, inputs, attrs)
    out = []
    for e in expected:
        big = np.zeros(e.shape[:-1] + (2 * e.shape[-1],), e.dtype)
        out.append(big[..., ::2])
    got = _run(op, inputs, attrs, out=out)
    for g, o, e in zip(got, out, expected):
        assert g is o
        np.testing.assert_array_equal(g, e)


def test_inputs_not_modified():
    for op, inputs, attrs in _out_cases():
        frozen = [a.copy() for a in inputs]
        for a in inputs:
            a.flags.writeable = False
        _run(op, inputs, attrs)
        for a, f in zip(inputs, frozen):
            np.testing.assert_array_equal(a, f)


# ---------------------------------------------------------------------------- normalisation


def test_global_pools_any_rank():
    x = np.random.default_rng(4).standard_normal((2, 3, 4, 5, 6)).astype(np.float32)
    (a,) = _run("GlobalAveragePool", [x], {})
    (m,) = _run("GlobalMaxPool", [x], {})
    assert a.shape == m.shape == (2, 3, 1, 1, 1)
    np.testing.assert_allclose(a, x.mean(axis=(2, 3, 4), keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(m, x.max(axis=(2, 3, 4), keepdims=True))


def test_global_pools_of_zero_channels_and_of_empty_planes():
    (a,) = _run("GlobalAveragePool", [np.zeros((1, 0, 4, 4), np.float32)], {})
    (m,) = _run("GlobalMaxPool", [np.zeros((1, 0, 3), np.float32)], {})
    assert a.shape == (1, 0, 1, 1) and m.shape == (1, 0, 1)
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        with pytest.raises(ValueError, match=r"X of shape \[1, 2, 0, 4\]: its spatial axes hold no values"):
            _run(op, [np.zeros((1, 2, 0, 4), np.float32)], {})


def test_lpnormalization_zero_vector_gives_zero():
    x = np.array([[0, 0, 0], [3, 0, 4]], np.float32)
    (y2,) = _run("LpNormalization", [x], dict(p=2, axis=1))
    (y1,) = _run("LpNormalization", [x], dict(p=1, axis=1))
    np.testing.assert_allclose(y2, [[0, 0, 0], [0.6, 0, 0.8]], rtol=1e-6)
    np.testing.assert_allclose(y1, [[0, 0, 0], [3 / 7, 0, 4 / 7]], rtol=1e-6)
    assert not np.isnan(y2).any()


def _ref_batchnorm(x, s, b, m, v, eps):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    x = x.astype(np.float64)
    return (x - m.reshape(shape)) / np.sqrt(v.reshape(shape) + eps) * s.reshape(shape) + b.reshape(shape)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (1, 3, 4, 4), (1, 3, 2, 2, 2)])
def test_batchnorm_ranks_and_constant_folding(shape):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    params = [rng.standard_normal(3).astype(np.float32) for _ in range(3)] + [rng.random(3).astype(np.float32)]
    expected = _ref_batchnorm(x, *params, 1e-5)
    (runtime,) = _run("BatchNormalization", [x] + params, {}, opset=15)
    (folded,) = _run("BatchNormalization", [x] + params, {}, consts=[None] + params, opset=15)
    np.testing.assert_allclose(runtime, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(folded, expected, rtol=1e-5, atol=1e-5)
    assert runtime.dtype == folded.dtype == np.float32


def test_batchnorm_opset9_and_14():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    params = [rng.standard_normal(3).astype(np.float32) for _ in range(3)] + [rng.random(3).astype(np.float32)]
    for opset, attrs in ((9, {}), (14, dict(training_mode=0, momentum=0.9))):
        (y,) = _run("BatchNormalization", [x] + params, attrs, opset=opset)
        np.testing.assert_allclose(y, _ref_batchnorm(x, *params, 1e-5), rtol=1e-5, atol=1e-5)


def _ref_layernorm(x, scale, bias, axis, eps):
    axes = tuple(range(axis % x.ndim, x.ndim))
    xd = x.astype(np.float64)
    mean = xd.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(((xd - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    y = (xd - mean) * inv * scale
    if bias is not None:
        y = y + bias
    return y, mean, inv


@pytest.mark.parametrize("stash_type", [1, 11])
def test_layernorm_no_bias_broadcast_scale_and_stash(stash_type):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2, 3, 8)) * 3 + 100).astype(np.float32)  # |mean| >> std
    scale = rng.standard_normal((1, 8)).astype(np.float32)
    y, mean, inv = _run("LayerNormalization", [x, scale], dict(axis=-1, epsilon=1e-6, stash_type=stash_type))
    ry, rmean, rinv = _ref_layernorm(x, scale, None, -1, 1e-6)
    np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean, rmean, rtol=1e-6)
    np.testing.assert_allclose(inv, rinv, rtol=1e-4)
    assert y.dtype == mean.dtype == inv.dtype == np.float32
    assert mean.shape == inv.shape == (2, 3, 1)


@pytest.mark.parametrize("scale, bias, message", [
    ((8,), (16,), "Scale of shape [8] does not broadcast to X's shape [2, 3, 16] (normalized axes [16])"),
    ((16,), (4, 1), "B of shape [4, 1] does not broadcast"),
])
def test_layernorm_scale_or_bias_of_another_shape_is_named(scale, bias, message):
    x = np.ones((2, 3, 16), np.float32)
    with pytest.raises(ValueError) as e:
        _run("LayerNormalization", [x, np.ones(scale, np.float32), np.ones(bias, np.float32)], dict(axis=-1))
    assert message in str(e.value)


def test_instancenorm_large_mean():
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((2, 3, 5, 7)) * 0.5 + 50).astype(np.float32)
    scale, bias = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    (y,) = _run("InstanceNormalization", [x, scale, bias], dict(epsilon=1e-5))
    xd = x.astype(np.float64)
    m = xd.mean(axis=(2, 3), keepdims=True)
    v = xd.var(axis=(2, 3), keepdims=True)
    ref = (xd - m) / np.sqrt(v + 1e-5) * scale.reshape(1, 3, 1, 1) + bias.reshape(1, 3, 1, 1)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------- attribute validation

BAD_ATTRS = [
    ("MaxPool", {}, "kernel_shape"),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[1]), "strides"),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[0, 1]), "strides"),
    ("MaxPool", dict(kernel_shape=[2, 2], pads=[1, 1, -1, 0]), "pads"),
    ("MaxPool", dict(kernel_shape=[2, 2], dilations=[1, 1, 1]), "dilations"),
    ("MaxPool", dict(kernel_shape=[2, 2], auto_pad="SAME"), "auto_pad"),
    ("MaxPool", dict(kernel_shape=[2, 2], storage_order=2), "storage_order"),
    ("MaxPool", dict(kernel_shape=[2, 2], ceil_mode=3), "ceil_mode"),
    ("MaxPool", dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER", pads=[1, 1, 1, 1]), "pads"),
    ("MaxPool", dict(kernel_shape=[2, 2, 2, 2]), "kernel_shape"),
    ("MaxPool", dict(kernel_shape=[0, 2]), "kernel_shape"),
    ("AveragePool", dict(kernel_shape=[2], count_include_pad=5), "count_include_pad"),
    ("LpNormalization", dict(p=3), "p"),
    ("BatchNormalization", dict(training_mode=1), "training_mode"),
    ("BatchNormalization", dict(epsilon=-1.0), "epsilon"),
    ("LayerNormalization", dict(stash_type=7), "stash_type"),
    ("LayerNormalization", dict(axis="x"), "axis"),
    ("InstanceNormalization", dict(epsilon="big"), "epsilon"),
]


@pytest.mark.parametrize("op, attrs, word", BAD_ATTRS, ids=[f"{o}-{w}" for o, _, w in BAD_ATTRS])
def test_bad_attributes(op, attrs, word):
    spec = KERNELS[op]
    with pytest.raises(ModelInvalidError, match=word) as info:
        spec.prepare(dict(attrs, _opset=19), [None] * 5)
    assert info.value.op == op


def test_registration_flags():
    for op in OPS:
        spec = KERNELS[op]
        assert spec.out, op
        assert not spec.data_dependent, op


@pytest.mark.parametrize("case, k", kernel_params(["LRN"]))
def test_lrn_node_cases(case, k):
    inputs, expected = case.data_sets[k]
    assert_matches(case, run_with_kernels(case, inputs), expected)


def test_lrn_out_path_and_bad_size():
    from rknnlite.backends.software.ops import KERNELS

    spec = KERNELS["LRN"]
    x = np.random.default_rng(0).standard_normal((2, 7, 3, 3)).astype(np.float32)
    attrs = spec.prepare({"size": 3, "alpha": 0.001, "beta": 0.7, "bias": 2.0}, [None])
    expected = spec.fn([x], attrs)[0]
    out = [np.empty_like(x)]
    assert spec.fn([x], attrs, out)[0] is out[0]
    np.testing.assert_array_equal(out[0], expected)
    sq = np.pad(x ** 2, ((0, 0), (1, 1), (0, 0), (0, 0)))
    window = sq[:, :-2] + sq[:, 1:-1] + sq[:, 2:]
    np.testing.assert_allclose(expected, x / (2.0 + 0.001 / 3 * window) ** 0.7, rtol=1e-5)
    with pytest.raises(ModelInvalidError, match="size"):
        spec.prepare({"size": 0}, [None])
