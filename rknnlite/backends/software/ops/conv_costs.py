"""Whether a 3x3 convolution runs faster as Winograd or as the direct gather GEMM on this CPU.

Winograd F(4x4, 3x3) does 4x fewer multiply-adds than the direct GEMM (F(2x2, 3x3) 2.25x)
but pays, per output tile, for transforming every input and every output channel.  Where
channels are few (squeezenet's 16-channel 3x3 layers, densenet's 32-output ones) the
transforms can outweigh the saving.  Where the crossover lies depends on the CPU's FMA rate
against its load and shuffle throughput, which neither the caches nor the SIMD path tell
(an AMD EPYC, Zen 5: direct 1.4x faster at 16 input channels on 56x56, Winograd 1.3x
faster at 64), so it is measured once per CPU model (``..calibration``) on a few probe
layers, and a cost model fitted to them decides every layer:

* direct: ``d * 9*M*C*N`` (``N`` output pixels),
* Winograd: ``T * A * (w * M*C + (t_in * C + t_out * M) / 36)`` for ``T`` tiles of
  ``A`` = 36 (F(4x4)) or 16 (F(2x2)) transformed components.

The fitted seconds per multiply-add ``d`` and ``w`` and per transformed tile-channel ``t_in``,
``t_out`` are stored, ``w``, ``t_in`` and ``t_out`` once for each tile size: F(2x2) runs only
where an output has too few 4x4 tiles (7x7 maps), where its 16 GEMMs of 16 tiles each cost per
multiply-add what F(4x4)'s larger ones do not (a Sapphire Rapids Xeon: F(2x2) 10-28 % faster than
direct on inception_v2's 160-224 channel 7x7 layers, where costs fitted on F(4x4) alone chose
direct).  A measurement without F(2x2) probes prices F(2x2) with F(4x4)'s costs.  With
``RKNNLITE_CALIBRATION=off`` (or no micro-kernels) the built-in rule alone decides: Winograd for
every eligible layer.  The choice never changes what is computed beyond Winograd's documented
rounding (``conv`` module docstring).
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import asdict, dataclass
from itertools import combinations
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..calibration import calibrated
from ..host_cpu import cpu_model, detect_caches
from ..parallel import using

__all__ = ["CHOICE", "PROBES", "WinogradCosts", "calibration_key", "current_costs", "fit", "measure_probes"]

#: probe layers (input channels, output channels, square output size): few and many
#: channels on both sides, big and small images
PROBES = ((16, 64, 28), (32, 64, 28), (64, 64, 28), (16, 128, 14), (64, 128, 14), (128, 32, 28),
          (64, 128, 7), (128, 192, 7), (192, 320, 7))
_REPEATS = 5
_SCHEMA = "conv-winograd/2"
#: the measurement's name in the calibration store
CHOICE = "conv-winograd"


@dataclass(frozen=True)
class WinogradCosts:
    """Fitted costs in seconds (see the module docstring)."""

    direct_mac: float
    winograd_mac: float
    transform_in: float
    transform_out: float
    #: F(2x2)'s own ``w``, ``t_in``, ``t_out``; 0 (no F(2x2) probe fitted): F(4x4)'s apply
    f2_mac: float = 0.0
    f2_in: float = 0.0
    f2_out: float = 0.0

    def winograd_pays(self, C: int, M: int, out_hw: Sequence[int], tile: int) -> bool:
        """True when Winograd F(tile x tile) is estimated faster than the direct GEMM for a
        C -> M channel 3x3 convolution with output ``out_hw``."""
        oh, ow = out_hw
        tiles = (-(-oh // tile)) * (-(-ow // tile))
        comps = (tile + 2) ** 2
        w, t_in, t_out = self.tile_costs(tile)
        direct = self.direct_mac * 9 * M * C * oh * ow
        winograd = tiles * comps * (w * M * C + (t_in * C + t_out * M) / 36)
        return winograd < direct

    def tile_costs(self, tile: int) -> tuple:
        """``(w, t_in, t_out)`` of Winograd F(tile x tile)."""
        if tile == 2 and self.f2_mac > 0:
            return self.f2_mac, self.f2_in, self.f2_out
        return self.winograd_mac, self.transform_in, self.transform_out

    @classmethod
    def from_value(cls, value: Dict) -> Optional["WinogradCosts"]:
        """The costs a stored measurement holds, or None if it is malformed."""
        try:
            costs = cls(**{k: float(value[k]) for k in ("direct_mac", "winograd_mac", "transform_in",
                                                          "transform_out")},
                        **{k: float(value[k]) for k in ("f2_mac", "f2_in", "f2_out") if k in value})
        except (KeyError, TypeError, ValueError):
            return None
        fields = asdict(costs).values()
        if not all(np.isfinite(v) and v >= 0 for v in fields) or costs.direct_mac <= 0 or costs.winograd_mac <= 0:
            return None
        return costs


def _nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a few columns: the best of every subset's plain fit
    that comes out non-negative."""
    best, best_res = np.zeros(a.shape[1]), float(np.sum(y * y))
    cols = range(a.shape[1])
    for k in range(1, a.shape[1] + 1):
        for subset in combinations(cols, k):
            sol = np.linalg.lstsq(a[:, subset], y, rcond=None)[0]
            if np.any(sol < 0):
                continue
            res = float(np.sum((a[:, subset] @ sol - y) ** 2))
            if res < best_res:
                best_res, best = res, np.zeros(a.shape[1])
                best[list(subset)] = sol
    return best


