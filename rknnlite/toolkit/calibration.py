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
* ``kl_divergence`` (:func:`kl_range`): RKNN-Toolkit2 2.5.0's rule, established by
  experiment (``docs/vendor-examples.md``).  A second pass accumulates a histogram of
  ``|x|`` (:data:`KL_BINS` = 1024 equal bins over ``[0, max(-lo, hi)]``); bin 0 (exact
  zeros and whatever rounds to zero) takes no part.  Of the remaining bins, each
  candidate ``t = 128 .. 1022`` keeps the first ``t`` as the reference distribution
  ``P``, everything beyond folded into its last bin.  ``Q`` merges those ``t`` bins
  (outliers excluded) into :data:`KL_TARGET_BINS` groups of ``t // 128`` bins, the last
  group taking the remainder, and gives every bin of a group the group's count divided
  by its number of non-empty bins; the last bin of ``P`` is left out of that spreading.
  Empty bins of either distribution count :data:`KL_EPS`; both are normalised and the
  ``t`` with the smallest ``KL(P || Q)`` gives the threshold ``T = (t + 1.5) * width``
  (the centre of the first bin beyond ``P``), the range being
  ``[max(lo, -T), min(hi, T)]``.  When even the smallest divergence exceeds
  :data:`KL_MAX_DIVERGENCE` (a spike in a low bin, a histogram with every other bin
  empty) the tensor keeps its ``normal`` range.  All candidates are evaluated at once
  from cumulative sums (no Python loop per threshold).  The model's inputs are the
  exception (:class:`SampleKLObserver`): each calibration sample is ranged on its own and
  the input's range is the union.

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
#: vendor's boundary, observed in this module's divergences, lies between 0.1021 and 0.1034).
KL_MAX_DIVERGENCE = 0.1027
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
            counts = histogram(np.abs(value), lo, hi, bins)  # bin 0 is ignored by kl_curve
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
            lo, hi = kl_range(histogram(np.abs(value), 0.0, amax, KL_BINS), lo, hi)
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
    bins of ``|x|`` over ``[0, max(-lo, hi)]``) of a tensor whose values span ``[lo, hi]``:
    the threshold ``T`` of :func:`kl_curve` with the smallest divergence gives
    ``[max(lo, -T), min(hi, T)]``.  ``[lo, hi]`` itself when no threshold is tried (an
    empty histogram) or when even the best divergence exceeds :data:`KL_MAX_DIVERGENCE`."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    thresholds, kl = kl_curve(counts, lo, hi)
    if len(thresholds) == 0:
        return lo, hi
    k = int(np.argmin(kl))
    if not kl[k] <= KL_MAX_DIVERGENCE:
        return lo, hi
    best = float(thresholds[k])
    return max(lo, -best), min(hi, best)


def kl_curve(counts: np.ndarray, lo: float, hi: float) -> Tuple[np.ndarray, np.ndarray]:
    """``(thresholds, divergences)`` of the ``|x|`` histogram ``counts`` (equal bins over
    ``[0, max(-lo, hi)]``), one pair per candidate; see the module docstring for the
    definition.  Both arrays are empty when the histogram is too short, empty, or the
    range is ``[0, 0]``."""
    h = np.asarray(counts, np.float64)
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    amax = max(-lo, hi)
    g = KL_TARGET_BINS
    d = h[1:]  # bin 0 (zeros and the values that quantize to zero) takes no part
    n = len(d)
    if not amax > 0 or d.sum() == 0 or n <= g:
        return np.zeros(0), np.zeros(0)
    width = amax / len(h)
    eps = KL_EPS
    log_eps = np.log(eps)
    ch = np.concatenate([[0.0], np.cumsum(d)])
    cn = np.concatenate([[0], np.cumsum(d > 0)])
    dlogd = np.where(d > 0, d * np.log(np.where(d > 0, d, 1.0)), 0.0)
    cl = np.concatenate([[0.0], np.cumsum(dlogd)])
    total = ch[-1]

    t = np.arange(g, n)  # P holds the first t bins of d, the last one with the outliers
    m = t // g
    last = ch[n] - ch[t - 1]  # P's last bin
    last_e = np.where(last > 0, last, eps)
    empty = (t - 1) - cn[t - 1]  # empty bins of P before its last one
    p_sum = total + eps * (empty + (last == 0))
    p_log_p = cl[t - 1] + empty * eps * log_eps + last_e * np.log(last_e)

    # Q: group j covers m bins from j * m (the last group: to t); its count (outliers
    # excluded) is spread over the group's non-empty bins, and every bin of the group
    # gets that share.  The last bin of P is not part of the spreading: Q is eps there.
    j = np.arange(g)[None, :]
    a = j * m[:, None]
    is_last = j == g - 1
    b_sum = np.where(is_last, t[:, None], a + m[:, None])
    b = np.where(is_last, (t - 1)[:, None], a + m[:, None])
    s = ch[b_sum] - ch[a]
    nz = (cn[b] - cn[a]).astype(np.float64)
    bins = (b - a).astype(np.float64)
    ok = (nz > 0) & (s > 0)
    share = np.where(ok, s / np.where(nz > 0, nz, 1.0), eps)
    p_mass = (ch[b] - ch[a]) + (bins - nz) * eps  # P's mass over the group, empty bins at eps
    p_log_q = np.where(ok, p_mass * np.log(share), bins * eps * log_eps).sum(axis=1) + last_e * log_eps
    q_sum = (bins * share).sum(axis=1) + eps
    kl = (p_log_p - p_log_q) / p_sum - np.log(p_sum) + np.log(q_sum)
    return (t + 1.5) * width, kl
