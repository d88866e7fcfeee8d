"""Activation range calibration: the ``normal``, ``mmse`` and ``kl_divergence`` algorithms
of ``config(quantized_algorithm=...)``.

Every algorithm turns the float values an activation takes over the calibration data
into a range ``[lo, hi]`` (containing 0) from which :func:`affine_params` derives the
asymmetric int8 ``scale`` and ``zero_point`` (``scale = (hi - lo) / 255``,
``zero_point = round(-128 - lo / scale)``).

* ``normal``: the observed minimum and maximum (:class:`MinMaxObserver`, one pass).
* ``mmse`` (:func:`mmse_range`): a second pass accumulates a histogram of each
  activation (:data:`MMSE_BINS` equal bins over its ``normal`` range).  The clipping
  range is then searched by brute force for the smallest squared error of
  quantize-dequantize over the histogram (each bin's count times the error at its
  centre): candidate ends are the ``normal`` ends times the fractions
  ``2 ** (-k / 16)``, ``k = 0 .. 64`` (1 down to 1/16); the upper and lower ends are
  optimised in turn (coordinate descent, two rounds; a one-sided tensor such as a Relu
  output only moves its nonzero end), then each end is refined with the fractions
  ``2 ** (j / 128)``, ``j = -8 .. 8``, around its best value (never beyond the
  ``normal`` range).  The 1/16 floor keeps every candidate's quantization step at
  least ~2 histogram bins wide, where bin-centre errors are a good estimate.
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

__all__ = [
    "ALGORITHMS",
    "MMSE_BINS",
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
    "histogram",
    "mmse_range",
    "kl_range",
    "kl_curve",
    "kl_histogram",
]

#: ``config(quantized_algorithm=...)`` values implemented here.
ALGORITHMS = ("normal", "mmse", "kl_divergence")
#: Histogram bins of the ``mmse`` search (over the tensor's ``normal`` range).
MMSE_BINS = 8192
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

_COARSE = 2.0 ** (-np.arange(65) / 16.0)  # 1 .. 1/16
_FINE = 2.0 ** (np.arange(-8, 9) / 128.0)


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


def histogram(values: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    """Counts (int64, ``bins`` long) of ``values`` in ``bins`` equal bins over ``[lo, hi]``;
    values outside go to the end bins.  ``hi`` must be greater than ``lo``."""
    x = np.asarray(values).reshape(-1)
    factor = bins / (hi - lo)
    # float32 arithmetic halves the memory traffic; float64 where float32 cannot hold the factor.
    dtype = np.float32 if x.dtype == np.float32 and factor < 1e30 and abs(lo) < 1e30 else np.float64
    idx = np.subtract(x, dtype(lo), dtype=dtype)
    idx *= dtype(factor)
    np.clip(idx, 0, bins - 1, out=idx)
    return np.bincount(idx.astype(np.intp), minlength=bins)


class HistogramObserver:
    """Second calibration pass of ``mmse`` / ``kl_divergence``: one histogram per tensor
    over the first pass's ``ranges`` (signed values for ``mmse``, ``|x|`` for
    ``kl_divergence``); :meth:`ranges` applies the algorithm to each."""

    def __init__(self, ranges: Mapping[str, Tuple[float, float]], algorithm: str):
        if algorithm not in ("mmse", "kl_divergence"):
            raise ValueError(f"no histogram algorithm {algorithm!r}; use 'mmse' or 'kl_divergence'")
        self.algorithm = algorithm
        self._ranges = dict(ranges)
        self._hist: Dict[str, np.ndarray] = {}

    def _span(self, name: str) -> Tuple[float, float]:
        lo, hi = self._ranges[name]
        if self.algorithm == "kl_divergence":
            return 0.0, max(-min(lo, 0.0), hi, 0.0)
        return min(lo, 0.0), max(hi, 0.0)

    def add(self, name: str, value: np.ndarray) -> None:
        """Account for one float array of a tensor the first pass ranged (others are ignored)."""
        if name not in self._ranges or value.size == 0:
            return
        lo, hi = self._span(name)
        if not hi > lo:
            return
        bins = KL_BINS if self.algorithm == "kl_divergence" else MMSE_BINS
        if self.algorithm == "kl_divergence":
            counts = kl_histogram(value, hi)  # bin 0 is ignored by kl_curve
        else:
            counts = histogram(value, lo, hi, bins)
        if name in self._hist:
            self._hist[name] += counts
        else:
            self._hist[name] = counts

    def ranges(self) -> Dict[str, Tuple[float, float]]:
        """``{tensor: (lo, hi)}`` chosen by the algorithm; the first pass's range where no
        histogram was collected (a constant or empty tensor)."""
        out = {}
        for name, (lo, hi) in self._ranges.items():
            counts = self._hist.get(name)
            if counts is None or lo == hi:
                out[name] = (lo, hi)
            elif self.algorithm == "mmse":
                out[name] = mmse_range(counts, min(lo, 0.0), max(hi, 0.0))
            else:
                out[name] = kl_range(counts, lo, hi)
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


def _qdq_sse(centres: np.ndarray, counts: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Squared quantize-dequantize error of a histogram for each candidate range
    (``lo``/``hi`` 1-D, same length): a vector of sums."""
    scale, zp = affine_params(lo, hi)
    scale, zp = scale[:, None], zp[:, None]
    q = np.clip(np.round(centres[None, :] / scale) + zp, QMIN, QMAX)
    err = (q - zp) * scale
    err -= centres[None, :]
    err *= err
    return err @ counts


def mmse_range(counts: np.ndarray, lo: float, hi: float) -> Tuple[float, float]:
    """The clipping range inside ``[lo, hi]`` (``lo <= 0 <= hi``) with the smallest squared
    quantize-dequantize error for the histogram ``counts`` (equal bins over
    ``[lo, hi]``); see the module docstring for the search."""
    counts = np.asarray(counts, np.float64)
    lo, hi = float(lo), float(hi)
    if not hi > lo or counts.sum() == 0:
        return lo, hi
    width = (hi - lo) / len(counts)
    keep = counts > 0
    centres = (lo + (np.nonzero(keep)[0] + 0.5) * width)
    counts = counts[keep]
    best_lo, best_hi = lo, hi

    def pick(fractions, side):
        nonlocal best_lo, best_hi
        f = np.minimum(fractions, 1.0)
        if side == "hi":
            los, his = np.full(len(f), best_lo), hi * f
        else:
            los, his = lo * f, np.full(len(f), best_hi)
        k = int(np.argmin(_qdq_sse(centres, counts, los, his)))
        best_lo, best_hi = float(los[k]), float(his[k])

    sides = [s for s, end in (("hi", hi), ("lo", lo)) if end != 0.0]
    for _ in range(2):
        for side in sides:
            pick(_COARSE, side)
    for side in sides:
        current = best_hi / hi if side == "hi" else best_lo / lo
        pick(current * _FINE, side)
    return best_lo, best_hi


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
