"""Vendor weight tiles (layout 65) and bias blocks back to model layout.

Weight tiles (reference §3): the NPU shape is a list of 6-tuples
``(n_oblk, n_iblk, kh, kw, oblk, iblk)``.  Consecutive tuples whose input extents
(``n_iblk * iblk``) reach the model's input channels ``I`` form one row covering
``n_oblk * oblk`` output channels; rows stack along ``O``.  Within a row the bytes are
``for b in range(n_oblk): for tuple in row: [n_iblk][kh][kw][oblk][iblk]``.  Input lanes
past ``I`` and output lanes past ``O`` (the last output block may be padded) are padding
and dropped.

Bias blocks: fp16 models store float32 biases (padded).  int8 models with per-channel
quantization store blocks of ``n`` output channels, ``i32 bias[n] | i16 -w_zp[n] | u16 mul[n]``
(``n`` = 8 on rk3588/rk3576, 4 on rk3566: half the C2 of the platform's int8 activations); per-layer quantization (and the compiler's
identity convs) a plain int32 array (the registers say which, see :mod:`.regcmd`).  rk3576 and
rv1126b int8 depthwise convs keep the weight zero points beside the weights
(:func:`decode_depthwise_weight`) and their bias blocks are ``i32 bias[n] | u16 mul[n]``.

Every function returns new arrays (copies of the file's bytes in model layout).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ...errors import ModelInvalidError

__all__ = ["decode_weight", "decode_packed_weight", "decode_depthwise_weight", "decode_compact_identity",
           "decode_packed_identity", "spare_lane_zero_point", "decode_float_bias", "decode_int32_bias",
           "decode_int8_bias", "weight_tiles", "tiles_nbytes"]

_ITEM = {"float16": np.dtype("<f2"), "int8": np.dtype("i1")}
_PACKED_ALIGN = 16  # a (kh, o) row of the packed layout is padded to a multiple of this many bytes


def _error(where: str, message: str) -> ModelInvalidError:
    return ModelInvalidError(f"{where}: {message}", op="load")


def weight_tiles(npu_shape: Sequence[int]) -> List[Tuple[int, ...]]:
    """A weight's NPU shape as its tiles, 6-tuples ``(n_oblk, n_iblk, kh, kw, oblk, iblk)``."""
    return [tuple(int(v) for v in npu_shape[k:k + 6]) for k in range(0, len(npu_shape), 6)]


def tiles_nbytes(npu_shape: Sequence[int], dtype: str) -> int:
    """The bytes a float16 or int8 weight's tiles hold (0 for another dtype)."""
    item = _ITEM.get(dtype)
    return sum(int(np.prod(t)) for t in weight_tiles(npu_shape)) * item.itemsize if item is not None else 0


