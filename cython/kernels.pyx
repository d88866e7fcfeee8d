# cython: language_level=3
"""Hot loops of the software backend, compiled; each runs without the GIL."""



def im2col(const float[:, :, ::1] x, float[:, ::1] out,
           int kh, int kw, int sh, int sw, int pad_top, int pad_left,
           int dh, int dw, int oh, int ow):
    """Unfold one image for convolution, in place into ``out``.

    x: (C, H, W) float32, C-contiguous.  out: (C*kh*kw, oh*ow) float32, written fully
    (padding positions become 0).  Row ``(c*kh + i)*kw + j`` holds input pixel
    ``(c, y*sh - pad_top + i*dh, x*sw - pad_left + j*dw)`` for every output position.
    """
    cdef Py_ssize_t C = x.shape[0], H = x.shape[1], W = x.shape[2]
    cdef Py_ssize_t c, i, j, y, xo, row, iy, ix, col
    if out.shape[0] != C * kh * kw or out.shape[1] != oh * ow:
        raise ValueError("im2col: output buffer has the wrong shape")
    with nogil:
        for c in range(C):
            for i in range(kh):
                for j in range(kw):
                    row = (c * kh + i) * kw + j
                    for y in range(oh):
                        iy = y * sh - pad_top + i * dh
                        col = y * ow
                        if iy < 0 or iy >= H:
                            for xo in range(ow):
                                out[row, col + xo] = 0
                            continue
                        for xo in range(ow):
                            ix = xo * sw - pad_left + j * dw
                            if ix < 0 or ix >= W:
                                out[row, col + xo] = 0
                            else:
                                out[row, col + xo] = x[c, iy, ix]
