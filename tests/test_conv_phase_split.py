"""The stride-phase split a strided or padded Conv reads its input from
(``conv_kernels.phase_split``), on every path this CPU executes: AVX-512 and AVX2 take
stride 2 along W in one pass per input row (masked loads, even and odd lanes to the two
column phases), other strides and the generic path copy each phase row by row.  Every
path must equal the definition, including the rows and columns that fall in the padding
and the planes' slack past the image."""

import numpy as np
import pytest

from rknnlite._native import conv_kernels as ck


def reference(x, sd, sh, sw, pd, ph, pw, Ds, Hs, Ws):
    """out[c, a, b, e, z, y, x] = x[c, z*sd+a-pd, y*sh+b-ph, x*sw+e-pw], 0 outside."""
    C, D, H, W = x.shape
    pad = np.zeros((C, Ds * sd + pd + D, Hs * sh + ph + H, Ws * sw + pw + W), np.float32)
    pad[:, pd:pd + D, ph:ph + H, pw:pw + W] = x
    out = np.empty((C, sd, sh, sw, Ds, Hs, Ws), np.float32)
    for a in range(sd):
        for b in range(sh):
            for e in range(sw):
                out[:, a, b, e] = pad[:, a:a + Ds * sd:sd, b:b + Hs * sh:sh, e:e + Ws * sw:sw]
    return out.reshape(-1)


def split(x, sd, sh, sw, pd, ph, pw, Ds, Hs, Ws):
    n = x.shape[0] * sd * sh * sw * Ds * Hs * Ws
    out = np.full(n + 16, np.nan, np.float32)  # the 16 floats past the end must stay untouched
    ck.phase_split(np.ascontiguousarray(x), sd, sh, sw, pd, ph, pw, Ds, Hs, Ws, out)
    assert np.isnan(out[n:]).all(), "phase_split wrote past its output"
    return out[:n]


# (H, W, kernel, stride, pad): a 3x3/2 conv's split at 7x7 to 56x56 (one to four 16-lane
# chunks per row, odd and even widths), a 7x7/2 stem's (pad 3), stride 4 and stride 3.
@pytest.mark.parametrize("H, W, k, s, p", [
    (14, 14, 3, 2, 1), (7, 7, 3, 2, 1), (28, 28, 3, 2, 1), (56, 56, 3, 2, 1), (15, 33, 3, 2, 1),
    (13, 31, 3, 2, 0), (9, 40, 7, 2, 3), (112, 112, 7, 2, 3), (5, 3, 3, 2, 2), (1, 1, 3, 2, 1),
    (17, 70, 4, 4, 0), (20, 45, 3, 3, 1), (16, 37, 8, 4, 2),
])
def test_every_path_equals_the_definition(kernel_isa, H, W, k, s, p):
    rng = np.random.default_rng(H * 131 + W)
    x = rng.standard_normal((3, 1, H, W)).astype(np.float32)
    Hs, Ws = -(-(H + 2 * p) // s), -(-(W + 2 * p) // s)
    args = (1, s, s, 0, p, p, 1, Hs, Ws)
    np.testing.assert_array_equal(split(x, *args), reference(x, *args))


@pytest.mark.parametrize("Ws_extra", [0, 1, 5, 17])
def test_planes_wider_than_the_image_are_zero_past_it(kernel_isa, Ws_extra):
    # the gather GEMM's planes can be wider than the padded image (they hold the whole output grid)
    x = np.arange(2 * 9 * 11, dtype=np.float32).reshape(2, 1, 9, 11) + 1
    args = (1, 2, 2, 0, 1, 1, 1, 6, 7 + Ws_extra)
    np.testing.assert_array_equal(split(x, *args), reference(x, *args))


def test_three_dimensional_strides(kernel_isa):
    x = np.random.default_rng(3).standard_normal((2, 6, 9, 19)).astype(np.float32)
    args = (2, 2, 2, 1, 1, 1, 4, 6, 11)
    np.testing.assert_array_equal(split(x, *args), reference(x, *args))
