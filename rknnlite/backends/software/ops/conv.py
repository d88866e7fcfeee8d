"""Convolution kernels: Conv and ConvTranspose (1 to 3 spatial axes).

Layouts are ONNX's: input ``(N, C, D1, ..., Dk)``, Conv weights ``(M, C/group, k1, ..., kk)``,
ConvTranspose weights ``(C, M/group, k1, ..., kk)``.  See the package docstring for the
calling convention.

How Conv runs (one image at a time, one GEMM per group):

* ``prepare`` validates the attributes and, when the weights are constants, packs
  them once into the micro-kernel layout of ``rknnlite._native.conv_kernels``.
* On x86 with AVX2+FMA or AVX-512, ``gather_gemm`` computes the convolution as a
  GEMM whose right-hand side is gathered straight from the image (stride-1 unpadded
  input) or from a zero-padded stride-phase split copy of it (everything else):
  no im2col matrix, only a cache-sized packed block per thread.  Small outputs
  (7x7, 14x14) use transposed tiles (vectors along output channels).  With several
  threads the phase split (or subsampled copy) of a big input is shared out by
  channels, and when the GEMM is split by weight rows over one column block, its B is
  packed once (K blocks shared out) and read by every row part, not packed per part.
* 2-D 3x3 stride-1 convolutions with enough channels and at least 16 4x4 output
  tiles run as Winograd F(4x4, 3x3): input/output transforms in compiled loops and
  36 channel GEMMs on the same micro-kernels (4x fewer multiply-adds than direct;
  the transformed weights are cached per node).  The input transform runs over all
  channels in one flat vector sweep (each channel's transformed tiles sit on a
  (th + 1) x (tw + 1) grid, as its phase-split input does; see
  ``conv_kernels.winograd_input``), so small images (14x14, 7x7) are as cheap per
  tile as large ones.  Its float32 error is ~1e-5 of the
  output scale (direct: ~3e-7).  Where F(4x4)'s transformed weights (36 M C floats)
  would pass the per-layer cap, or the output has too few 4x4 tiles (7x7), F(2x2, 3x3)
  is used if it fits (16 M C floats, 16 2x2 tiles; 2.25x fewer multiply-adds, error
  ~1e-6).  Where few channels make the transforms cost more than they save, the direct
  GEMM runs instead: the crossover is measured once per CPU model (``conv_costs``).  A
  node whose attrs carry ``"_winograd": False`` (set by the caller before ``prepare``)
  never uses Winograd, ``"always"`` whenever it is eligible.  Large images (56x56
  layers) run in bands of tile
  rows, each band transformed, multiplied and transformed back on one thread while its
  data is still in cache (see ``_WINO_V_BAND``); banding never changes a value.  An
  image too small for two bands (14x14, 7x7) whose transformed input is cache-sized runs
  as one band, in one native call; with several threads it is shared by output
  channels: each thread transforms the whole input and computes its share of the
  channels, in one native split.
* Depthwise convolution (one input channel per group) runs a direct compiled loop.
* Elsewhere (no such CPU, huge tensors, tiny GEMMs): im2col into a per-thread
  scratch buffer and ``np.matmul`` into the output; a 1x1 stride-1 unpadded Conv is one
  GEMM per column band of the output (no im2col; bands fixed by the shape, shared out
  across the threads, so results do not depend on the thread count).

Fused activations: a Conv node whose attrs carry ``"_activation"`` (set by the
toolkit's ``fuse_activations`` pass; see :data:`FUSED_ACTIVATIONS`) applies it in the
output stage of every path -- on the accumulator registers before the micro-kernels
store a finished tile, on each channel's tiles in the Winograd output transform, on
each finished depthwise plane, in the BLAS path's bias pass -- never as a separate
pass over the output.  The result equals the unfused Conv followed by the activation
kernel bit for bit (float32).

Fused residual add: a Conv node whose attrs carry ``"_residual": True`` (set by the
toolkit's ``fuse_residual_add`` pass) has a 4th input ``r`` of exactly the output's
shape and computes ``act(conv(x) + bias + r)``: ``r`` is added in the same output
stages, after the bias and before the activation (on the accumulators of the gather
GEMM's last K block, on each finished channel plane of the Winograd output transform
and of the depthwise loop, in the BLAS path's bias pass; transposed tiles add it
right after their transpose).  The result equals Conv, then Add, then the activation
bit for bit (float32).  A plain Conv never takes a 4th input.

Scratch buffers are per thread and reused across calls; with ``out`` given nothing
tensor-sized is allocated after the first call.
"""

from __future__ import annotations

import math
import threading
from functools import partial
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ....errors import ModelInvalidError
from ...._native import conv_kernels as _ck
from ..blocking import derive_blocking
from ..calibration import mode as calibration_mode
from ..host_cpu import detect_caches
from ..isa import select_isa
from ..parallel import SPLIT_MIN_ELEMENTS, current_handle, current_threads, parallel_for
from . import kernel
from . import conv_costs
from . import sparse as _sparse
from .attributes import int_list
from .linear import gemv, gemv_fits
from .pool import pool_stage_conv

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
#: the micro-kernel level in use: the CPU's best, or RKNNLITE_ISA's (see ..isa)
_ISA = select_isa(_ck.limit_isa, _ck.gemm_isa())
#: cache blocking and split sizes from this host's caches (RKNNLITE_CPU_CACHES overrides them)
BLOCKING = derive_blocking(detect_caches(), _ISA)
_ck.set_a_block_bytes(BLOCKING.a_block_bytes)
calibration_mode()  # a bad RKNNLITE_CALIBRATION fails the first software Context, by name
_INT32_MAX = 2 ** 31 - 1
#: floats per packed B block, and the largest K block (see ..blocking)
_BLOCK_FLOATS = BLOCKING.b_block_floats
_MAX_KC = BLOCKING.max_kc

_tls = threading.local()

#: Activations a Conv applies itself, named in ``attrs["_activation"]``:
#:
#: * ``"Relu"``: ``max(x, 0)``;
#: * ``"Clip"``: ``min(max(x, lo), hi)`` with ``attrs["_activation_min"]`` /
#:   ``attrs["_activation_max"]`` (floats; an absent one does not clip), as ONNX Clip
#:   with constant bounds (ReLU6 is ``0, 6``);
#: * ``"LeakyRelu"``: ``x`` for ``x >= 0`` else ``alpha * x`` with
#:   ``attrs["_activation_alpha"]`` (default 0.01).
#:
#: nan stays nan, as with the activation kernels.
FUSED_ACTIVATIONS = ("Relu", "Clip", "LeakyRelu")


def _scratch(name: str, n: int) -> np.ndarray:
    """A per-thread float32 scratch vector of ``n`` floats (grown, never shrunk)."""
    bufs = getattr(_tls, "bufs", None)
    if bufs is None:
        bufs = _tls.bufs = {}
    buf = bufs.get(name)
    if buf is None or buf.shape[0] < n:
        buf = np.empty(max(n, 64), np.float32)
        bufs[name] = buf
    return buf[:n]


# ---------------------------------------------------------------------------- attributes


class _ConvAttrs:
    """Validated geometry attributes of a Conv / ConvTranspose node."""

    __slots__ = ("op", "nd", "kernel_shape", "strides", "dilations", "pads", "auto_pad", "group",
                 "output_padding", "output_shape")

    def __init__(self, attrs, op: str, nd: int):
        self.op = op
        self.nd = nd
        if nd < 1 or nd > 3:
            raise ModelInvalidError(f"{nd} spatial axes; 1 to 3 are supported", op=op)
        ks = attrs.get("kernel_shape")
        self.kernel_shape = None if ks is None else int_list(attrs, "kernel_shape", op, nd, 1, 1)
        self.strides = int_list(attrs, "strides", op, nd, 1, 1)
        self.dilations = int_list(attrs, "dilations", op, nd, 1, 1)
        auto_pad = attrs.get("auto_pad", "NOTSET") or "NOTSET"
        if auto_pad not in _AUTO_PADS:
            raise ModelInvalidError(f"attribute auto_pad must be one of {', '.join(_AUTO_PADS)}, got {auto_pad!r}",
                                    op=op)
        self.auto_pad = auto_pad
        self.pads = int_list(attrs, "pads", op, 2 * nd, 0, 0 if op == "Conv" else None)
        group = attrs.get("group", 1)
        if not isinstance(group, (int, np.integer)) or isinstance(group, bool) or group < 1:
            raise ModelInvalidError(f"attribute group must be an int >= 1, got {group!r}", op=op)
        self.group = int(group)
        self.output_padding = [0] * nd
        self.output_shape = None
        if op == "ConvTranspose":
            self.output_padding = int_list(attrs, "output_padding", op, nd, 0, 0)
            os_ = attrs.get("output_shape")
            if os_ is not None:
                os_ = [int(v) for v in os_]
                if len(os_) == nd + 2:  # some exporters include batch and channels
                    os_ = os_[2:]
                if len(os_) != nd or any(v < 0 for v in os_):
                    raise ModelInvalidError(f"attribute output_shape must have {nd} values >= 0, got {os_}", op=op)
                self.output_shape = os_

    def check_weights(self, w: np.ndarray):
        """Validate the weight shape against the attributes (``ModelInvalidError``)."""
        op = self.op
        if w.ndim != self.nd + 2:
            raise ModelInvalidError(f"weights of shape {list(w.shape)} do not have {self.nd} spatial axes", op=op)
        if self.kernel_shape is not None and list(w.shape[2:]) != self.kernel_shape:
            raise ModelInvalidError(f"attribute kernel_shape {self.kernel_shape} does not match the weights' "
                                    f"spatial shape {list(w.shape[2:])}", op=op)
        if w.shape[0] % self.group:
            raise ModelInvalidError(f"weights' first axis ({w.shape[0]}) is not divisible by group={self.group}",
                                    op=op)


