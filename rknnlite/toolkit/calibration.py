"""Activation range calibration: the ``normal``, ``mmse`` and ``kl_divergence`` algorithms
of ``config(quantized_algorithm=...)``.

Every algorithm turns the float values an activation takes over the calibration data
into a range ``[lo, hi]`` (containing 0) from which :func:`affine_params` derives the
asymmetric int8 ``scale`` and ``zero_point`` (``scale = (hi - lo) / 255``,
``zero_point = round(-128 - lo / scale)``).

* ``normal``: the observed minimum and maximum (:class:`MinMaxObserver`, one pass).
* ``mmse``: RKNN-Toolkit2 2.5.0's ``MmseQaunt2`` (traced in its build; ``docs/vendor-examples.md``),
  a layer-by-layer search that starts from the ``kl_divergence`` parameters and keeps each
  tensor's zero point (:func:`rknnlite.toolkit.quantize.mmse_search`, which also tunes the
  weights); the pieces it shares are here: every candidate multiplies a scale by one of :data:`MMSE_MULTIPLIERS`
  (:func:`mmse_fake_quant`, the vendor's float32 arithmetic) and is judged by the mean squared
  error of a layer's output against float (:func:`mmse_error`, the vendor's float32 sums); the
  smallest error wins, the first of equal ones (:func:`mmse_best`).
* ``kl_divergence`` (:func:`kl_range`): RKNN-Toolkit2 2.5.0's rule, reconstructed from its
  ``calc_kl`` (its float32 divergences reproduced bit for bit; ``docs/vendor-examples.md``).
  A second pass accumulates a histogram of ``|x|`` (:func:`kl_histogram`: :data:`KL_BINS` =
  1024 equal bins over ``[0, max(-lo, hi))``, the maximum itself falling out); bin 0 takes no
  part.  Each candidate ``t = 128 .. 1022`` compares ``P`` (the first ``t`` bins, the rest
  folded into the last) with ``Q`` (:data:`KL_TARGET_BINS` groups spread over their bins, see
  :func:`kl_curve`), both smoothed with :data:`KL_EPS` and normalised, in float32; the ``t``
  with the smallest positive divergence (the first of equal ones) gives the threshold
  ``T = (t + 1.5) * width`` and the range ``[max(lo, -T), min(hi, T)]``.  When even the
  smallest divergence exceeds :data:`KL_MAX_DIVERGENCE` the tensor keeps its ``normal``
  range.  The model's inputs are the exception (:class:`SampleKLObserver`): each
  calibration sample is ranged on its own and the input's range is the union.

A tensor whose values are all equal keeps its ``normal`` range under every algorithm.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from .._native import elementwise_kernels as _ew

__all__ = [
    "ALGORITHMS",
    "MMSE_MULTIPLIERS",
    "MMSE_NORMAL_BELOW",
    "MMSE_CHANNEL_MIN_SIZE",
    "KL_BINS",
    "KL_TARGET_BINS",
    "KL_EPS",
    "KL_MAX_DIVERGENCE",
    "QMIN",
    "QMAX",
    "affine_params",
    "quantize_dequantize",
    "MinMaxObserver",
    "HistogramObserver",
    "SampleKLObserver",
    "mmse_fake_quant",
    "mmse_error",
    "mmse_errors",
    "mmse_errors_pieces",
    "mmse_best",
    "kl_range",
    "kl_curve",
    "kl_histogram",
]

#: ``config(quantized_algorithm=...)`` values implemented here.
ALGORITHMS = ("normal", "mmse", "kl_divergence")
#: ``mmse``: the factors a scale is multiplied by, in the order they are tried (``0.5 .. 2``).
MMSE_MULTIPLIERS = np.linspace(0.5, 2.0, 50)
#: ``mmse`` also searches around a tensor's min/max parameters when its ``kl_divergence`` scale
#: is below this fraction of the min/max scale.
MMSE_NORMAL_BELOW = 0.9
#: ``mmse`` under ``quantized_method='channel'`` picks a weight multiplier per output channel
#: when the layer's output has at least this many values per channel and sample (14 x 14; one
#: multiplier for the whole weight below: the vendor's build, probed from 1 x 195 to 1 x 196).
MMSE_CHANNEL_MIN_SIZE = 196
#: Histogram bins of ``|x|`` for ``kl_divergence``.
KL_BINS = 1024
#: Groups the candidate distributions are merged into (the int8 levels of ``[0, T]``).
KL_TARGET_BINS = 128
#: Stand-in for an empty bin of either distribution.
KL_EPS = 1e-4
#: ``kl_divergence`` keeps the min/max of a tensor whose best divergence is larger (the
#: vendor's ``compute_kl_divergence`` threshold: it kept min/max at 0.1087 and clipped at 0.0990).
KL_MAX_DIVERGENCE = 0.1
QMIN, QMAX = -128, 127
_LEVELS = QMAX - QMIN  # 255 steps



def affine_params(lo, hi) -> Tuple[np.ndarray, np.ndarray]:
    """Asymmetric int8 ``(scale, zero_point)`` for ranges ``[lo, hi]`` (scalars or arrays;
    float64 / int64 arrays returned).  Each range is widened to contain 0; an empty
    range gets scale 1 and zero point 0."""
    lo = np.minimum(np.asarray(lo, np.float64), 0.0)
    hi = np.maximum(np.asarray(hi, np.float64), 0.0)
    scale = (hi - lo) / _LEVELS
    ok = scale > 0
    safe = np.where(ok, scale, 1.0)
    zp = np.clip(np.round(QMIN - lo / safe), QMIN, QMAX)
    return safe, np.where(ok, zp, 0).astype(np.int64)


def quantize_dequantize(x, lo, hi) -> np.ndarray:
    """``x`` (any shape) quantized to int8 with the parameters of range ``[lo, hi]`` and
    back to float64 (a new array): what the int8 model stores for a value."""
    scale, zp = affine_params(lo, hi)
    q = np.clip(np.round(np.asarray(x, np.float64) / scale) + zp, QMIN, QMAX)
    return (q - zp) * scale


def _finite_extrema(bad: set, name: str, value: np.ndarray) -> Optional[Tuple[float, float]]:
    """``(min, max)`` of ``value`` for an observer, or None to skip it: an empty array, a
    tensor already in ``bad``, or one holding NaN or an infinity (then added to ``bad``)."""
    if name in bad or value.size == 0:
        return None
    lo, hi = float(np.min(value)), float(np.max(value))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        bad.add(name)
        return None
    return lo, hi


class MinMaxObserver:
    """Running minimum and maximum per tensor (the ``normal`` algorithm, and the first
    pass of the others).  Tensors that ever hold NaN or an infinity are left out."""

    def __init__(self):
        self._lo: Dict[str, float] = {}
        self._hi: Dict[str, float] = {}
        self._bad = set()

    def add(self, name: str, value: np.ndarray) -> None:
        """Account for one float array (not kept)."""
        extrema = _finite_extrema(self._bad, name, value)
        if extrema is None:
            return
        vmin, vmax = extrema
        self._lo[name] = min(self._lo.get(name, vmin), vmin)
        self._hi[name] = max(self._hi.get(name, vmax), vmax)

    def ranges(self) -> Dict[str, Tuple[float, float]]:
        """``{tensor: (min, max)}`` in first-seen order (a new dict)."""
        return {n: (self._lo[n], self._hi[n]) for n in self._lo if n not in self._bad}


class HistogramObserver:
    """Second calibration pass of ``kl_divergence`` (also the start of ``mmse``): one
    :func:`kl_histogram` of ``|x|`` per tensor over the first pass's ``ranges``;
    :meth:`ranges` applies :func:`kl_range` to each."""

    def __init__(self, ranges: Mapping[str, Tuple[float, float]], algorithm: str = "kl_divergence"):
        if algorithm != "kl_divergence":
            raise ValueError(f"no histogram algorithm {algorithm!r}; use 'kl_divergence'")
        self.algorithm = algorithm
        self._ranges = dict(ranges)
        self._hist: Dict[str, np.ndarray] = {}

    def add(self, name: str, value: np.ndarray) -> None:
        """Account for one float array of a tensor the first pass ranged (others are ignored)."""
        if name not in self._ranges or value.size == 0:
            return
        lo, hi = self._ranges[name]
        amax = max(-min(lo, 0.0), hi, 0.0)
        if not amax > 0:
            return
        counts = kl_histogram(value, amax)  # bin 0 is ignored by kl_curve
        if name in self._hist:
            self._hist[name] += counts
        else:
            self._hist[name] = counts

    def ranges(self) -> Dict[str, Tuple[float, float]]:
        """``{tensor: (lo, hi)}`` chosen by :func:`kl_range`; the first pass's range where no
        histogram was collected (a constant or empty tensor)."""
        out = {}
        for name, (lo, hi) in self._ranges.items():
            counts = self._hist.get(name)
            out[name] = (lo, hi) if counts is None or lo == hi else kl_range(counts, lo, hi)
        return out


class SampleKLObserver:
    """``kl_divergence`` of the model's inputs, as RKNN-Toolkit2 2.5.0 does it: every
    calibration array gets its own :func:`kl_range` (a histogram over its own ``|x|``
    maximum) and a tensor's range is the union of those.  Tensors that ever hold NaN or an
    infinity are left out."""

    def __init__(self):
        self._ranges: Dict[str, Tuple[float, float]] = {}
        self._bad = set()

    def add(self, name: str, value: np.ndarray) -> None:
        """Account for one float array (not kept)."""
        extrema = _finite_extrema(self._bad, name, value)
        if extrema is None:
            return
        lo, hi = extrema
        amax = max(-lo, hi, 0.0)
        if amax > 0 and lo != hi:
            lo, hi = kl_range(kl_histogram(value, amax), lo, hi)
        if name in self._ranges:
            old = self._ranges[name]
            lo, hi = min(old[0], lo), max(old[1], hi)
        self._ranges[name] = (lo, hi)

    def ranges(self) -> Dict[str, Tuple[float, float]]:
        """``{tensor: (lo, hi)}`` in first-seen order (a new dict)."""
        return {n: r for n, r in self._ranges.items() if n not in self._bad}


# -- mmse --------------------------------------------------------------------------------------


def mmse_fake_quant(x: np.ndarray, scale, zero_point, multiplier: float = 1.0, axis: Optional[int] = None,
                    qmin: int = QMIN, qmax: int = QMAX) -> np.ndarray:
    """``x`` quantized with ``scale * multiplier`` and ``zero_point`` and back (a new float32
    array), in RKNN-Toolkit2's ``mmse`` arithmetic: the step ``float32(scale) * float32(multiplier)``
    in float32, ``round(x / step)`` (half to even) in float32, plus the zero point, clipped to
    ``[qmin, qmax]``, minus the zero point, times the step.  ``scale`` / ``zero_point`` are scalars
    or, with ``axis``, one per slice along that axis (per channel)."""
    x = np.asarray(x, np.float32)
    step = np.asarray(scale, np.float32) * np.float32(multiplier)
    zp = np.asarray(zero_point, np.float32)
    if axis is None:
        channels, inner = 1, x.size
    elif -x.ndim <= axis < x.ndim:
        channels, inner = x.shape[axis], int(np.prod(x.shape[axis % x.ndim + 1:]))
    else:
        channels = inner = 0
    if x.size and channels and step.ndim <= x.ndim and zp.ndim <= x.ndim and step.size in (1, channels) \
            and zp.size in (1, channels):  # the same float32 arithmetic in a compiled loop
        out = np.empty(x.shape, np.float32)
        _ew.fake_quant(np.ascontiguousarray(x).reshape(-1), out.reshape(-1), channels, inner,
                       np.broadcast_to(step.reshape(-1), (channels,)).copy(),
                       np.broadcast_to(zp.reshape(-1), (channels,)).copy(), np.float32(qmin), np.float32(qmax))
        return out
    if axis is not None:
        shape = [1] * x.ndim
        shape[axis] = -1
        step, zp = step.reshape(shape), zp.reshape(shape)
    q = np.round(x / step) + zp
    np.clip(q, qmin, qmax, out=q)
    q -= zp
    q *= step
    return q.astype(np.float32, copy=False)


def mmse_error(u: np.ndarray, v: np.ndarray) -> float:
    """Mean squared difference of two float32 arrays as RKNN-Toolkit2's ``mmse`` computes it
    (``mean_squared_error`` of its libcpputils2, AVX path): eight float32 running sums over
    blocks of eight elements (``i = 0, 8, ...`` while ``i + 8 <= n``), folded as
    ``((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7))``, then the remaining squares added in
    float64 and the total divided by ``n``."""
    return float(mmse_errors(np.reshape(u, (1, -1)), np.reshape(v, (1, -1)))[0])


def mmse_errors(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """:func:`mmse_error` of each row of two 2-D arrays of the same shape (float64 array; a
    compiled loop, ``elementwise_kernels.mmse_pieces``, that adds in the vendor's order)."""
    return mmse_errors_pieces(u, [v])


def mmse_errors_pieces(u: np.ndarray, pieces) -> np.ndarray:
    """:func:`mmse_errors` of ``u`` (rows x n) against the rows made of ``pieces`` laid side by
    side (each rows x n / len(pieces); row r is piece 0's row r, then piece 1's, ...), without
    copying them together: the same sums in the same order."""
    u = np.ascontiguousarray(u, np.float32)
    pieces = [np.ascontiguousarray(p, np.float32) for p in pieces]
    rows, n = u.shape
    if n == 0:
        return np.zeros(rows)
    out = np.empty(rows)
    _ew.mmse_pieces(u, pieces, out)
    return out


def mmse_best(errors) -> int:
    """Index of the smallest of ``errors`` (the first of equal ones; NaN never), as the search
    keeps a candidate only when it is strictly better."""
    e = np.asarray(errors, np.float64)
    return int(np.argmin(np.where(np.isnan(e), np.inf, e)))


# -- kl_divergence -----------------------------------------------------------------------------


def kl_range(counts: np.ndarray, lo: float, hi: float) -> Tuple[float, float]:
    """The range chosen by KL divergence for the histogram ``counts`` (:data:`KL_BINS` equal
    bins of ``|x|`` over ``[0, max(-lo, hi)]``, :func:`kl_histogram`) of a tensor whose values
    span ``[lo, hi]``: the threshold ``T`` of :func:`kl_curve` with the smallest positive
    divergence (the first of equal ones) gives ``[max(lo, -T), min(hi, T)]``.  ``[lo, hi]`` itself
    when no threshold is tried (an empty histogram) or when even the best divergence exceeds
    :data:`KL_MAX_DIVERGENCE`."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    thresholds, kl = kl_curve(counts, lo, hi)
    positive = kl > 0
    if not positive.any():
        return lo, hi
    k = int(np.argmin(np.where(positive, kl, np.inf)))  # the first of equal minima, as the vendor's
    if not kl[k] <= KL_MAX_DIVERGENCE:
        return lo, hi
    best = float(thresholds[k])
    return max(lo, -best), min(hi, best)


def kl_histogram(values: np.ndarray, amax: float) -> np.ndarray:
    """The :data:`KL_BINS` counts of ``|values|`` over ``[0, amax)`` as RKNN-Toolkit2 bins them
    (``fast_histogram``): bin ``floor(|x| * KL_BINS / amax)`` computed in float64 in that order
    (``|x| * (KL_BINS / amax)`` rounds the maximum itself into the last bin), a value at ``amax``
    or beyond counted nowhere (the tensor's maximum falls out)."""
    x = np.abs(np.asarray(values, np.float64).reshape(-1))
    idx = np.floor(x * KL_BINS / amax)
    idx = idx[idx < KL_BINS].astype(np.intp)
    return np.bincount(idx, minlength=KL_BINS)


def _seq_sum(a: np.ndarray) -> np.ndarray:
    """Row sums of a float32 2-D array added one element after another, as a C loop adds them."""
    return np.cumsum(a, axis=1, dtype=np.float32)[:, -1]


def kl_curve(counts: np.ndarray, lo: float, hi: float) -> Tuple[np.ndarray, np.ndarray]:
    """``(thresholds, divergences)`` of the ``|x|`` histogram ``counts`` (equal bins over
    ``[0, max(-lo, hi)]``), one pair per candidate ``t``, computed as RKNN-Toolkit2 2.5.0's
    ``calc_kl`` computes them (reconstructed from its binary and checked on every candidate of
    its own histograms: the same float32 values).  Bin 0 takes no part; of the others (``d``),
    candidate ``t`` (128 .. ``len(d)`` - 1) makes

    * ``P``: ``d[:t]``, its last bin plus everything beyond (the tail kept as a float32 running
      difference);
    * ``Q``: :data:`KL_TARGET_BINS` groups of ``m = t // 128`` bins; every bin of a group gets the
      group's float32 sum over its number of non-zero bins; the last group runs from
      ``127 m`` to ``t - 1`` (its sum includes ``P``'s last bin, its count does not; empty when
      ``t = 128 m``); ``Q``'s last bin stays 0;
    * both smoothed: zero bins become :data:`KL_EPS`, the others lose ``zeros * eps / nonzeros``;
      normalised by their sums; ``KL = sum(p * log(p / q))``, every sum float32 in order.

    The threshold of ``t`` is ``(t + 1.5) * width``.  Both arrays are empty when the histogram
    is too short, empty, or the range is ``[0, 0]``."""
    f32 = np.float32
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    amax = max(-lo, hi)
    g = KL_TARGET_BINS
    h = np.asarray(counts, np.float64)
    d = h[1:].astype(f32)
    n = len(d)
    if not amax > 0 or not d.any() or n <= g:
        return np.zeros(0), np.zeros(0)
    width = amax / len(h)
    t = np.arange(g, n)
    rows, cols = len(t), n
    inside = np.arange(cols)[None, :] < t[:, None]
    # the tail beyond P's last bin: sum(d[g:]) in order, then minus d[t] one candidate after another
    tail = np.cumsum(np.concatenate([[_seq_sum(d[None, g:])[0]], -d[g:n - 1]]), dtype=f32)
    last_p = (d[t - 1] + tail).astype(f32)
    last_base = (last_p - tail).astype(f32)
    p = np.where(inside, d[None, :], f32(0)).astype(f32)
    p[np.arange(rows), t - 1] = last_p
    q = np.zeros((rows, cols), f32)
    m = t // g
    for mm in np.unique(m):
        sel = np.nonzero(m == mm)[0]
        groups = d[:(g - 1) * mm].reshape(g - 1, mm)
        nz = np.count_nonzero(groups, axis=1)
        values = np.where(nz > 0, (_seq_sum(groups) / np.maximum(nz, 1).astype(f32)).astype(f32), f32(0))
        q[np.ix_(sel, np.arange((g - 1) * mm))] = np.repeat(values, mm)[None, :]
        a = (g - 1) * mm
        run = np.cumsum(d[a:], dtype=f32)  # run[k] = d[a] + ... + d[a + k], in order
        nonzero = np.concatenate([[0], np.cumsum(d[a:] != 0)])
        tt = t[sel]
        count = nonzero[tt - 1 - a]  # non-zero bins of d[a:t-1]
        before = run[np.maximum(tt - 2 - a, 0)]
        total = np.where(tt - 1 > a, (before + last_base[sel]).astype(f32), last_base[sel]).astype(f32)
        value = np.where((count > 0) & (tt > g * mm), (total / np.maximum(count, 1).astype(f32)).astype(f32), f32(0))
        span = (np.arange(cols)[None, :] >= a) & (np.arange(cols)[None, :] < (tt - 1)[:, None])
        q[sel] = np.where(span, value[:, None], q[sel]).astype(f32)

    def smooth(x: np.ndarray) -> np.ndarray:  # an all-zero row stays zero (its divergence is NaN: skipped)
        zero = (x == 0) & inside
        nzero = zero.sum(axis=1).astype(f32)
        nnz = (inside & ~zero).sum(axis=1).astype(f32)
        cut = ((nzero * f32(KL_EPS)).astype(f32) / np.maximum(nnz, 1)).astype(f32)
        out = np.where(zero, f32(KL_EPS), np.where(inside, (x - cut[:, None]).astype(f32), f32(0))).astype(f32)
        return np.where((nnz > 0)[:, None], out, x).astype(f32)

    ps, qs = smooth(p), smooth(q)
    with np.errstate(divide="ignore", invalid="ignore"):  # an all-zero Q row: NaN, never chosen
        pn = (ps / _seq_sum(ps)[:, None]).astype(f32)
        qn = (qs / _seq_sum(qs)[:, None]).astype(f32)
        ratio = np.where(inside, (pn / np.where(inside, qn, f32(1))).astype(f32), f32(1))
        terms = np.where(inside, (pn * np.log(ratio.astype(np.float64)).astype(f32)).astype(f32), f32(0))
    kl = _seq_sum(terms.astype(f32)).astype(np.float64)
    return (t + 1.5) * width, kl
