#!/usr/bin/env python3
"""Layout conversion speed (``rknnlite.tensors.layout``) against a plain memory copy.

    python tools/bench/bench_layout.py [--runs 10] [--rounds 5] [--mb 8] [--only SUBSTRING] [--stat min]

Each case converts one tensor of about ``--mb`` MiB (int8 / float16 / uint8) into a
preallocated output (the ``out=`` path, so only the copy is timed), and times
``np.copyto`` of an array of the same bytes (the memcpy reference).  The two alternate
for ``--rounds`` rounds, each the median of ``--runs`` calls after 2 warm-up calls; the
table gives each side's best median (so a burst of load from other processes does not
land on one side only), the throughput (bytes of the source tensor / time, GB = 1e9
bytes) and the conversion's throughput as a percentage of the memcpy one.  ``--stat min``
instead alternates single calls (``--runs`` x ``--rounds`` of each) and keeps each side's
fastest call: the least load-sensitive figure on a shared machine (a call that no other
process disturbed).

C2 = 16 (int8) / 8 (fp16) are RK3588's values, C2 = 8 / 4 RK3566's.  Every NCHW/NHWC
case runs at H x W = 256 x 256 (NCHW channel planes a power of two apart, which costs the
NCHW kernels cache-set conflicts) and 240 x 273.  The C=13 rows have a last channel
block with only 5 real channels; the last rows pad / unpad NHWC rows to a multiple of 16
pixels.  Timings on a shared machine are noisy: compare the two columns of one row,
measured in alternation, rather than rows or runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import interleaved_ms, machine, median_ms  # noqa: E402
from rknnlite.tensors import layout  # noqa: E402


def _cases(mib: float):
    """(name, function, source array, argument, output array) for every case."""
    rng = np.random.default_rng(0)
    out = []

    def src(dtype, c, nhwc, h=256, w=None):
        if w is None:  # the width that makes the tensor `mib` MiB
            w = max(1, int(mib * (1 << 20) / np.dtype(dtype).itemsize / c) // h)
        shape = (1, h, w, c) if nhwc else (1, c, h, w)
        return rng.integers(-100, 100, size=shape).astype(dtype)

    def both_ways(dtype, c2, x, nhwc, note=""):
        to = layout.nhwc_to_nc1hwc2 if nhwc else layout.nchw_to_nc1hwc2
        back = layout.nc1hwc2_to_nhwc if nhwc else layout.nc1hwc2_to_nchw
        blocked = to(x, c2)
        tag = "NHWC" if nhwc else "NCHW"
        c = x.shape[3] if nhwc else x.shape[1]
        out.append((f"{dtype} {tag} -> NC1HWC2 C2={c2}{note} {list(x.shape)}", to, x, c2, np.empty_like(blocked)))
        out.append((f"{dtype} NC1HWC2 C2={c2} -> {tag}{note} {list(blocked.shape)}", back, blocked, c,
                    np.empty_like(x)))

    # H*W = 256*256: channel planes 64 KB (int8) apart, the cache-set-conflict case; then
    # H*W = 240*273, not a power of two.
    for h, w in ((256, None), (240, 273)):
        for dtype, c2s, c in (("int8", (16, 8), 128), ("float16", (8, 4), 64)):
            for c2 in c2s:
                for nhwc in (False, True):
                    both_ways(dtype, c2, src(dtype, c, nhwc, h, w), nhwc)
    for nhwc in (False, True):
        both_ways("int8", 8, src("int8", 13, nhwc), nhwc, ", C=13")
    h = 1080
    w = int(mib * (1 << 20) / 3 / h) // 16 * 16 - 6  # a width that needs padding to a multiple of 16
    img = rng.integers(0, 255, size=(1, h, w, 3), dtype=np.uint8)
    ws = -(-w // 16) * 16
    padded = layout.pad_width(img, ws)
    out.append((f"uint8 NHWC pad_width {w}->{ws} {list(img.shape)}", layout.pad_width, img, ws,
                np.empty_like(padded)))
    out.append((f"uint8 NHWC unpad_width {ws}->{w} {list(padded.shape)}", layout.unpad_width, padded, w,
                np.empty_like(img)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="timed calls per median")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds; the best median is kept")
    ap.add_argument("--mb", type=float, default=8.0, help="tensor size in MiB")
    ap.add_argument("--only", default="", help="run only cases whose name contains this")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="best median of --runs calls (default) or fastest single call")
    args = ap.parse_args(argv)

    print(machine())
    print(f"| conversion ({args.mb:g} MiB) | ms | GB/s | memcpy GB/s | % of memcpy |")
    print("|---|---:|---:|---:|---:|")
    for name, fn, x, arg, y in _cases(args.mb):
        if args.only and args.only not in name:
            continue
        ref_src = x.reshape(-1).view(np.uint8)
        ref_dst = np.empty_like(ref_src)
        t_ref = t = float("inf")
        if args.stat == "min":  # alternate single calls, keep each side's fastest
            calls = interleaved_ms([lambda: np.copyto(ref_dst, ref_src), lambda: fn(x, arg, out=y)],
                                   args.runs * args.rounds, warmup=2)
            t_ref, t = min(calls[0]), min(calls[1])
        for _ in range(args.rounds if args.stat == "median" else 0):
            # alternate, keep each side's best median (load bursts on shared hosts)
            t_ref = min(t_ref, median_ms(lambda: np.copyto(ref_dst, ref_src), args.runs, warmup=2))
            t = min(t, median_ms(lambda: fn(x, arg, out=y), args.runs, warmup=2))
        gbs = x.nbytes / t / 1e6
        ref_gbs = x.nbytes / t_ref / 1e6
        print(f"| {name} | {t:.3f} | {gbs:.1f} | {ref_gbs:.1f} | {100 * gbs / ref_gbs:.0f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