def _nd_of(attrs, consts) -> Optional[int]:
    """Number of spatial axes, from the constant weights or the attributes (None: unknown yet)."""
    w = consts[1] if consts is not None and len(consts) > 1 else None
    if w is not None:
        return np.ndim(w) - 2
    for name in ("kernel_shape", "strides", "dilations", "output_padding"):
        if attrs.get(name) is not None:
            return len(attrs[name])
    if attrs.get("pads") is not None:
        return len(attrs["pads"]) // 2
    return None


# ---------------------------------------------------------------------------- Conv


class _ConvPlan:
    """Per-node state: validated attributes, packed constant weights, geometry cache."""

    def __init__(self, ca: Optional[_ConvAttrs], w: Optional[np.ndarray], b: Optional[np.ndarray]):
        self.ca = ca
        self.w_src = w
        self.b_src = b
        self.bias = None if b is None else np.array(b, dtype=np.float32).reshape(-1)  # own copy: see caches_inputs
        self.packed: Dict[object, object] = {}  # transposed? -> packed weights; ("wino", tile) -> U
        self.geoms: Dict[tuple, "_Geometry"] = {}
        self.lock = threading.Lock()
        self.winograd = True
        self.act: Optional[tuple] = None  # fused activation (see _fused_activation)
        self.residual = False  # inputs[3] is added before the activation (fused Add)

    def packed_for(self, w: np.ndarray, transposed: bool) -> np.ndarray:
        """Packed weights of every group, (group, panels, K, MR): cached for the node's
        constant weights, else packed now."""
        if w is self.w_src:
            packs = self.packed.get(transposed)
            if packs is None:
                with self.lock:
                    packs = self.packed.get(transposed)
                    if packs is None:
                        packs = _pack_groups(w, self.ca.group, transposed)
                        self.packed[transposed] = packs
            return packs
        return _pack_groups(w, self.ca.group, transposed)

    def winograd_for(self, w: np.ndarray, tile: int) -> np.ndarray:
        """Packed Winograd F(tile x tile, 3x3) transformed weights ((tile+2)**2, panels, C, MR):
        cached for constant weights."""
        key = ("wino", tile)
        if w is self.w_src:
            u = self.packed.get(key)
            if u is None:
                with self.lock:
                    u = self.packed.get(key)
                    if u is None:
                        u = self.packed[key] = _pack_winograd(w, tile)
            return u
        return _pack_winograd(w, tile)


def _pack_winograd(w: np.ndarray, tile: int) -> np.ndarray:
    u = _ck.winograd_weights(np.ascontiguousarray(w, dtype=np.float32), tile)
    return np.stack([_ck.pack_weights(u[i]) for i in range(u.shape[0])])