def _fit_tile(probes: Sequence[Dict], tile: int) -> np.ndarray:
    """``[w, t_in, t_out]`` of the probes run as F(tile x tile) (zeros: none)."""
    rows = []
    for p in probes:
        C, M, n = p["C"], p["M"], p["size"]
        tiles, comps = (-(-n // tile)) ** 2, (tile + 2) ** 2
        # winograd_s = tiles * comps * (w*M*C + (t_in*C + t_out*M)/36), each row scaled to relative error
        rows.append(np.array([tiles * comps * M * C, tiles * comps * C / 36, tiles * comps * M / 36],
                             np.float64) / p["winograd_s"])
    return _nnls(np.array(rows), np.ones(len(rows))) if rows else np.zeros(3)


def fit(probes: Sequence[Dict]) -> Optional[WinogradCosts]:
    """The :class:`WinogradCosts` of measured probes (dicts with ``C``, ``M``, ``size``,
    ``direct_s``, ``winograd_s`` on a ``size`` x ``size`` output, and ``tile``: the Winograd
    variant that ran, 4 when left out), fitted in relative error, each tile size on its own
    probes; None when the measurements cannot give positive multiply-add costs."""
    if not probes:
        return None
    direct = [p["direct_s"] / (9 * p["M"] * p["C"] * p["size"] ** 2) for p in probes]
    w4 = _fit_tile([p for p in probes if p.get("tile", 4) == 4], 4)
    w2 = _fit_tile([p for p in probes if p.get("tile", 4) == 2], 2)
    if w2[0] <= 0:
        w2 = np.zeros(3)   # no usable F(2x2) fit: F(4x4)'s costs price it
    return WinogradCosts.from_value({"direct_mac": statistics.median(direct), "winograd_mac": w4[0],
                                     "transform_in": w4[1], "transform_out": w4[2],
                                     "f2_mac": w2[0], "f2_in": w2[1], "f2_out": w2[2]})


def measure_probes(repeats: int = _REPEATS) -> List[Dict]:
    """Time each :data:`PROBES` layer both ways on the calling thread (the fastest of
    ``repeats`` interleaved runs, thread CPU time): a list of :func:`fit`'s dicts."""
    from . import KERNELS  # the Conv kernel itself, forced down each path
    from .conv import _geometry

    spec = KERNELS["Conv"]
    rng = np.random.default_rng(0)
    out = []
    with using(None):  # one thread, whatever run this happens in
        for C, M, n in PROBES:
            x = rng.standard_normal((1, C, n, n)).astype(np.float32)
            w = (rng.standard_normal((M, C, 3, 3)) * 0.1).astype(np.float32)
            b = np.zeros(M, np.float32)
            y = [np.empty((1, M, n, n), np.float32)]
            prepared = [spec.prepare({"pads": [1, 1, 1, 1], "_opset": 17, "_winograd": how}, [None, w, b])
                        for how in ("always", False)]
            runs = [lambda p=p: spec.fn([x, w, b], p, out=y) for p in prepared]
            best = [float("inf")] * 2
            for rep in range(repeats + 1):
                for i, run in enumerate(runs):
                    t = time.thread_time_ns()
                    run()
                    if rep:  # the first round warms caches and packs weights
                        best[i] = min(best[i], (time.thread_time_ns() - t) * 1e-9)
            tile = _geometry(prepared[0]["_conv"], x.shape, w.shape).wtile
            out.append({"C": C, "M": M, "size": n, "tile": tile, "winograd_s": best[0], "direct_s": best[1]})
    return out


_UNSET = object()
_lock = threading.Lock()
_costs = _UNSET


def calibration_key(isa_level: int) -> dict:
    """What the stored measurement is valid for: this CPU model, its caches, the SIMD level."""
    return {"choice": _SCHEMA, "cpu": cpu_model(), "caches": detect_caches().describe(), "isa": isa_level}


def _load(isa_level: int) -> Optional[WinogradCosts]:
    key = calibration_key(isa_level)

    def measure() -> dict:
        probes = measure_probes()
        costs = fit(probes)
        return {"probes": probes, **(asdict(costs) if costs is not None else {})}

    # a stored value holds usable costs, or the probes a failed fit came from; else it is damaged
    value = calibrated(CHOICE, key, measure, accept=lambda v: "probes" in v or WinogradCosts.from_value(v) is not None)
    return None if value is None else WinogradCosts.from_value(value)


def current_costs(isa_level: int) -> Optional[WinogradCosts]:
    """This CPU's :class:`WinogradCosts` (measured on the first call of the process when none
    are stored), or None: calibration off, or the measurement gave no usable fit."""
    global _costs
    if _costs is _UNSET:
        with _lock:
            if _costs is _UNSET:
                _costs = _load(isa_level)
    return _costs
