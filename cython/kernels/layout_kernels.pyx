# cython: language_level=3
"""Tensor layout conversions (NCHW / NHWC <-> NC1HWC2, NHWC row padding) as byte copies.

Every kernel moves whole elements of ``es`` bytes without looking at their values, so one
kernel serves every dtype (int8, uint8, float16, int16, float32, ...).  The caller
(``rknnlite.tensors.layout``) checks shapes and passes flat C-contiguous byte buffers;
nothing here allocates the result or raises for bad geometry (the wrappers only refuse
buffers too small for the geometry they are given).  All loops run without the GIL.

NC1HWC2 keeps, for each batch ``n`` and channel block ``c1``, the H*W pixels in order,
each pixel holding ``K = C2`` channel lanes.  NCHW and NHWC keep H and W in that same
order too, so H and W never need to be told apart: the kernels see a flat pixel axis
``P = H * W``.

NCHW (N, C, P) <-> NC1HWC2 (N, C1, P, K) is a K x P <-> P x K transpose per block.  When
``es`` is 1, 2, 4 or 8 and K is 2, 4, 8 or 16 (every C2 the NPUs use) and the compiler is
GCC or Clang, blocks move through 16-byte vector registers: K vectors of V = 16 / es
pixels are loaded (one per channel row, or K consecutive ones from the blocked side),
transposed in registers with "zip" steps, and stored.  A zip of vector j with vector
j + K/2 (low halves interleaved into one result, high halves into the other) for every j
is a perfect shuffle of the whole K*V block: element indices rotate left by one bit.  So
log2(K) rounds turn channel-major into pixel-major order and log2(V) rounds do the
inverse.  The vector extensions compile to SSE2 unpack instructions on x86-64 and to
zip1/zip2 on aarch64.  On x86-64 CPUs with AVX-512 VBMI (checked at import; ``set_wide``)
the same shuffles run on 64-byte registers, one ``vpermt2b`` per zip half through
byte-index tables for any element size, and NC1HWC2 -> NCHW uses the inverse shuffle
(unzip: even / odd elements) so both directions take log2(K) rounds; the last
(64 / es) - 1 pixels or fewer fall back to the 16-byte kernels.  With 16-byte vectors,
channel rows a multiple of 4 KB apart share L1 cache sets, so for 16 rows (and 8 rows
written) the kernel works through a small staging buffer filled or emptied row by row
with memcpy; the 64-byte kernels load or store whole cache lines per row, and staging
measured no faster for them, so they run straight between the tensors.  A last block
with fewer than C2 real channels goes through the staging buffer (its spare rows hold
zeros, or are dropped).  Other element sizes or C2 values, other compilers, and the last
pixels of a row take scalar loops.

NHWC (N, P, C) <-> NC1HWC2 (N, C1, P, K) copies a run of ``kc * es`` bytes per pixel and
block (a fixed-size copy for the usual run lengths).  Pixels are walked in tiles of about
4 KB of NHWC data (the best of 1 KB..256 KB measured), block by block inside a tile, so
the NHWC side stays in the L1 cache while each block streams sequentially.  Two full
blocks of 8 bytes (C2 * es == 8: RK3566/RK3568) move together as a 2 x 2 transpose of
8-byte elements in one 16-byte register per pixel pair; with the 64-byte kernels, four
full blocks of 16 bytes (C2 * es == 16: RK3588) move as a 4 x 4 transpose of 16-byte
lanes per 4 pixels.  A last block with fewer than C2 channels whose run is 8 or 16 bytes
moves whole runs (reading past the pixel's channels into the next pixel, masked to zero,
or writing into the next pixel before its first block is written), except where the run
would pass the end of the NHWC tensor.

Lanes of the last block beyond the real channels (``C`` not a multiple of C2) are written
as zero bytes on the way into NC1HWC2 and never read on the way out.
"""

from libc.stdint cimport uint8_t

from rk_layout cimport (LK_VECTOR, lk_blocked_to_interleaved, lk_blocked_to_planar, lk_copy_rows,
                       lk_interleaved_to_blocked, lk_planar_to_blocked, lk_set_wide, lk_wide_init)

#: Whether this build moves full C2 blocks through vector registers (GCC or Clang).
VECTORIZED = bool(LK_VECTOR)

lk_wide_init()
lk_set_wide(1)