def _pack_groups(w: np.ndarray, group: int, transposed: bool) -> np.ndarray:
    m = w.shape[0]
    wm = np.ascontiguousarray(w, dtype=np.float32).reshape(group, m // group, -1)
    if group == 1:
        return _ck.pack_weights(wm[0], transposed)[None]
    return np.stack([_ck.pack_weights(wm[g], transposed) for g in range(group)])


def _act_float(attrs, name: str, default: Optional[float]) -> Optional[float]:
    value = attrs.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or math.isnan(float(value)):
        raise ModelInvalidError(f"attribute {name} must be a number (not nan), got {value!r}", op="Conv")
    return float(np.float32(value))


def _fused_activation(attrs) -> Optional[tuple]:
    """The ``act`` argument of the compiled output stages for ``attrs["_activation"]``
    (None: no activation); ``ModelInvalidError`` for an unsupported one."""
    name = attrs.get("_activation")
    if name is None:
        return None
    if name == "Relu":
        return (_ck.ACT_CLIP, 0.0, math.inf)
    if name == "Clip":
        lo = _act_float(attrs, "_activation_min", None)
        hi = _act_float(attrs, "_activation_max", None)
        if lo is None and hi is None:
            return None
        return (_ck.ACT_CLIP, -math.inf if lo is None else lo, math.inf if hi is None else hi)
    if name == "LeakyRelu":
        return (_ck.ACT_LEAKY, _act_float(attrs, "_activation_alpha", 0.01))
    raise ModelInvalidError(f"attribute _activation must be one of {', '.join(FUSED_ACTIVATIONS)}, got {name!r}",
                            op="Conv")


def _conv_prepare(attrs, consts):
    nd = _nd_of(attrs, consts)
    w = consts[1] if consts is not None and len(consts) > 1 else None
    b = consts[2] if consts is not None and len(consts) > 2 else None
    ca = None
    if nd is not None:
        ca = _ConvAttrs(attrs, "Conv", nd)
        if w is not None:
            ca.check_weights(w)
            if b is not None and (np.ndim(b) != 1 or b.shape[0] != w.shape[0]):
                raise ModelInvalidError(f"bias of shape {list(np.shape(b))} does not match {w.shape[0]} output "
                                        f"channels", op="Conv")
    residual = attrs.get("_residual", False)
    if not isinstance(residual, (bool, np.bool_)):
        raise ModelInvalidError(f"attribute _residual must be a bool, got {residual!r}", op="Conv")
    if consts is not None and len(consts) > 3 and not residual:
        raise ModelInvalidError(f"{len(consts)} inputs; Conv takes at most 3 (a 4th, the fused residual, "
                                f"needs attribute _residual)", op="Conv")
    new = dict(attrs)
    new["_conv"] = plan = _ConvPlan(ca, w, b)
    winograd = attrs.get("_winograd", True)
    if winograd not in _WINOGRAD_MODES:
        raise ModelInvalidError(f"attribute _winograd must be True, False or 'always', got {winograd!r}", op="Conv")
    plan.winograd = winograd
    plan.act = _fused_activation(attrs)
    plan.residual = bool(residual)
    # layers the toolkit marked sparse (attrs["_sparsity"]) may run the sparse kernel
    new["_sparse"] = _sparse.prepare_conv(attrs, w, nd, ca.group if ca is not None else 1)
    return new


def _conv_pads(ca: _ConvAttrs, in_sp, ksz) -> Tuple[List[int], List[int]]:
    """(pads_begin, pads_end) per spatial axis, resolving auto_pad."""
    nd = ca.nd
    if ca.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(in_sp, ksz, ca.strides, ca.dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            begin.append(small if ca.auto_pad == "SAME_UPPER" else big)
            end.append(big if ca.auto_pad == "SAME_UPPER" else small)
        return begin, end
    if ca.auto_pad == "VALID":
        return [0] * nd, [0] * nd
    return ca.pads[:nd], ca.pads[nd:]


class _Geometry:
    """Everything about a Conv that depends on the input shape (cached per shape)."""

    __slots__ = ("in_sp", "out_sp", "ksz", "pb", "pe", "N", "K", "Cg", "Mg", "path", "direct", "split",
                 "psize", "off", "idx", "transposed", "kcb", "ncb", "dw_pads", "tiles", "wtile", "grid", "chan_in",
                 "dw_args", "wbands", "wbands_mt", "wband_whole", "direct_b", "splits")


def _pad3(v: Sequence[int], fill: int) -> List[int]:
    """A 1-3 element per-axis list as 3 axes (d, h, w), leading axes ``fill``."""
    return [fill] * (3 - len(v)) + list(v)


def _gemm_efficiency(M: int, N: int, transposed: bool) -> float:
    """Rough fraction of useful work in the micro-kernel tiles (padding waste)."""
    mr, nr = _ck.panel_shape(transposed)
    if transposed:
        return (N / (-(-N // nr) * nr)) * (M / (-(-M // mr) * mr)) * 0.95
    full, rest = divmod(N, nr)
    padded = full * nr + (0 if rest == 0 else (nr // 2 if (_ISA >= 2 and rest <= nr // 2) else nr))
    return (N / padded) * (M / (-(-M // mr) * mr))


def _geometry(plan: _ConvPlan, x_shape, w_shape) -> _Geometry:
    ca = plan.ca
    key = (tuple(x_shape[1:]), tuple(w_shape))
    g = plan.geoms.get(key)
    if g is not None:
        return g
    nd = ca.nd
    C = x_shape[1]
    M, Cg = w_shape[0], w_shape[1]
    group = ca.group
    if C != Cg * group:
        raise ModelInvalidError(f"input has {C} channels; weights expect {Cg} x group {group}", op="Conv")
    if M % group:
        raise ModelInvalidError(f"weights' first axis ({M}) is not divisible by group={group}", op="Conv")
    in_sp = list(x_shape[2:])
    ksz = list(w_shape[2:])
    pb, pe = _conv_pads(ca, in_sp, ksz)
    out_sp = []
    for size, k, s, d, a, b in zip(in_sp, ksz, ca.strides, ca.dilations, pb, pe):
        o = (size + a + b - (k - 1) * d - 1) // s + 1
        if o < 0:
            o = 0
        out_sp.append(o)
    g = _Geometry()
    g.in_sp, g.out_sp, g.ksz, g.pb, g.pe = in_sp, out_sp, ksz, pb, pe
    g.chan_in = int(np.prod(in_sp)) if in_sp else 1
    g.N = int(np.prod(out_sp)) if out_sp else 1
    g.K = Cg * int(np.prod(ksz))
    g.Cg, g.Mg = Cg, M // group
    g.direct = all(s == 1 for s in ca.strides) and not any(pb) and not any(pe)
    g.split = None
    g.grid = None
    g.transposed = False
    g.dw_pads = None
    g.dw_args = None
    g.wbands = g.wbands_mt = g.wband_whole = None
    g.splits = {}  # _split_plan's results, by thread count and panels
    empty = g.N == 0 or g.Mg == 0 or x_shape[0] == 0
    if empty:
        g.path = "empty"
    elif Cg == 1 and nd <= 2 and g.Mg >= 1 and all(v > 0 for v in in_sp):
        g.path = "depthwise"
        pb2, pe2 = _pad3(pb, 0)[1:], _pad3(pe, 0)[1:]
        g.dw_pads = (pb2[0], pb2[1], pe2[0], pe2[1])
    elif plan.winograd and _use_winograd(ca, g, C, plan.winograd == "always"):
        g.path = "winograd"
        g.wtile = t = _use_winograd(ca, g, C, True)
        th, tw = -(-out_sp[0] // t), -(-out_sp[1] // t)
        g.tiles = (th, tw)
        # V columns live on a (th + 1, tw + 1) grid per channel; the GEMM gathers the th*tw real tiles
        g.off = (np.arange(C, dtype=np.int64) * (th + 1) * (tw + 1)).astype(np.int32)
        ty, tx = np.meshgrid(np.arange(th), np.arange(tw), indexing="ij")
        g.idx = (ty * (tw + 1) + tx).reshape(-1).astype(np.int32)
        g.transposed = False
        kfull, n_full = g.K, g.N
        g.K, g.N = C, th * tw
        _ck_blocks(g)
        g.K, g.N = kfull, n_full
        g.wbands = _winograd_bands(t, th, tw, C, g.Mg, _WINO_BAND_MIN_TILES, _WINO_V_CACHE)
        g.wbands_mt = _winograd_bands(t, th, tw, C, g.Mg, _WINO_MT_BAND_MIN_TILES, 0)
        if (t + 2) * (t + 2) * C * (th + 1) * (tw + 1) * 4 <= _WINO_V_CACHE:
            g.wband_whole = [_winograd_band(0, th, C, tw, {})]
    else:
        g.path = "blas"
        if _ISA and g.K > 0 and all(v > 0 for v in in_sp):
            eff_n = _gemm_efficiency(g.Mg, g.N, False)
            eff_t = _gemm_efficiency(g.Mg, g.N, True) if _ISA >= 2 else 0.0
            if max(eff_n, eff_t) >= 0.5:
                g.transposed = eff_t > eff_n + 0.05
                _gather_tables(g, ca, C)
                if g.path == "gather":
                    _ck_blocks(g)
    plan.geoms[key] = g
    return g


#: Winograd F(4x4)'s transformed weights take 36 * M * C floats (4x the 3x3 weights),
#: F(2x2)'s 16 * M * C; past this size per layer (4 MB: the memory budget of weights +
#: activations, see tests/test_memory.py, leaves no room for 4x copies of large layers),
#: or with fewer output tiles than this (weights streamed from memory for little work),
#: the direct gather GEMM is used instead.
_WINO_MAX_U_FLOATS = 1024 * 1024
#: attrs["_winograd"]: True (when eligible and measured faster), False (never), "always" (when eligible)
_WINOGRAD_MODES = (True, False, "always")
_WINO_MIN_TILES = 16


def _use_winograd(ca: _ConvAttrs, g: _Geometry, C: int, always: bool = False) -> int:
    """Output tile size of the Winograd variant to use, 4 (F(4x4, 3x3)) or 2 (F(2x2, 3x3)),
    or 0 for none: 2-D 3x3 stride-1 undilated ungrouped convolutions big enough to gain
    (enough channels and tiles) and small enough for the transformed weights, and (unless
    ``always``) estimated faster than the direct GEMM by this CPU's measured costs
    (``conv_costs``; without a measurement every such convolution)."""
    if not _ISA or ca.nd != 2 or ca.group != 1 or g.ksz != [3, 3]:
        return 0
    if any(s != 1 for s in ca.strides) or any(d != 1 for d in ca.dilations):
        return 0
    if C < 16 or g.Mg < 16 or any(v <= 0 for v in g.in_sp):
        return 0
    for t, comps in ((4, 36), (2, 16)):
        tiles = (-(-g.out_sp[0] // t)) * (-(-g.out_sp[1] // t))
        if tiles >= _WINO_MIN_TILES and comps * g.Mg * C <= _WINO_MAX_U_FLOATS:
            costs = None if always else conv_costs.current_costs(_ISA)
            return t if costs is None or costs.winograd_pays(C, g.Mg, g.out_sp, t) else 0
    return 0


#: Banded Winograd: when the transformed input of a whole image (A*A*C floats per tile)
#: would pass _WINO_V_CACHE bytes and the transformed weights fit in _WINO_U_CACHE bytes,
#: the output is done in bands of at least _WINO_BAND_MIN_TILES tiles (the GEMMs' N: a
#: few full micro-kernel panels) whose transformed input takes about _WINO_V_BAND bytes:
#: input transform, GEMMs and output transform of a band run back to back on one thread,
#: so the band's V and M are still in cache when read (measured: 56x56 layers of
#: resnet50 / densenet121 / inception_v2 ~15-20% faster).  Banding never changes a value.
_WINO_V_CACHE = BLOCKING.wino_v_cache
_WINO_U_CACHE = BLOCKING.wino_u_cache
_WINO_V_BAND = BLOCKING.wino_v_band
_WINO_BAND_MIN_TILES = 64
#: With several threads every Winograd Conv whose weights fit is banded, in bands of at
#: least this many tiles: one fork-join per layer (a band is a whole unit of work for a
#: thread) instead of one per phase; measured faster on two threads for 14x14 to 56x56.
_WINO_MT_BAND_MIN_TILES = 16
#: An unbanded Winograd Conv (one band would be too few tiles, or its transformed weights
#: too big) splits each phase across the threads only from this much work (see ..blocking)
_WINO_PHASES_MIN_MACS = BLOCKING.winograd_phases_min_macs


def _winograd_bands(t: int, th: int, tw: int, C: int, M: int, min_tiles: int, v_cache: int):
    """``[(tile_row_begin, tile_row_end, off, idx, kcb, ncb), ...]`` for a banded Winograd
    Conv of th x tw tiles of t x t (bands of at least ``min_tiles`` tiles when the whole
    transformed input passes ``v_cache`` bytes), or None when one pass is better."""
    ncomp = (t + 2) * (t + 2)
    row_bytes = ncomp * C * (tw + 1) * 4
    if row_bytes * th <= v_cache or ncomp * M * C * 4 > _WINO_U_CACHE or th < 2:
        return None
    rows = max(1, _WINO_V_BAND // row_bytes, -(-min_tiles // tw))
    nbands = -(-th // rows)
    if nbands < 2:
        return None
    if nbands % 2 and nbands < th:
        nbands += 1  # an even count of near-equal bands: two threads share them evenly
    tables = {}
    bands = [_winograd_band(th * k // nbands, th * (k + 1) // nbands, C, tw, tables) for k in range(nbands)]
    # biggest first: threads taking bands in turn then end together (14 tile rows in
    # 2,2,2,2,2,2,1,1 finish in 7 band-rows per thread; in 1,2,2,2,1,2,2,2, in 8)
    bands.sort(key=lambda band: band[0] - band[1])
    return bands


def _winograd_band(r0: int, r1: int, C: int, tw: int, tables: dict) -> tuple:
    """Band ``(r0, r1, off, idx, kcb, ncb)`` of tile rows [r0, r1) (``tables``: the gather
    tables made so far, by band height, shared by bands of one height)."""
    n = r1 - r0
    if n not in tables:
        off = (np.arange(C, dtype=np.int64) * (n + 1) * (tw + 1)).astype(np.int32)
        ty, tx = np.meshgrid(np.arange(n), np.arange(tw), indexing="ij")
        idx = (ty * (tw + 1) + tx).reshape(-1).astype(np.int32)
        tables[n] = (off, idx) + _blocks(C, len(idx), False)
    return (r0, r1) + tables[n]


def _run_winograd(g: _Geometry, plan: _ConvPlan, x: np.ndarray, w: np.ndarray, bias, y: np.ndarray,
                  res: Optional[np.ndarray] = None) -> None:
    """Winograd F(t x t, 3x3) Conv (t = g.wtile) of every image: x (n, C, H, W) contiguous,
    y (n, M, OH, OW) contiguous, plus the residual ``res`` (y's shape, contiguous) if any."""
    t = g.wtile
    ncomp = (t + 2) * (t + 2)
    u = plan.winograd_for(w, t)
    threads = current_threads()
    bands = g.wbands_mt if threads > 1 else g.wbands
    if bands is not None:
        _run_winograd_bands(g, bands, plan, x, u, bias, y, res)
        return
    n_img, C = x.shape[0], x.shape[1]
    M = w.shape[0]
    th, tw = g.tiles
    T = th * tw
    if g.wband_whole is not None:
        # too few tiles for bands, and the whole transformed input is cache-sized: one native
        # call transforms, multiplies and transforms back (measured ~3 % of inception_v2 on one
        # thread against three Python-driven passes); a conv big enough to split gives every
        # thread a share of the output channels, each transforming the whole input itself
        split = threads > 1 and M * C * T * ncomp >= _PARALLEL_MIN_MACS
        _run_winograd_bands(g, g.wband_whole, plan, x, u, bias, y, res, mparts=threads if split else 1)
        return
    nv, vstride, nsplit, nbuf = _ck.winograd_scratch(C, th, tw, t)
    v = _scratch("wino_v", nv)
    mt = _scratch("wino_m", ncomp * M * T)
    split = _scratch("phase", nsplit)
    pt, pl = g.pb

    def transform_in(c0: int, c1: int) -> None:
        own = _scratch("wino_buf", nbuf)  # per thread: any thread may run any range
        _ck.winograd_input(xi, pt, pl, th, tw, v, split, own, c0, c1, tile=t)

    def products(i0: int, i1: int) -> None:  # the 36 (16) transformed-domain GEMMs
        blk = _scratch("block", g.kcb * g.ncb + 16)
        _ck.gather_gemm_batch(v[i0 * vstride:], vstride, g.off, g.idx, u[i0:i1], M, mt[i0 * M * T:], blk,
                              g.kcb, g.ncb)

    def transform_out(m0: int, m1: int) -> None:
        own = _scratch("wino_buf", nbuf)
        _ck.winograd_output(mt, M, th, tw, bias, yi, own, m0, m1, act=plan.act, tile=t, residual=ri)

    split_work = parallel_for if M * C * T * ncomp >= _WINO_PHASES_MIN_MACS else _serial
    for i in range(n_img):
        xi, yi = x[i], y[i]
        ri = None if res is None else res[i]
        split_work(C, transform_in, min_chunk=8)
        split_work(ncomp, products)
        split_work(M, transform_out, min_chunk=8)


def _run_winograd_bands(g: _Geometry, bands, plan: _ConvPlan, x: np.ndarray, u: np.ndarray, bias, y: np.ndarray,
                        res: Optional[np.ndarray], mparts: int = 1) -> None:
    """Banded Winograd (see _WINO_V_BAND): every band of tile rows goes through the input
    transform, the GEMMs and the output transform on one thread with that thread's
    scratch; the bands are shared out across the run's native threads
    (``winograd_bands``, no GIL hand-off).  ``mparts`` > 1 cuts each band's output
    channels into that many work items (each transforms the band's input itself)."""
    t = g.wtile
    C, M = x.shape[1], y.shape[1]
    th, tw = g.tiles
    big = M * C * th * tw * (t + 2) * (t + 2) >= _PARALLEL_MIN_MACS
    pool = current_handle() if big else None
    threads = current_threads() if pool is not None else 1
    scratch = _scratch("wino_bands", threads * _bands_scratch(g, bands, C, M) + 16)
    _ck.winograd_bands(pool, x, u, bias, y, res, bands, g.pb[0], g.pb[1], tw, scratch, act=plan.act, tile=t,
                       mparts=mparts)


def _bands_scratch(g: _Geometry, bands, C: int, M: int) -> int:
    """Floats of one thread's scratch for ``winograd_bands`` over ``bands``."""
    rows = max(b[1] - b[0] for b in bands)
    nblock = max(b[4] * b[5] for b in bands) + 16
    return _ck.winograd_bands_scratch(C, M, rows, g.tiles[1], nblock, tile=g.wtile)


def _serial(n: int, body, min_chunk: int = 1) -> None:
    """``parallel_for``'s signature, run on the calling thread."""
    body(0, n)


def _gather_tables(g: _Geometry, ca: _ConvAttrs, C: int) -> None:
    """Offsets ``off[k]`` and ``idx[n]`` of the gather GEMM; sets path "gather" when they fit int32."""
    sd, sh, sw = _pad3(ca.strides, 1)
    dd, dh, dw = _pad3(ca.dilations, 1)
    kd, kh, kw = _pad3(g.ksz, 1)
    D, H, W = _pad3(g.in_sp, 1)
    pd, ph, pw = _pad3(g.pb, 0)
    ed, eh, ew = _pad3(g.pe, 0)
    OD, OH, OW = _pad3(g.out_sp, 1)
    pointwise = kd == kh == kw == 1 and not any(g.pb) and not any(g.pe)
    if g.direct:
        Ds, Hs, Ws = D, H, W
    elif pointwise:
        # strided 1x1: a plain subsampled copy of the input (only one phase is ever read)
        Ds, Hs, Ws = OD, OH, OW
        sd = sh = sw = 1
        g.split = "subsample"
    else:
        Ds, Hs, Ws = -(-(D + pd + ed) // sd), -(-(H + ph + eh) // sh), -(-(W + pw + ew) // sw)
        # every valid output reads inside the planes; make sure the planes hold the whole output grid
        Ds, Hs, Ws = max(Ds, OD), max(Hs, OH), max(Ws, OW)
        g.split = (sd, sh, sw, pd, ph, pw, Ds, Hs, Ws)
    chan = sd * sh * sw * Ds * Hs * Ws  # floats per channel in P
    if C * chan + Ws >= _INT32_MAX:
        return
    g.psize = C * chan
    c = np.arange(g.Cg, dtype=np.int64)[:, None, None, None]
    a = (np.arange(kd, dtype=np.int64) * dd)[None, :, None, None]
    i = (np.arange(kh, dtype=np.int64) * dh)[None, None, :, None]
    j = (np.arange(kw, dtype=np.int64) * dw)[None, None, None, :]
    phase = ((a % sd) * sh + (i % sh)) * sw + (j % sw)
    off = c * chan + phase * (Ds * Hs * Ws) + (a // sd) * (Hs * Ws) + (i // sh) * Ws + (j // sw)
    g.off = off.reshape(-1).astype(np.int32)
    nr = _ck.panel_shape(False)[1]
    if (_ISA >= 2 and isinstance(g.split, tuple) and not g.transposed and OD == 1 and Ws > OW and OW % nr
            and (Ws - OW) * 20 <= Ws):
        # Compute on the whole phase-plane grid (a few padding columns per row, never
        # stored): every B panel is then a contiguous run, read without packing.
        g.grid = (OH, Ws, OW)
        g.idx = np.arange(OH * Ws, dtype=np.int32)
    else:
        od = np.arange(OD, dtype=np.int64)[:, None, None]
        oh = np.arange(OH, dtype=np.int64)[None, :, None]
        ow = np.arange(OW, dtype=np.int64)[None, None, :]
        g.idx = ((od * Hs + oh) * Ws + ow).reshape(-1).astype(np.int32)
    g.path = "gather"


def _blocks(K: int, n: int, transposed: bool) -> Tuple[int, int]:
    """``(kcb, ncb)``: K and N block sizes of the packed B blocks of a K x n gather GEMM."""
    _, nr = _ck.panel_shape(transposed)
    nk = -(-K // _MAX_KC)
    kcb = -(-K // nk)
    ncb = max(1, _BLOCK_FLOATS // (kcb * nr)) * nr
    return kcb, min(ncb, -(-n // nr) * nr)


def _ck_blocks(g: _Geometry) -> None:
    """K and N block sizes of the packed B blocks, and whether B panels are read straight
    from the image (``direct_b``: while the weights fit ``BLOCKING.direct_b_bytes``)."""
    g.kcb, g.ncb = _blocks(g.K, len(g.idx), g.transposed)
    g.direct_b = g.Mg * g.K * 4 <= BLOCKING.direct_b_bytes


def _run_gather(g: _Geometry, plan: _ConvPlan, x: np.ndarray, w: np.ndarray, bias, y3: np.ndarray,
                res3: Optional[np.ndarray] = None) -> None:
    """Gather-GEMM Conv of every image: x (n, C, ...) contiguous, y3 (n, M, N) contiguous,
    plus the residual ``res3`` (y3's shape, contiguous) if any."""
    packs = plan.packed_for(w, g.transposed)
    n_img, C = x.shape[0], x.shape[1]
    scratch = _scratch("block", g.kcb * g.ncb + 16)
    M = packs.shape[0] * g.Mg
    yt = _scratch("yt", g.N * M).reshape(g.N, M) if g.transposed else None
    chan_in = g.chan_in
    for i in range(n_img):
        if g.split is None:
            P = x[i].reshape(-1)
        elif g.split == "subsample":
            P = _scratch("phase", g.psize + 64)
            sd, sh, sw = _pad3(plan.ca.strides, 1)
            od, oh, ow = _pad3(g.out_sp, 1)
            src = x[i].reshape((C,) + tuple(_pad3(g.in_sp, 1)))[:, :od * sd:sd, :oh * sh:sh, :ow * sw:sw]
            _by_channels(C, g.psize, partial(_subsample_channels, src, P[:g.psize].reshape(src.shape)))
        else:
            sd, sh, sw, pd, ph, pw, Ds, Hs, Ws = g.split
            P = _scratch("phase", g.psize + Ws + 64)  # slack: grid columns read past the last row
            xi = x[i].reshape((C,) + tuple(_pad3(g.in_sp, 1)))
            _by_channels(C, g.psize, partial(_phase_split_channels, xi, g.split, g.psize // C, P))
        chan = (g.psize // C) if g.split is not None else chan_in  # floats per channel in P
        pstride = g.Cg * chan  # floats between the groups' channels in P
        r = None if res3 is None else res3[i]
        if g.transposed:
            # Y^T tiles: the residual (Y's layout) and then the activation go in one pass
            # over the transposed rows, still cache-hot (these outputs are small), done by
            # the work item that computed them when the rows are split across threads
            _gemm_blocks(g, P, packs, bias, yt, scratch, plan.act if r is None else None, pstride, transposed=True,
                         untranspose=(y3[i], r, plan.act))
        elif g.grid is not None:
            _, ws, ow = g.grid
            _gemm_blocks(g, P, packs, bias, y3[i], scratch, plan.act, pstride, grid=(ws, ow), residual=r)
        else:
            _gemm_blocks(g, P, packs, bias, y3[i], scratch, plan.act, pstride, residual=r)


#: a strided Conv's input copy (phase split or subsampling) of fewer floats than this
#: runs on the calling thread: below it the copy takes less than waking a worker gains
_PARALLEL_MIN_COPY = SPLIT_MIN_ELEMENTS


def _by_channels(C: int, floats: int, body) -> None:
    """``body(c0, c1)`` over the channels of an input copy of ``floats`` floats: split
    across the run's threads when it is big enough, else one call."""
    if floats >= _PARALLEL_MIN_COPY and current_threads() > 1:
        parallel_for(C, body, min_chunk=max(1, -(-C * (_PARALLEL_MIN_COPY // 2) // floats)))
    else:
        body(0, C)


def _subsample_channels(src: np.ndarray, dst: np.ndarray, c0: int, c1: int) -> None:
    np.copyto(dst[c0:c1], src[c0:c1])


def _phase_split_channels(x: np.ndarray, split: tuple, chan: int, P: np.ndarray, c0: int, c1: int) -> None:
    """Channels ``[c0, c1)`` of the stride-phase split (each channel's planes take ``chan`` floats of ``P``)."""
    sd, sh, sw, pd, ph, pw, Ds, Hs, Ws = split
    _ck.phase_split(x[c0:c1], sd, sh, sw, pd, ph, pw, Ds, Hs, Ws, P[c0 * chan:c1 * chan])


def _untranspose(yt: np.ndarray, y: np.ndarray, r: Optional[np.ndarray], act, m0: int, m1: int) -> None:
    """Rows ``[m0, m1)`` of ``y`` from the transposed tiles ``yt`` (N, M), plus the
    residual rows of ``r`` and the activation ``act`` when there is a residual (else the
    tiles applied ``act`` already)."""
    _ck.transpose_into(yt[:, m0:m1], y[m0:m1])
    if r is not None:
        _ck.bias_act(y[m0:m1], None, act, residual=r[m0:m1])


#: work items per thread a multithreaded gather GEMM is cut into (fewer: a thread the OS
#: delays, or the last item, leaves the others idle longer; more: per-item overhead)
_ITEMS_PER_THREAD = 4

#: a GEMM with fewer multiply-adds than this runs on the calling thread: waking the
#: workers costs tens of microseconds, more than such a layer takes
_PARALLEL_MIN_MACS = BLOCKING.parallel_min_macs
#: a GEMM with few column panels is split by columns while its weights fit this (bytes)
_COLUMN_SPLIT_WEIGHTS = BLOCKING.column_split_weights_bytes


def _serial_gemm(g: _Geometry, groups: int) -> bool:
    """Whether the gather GEMMs of ``groups`` groups of geometry ``g`` run on the calling thread
    whatever the run's threads (fewer multiply-adds than :data:`_PARALLEL_MIN_MACS`)."""
    return g.Mg * g.K * len(g.idx) * groups < _PARALLEL_MIN_MACS


def _gemm_blocks(g: _Geometry, P, packs, bias, y, scratch, act, pstride: int, transposed: bool = False,
                 grid=None, residual=None, untranspose=None) -> None:
    """The gather GEMMs of every group (one compiled call), split across the run's threads.

    Work items are (row part, column block) pairs, each computing its outputs exactly as
    the whole GEMM does (a block's width never changes any output value, row parts start
    on weight-panel boundaries; each thread packs into its own scratch).  Wide outputs are
    split by columns: with several threads the blocks are narrowed (to a multiple of the
    panel width) so each thread gets a few.  Narrow ones (14x14, 7x7: 7 column panels,
    a 4/3 split for 2 threads) are split by columns too while their weights stay in L2
    (:data:`_COLUMN_SPLIT_WEIGHTS`): each thread packs only its own columns.  Those whose
    weights outweigh the image, and narrow ones with weights past that, are split by rows
    instead (see :func:`_row_parts`): the weights, then the bigger operand, are read once
    per column block as on one thread, not once per narrowed block, and every row part
    reads one shared packing of B.

    ``untranspose=(y, residual, act)`` (transposed tiles: ``y`` here is Y^T): the rows
    go to that ``y``, with the residual and then the activation when there is a
    residual (see :func:`_untranspose`), once for every output row range after its GEMM
    is complete: inside the work item when the rows are split and one column block
    holds every column, else once for all rows at the end.  The work items run on the
    current run's native threads (``gather_gemm_items``), without the GIL."""
    n = len(g.idx)
    threads = 1 if _serial_gemm(g, len(packs)) else current_threads()
    key = (threads, len(packs), packs.shape[1], transposed, _ITEMS_PER_THREAD, _COLUMN_SPLIT_WEIGHTS)
    split = g.splits.get(key)
    if split is None:
        split = g.splits[key] = _split_plan(g, threads, len(packs), packs.shape[1], transposed)
    ncb, rows = split
    kw = {"transposed": True} if transposed else ({"grid": grid} if grid is not None else {})
    if act is not None:
        kw["act"] = act
    if threads == 1:
        _ck.gather_gemm(P, g.off, g.idx, packs, g.Mg, bias, y, scratch, g.kcb, ncb, pstride=pstride,
                        residual=residual, direct_b=g.direct_b, **kw)
        if untranspose is not None:
            _untranspose(y, *untranspose, 0, g.Mg * len(packs))
        return
    nblocks = -(-n // ncb)
    finish_items = untranspose is not None and rows is not None and nblocks == 1
    if rows is not None and nblocks == 1 and (transposed or grid is not None or g.K != g.Cg or not g.direct_b):
        # every row part multiplies the same B: pack it once, shared, not once per part
        # (a 1x1 Conv whose normal tiles read B straight from P has nothing to share)
        kw["prepacked"] = pre = _scratch("prepacked", _ck.prepacked_size(g.K, g.kcb, n, transposed) + 16)
        _pack_b(P, g.off, g.idx, pre, g.kcb, n, transposed, g.direct_b)
    blocks = _scratch("blocks", threads * (g.kcb * ncb + 16) + 16)  # one B block per thread
    _ck.gather_gemm_items(current_handle(), P, g.off, g.idx, packs, g.Mg, bias, y, blocks, g.kcb, ncb,
                          row_parts=rows, pstride=pstride, residual=residual,
                          finish=untranspose if finish_items else None, direct_b=g.direct_b, **kw)
    if untranspose is not None and not finish_items:
        _untranspose(y, *untranspose, 0, g.Mg * len(packs))


def _split_plan(g: _Geometry, threads: int, groups: int, panels: int, transposed: bool) -> tuple:
    """``(ncb, rows)`` of :func:`_gemm_blocks` on ``threads`` threads: the column block width
    and the row parts (None: every row in each work item), as its docstring says; the same
    for every call of a geometry, so it is kept per thread count (``_Geometry.splits``)."""
    n, ncb = len(g.idx), g.ncb
    if threads == 1 or -(-n // ncb) >= _ITEMS_PER_THREAD * threads:
        return ncb, None
    nr = _ck.panel_shape(transposed)[1]
    narrow = max(nr, n // (_ITEMS_PER_THREAD * threads) // nr * nr)
    # rows when the weights (Mg x K) outweigh the image block (K x n), or when even
    # one-panel column blocks are too few to share out evenly and the weights, read
    # again by every column block, would not stay in L2
    few = -(-n // narrow) < _ITEMS_PER_THREAD * threads
    if groups == 1 and (g.Mg > n or (few and g.Mg * g.K * 4 > _COLUMN_SPLIT_WEIGHTS)):
        if n <= 2 * ncb:  # one column block (not one plus a sliver: 196 = 192 + 4)
            ncb = -(-n // nr) * nr
        return ncb, _row_parts(panels, -(-n // ncb), threads)
    return narrow, None


#: a shared B packing (see _gemm_blocks) of fewer floats than this is done by the
#: calling thread alone
_PARALLEL_MIN_PACK = 1 << 17


def _pack_b(P, off, idx, pre: np.ndarray, kcb: int, n: int, transposed: bool, direct_b: bool) -> None:
    """Pack every K block of the gather GEMM's B (columns ``[0, n)``) into ``pre``, the K
    blocks shared out across the run's native threads when there is enough to pack."""
    nkb = -(-off.shape[0] // kcb)
    pool = current_handle() if nkb > 1 and off.shape[0] * n >= _PARALLEL_MIN_PACK else None
    _ck.pack_gather_b(P, off, idx, pre, kcb, 0, n, transposed, pool=pool, direct_b=direct_b)


def _row_parts(panels: int, nblocks: int, threads: int) -> List[Tuple[int, int]]:
    """``[(panel_begin, panel_end), ...]``: the output rows (``panels`` weight panels, one
    group) of a multithreaded gather GEMM cut into as many parts as it takes to give
    every thread about 4 work items with ``nblocks`` column blocks (at most one part per
    panel).  Parts start on a panel boundary, so every tile is the one the uncut GEMM
    computes."""
    parts = max(1, min(panels, -(-_ITEMS_PER_THREAD * threads // nblocks)))
    return [(panels * k // parts, panels * (k + 1) // parts) for k in range(parts)]


#: largest im2col block (floats) of the BLAS path; bigger outputs are unfolded in row bands
_MAX_COLS_FLOATS = 4 * 1024 * 1024


def _run_blas(g: _Geometry, ca: _ConvAttrs, x: np.ndarray, w: np.ndarray, bias, y3: np.ndarray, act,
              res3: Optional[np.ndarray] = None) -> None:
    """im2col (none for 1x1 stride-1 unpadded) + np.matmul per image and group, then one
    compiled pass adding the bias and the residual ``res3`` (if any) and applying the
    fused activation ``act``.

    For 1-D/2-D convolutions the unfolding runs in bands of output rows so the scratch
    stays under ``_MAX_COLS_FLOATS`` floats: each band is the same im2col on the input
    rows it needs (a slice, with the top padding shifted accordingly)."""
    n_img = x.shape[0]
    group = ca.group
    wm = np.ascontiguousarray(w, dtype=np.float32).reshape(group, g.Mg, g.K)
    pointwise = g.direct and all(k == 1 for k in g.ksz) and all(d == 1 for d in ca.dilations)
    sp3 = tuple(_pad3(g.in_sp, 1))
    ks3, st3, dl3, pb3 = _pad3(g.ksz, 1), _pad3(ca.strides, 1), _pad3(ca.dilations, 1), _pad3(g.pb, 0)
    od, oh, ow = _pad3(g.out_sp, 1)
    band = oh
    if not pointwise and od == 1 and g.K * g.N > _MAX_COLS_FLOATS:
        band = max(1, _MAX_COLS_FLOATS // (g.K * ow))
    cols_all = None if pointwise else _scratch("cols", g.K * band * ow * od)
    for i in range(n_img):
        for gi in range(group):
            xg = x[i, gi * g.Cg:(gi + 1) * g.Cg].reshape((g.Cg,) + sp3)
            yg = y3[i, gi * g.Mg:(gi + 1) * g.Mg]
            if pointwise:
                _pointwise_blas(wm[gi], xg.reshape(g.Cg, g.N), yg,
                                None if bias is None else bias[gi * g.Mg:(gi + 1) * g.Mg], act,
                                None if res3 is None else res3[i, gi * g.Mg:(gi + 1) * g.Mg])
                continue
            for r0 in range(0, oh, band):
                r1 = min(oh, r0 + band)
                start = r0 * st3[1] - pb3[1]  # first input row (may be in the padding)
                s0 = min(max(start, 0), sp3[1])
                cols = cols_all[:g.K * (r1 - r0) * ow * od].reshape(g.K, -1)
                _ck.im2col(xg[:, :, s0:], cols, ks3, st3, dl3, (pb3[0], s0 - start, pb3[2]), (od, r1 - r0, ow))
                np.matmul(wm[gi], cols, out=yg[:, r0 * ow:r1 * ow] if band < oh else yg)
            if bias is not None or act is not None or res3 is not None:
                _ck.bias_act(yg, None if bias is None else bias[gi * g.Mg:(gi + 1) * g.Mg], act,
                             residual=None if res3 is None else res3[i, gi * g.Mg:(gi + 1) * g.Mg])


#: about this many output columns per band of the BLAS pointwise path
_PW_BAND = 512


def _pointwise_blas(a: np.ndarray, b: np.ndarray, y: np.ndarray, bias, act, res) -> None:
    """``y = act(a @ b + bias + res)`` for a (M, K) @ (K, N) -> (M, N) pointwise Conv, in
    column bands (strided views, no copies): each band is one BLAS GEMM followed by its
    compiled output stage while the band is still in cache; the bands are shared out
    across the run's threads.  The bands depend on N only, so the result does not
    depend on the thread count.  One column (N = 1) is a matrix-vector product:
    :func:`.linear.gemv`, its weight rows shared out."""
    M, K = a.shape
    n = y.shape[1]
    if n == 1 and gemv_fits(1, a) and b.flags.c_contiguous and y.flags.c_contiguous:
        # one output position (a classifier's 1x1 conv on a 1x1 map): a matrix-vector product,
        # the weights' rows shared out across the threads
        gemv(b.reshape(1, K), a, y.reshape(1, M))
        if bias is not None or act is not None or res is not None:
            _ck.bias_act(y, bias, act, residual=res)
        return
    nbands = max(2, (n + _PW_BAND // 2) // _PW_BAND)
    band = -(-(-(-n // nbands)) // 16) * 16
    stage = bias is not None or act is not None or res is not None

    def body(j0: int, j1: int) -> None:
        for j in range(j0, j1):
            c0, c1 = j * band, min(n, (j + 1) * band)
            if c0 >= c1:
                continue
            yb = y[:, c0:c1]
            np.matmul(a, b[:, c0:c1], out=yb)
            if stage:
                _ck.bias_act(yb, bias, act, residual=None if res is None else res[:, c0:c1])

    if M * K * n >= _PARALLEL_MIN_MACS:
        parallel_for(nbands, body)
    else:
        body(0, nbands)


def _depthwise_args(g: _Geometry, ca: _ConvAttrs, C: int) -> tuple:
    """``(image shape, output shape, weight shape, geometry, scratch floats)`` of the
    depthwise kernel for geometry ``g`` of a ``C``-channel input (made once per geometry)."""
    args = g.dw_args
    if args is None:
        H, W = _pad3(g.in_sp, 1)[1:]
        OH, OW = _pad3(g.out_sp, 1)[1:]
        sh, sw = _pad3(ca.strides, 1)[1:]
        dh, dw = _pad3(ca.dilations, 1)[1:]
        kh, kw = _pad3(g.ksz, 1)[1:]
        pt, pl, pb, pr = g.dw_pads
        args = g.dw_args = ((C, H, W), (-1, OH, OW), (-1, kh, kw), (sh, sw, dh, dw, pt, pl, pb, pr),
                            _ck.depthwise_scratch_size(H, W, pt, pl, pb, pr))
    return args


def _run_depthwise(g: _Geometry, ca: _ConvAttrs, x: np.ndarray, w: np.ndarray, bias, y3: np.ndarray, act,
                   res3: Optional[np.ndarray] = None) -> None:
    n_img, C = x.shape[0], x.shape[1]
    xshape, yshape, wshape, geo, nscratch = _depthwise_args(g, ca, C)
    w3 = np.ascontiguousarray(w, dtype=np.float32).reshape(wshape)
    scratch = _scratch("dwpad", nscratch)
    for i in range(n_img):
        _ck.depthwise(x[i].reshape(xshape), w3, bias, y3[i].reshape(yshape), *geo, scratch, act,
                      residual=None if res3 is None else res3[i].reshape(yshape))


@kernel("Conv", out=True, prepare=_conv_prepare, caches_inputs=(1, 2))
def conv(inputs, attrs, out=None):
    """ONNX Conv (1-3 spatial axes, groups, dilations, pads / auto_pad, optional bias),
    plus the fused residual ``inputs[3]`` when ``attrs["_residual"]`` (an array of the
    output's shape), followed by the fused activation ``attrs["_activation"]`` if any
    (see :data:`FUSED_ACTIVATIONS`): ``act(conv(x) + bias + r)``.

    Writes into ``out[0]`` when given (no tensor-sized temporaries; into a temporary
    first if ``out[0]`` overlaps the residual); float32 result.
    """
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    plan = attrs.get("_conv")
    if plan is None or plan.ca is None:
        plan = _conv_prepare(attrs, [None, w, b])["_conv"] if plan is None else plan
        if plan.ca is None:
            plan.ca = _ConvAttrs(attrs, "Conv", w.ndim - 2)
    ca = plan.ca
    if x.ndim != ca.nd + 2 or w.ndim != ca.nd + 2:
        raise ModelInvalidError(f"input of rank {x.ndim} and weights of rank {w.ndim} do not match "
                                f"{ca.nd} spatial axes", op="Conv")
    if w is not plan.w_src:
        ca.check_weights(w)
    if (attrs.get("_pool_stage_taps") and attrs.get("_int_output") and b is None and not plan.residual
            and plan.act is None and x.ndim == 4 and w.shape[1] == 1 and ca.group == w.shape[0] == x.shape[1]):
        return [pool_stage_conv(x, w, attrs, out)]
    g = _geometry(plan, x.shape, w.shape)
    if b is None:
        bias = None
    elif b is plan.b_src:
        bias = plan.bias
    else:
        bias = np.ascontiguousarray(b, dtype=np.float32).reshape(-1)
        if bias.shape[0] != w.shape[0]:
            raise ModelInvalidError(f"bias of shape {list(b.shape)} does not match {w.shape[0]} output channels",
                                    op="Conv")
    shape = (x.shape[0], w.shape[0]) + tuple(g.out_sp)
    res = None
    if plan.residual:
        r = inputs[3] if len(inputs) > 3 else None
        if r is None:
            raise ModelInvalidError("attribute _residual is set but the residual input (the 4th) is missing",
                                    op="Conv")
        res = np.ascontiguousarray(r, dtype=np.float32)
        if res.shape != shape:
            raise ValueError(f"Conv: residual of shape {res.shape}, expected the output's {shape}")
    target = out[0] if out is not None else None
    if target is not None and target.flags.c_contiguous and target.dtype == np.float32 \
            and (res is None or not np.may_share_memory(target, res)):
        y = target
    else:
        y = np.empty(shape, np.float32)
    if y.shape != shape:
        raise ValueError(f"Conv: output buffer of shape {y.shape}, expected {shape}")
    y3 = y.reshape(shape[0], shape[1], g.N)
    res3 = None if res is None else res.reshape(y3.shape)
    if g.path == "empty":
        if y.size:
            y3[...] = 0 if bias is None else bias[None, :, None]
            if res3 is not None:
                np.add(y3, res3, out=y3)
            _ck.activation_numpy(y3, plan.act)
    else:
        x = np.ascontiguousarray(x, dtype=np.float32)
        sp = attrs.get("_sparse")
        if sp is not None and w is plan.w_src and sp.use(g.path, g.N, g.direct and all(k == 1 for k in g.ksz)):
            sp.run(x, y3, bias, plan.act, res3, (g.in_sp, g.out_sp, g.ksz, ca.strides, ca.dilations, g.pb,
                                                 g.direct and all(k == 1 for k in g.ksz)))
        elif g.path == "gather":
            _run_gather(g, plan, x, w, bias, y3, res3)
        elif g.path == "winograd":
            _run_winograd(g, plan, x, w, bias, y, res)
        elif g.path == "depthwise":
            _run_depthwise(g, ca, x, w, bias, y3, plan.act, res3)
        else:
            _run_blas(g, ca, x, w, bias, y3, plan.act, res3)
    if target is not None:
        if y is not target:
            np.copyto(target, y)
        return out
    return [y]


def _bind_conv(attrs, ins, out):
    """A compiled run's direct call of a one-image Conv with constant weights and bias and no
    fused residual (see ``bind`` in ``ops/elementwise.py``), or None: a depthwise conv, a
    Winograd conv that runs in bands (or as one band), or a gather GEMM that takes the image
    as it is (no stride phases, grid stores or transposed tiles).

    The call skips the kernel's per-call checks and dispatch, which cost more than a small
    layer's multiply-adds; it computes exactly what :func:`conv` does (with several threads,
    through the same split), and hands over to it for other inputs."""
    plan = attrs.get("_conv")
    if (plan is None or plan.ca is None or plan.residual or attrs.get("_sparse") is not None or not out
            or out[0] is None or not out[0].flags.c_contiguous or len(ins) not in (2, 3) or ins[0][0][0] != 1
            or any(meta[1] != np.float32 for meta in ins)):
        return None
    (x_shape, _), (w_shape, _) = ins[0], ins[1]
    if len(x_shape) != plan.ca.nd + 2 or len(w_shape) != plan.ca.nd + 2:
        return None
    g = _geometry(plan, x_shape, w_shape)
    if g.path == "depthwise":
        return _bind_depthwise(g, plan, attrs, out, x_shape[1])
    if g.path == "winograd":
        return _bind_winograd(g, plan, attrs, out, x_shape[1], w_shape[0])
    if g.path != "gather" or g.split is not None or g.transposed or g.grid is not None:
        return None
    y2 = out[0].reshape(w_shape[0], g.N)
    y3 = y2.reshape(1, w_shape[0], g.N)
    serial = _serial_gemm(g, plan.ca.group)
    off, idx, Mg, kcb, ncb, direct_b = g.off, g.idx, g.Mg, g.kcb, g.ncb, g.direct_b
    pstride, nscratch = g.Cg * g.chan_in, g.kcb * g.ncb + 16

    def call(x, w, b=None):
        if w is not plan.w_src or b is not plan.b_src:
            return conv([x, w] if b is None else [x, w, b], attrs, out)
        if serial or current_threads() == 1:
            _ck.gather_gemm(x.reshape(-1), off, idx, plan.packed_for(w, False), Mg, plan.bias, y2,
                            _scratch("block", nscratch), kcb, ncb, pstride=pstride, act=plan.act, direct_b=direct_b)
        else:  # shared out as the full kernel does, without its per-call checks
            _run_gather(g, plan, x, w, plan.bias, y3)
        return out

    return call, ()


def _bind_winograd(g: _Geometry, plan: _ConvPlan, attrs, out, C: int, M: int):
    """:func:`_bind_conv`'s call of a Winograd conv whose one-thread run is a single
    ``winograd_bands`` call (its bands, or the whole image as one band; see
    :func:`_run_winograd`); None for the three-pass form."""
    bands = g.wbands if g.wbands is not None else g.wband_whole
    if bands is None:
        return None
    t, tw, (pt, pl) = g.wtile, g.tiles[1], g.pb[:2]
    nscratch = _bands_scratch(g, bands, C, M) + 16
    y = out[0]

    def call(x, w, b=None):
        if w is not plan.w_src or b is not plan.b_src or not x.flags.c_contiguous:
            return conv([x, w] if b is None else [x, w, b], attrs, out)
        if current_threads() != 1:  # shared out as the full kernel does, without its per-call checks
            _run_winograd(g, plan, x, w, plan.bias, y, None)
            return out
        _ck.winograd_bands(None, x, plan.winograd_for(w, t), plan.bias, y, None, bands, pt, pl, tw,
                           _scratch("wino_bands", nscratch), act=plan.act, tile=t)
        return out

    return call, ()


def _bind_depthwise(g: _Geometry, plan: _ConvPlan, attrs, out, C: int):
    """:func:`_bind_conv`'s call of a depthwise conv (one thread: the kernel is not split)."""
    xshape, yshape, wshape, geo, nscratch = _depthwise_args(g, plan.ca, C)
    y = out[0].reshape(yshape)
    w3 = None

    def call(x, w, b=None):
        nonlocal w3
        if w is not plan.w_src or b is not plan.b_src:
            return conv([x, w] if b is None else [x, w, b], attrs, out)
        if w3 is None:
            w3 = np.ascontiguousarray(w, dtype=np.float32).reshape(wshape)
        _ck.depthwise(x.reshape(xshape), w3, plan.bias, y, *geo, _scratch("dwpad", nscratch), plan.act)
        return out

    return call, ()


conv.bind = _bind_conv


# ---------------------------------------------------------------------------- ConvTranspose


def _convtranspose_prepare(attrs, consts):
    nd = _nd_of(attrs, consts)
    w = consts[1] if consts is not None and len(consts) > 1 else None
    b = consts[2] if consts is not None and len(consts) > 2 else None
    ca = None
    if nd is not None:
        ca = _ConvAttrs(attrs, "ConvTranspose", nd)
        if w is not None:
            ca.check_weights(w)
            if b is not None and (np.ndim(b) != 1 or b.shape[0] != w.shape[1] * ca.group):
                raise ModelInvalidError(f"bias of shape {list(np.shape(b))} does not match "
                                        f"{w.shape[1] * ca.group} output channels", op="ConvTranspose")
        for s, d, p in zip(ca.strides, ca.dilations, ca.output_padding):
            if p >= max(s, d):
                raise ModelInvalidError(f"attribute output_padding {ca.output_padding} must be smaller than the "
                                        f"stride or the dilation", op="ConvTranspose")
    new = dict(attrs)
    new["_convt"] = _ConvPlan(ca, w, b)
    return new


def _convtranspose_geometry(ca: _ConvAttrs, in_sp, ksz):
    """(pads_begin, output spatial shape) per ONNX ConvTranspose."""
    nd = ca.nd
    full = [s * (i - 1) + op + (k - 1) * d + 1
            for i, k, s, d, op in zip(in_sp, ksz, ca.strides, ca.dilations, ca.output_padding)]
    if ca.output_shape is not None or ca.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = ca.output_shape if ca.output_shape is not None else [i * s for i, s in zip(in_sp, ca.strides)]
        begin = []
        for f, t in zip(full, target):
            total = f - t
            if ca.auto_pad == "SAME_UPPER":
                begin.append(total // 2)
            else:
                begin.append(total - total // 2)
        return begin, list(target)
    if ca.auto_pad == "VALID":
        return [0] * nd, full
    pb, pe = ca.pads[:nd], ca.pads[nd:]
    return pb, [f - a - b for f, a, b in zip(full, pb, pe)]


@kernel("ConvTranspose", out=True, prepare=_convtranspose_prepare)
def conv_transpose(inputs, attrs, out=None):
    """ONNX ConvTranspose (1-3 spatial axes, groups, strides, dilations, pads, output_padding,
    output_shape, auto_pad, optional bias): per image and group a GEMM ``W_g^T @ X_g`` then
    col2im scatter-add into the output (pre-filled with the bias).  Writes into ``out[0]``
    when given."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    plan = attrs.get("_convt")
    if plan is None:
        plan = _convtranspose_prepare(attrs, [None, w, b])["_convt"]
    if plan.ca is None:
        plan.ca = _ConvAttrs(attrs, "ConvTranspose", w.ndim - 2)
    ca = plan.ca
    if x.ndim != ca.nd + 2 or w.ndim != ca.nd + 2:
        raise ModelInvalidError(f"input of rank {x.ndim} and weights of rank {w.ndim} do not match "
                                f"{ca.nd} spatial axes", op="ConvTranspose")
    if w is not plan.w_src:
        ca.check_weights(w)
    group = ca.group
    n_img, C = x.shape[0], x.shape[1]
    if C != w.shape[0]:
        raise ModelInvalidError(f"input has {C} channels; weights expect {w.shape[0]}", op="ConvTranspose")
    Cg, Mg = C // group, w.shape[1]
    M = Mg * group
    in_sp, ksz = list(x.shape[2:]), list(w.shape[2:])
    pb, out_sp = _convtranspose_geometry(ca, in_sp, ksz)
    if any(o < 0 for o in out_sp):
        raise ModelInvalidError(f"output spatial shape {out_sp} is negative (pads too large)", op="ConvTranspose")
    shape = (n_img, M) + tuple(out_sp)
    target = out[0] if out is not None else None
    y = target if (target is not None and target.flags.c_contiguous and target.dtype == np.float32) \
        else np.empty(shape, np.float32)
    if y.shape != shape:
        raise ValueError(f"ConvTranspose: output buffer of shape {y.shape}, expected {shape}")
    if b is None:
        y[...] = 0
    else:
        bias = np.asarray(b, dtype=np.float32).reshape(-1)
        if bias.shape[0] != M:
            raise ModelInvalidError(f"bias of shape {list(b.shape)} does not match {M} output channels",
                                    op="ConvTranspose")
        y.reshape(n_img, M, -1)[...] = bias[None, :, None]
    n_in = int(np.prod(in_sp))
    kprod = int(np.prod(ksz))
    if y.size and n_in and Cg and kprod:
        x = np.ascontiguousarray(x, dtype=np.float32)
        # (group, Cg, Mg*k) -> per group (Mg*k, Cg): rows ordered (m, taps) as col2im expects
        wt = np.ascontiguousarray(w, dtype=np.float32).reshape(group, Cg, Mg * kprod)
        cols = _scratch("tcols", Mg * kprod * n_in).reshape(Mg * kprod, n_in)
        out3 = tuple(_pad3(out_sp, 1))
        args = (_pad3(ksz, 1), _pad3(ca.strides, 1), _pad3(ca.dilations, 1), _pad3(pb, 0), _pad3(in_sp, 1))
        for i in range(n_img):
            for gi in range(group):
                np.matmul(wt[gi].T, x[i, gi * Cg:(gi + 1) * Cg].reshape(Cg, n_in), out=cols)
                _ck.col2im(cols, y[i, gi * Mg:(gi + 1) * Mg].reshape((Mg,) + out3), *args)
    if target is not None:
        if y is not target:
            np.copyto(target, y)
        return out
    return [y]
