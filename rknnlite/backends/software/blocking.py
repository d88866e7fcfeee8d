"""Cache blocking and work-splitting sizes of the conv kernels, derived from the host CPU.

Each size is a fraction of a cache level of :func:`~.host_cpu.detect_caches` (or a rate of
the SIMD path in use), never a constant tuned for one CPU.  The fractions were measured on
the CPU the kernels were first tuned on (an AMD EPYC, Zen 4: 32 KiB L1d, 1 MiB L2, 32 MiB
L3, AVX-512), where they give the sizes that were best there, except the K block and the
panel order, which fit L1d and were measured inside whole models (cold weights) on a Sapphire
Rapids Xeon; on another CPU the same fractions of its own caches apply.
``RKNNLITE_CPU_CACHES`` (see ``host_cpu``) changes the caches they are taken from.  None of
these sizes changes a computed value: they only decide how the same sums are cut into
cache-sized pieces and threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .host_cpu import CpuCaches
from .isa import isa_levels

__all__ = ["Blocking", "derive_blocking", "macs_per_cycle"]

#: Floats per k step of the widest micro-kernel tile on each level, its A panel and its B panel
#: together (AVX-512: 8 x 32 normal tiles, 32 x 7 transposed; AVX2 6 x 16; NEON 8 x 12; the
#: generic path's BLAS GEMMs take no K block from here, it gets NEON's)
_TILE_FLOATS = {2: 8 + 32, 1: 6 + 16, 0: 8 + 12}
_TILE_FLOATS_ARM = {1: 8 + 12, 0: 8 + 12}
#: Multiply-adds per cycle of one core on each micro-kernel level (two FMA pipes of 16, 8 or
#: 4 float32 lanes: AVX-512, AVX2, and the 128-bit SIMD a BLAS or the compiler uses on the
#: generic path); level 1 on aarch64 is NEON, two 128-bit pipes as the generic path
_MACS_PER_CYCLE = {2: 32, 1: 16, 0: 8}
_MACS_PER_CYCLE_ARM = {1: 8, 0: 8}
#: A layer splits across threads when one thread would take at least this many cycles on it
#: (about 22 us at 3 GHz: several times a worker's wake-up and join, which the caller polls
#: for; twice this before the join polled: on the Xeon of README, two threads, squeezenet
#: 3.58 -> 3.44 ms and inception_v2 16.56 -> 16.41 with the half, densenet121 alike)
_SPLIT_MIN_CYCLES = 1 << 16
#: A Winograd layer split phase by phase pays three fork-joins with a GIL hand-off per work
#: item: below 12x the one-split work it ran slower on two threads than on one (Zen 5 EPYC,
#: inception_v2's 7x7 and 14x14 layers of 12M-16M Winograd multiply-adds: 0.62x-0.94x)
_PHASE_SPLITS = 12


def macs_per_cycle(isa_level: int, machine: Optional[str] = None) -> int:
    """Peak float32 multiply-adds per cycle of the micro-kernel level on ``machine`` (default
    this one): 2 AVX-512, 1 AVX2 (x86-64) or NEON (aarch64), 0 generic."""
    table = _MACS_PER_CYCLE_ARM if "neon" in isa_levels(machine) else _MACS_PER_CYCLE
    return table.get(isa_level, table[0])


@dataclass(frozen=True)
class Blocking:
    """Sizes the conv kernels cut their work by.

    Attributes:
        b_block_floats: floats of one packed B block of the gather GEMM (3/8 of L2: the block
            stays in L2 beside the A panel and the output tile streaming through it).
        max_kc: largest K block, in floats: the largest power of two at which one tile's A
            and B panels (``max_kc`` x (MR + NR) floats) fit in L1d together, so the panel a
            sweep reuses stays in L1 while the other streams past it (measured on a Sapphire
            Rapids Xeon, 48 KiB L1d, inside ResNet-50: 256 against 512, where the B panel
            alone filled 64 KiB, made its 14x14 and 7x7 layers 5-9 % faster).
        a_block_bytes: a K block of A (M x kc floats) larger than this goes A panel by A
            panel instead of B panel by B panel (half of L1d).  In a model the weights come
            from memory (each layer's are read once per run): swept B panel by B panel, a K
            block of them is read in the first sweep, at 4 bytes per cycle on AVX-512 whatever
            the shape, and the layer waits on memory for that sweep; A panel by A panel they
            stream in once, evenly, over the whole block.  Only weights small enough to stay in
            L1 beside the B panel keep the B-panel sweep (measured on the same Xeon inside
            ResNet-50: its 14x14 and 28x28 1x1 layers 8-17 % faster).
        direct_b_bytes: a gather GEMM reads its B panels straight from the image (32
            contiguous columns, unpacked) only while its weights (M x K floats per group) fit
            in this many bytes (L1d); with more weight panels each B panel is read again per
            panel, and a packed panel streams from L2 where an unpacked one gathers K rows
            (measured on a Zen 5 EPYC: ResNet-50's 1x1 layers 12 % faster packed, layers with
            16-64 output channels and few inputs 2-20 % faster unpacked).
        wino_v_cache: a Winograd layer whose transformed input passes this many bytes runs in
            bands of tile rows (half of L2).
        wino_v_band: bytes of transformed input per band (a quarter of L2).
        wino_u_cache: banding needs the transformed weights within this many bytes (four L2s,
            at most half of L3 where there is one: every band reads them again).
        column_split_weights_bytes: a multithreaded GEMM with too few column panels to share
            out evenly (14x14 outputs: 7, a 4/3 split for 2 threads) is still split by columns
            while its weights, which every column block reads again, fit in this many bytes
            (half of L2); otherwise by weight rows, all of them multiplying one B packed once
            and shared.  Reading a packing another core wrote costs cross-core transfers:
            on a Sapphire Rapids Xeon, DenseNet-121's 25 14x14 1x1 layers on two threads took
            13 % less time split by columns.
        parallel_min_macs: a layer with fewer multiply-adds stays on one thread
            (:data:`_SPLIT_MIN_CYCLES` cycles of the path's peak rate).
        winograd_phases_min_macs: the same for a Winograd layer split phase by phase (input
            transform, products, output transform: three fork-joins, each running Python
            work items on the workers) rather than in native bands: :data:`_PHASE_SPLITS`
            times ``parallel_min_macs``.
    """

    b_block_floats: int
    max_kc: int
    a_block_bytes: int
    direct_b_bytes: int
    wino_v_cache: int
    wino_v_band: int
    wino_u_cache: int
    column_split_weights_bytes: int
    parallel_min_macs: int
    winograd_phases_min_macs: int


def derive_blocking(caches: CpuCaches, isa_level: int, machine: Optional[str] = None) -> Blocking:
    """The :class:`Blocking` for these caches and micro-kernel level on ``machine`` (default
    this one; see the attributes for each rule).  Every size is at least what one micro-kernel
    panel needs."""
    l1d, l2 = max(caches.l1d, 4 << 10), max(caches.l2, 64 << 10)
    tiles = _TILE_FLOATS_ARM if "neon" in isa_levels(machine) else _TILE_FLOATS
    tile = tiles.get(isa_level, tiles[0])
    kc = 128
    while kc * 2 * tile * 4 <= l1d and kc < 4096:
        kc *= 2
    u_cache = 4 * l2 if caches.l3 <= 0 else max(l2, min(4 * l2, caches.l3 // 2))
    return Blocking(
        b_block_floats=max(16 << 10, (3 * l2 // 8) // 4),
        max_kc=kc,
        a_block_bytes=l1d // 2,
        direct_b_bytes=l1d,
        wino_v_cache=l2 // 2,
        wino_v_band=l2 // 4,
        wino_u_cache=u_cache,
        column_split_weights_bytes=l2 // 2,
        parallel_min_macs=macs_per_cycle(isa_level, machine) * _SPLIT_MIN_CYCLES,
        winograd_phases_min_macs=_PHASE_SPLITS * macs_per_cycle(isa_level, machine) * _SPLIT_MIN_CYCLES,
    )
