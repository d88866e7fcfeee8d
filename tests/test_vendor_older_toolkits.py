"""What RKNN-Toolkit2 2.3.0 and 2.2.0 compile differently from 2.3.2 and 2.5.0.

* A global ReduceMean followed by a channel shuffle (``pooled_shuffle*_tk230``/``_tk220``) becomes a
  conv of the reshaped map with 1/N weights and a Gather of the pooled column by the shuffle's
  permutation, a constant int64 index tensor.  On rk3576 that conv's int8 weight scale is a float16
  subnormal in the file (stored to 2^-25), so its check against the registers allows half a float16
  step (it was refused, 0.3 % off).
* An rk3576 ConvTranspose on the graph's image input sets rk3562's input fetch bits (``CONV_CON1``
  0x2000a002 besides; ``deconv_input_rk3576*``).

The corpus files match the simulator (``test_vendor_validated``); these tests pin what the lowering
reads from them and that a doctored field is refused by name.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.rknn_graph.regcmd import TARGET_CNA

from corpus import CORPUS, lowered
from vendor_files import doctored_copy, patch_registers, tensor_bytes, tensor_table

#: ShuffleNet's shuffle of 24 channels in 2 groups: output channel k is input channel _SHUFFLE[k]
_SHUFFLE = np.arange(24).reshape(2, 12).T.ravel()


@pytest.mark.parametrize("stem", ["pooled_shuffle_i8_tk230", "pooled_shuffle_rk3576_fp16_tk230",
                                  "pooled_shuffle_rk3562_i8_tk220", "pooled_shuffle_rk3566_fp16_tk220"])
def test_a_pooled_channel_shuffle_gathers_by_its_permutation(stem):
    graph = lowered(stem).graph
    (gather,) = [n for n in graph.nodes if n.op == "Gather"]
    assert gather.attrs == {"axis": 0}
    np.testing.assert_array_equal(graph.constants[gather.inputs[1]], _SHUFFLE)


def _set_index(value: int):
    def patch(data: bytearray) -> None:
        struct.pack_into("<q", tensor_bytes(data, "y-gather_i1"), 8 * 5, value)
    return patch


@pytest.mark.parametrize("value", [24, -25])
def test_a_gather_index_outside_its_axis_is_refused(tmp_path, value):
    path = doctored_copy(CORPUS / "pooled_shuffle_i8_tk230.rknn", tmp_path, _set_index(value))
    with pytest.raises(ModelInvalidError, match=r"Gather:y-gather.*indices .* of 'y-gather_i1' fall outside axis 0 of "
                                                r"size 24"):
        rknnlite.Context(path, backend="software")


def test_an_int8_gather_onto_another_grid_is_refused(tmp_path):
    def patch(data: bytearray) -> None:  # the gathered tensor's scale, doubled
        vec = tensor_table(data, "reducemean_5_sw").vector(10, 4)
        (scale,) = struct.unpack_from("<f", data, vec.pos)
        struct.pack_into("<f", data, vec.pos, 2 * scale)

    path = doctored_copy(CORPUS / "pooled_shuffle_i8_tk230.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"Gather:y-gather.*from the int8 grid .* only the input's own grid was "
                                                r"observed"):
        rknnlite.Context(path, backend="software")


def test_a_subnormal_stored_weight_scale_is_checked_to_half_a_float16_step(tmp_path):
    # registers 9.804e-06, stored 9.775e-06 (164 steps of 2^-24): 0.3 % apart, within half a step
    assert "Gather" in lowered("pooled_shuffle_rk3576_i8_tk230").vendor_ops

    def patch(data: bytearray) -> None:  # two float16 steps lower: 1.5 steps from the registers
        view = tensor_bytes(data, "ReduceMean6_i1_w4a16_weight")
        (code,) = struct.unpack_from("<H", view, 0)
        struct.pack_into("<H", view, 0, code - 2)

    path = doctored_copy(CORPUS / "pooled_shuffle_rk3576_i8_tk230.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError, match=r"conv_3_rs_mm#1.*give channel 0 a weight scale of 9\.804.*the file "
                                                r"stores 9\.65"):
        rknnlite.Context(path, backend="software")


@pytest.mark.parametrize("stem", ["deconv_input_rk3576_fp16_tk230", "deconv_input_rk3576_i8_tk220"])
def test_an_rk3576_deconv_on_the_image_input_reads_its_fetch_bits(tmp_path, stem):
    assert "ConvTranspose" in lowered(stem).vendor_ops
    # a part of the fetch bits only (0x8000 of 0x2000a002 cleared): neither the value decoded nor a conv's
    patch = patch_registers(TARGET_CNA, {0x100C}, lambda v: v & ~0x8000)
    with pytest.raises(ModelInvalidError,
                       match=r"a ConvTranspose with CNA_CONV_CON1 (0x20002002|0x20202122), .*rk3576 map"):
        rknnlite.Context(doctored_copy(CORPUS / f"{stem}.rknn", tmp_path, patch), backend="software")
