"""The compiler's helper constants beside a vendor Concat and exSoftmax13 are what the lowering
takes them to be (rknnlite/model/rknn_graph/helpers.py), and a file where they are not is refused.

Corpus ``concat_i8``: Concat of a 12- and a 20-channel tensor on axis 1, whose ``y_conv_weight``
(int8, [32, 48, 1, 1]) selects lanes 0..11 and 16..35 (the second input starts on the next
16-lane block).  Corpus ``softmax_i8`` / ``softmax_rk3576_fp16``: ``conv_3__float16_rs_weight`` /
``conv_3_rs_weight`` begin with 20 float16 ones.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import lower_rockchip

from corpus import CORPUS, corpus_arrays
from vendor_files import doctored_copy, tensor_bytes

pytestmark = pytest.mark.skipif(not (CORPUS / "concat_i8.rknn").is_file(), reason="no vendor corpus")


def _runs_like_the_simulator(stem: str) -> bool:
    data = corpus_arrays(stem)
    with rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as ctx:
        (y,) = ctx.run([data["in0"]], data_format="nchw")
    ref = data["out0"].reshape(y.shape).astype(np.float64)
    return float(np.ravel(y) @ np.ravel(ref) / (np.linalg.norm(y) * np.linalg.norm(ref))) >= 0.9999


def test_the_files_helpers_pass_the_checks():
    for stem in ("concat_i8", "concat_fp16", "softmax_fp16", "softmax_i8", "softmax_rk3576_fp16"):
        loaded = load_model(str(CORPUS / f"{stem}.rknn"))
        lower_rockchip(loaded.payload, loaded.model)
        assert _runs_like_the_simulator(stem)


def test_a_concat_whose_selection_swaps_two_channels_is_refused(tmp_path):
    def patch(data):  # the first tile is 32 output rows of 32 lanes: rows 0 and 1 swapped (a channel permutation)
        view = tensor_bytes(data, "y_conv_weight")
        rows = np.frombuffer(bytes(view[:32 * 32]), np.int8).reshape(32, 32).copy()
        assert rows[0, 0] == rows[1, 1] == 1 and np.count_nonzero(rows[:2]) == 2
        rows[[0, 1]] = rows[[1, 0]]
        view[:32 * 32] = rows.tobytes()

    with pytest.raises(ModelInvalidError, match=r"helper weight 'y_conv_weight' is not the in-order selection of its "
                                                r"inputs' \[12, 20\] channels \(output channel -> lane \[1, 0, 2"):
        rknnlite.Context(doctored_copy(CORPUS / "concat_i8.rknn", tmp_path, patch), backend="software")


@pytest.mark.parametrize("stem, name", [("softmax_i8", "conv_3__float16_rs_weight"),
                                        ("softmax_rk3576_fp16", "conv_3_rs_weight")])
def test_a_softmax_whose_sum_weight_is_not_ones_is_refused(tmp_path, stem, name):
    def patch(data):
        view = tensor_bytes(data, name)
        assert struct.unpack_from("<e", view, 2)[0] == 1.0
        struct.pack_into("<e", view, 2, 2.0)

    with pytest.raises(ModelInvalidError, match=rf"reduce-sum weight '{name}' \(float16, \[\d, 20, 1, 1\], blocks of "
                                                r"\d+ lanes\) holds \[1\.0, 2\.0, 1\.0"):
        rknnlite.Context(doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch), backend="software")


def test_a_sum_weight_over_more_than_32_channels_is_read_block_by_block(tmp_path):
    # rk3576: blocks of 8 rows of 32 input lanes, the first row's lanes first; a softmax over 48 channels
    # sums lanes 0..31 of the first block and 0..15 of the second (random graph 115: refused before)
    stem, name = "softmax_axes_rk3576_i8", "conv_21__float16_rs_weight"
    loaded = load_model(str(CORPUS / f"{stem}.rknn"))
    assert [n.attrs["axis"] for n in lower_rockchip(loaded.payload, loaded.model).graph.nodes
            if n.op == "Softmax"] == [3, 3, 1, 3]

    def patch(data):  # channel 35: lane 3 of the second block's first row
        view = tensor_bytes(data, name)
        assert struct.unpack_from("<e", view, (8 * 32 + 3) * 2)[0] == 1.0
        struct.pack_into("<e", view, (8 * 32 + 3) * 2, 0.0)

    with pytest.raises(ModelInvalidError, match=rf"reduce-sum weight '{name}' \(float16, \[8, 48, 1, 1\], blocks of 32 "
                                                r"lanes\) holds \[(1\.0, ){35}0\.0, 1\.0"):
        rknnlite.Context(doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch), backend="software")