def set_wide(bint on):
    """Use the 64-byte (AVX-512 VBMI) kernels (NCHW <-> NC1HWC2 transposes, NHWC <-> NC1HWC2
    groups of four 16-byte blocks) when ``on`` and the build and CPU have them, else the
    16-byte ones; returns whether the 64-byte kernels are now used (process-wide).
    They are on by default where available; tests turn them off to cover both paths.
    Not thread-safe against conversions running at the same time."""
    return bool(lk_set_wide(on))


def _check_sizes(Py_ssize_t src_len, Py_ssize_t dst_len, Py_ssize_t src_need, Py_ssize_t dst_need):
    # The caller sizes the buffers; this only guards memory safety against a caller bug.
    if src_len < src_need or dst_len < dst_need:
        raise ValueError(f"buffers too small: src {src_len} < {src_need} or dst {dst_len} < {dst_need} bytes")


def planar_to_blocked(const uint8_t[::1] src, uint8_t[::1] dst, Py_ssize_t N, Py_ssize_t C,
                      Py_ssize_t P, Py_ssize_t K, Py_ssize_t es):
    """NCHW bytes ``(N, C, P)`` -> NC1HWC2 bytes ``(N, ceil(C/K), P, K)`` of ``es``-byte elements;
    lanes past ``C`` are zeroed.  ``P`` = H * W.  Copies; both buffers C-contiguous."""
    _check_sizes(src.shape[0], dst.shape[0], N * C * P * es, N * ((C + K - 1) // K) * P * K * es)
    if N * C * P * es == 0:
        return
    with nogil:
        lk_planar_to_blocked(&src[0], &dst[0], N, C, P, K, es)


def blocked_to_planar(const uint8_t[::1] src, uint8_t[::1] dst, Py_ssize_t N, Py_ssize_t C,
                      Py_ssize_t P, Py_ssize_t K, Py_ssize_t es):
    """NC1HWC2 bytes ``(N, ceil(C/K), P, K)`` -> NCHW bytes ``(N, C, P)``; lanes past ``C``
    are not read.  Copies."""
    _check_sizes(src.shape[0], dst.shape[0], N * ((C + K - 1) // K) * P * K * es, N * C * P * es)
    if N * C * P * es == 0:
        return
    with nogil:
        lk_blocked_to_planar(&src[0], &dst[0], N, C, P, K, es)


def interleaved_to_blocked(const uint8_t[::1] src, uint8_t[::1] dst, Py_ssize_t N, Py_ssize_t C,
                           Py_ssize_t P, Py_ssize_t K, Py_ssize_t es):
    """NHWC bytes ``(N, P, C)`` -> NC1HWC2 bytes ``(N, ceil(C/K), P, K)``; lanes past ``C``
    are zeroed.  Copies."""
    _check_sizes(src.shape[0], dst.shape[0], N * C * P * es, N * ((C + K - 1) // K) * P * K * es)
    if N * C * P * es == 0:
        return
    with nogil:
        lk_interleaved_to_blocked(&src[0], &dst[0], N, C, P, K, es)


def blocked_to_interleaved(const uint8_t[::1] src, uint8_t[::1] dst, Py_ssize_t N, Py_ssize_t C,
                           Py_ssize_t P, Py_ssize_t K, Py_ssize_t es):
    """NC1HWC2 bytes ``(N, ceil(C/K), P, K)`` -> NHWC bytes ``(N, P, C)``; lanes past ``C``
    are not read.  Copies."""
    _check_sizes(src.shape[0], dst.shape[0], N * ((C + K - 1) // K) * P * K * es, N * C * P * es)
    if N * C * P * es == 0:
        return
    with nogil:
        lk_blocked_to_interleaved(&src[0], &dst[0], N, C, P, K, es)


def copy_rows(const uint8_t[::1] src, uint8_t[::1] dst, Py_ssize_t rows, Py_ssize_t src_row,
              Py_ssize_t dst_row, Py_ssize_t copy):
    """For each of ``rows`` rows, copy ``copy`` bytes from ``src`` (rows ``src_row`` bytes apart)
    to ``dst`` (rows ``dst_row`` bytes apart) and zero the rest of each ``dst`` row.  Copies."""
    if copy > src_row or copy > dst_row or copy < 0:
        raise ValueError(f"row copy of {copy} bytes does not fit rows of {src_row} / {dst_row} bytes")
    _check_sizes(src.shape[0], dst.shape[0], rows * src_row, rows * dst_row)
    if rows * dst_row == 0:
        return
    with nogil:
        lk_copy_rows(&src[0], &dst[0], rows, src_row, dst_row, copy)
