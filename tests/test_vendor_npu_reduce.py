"""rk3576/rv1126b's ReduceMax over the channels as NPU tasks (RKNN-Toolkit2 2.5.0), whose scratch
tensors (an int16 copy of the input in int8 files) are checked and not read: corpus
``reducemax_npu_*`` (random graphs of rk3576 were refused for an int16 activation before)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.model.rknn_graph.npu_reduce import SCRATCH_ZERO_POINT

from corpus import CORPUS, corpus_arrays, inputs_of, lowered
from vendor_files import doctored_copy, tensor_table

STEMS = [f"reducemax_npu_{p}_{v}" for p in ("rk3576", "rv1126b") for v in ("fp16", "i8")]


@pytest.mark.parametrize("stem", STEMS)
def test_a_channel_maximum_run_as_npu_tasks_is_the_onnx_op(stem):
    model = lowered(stem)
    reductions = [n for n in model.graph.nodes if n.op == "ReduceMax"]
    # keepdims 0 compiles to a ReduceMax that keeps them and a Reshape
    assert [(n.attrs["axes"], n.attrs["keepdims"]) for n in reductions] == [([1], 1)] * 3
    assert "Reshape" in [n.op for n in model.graph.nodes]


@pytest.mark.parametrize("stem", ["reducemax_npu_rk3576_fp16", "reducemax_npu_rk3576_i8"])
def test_its_outputs_are_the_simulator_s(stem):
    # a maximum is exact on any grid: float16 bit for bit, int8 codes equal
    arrays = corpus_arrays(stem)
    with rknnlite.Context(str(CORPUS / f"{stem}.rknn"), backend="software") as ctx:
        outs = ctx.run(inputs_of(arrays), data_format="nchw")
    for k, ours in enumerate(outs):
        np.testing.assert_array_equal(ours.astype(np.float32), arrays[f"out{k}"].reshape(ours.shape))


def _refusal(tmp_path, patch) -> str:
    path = doctored_copy(CORPUS / "reducemax_npu_rk3576_i8.rknn", tmp_path, patch)
    with pytest.raises(ModelInvalidError) as err:
        rknnlite.Context(path, backend="software")
    return str(err.value)


def test_an_int16_scratch_on_another_zero_point_is_refused(tmp_path):
    def patch(data: bytearray) -> None:
        vec = tensor_table(data, "concat_9_exSecondary1").vector(11, 4)
        assert struct.unpack_from("<i", data, vec.pos) == (SCRATCH_ZERO_POINT,)
        struct.pack_into("<i", data, vec.pos, 0)

    message = _refusal(tmp_path, patch)
    assert "ReduceMax" in message and "input scratch 'concat_9_exSecondary1' is int16 [1, 16, 8, 8]" in message
    assert "zero point 128 was expected" in message


def test_a_reduced_scratch_off_the_output_grid_is_refused(tmp_path):
    def patch(data: bytearray) -> None:
        vec = tensor_table(data, "concat_9_exSecondary0").vector(10, 4)
        (scale,) = struct.unpack_from("<f", data, vec.pos)
        struct.pack_into("<f", data, vec.pos, 2 * scale)

    assert "reduced scratch 'concat_9_exSecondary0'" in _refusal(tmp_path, patch)


def test_an_int16_activation_that_is_no_reducemax_scratch_is_refused(tmp_path):
    # the same int16 dtype on the graph's output: an activation the lowering does not run
    def patch(data: bytearray) -> None:
        data[tensor_table(data, "m16").field_pos(0)] = data[tensor_table(data, "concat_9_exSecondary1").field_pos(0)]

    assert "'m16') has dtype int16" in _refusal(tmp_path, patch)