def decode_weight(raw, npu_shape: Sequence[int], shape: Sequence[int], dtype: str, where: str,
                  npu_size: Optional[int] = None, packed: bool = False, align: int = 1) -> np.ndarray:
    """The weight ``[O, I, kh, kw]`` (``shape``, the model shape) from its tiles.

    ``dtype`` is ``"float16"`` or ``"int8"`` (the stored values, not dequantized); a new
    array of that dtype.  ``npu_size`` (the tensor's byte size on the NPU), when given, must
    be the tiles' byte count or (one input block per row, rk3576) that of the ``O`` real
    channels.  ``packed``: an int8 conv reading a graph input in an rk3576/rv1126b file,
    whose weight uses the packed layout of :func:`decode_packed_weight` (one tile of fewer
    input channels than its input block, ``kw`` blocks fitting a 16-byte row; anything else
    is refused).  The caller decides it from the platform and the conv's input, never from
    the size, which can equal the tiles' byte count by chance (8 output channels).  ``align``:
    the NPU size may also be the tiles' byte count rounded up to a multiple of it (rv1106
    weights end on 64 bytes).
    ``where`` names the tensor in messages."""
    if dtype not in _ITEM:
        raise _error(where, f"weights of dtype {dtype} are not supported (float16 or int8)")
    if len(shape) != 4 or min(shape) < 1:
        raise _error(where, f"weight model shape {list(shape)} is not [O, I, kh, kw]")
    if not npu_shape or len(npu_shape) % 6:
        raise _error(where, f"weight NPU shape {list(npu_shape)} is not a list of 6-tuples")
    item = _ITEM[dtype]
    data = np.frombuffer(raw, np.uint8)
    o_total, i_total, kh, kw = (int(d) for d in shape)
    tiles = weight_tiles(npu_shape)
    tile_bytes = tiles_nbytes(npu_shape, dtype)
    # rk3576 fp16 weights whose last output block is padded (20 channels: blocks of 16 + 8) give
    # the size of the O real channels; the buffer holds every tile
    unpadded = o_total * tiles[0][1] * tiles[0][5] * kh * kw * item.itemsize
    if packed:
        if not (dtype == "int8" and len(tiles) == 1 and tiles[0][0] >= 1 and tiles[0][1] == 1
                and i_total < tiles[0][5]):
            raise _error(where, f"an rk3576/rv1126b int8 conv on a graph input has {dtype} weight tiles {tiles} for "
                                f"{list(shape)}; only the packed layout (one tile, fewer input channels than its "
                                "input block) was observed")
        iblk = tiles[0][5]
        # observed: the size counts 2 * iblk bytes per (O, kh, kw), whatever the padded rows
        if npu_size is not None and npu_size != o_total * kh * kw * 2 * iblk:
            raise _error(where, f"a packed int8 weight {list(shape)} (input block {iblk}) has NPU size {npu_size}; "
                                f"{o_total * kh * kw * 2 * iblk} was observed for that shape")
        return decode_packed_weight(raw, shape, iblk, where, tiles[0][4], tiles[0][0])
    if npu_size is not None and npu_size not in (tile_bytes, -(-tile_bytes // align) * align) and not (
            npu_size == unpadded and all(t[1] * t[5] == tiles[0][1] * tiles[0][5] for t in tiles)):
        raise _error(where, f"weight tiles {tiles} hold {tile_bytes} bytes but the tensor's NPU size is {npu_size}")
    if o_total * i_total * kh * kw * item.itemsize > len(data):  # before allocating a forged shape
        raise _error(where, f"weight model shape {list(shape)} needs {o_total * i_total * kh * kw * item.itemsize} "
                            f"bytes; the buffer has {len(data)}")
    out = np.empty((o_total, i_total, kh, kw), item)
    pos = o0 = k = 0
    while k < len(tiles):
        row, extent = [], 0
        while extent < i_total and k < len(tiles):
            row.append(tiles[k])
            extent += tiles[k][1] * tiles[k][5]
            k += 1
        if extent < i_total:
            raise _error(where, f"weight tiles {tiles} cover {extent} of {i_total} input channels in a row")
        n_oblk, oblk = row[0][0], row[0][4]
        for t in row:
            if t[0] != n_oblk or t[4] != oblk or t[2:4] != (kh, kw) or min(t) < 0 or oblk < 1:
                raise _error(where, f"weight tile {t} does not fit row {row} of a {list(shape)} weight")
        if o0 + (n_oblk - 1) * oblk >= o_total and n_oblk:
            raise _error(where, f"weight tiles {tiles} hold more than the {o_total} output channels")
        for b in range(n_oblk):
            ob = o0 + b * oblk
            o_keep = min(oblk, o_total - ob)  # the last block may be padded (seen in int8 files)
            i0 = 0
            for _, n_i, _, _, _, iblk in row:
                count = n_i * kh * kw * oblk * iblk
                nbytes = count * item.itemsize
                if pos + nbytes > len(data):
                    raise _error(where, f"weight tiles need {pos + nbytes} bytes; the buffer has {len(data)}")
                block = data[pos:pos + nbytes].view(item).reshape(n_i, kh, kw, oblk, iblk)
                block = block.transpose(3, 0, 4, 1, 2).reshape(oblk, n_i * iblk, kh, kw)
                keep = max(0, min(n_i * iblk, i_total - i0))
                out[ob:ob + o_keep, i0:i0 + keep] = block[:o_keep, :keep]
                i0 += n_i * iblk
                pos += nbytes
        o0 += n_oblk * oblk
    if o0 < o_total:
        raise _error(where, f"weight tiles {tiles} cover {o0} of {o_total} output channels")
    return out


def decode_depthwise_weight(raw, npu_shape: Sequence[int], shape: Sequence[int], where: str,
                            npu_size: Optional[int] = None, group: int = 2,
                            align: int = 1) -> Tuple[np.ndarray, np.ndarray]:
    """``(weight, w_zp)`` of an rk3576/rv1126b/rk3562/rv1106 int8 depthwise conv: the weight
    ``[1, C, kh, kw]`` int8 and the per-channel weight zero points, int64.

    The NPU shape is one row of tiles ``(1, n_iblk, kh, kw, 1, iblk)`` (several when the
    channels are not a multiple of one block, e.g. 3 blocks of 64 then one of 48; a tuple of
    no blocks is skipped).  Each tile holds, per input block and kernel tap, each ``group`` of
    channels as their weights then their negated zero points: ``w[c] w[c+1] -zp[c] -zp[c+1]``
    for ``group`` 2 (rk3576, rv1126b, rk3562), ``w[c] -zp[c]`` for 1 (rv1106); ``-zp`` as int8,
    so 128 is stored as -128, channels past ``C`` zero.  That is twice the bytes of the tiles:
    the tensor's NPU size, or (``align``) that rounded up to a multiple of ``align`` bytes.  The
    zero points repeat at every tap; a file where they differ is refused
    (``docs/vendor-format-notes.md`` §6)."""
    if len(shape) != 4 or shape[0] != 1 or min(shape) < 1:
        raise _error(where, f"depthwise weight model shape {list(shape)} is not [1, C, kh, kw]")
    _, channels, kh, kw = (int(d) for d in shape)
    if not npu_shape or len(npu_shape) % 6:
        raise _error(where, f"depthwise weight NPU shape {list(npu_shape)} is not a list of 6-tuples")
    tiles = weight_tiles(npu_shape)
    if group not in (1, 2):
        raise _error(where, f"depthwise weights whose zero points follow every {group} channels were never observed")
    if any(t[0] != 1 or t[4] != 1 or t[2:4] != (kh, kw) or t[1] < 0 or t[5] < 2 or t[5] % 2 for t in tiles) \
            or not 0 < channels <= sum(t[1] * t[5] for t in tiles) or sum(t[1] for t in tiles) < 1:
        raise _error(where, f"depthwise weight tiles {tiles} do not fit {list(shape)}; only rows of "
                            "(1, n, kh, kw, 1, even input block) covering the channels were observed")
    lanes = sum(t[1] * t[5] for t in tiles)
    need = 2 * lanes * kh * kw
    if npu_size is not None and npu_size not in (need, -(-need // align) * align):
        raise _error(where, f"depthwise weight tiles {tiles} with their zero points hold {need} bytes "
                            f"but the tensor's NPU size is {npu_size}")
    data = np.frombuffer(raw, np.int8)
    if len(data) < need:
        raise _error(where, f"a depthwise weight {list(shape)} needs {need} bytes, has {len(data)}")
    parts, pos = [], 0
    for _, n_i, _, _, _, iblk in tiles:
        count = 2 * n_i * iblk * kh * kw
        # [block][kh][kw][group][weights, zero points][lane in group] -> [kh][kw][lane][weight, zero point]
        runs = data[pos:pos + count].reshape(n_i, kh, kw, iblk // group, 2, group).transpose(1, 2, 0, 3, 5, 4)
        parts.append(runs.reshape(kh, kw, n_i * iblk, 2))
        pos += count
    lanes_of = np.concatenate(parts, axis=2)[:, :, :channels]
    negated = lanes_of[..., 1].astype(np.int64)
    if np.any(negated != negated[:1, :1]):
        raise _error(where, "the weight zero points beside a depthwise weight differ between kernel taps")
    w_zp = -negated[0, 0]
    w_zp[w_zp == 128] = -128  # -(-128) does not fit int8: stored as -128
    weight = np.ascontiguousarray(lanes_of[..., 0].transpose(2, 0, 1))[None]
    return weight, w_zp


def decode_packed_weight(raw, shape: Sequence[int], iblk: int, where: str,
                         o_stride: Optional[int] = None, o_blocks: int = 1) -> np.ndarray:
    """An int8 weight in the packed layout of rk3576/rv1126b first convs (few input channels):
    ``[o_blocks][kh][o_stride][row]``, each row ``kw`` groups of ``iblk`` bytes (the ``I``
    weights, then the channel's weight zero point in the spare lanes), zero-padded to a
    multiple of 16 bytes (16 for a 3x3 kernel, 32 for a 7x7).  ``o_stride`` is the NPU shape's
    output block (e.g. 32 for 20 channels; default ``O``) and ``o_blocks`` its count (64
    channels of a ResNet stem: 2 blocks of 32); rows past ``O`` are zero.  ``[O, I, kh, kw]``
    int8, a new array (``docs/vendor-format-notes.md`` §6)."""
    o_total, i_total, kh, kw = (int(d) for d in shape)
    o_stride = o_total if o_stride is None else int(o_stride)
    if i_total >= iblk:
        raise _error(where, f"a packed weight needs fewer than {iblk} input channels, has {i_total}")
    if o_blocks < 1 or o_stride * o_blocks < o_total or o_stride * (o_blocks - 1) >= o_total:
        raise _error(where, f"a packed weight of {o_total} output channels cannot have {o_blocks} blocks of "
                            f"{o_stride} rows per kernel row")
    row = -(-kw * iblk // _PACKED_ALIGN) * _PACKED_ALIGN
    need = o_blocks * kh * o_stride * row
    data = np.frombuffer(raw, np.int8)
    if len(data) < need:
        raise _error(where, f"a packed weight [{o_total}, {i_total}, {kh}, {kw}] needs {need} bytes, has {len(data)}")
    rows = data[:need].reshape(o_blocks, kh, o_stride, row).transpose(1, 0, 2, 3).reshape(kh, o_blocks * o_stride, row)
    rows = rows[:, :o_total, :kw * iblk].reshape(kh, o_total, kw, iblk)
    return np.ascontiguousarray(rows[..., :i_total].transpose(1, 3, 0, 2))


#: the row width of an rk3576/rv1126b compiler input conv's compact weight
_COMPACT_ROW = 4


def decode_compact_identity(raw, shape: Sequence[int], dtype: str, npu_size: int, where: str) -> np.ndarray:
    """The weight ``[C, C, 1, 1]`` (``dtype`` values: float16, or int8 codes) of the 1x1 conv an
    rk3576/rv1126b file inserts on a graph input of ``C <= 4`` channels (``Pre_weight<input>``, an
    unnamed node that moves the input into the NPU layout): ``C`` rows of 4 values in ``npu_size``
    bytes, fewer than its tiles (random rk3576 graphs: 1, 3 and 4 channels; fp16 16 or 32 bytes,
    int8 16; an int8 one whose CONV_CON1 says packed is :func:`decode_packed_weight`'s).  Only the
    identity (ones, code 1 in int8) was observed, so any other stored value is refused."""
    c = int(shape[0]) if len(shape) == 4 else 0
    item = _ITEM.get(dtype)
    if item is None or not (1 <= c <= _COMPACT_ROW and tuple(shape) == (c, c, 1, 1)
                            and c * _COMPACT_ROW * item.itemsize <= npu_size <= len(raw)):
        raise _error(where, f"a compact compiler input weight {list(shape)} of {npu_size} bytes ({dtype}); only "
                            f"[C, C, 1, 1] identities, C <= {_COMPACT_ROW}, in rows of {_COMPACT_ROW} float16 or "
                            "int8 values were observed")
    values = np.frombuffer(raw, item, npu_size // item.itemsize)
    expected = np.zeros(values.shape, item)
    expected[[o * _COMPACT_ROW + o for o in range(c)]] = 1
    if not np.array_equal(values, expected):
        raise _error(where, f"a compact compiler input weight {list(shape)} that is not the identity "
                            f"({values.tolist()}); only identities were observed")
    return np.eye(c, dtype=item).reshape(c, c, 1, 1)


def spare_lane_zero_point(raw, npu_shape: Sequence[int], shape: Sequence[int], where: str) -> int:
    """The weight zero point an rk3576/rv1126b/rk3562 int8 deconv of one output channel (and an
    rv1106/rv1103 one from one channel; a plain int32 bias, no bias blocks) writes in the spare
    input lanes of its one weight tile: every lane past the ``I`` input channels holds it (random
    rk3576 graphs: code 50 in lanes 1..15 beside a 1-channel 4x4 kernel, the bias
    ``-zp_in * sum(q - 50)``).  Refused unless the weight is one tile with spare lanes all of one
    value (rv1106 states an empty tile of no input channels before it, which holds no byte)."""
    tiles = [t for t in weight_tiles(npu_shape) if np.prod(t)]
    o_total, i_total, kh, kw = (int(d) for d in shape)
    if not (len(tiles) == 1 and tiles[0][:2] == (1, 1) and tiles[0][2:4] == (kh, kw) and tiles[0][4] == o_total
            and tiles[0][5] > i_total and len(raw) >= kh * kw * o_total * tiles[0][5]):
        raise _error(where, f"weight tiles {tiles} for {list(shape)}: one tile with spare input lanes was expected to "
                            "hold the weight zero point")
    lanes = np.frombuffer(raw, np.int8, kh * kw * o_total * tiles[0][5]).reshape(-1, tiles[0][5])[:, i_total:]
    if np.any(lanes != lanes.flat[0]):
        held = sorted(set(lanes.ravel().tolist()))
        raise _error(where, f"the spare input lanes of weight tile {tiles[0]} hold {held}; one weight zero point was "
                            "expected")
    return int(lanes.flat[0])


#: the NPU size every packed compiler input weight states, whatever its channels (1, 3 and 4 seen)
_PACKED_IDENTITY_SIZE = 32


def decode_packed_identity(raw, shape: Sequence[int], iblk: int, npu_size: int, where: str) -> np.ndarray:
    """The int8 weight ``[C, C, 1, 1]`` of the 1x1 conv an rk3576/rv1126b file inserts on a graph
    input of ``C <= iblk`` channels (``Pre_weight<input>``, unnamed) when its CONV_CON1 says packed:
    ``C`` rows of 16 bytes, row ``o`` holding code 1 at byte ``o`` and zeros elsewhere (the spare
    lanes' weight zero point 0).  Its stated NPU size is 32 bytes for 1, 3 and 4 channels alike
    (random rk3576/rv1126b graphs), which is not the rows' extent (64 bytes for 4 channels), so the
    rows are read from the buffer.  Only the identity was observed: any other value is refused."""
    c = int(shape[0]) if len(shape) == 4 else 0
    row = -(-iblk // _PACKED_ALIGN) * _PACKED_ALIGN
    if not (1 <= c <= iblk and tuple(shape) == (c, c, 1, 1) and npu_size == _PACKED_IDENTITY_SIZE
            and c * row <= len(raw)):
        raise _error(where, f"a packed compiler input weight {list(shape)} (input block {iblk}) of NPU size "
                            f"{npu_size} in a {len(raw)}-byte buffer; only [C, C, 1, 1] identities, C <= the input "
                            f"block, of NPU size {_PACKED_IDENTITY_SIZE} were observed")
    rows = np.frombuffer(raw, np.int8, c * row).reshape(c, row)
    expected = np.zeros((c, row), np.int8)
    expected[np.arange(c), np.arange(c)] = 1
    if not np.array_equal(rows, expected):
        raise _error(where, f"a packed compiler input weight {list(shape)} that is not the identity "
                            f"({rows.tolist()}); only identities were observed")
    return np.eye(c, dtype=np.int8).reshape(c, c, 1, 1)


def decode_float_bias(raw, channels: int, where: str) -> np.ndarray:
    """The float32 bias of ``channels`` output channels (padding dropped); a new array."""
    data = np.frombuffer(raw, np.uint8)
    if len(data) < 4 * channels:
        raise _error(where, f"a float32 bias of {channels} channels needs {4 * channels} bytes, has {len(data)}")
    return data[:4 * channels].view("<f4").astype(np.float32)


def decode_int32_bias(raw, channels: int, where: str) -> np.ndarray:
    """The plain int32 bias of a per-layer quantized conv (padding dropped); int64, a new array."""
    data = np.frombuffer(raw, np.uint8)
    if len(data) < 4 * channels:
        raise _error(where, f"an int32 bias of {channels} channels needs {4 * channels} bytes, has {len(data)}")
    return data[:4 * channels].view("<i4").astype(np.int64)


def decode_int8_bias(raw, channels: int, where: str, per_block: int = 8,
                     zero_points: bool = True) -> Tuple[np.ndarray, Optional[np.ndarray], np.ndarray]:
    """``(bias_i32, w_zp, mul)`` per output channel from the int8 per-channel bias blocks of
    ``per_block`` channels (8 on rk3588/rk3576, 4 on rk3566: half the int8 activations' C2):
    the integer bias, the weight zero point (the block stores its negation) and the
    normalised multiplier ``round(2^14 * s_w[c] / max s_w)``; int64 arrays.
    ``zero_points=False``: blocks without the zero points (``i32 bias[n] | u16 mul[n]``, rk3576
    and rv1126b depthwise convs, whose weight holds them); ``w_zp`` is then ``None``."""
    if per_block not in (4, 8):
        raise _error(where, f"int8 bias blocks of {per_block} channels were never observed (4 or 8)")
    n = per_block
    size = (8 if zero_points else 6) * n
    data = np.frombuffer(raw, np.uint8)
    blocks = -(-channels // per_block)
    if len(data) < size * blocks:
        raise _error(where, f"int8 bias blocks for {channels} channels need {size * blocks} bytes, have {len(data)}")
    raw_blocks = data[:size * blocks].reshape(blocks, size)
    bias = raw_blocks[:, :4 * n].copy().view("<i4").reshape(-1)[:channels].astype(np.int64)
    zp = -raw_blocks[:, 4 * n:6 * n].copy().view("<i2").reshape(-1)[:channels].astype(np.int64) if zero_points else None
    mul = raw_blocks[:, size - 2 * n:].copy().view("<u2").reshape(-1)[:channels].astype(np.int64)
    return bias, zp, mul
