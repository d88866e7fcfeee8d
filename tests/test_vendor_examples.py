"""What Rockchip's example scripts (rknn-toolkit2/examples/functions/*, run import-swapped
against ``rknnlite.toolkit``; see docs/vendor-examples.md) rely on: the calls, arguments and
files of functions/onnx_edit and functions/multi_input, on small models written here."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rknnlite.toolkit import RKNN, onnx_edit  # noqa: E402

RNG = np.random.default_rng(21)


def _save(nodes, inputs, outputs, inits, path):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _kv_block(path):
    """A KV-cache block like the example's concat_block: k_cache = Concat(k_cache.1, conv(k_new))."""
    w = numpy_helper.from_array(RNG.standard_normal((4, 4, 1, 1)).astype(np.float32), "w")
    f = TensorProto.FLOAT
    return _save([helper.make_node("Conv", ["k_new", "w"], ["k_proj"]),
                  helper.make_node("Concat", ["k_cache.1", "k_proj"], ["k_cache"], axis=2),
                  helper.make_node("Relu", ["k_cache"], ["out"])],
                 [helper.make_tensor_value_info("k_cache.1", f, [1, 4, 6, 8]),
                  helper.make_tensor_value_info("k_new", f, [1, 4, 1, 8])],
                 [helper.make_tensor_value_info("k_cache", f, [1, 4, 7, 8]),
                  helper.make_tensor_value_info("out", f, [1, 4, 7, 8])], [w], path)


def test_onnx_edit_example_builds_from_the_rewritten_dataset(tmp_path, monkeypatch):
    """functions/onnx_edit/test.py: build, onnx_edit(..., dataset='./dataset.txt'), then a
    second build from './dataset_for_concat_block_edited.txt' in the working directory."""
    monkeypatch.chdir(tmp_path)
    _kv_block("concat_block.onnx")
    np.save("concat_block_input_0.npy", RNG.standard_normal((1, 4, 6, 8)).astype(np.float32))
    np.save("concat_block_input_1.npy", RNG.standard_normal((1, 4, 1, 8)).astype(np.float32))
    (tmp_path / "dataset.txt").write_text("concat_block_input_0.npy concat_block_input_1.npy\n")
    rk = RKNN()
    assert rk.config(target_platform="rk3588") == 0
    assert rk.load_onnx("./concat_block.onnx") == 0
    assert rk.build(do_quantization=True, dataset="./dataset.txt") == 0
    assert rk.export_rknn("./concat_block.rknn") == 0
    assert onnx_edit(model="./concat_block.onnx", export_path="./concat_block_edited.onnx",
                     inputs_transform={"k_cache.1": "a,b,c,d->1,ad,b,c"},
                     outputs_transform={"k_cache": "a,b,c,d->1,ab,c,d"}, dataset="./dataset.txt") == 0
    assert sorted(os.listdir("dataset_for_concat_block_edited")) == ["concat_block_input_0.npy",
                                                                    "concat_block_input_1.npy"]
    assert np.load("dataset_for_concat_block_edited/concat_block_input_0.npy").shape == (1, 8, 4, 6)
    rk = RKNN()
    assert rk.config(target_platform="rk3588") == 0
    assert rk.load_onnx("./concat_block_edited.onnx") == 0
    assert rk.build(do_quantization=True, dataset="./dataset_for_concat_block_edited.txt") == 0
    assert rk.export_rknn("./concat_block_edited.rknn") == 0
    assert os.path.getsize("concat_block_edited.rknn") > 0


def _four_inputs(path):
    """multi_input's shape: three RGB inputs and one gray input (NCHW here), convs, a sum."""
    f = TensorProto.FLOAT
    nodes, inits, ins = [], [], []
    for i, c in enumerate((3, 3, 3, 1)):
        inits.append(numpy_helper.from_array(RNG.standard_normal((4, c, 3, 3)).astype(np.float32) * 0.2, f"w{i}"))
        ins.append(helper.make_tensor_value_info(f"input{i + 1}", f, [1, c, 16, 16]))
        nodes.append(helper.make_node("Conv", [f"input{i + 1}", f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
    nodes += [helper.make_node("Sum", [f"c{i}" for i in range(4)], ["s"]),
              helper.make_node("GlobalAveragePool", ["s"], ["output"])]
    return _save(nodes, ins, [helper.make_tensor_value_info("output", f, [1, 4, 1, 1])], inits, path)


@pytest.fixture
def multi_input(tmp_path, monkeypatch):
    """The multi_input flow: per-input mean/std lists, a dataset mixing an image and
    CHW .npy files, a float build ready for inference."""
    pil = pytest.importorskip("PIL.Image")
    monkeypatch.chdir(tmp_path)
    _four_inputs("m.onnx")
    pixels = [RNG.integers(0, 256, (16, 16, c), dtype=np.uint8) for c in (3, 3, 3, 1)]
    pil.fromarray(pixels[0]).save("input1.jpg", quality=95)
    for i, p in enumerate(pixels[1:], 2):
        np.save(f"input{i}.npy", p.transpose(2, 0, 1).astype(np.float32))  # CHW, without the batch dim
    (tmp_path / "dataset.txt").write_text("input1.jpg input2.npy input3.npy input4.npy\n")
    rk = RKNN()
    assert rk.config(mean_values=[[127.5, 127.5, 127.5], [0, 0, 0], [0, 0, 0], [127.5]],
                     std_values=[[128, 128, 128], [1, 1, 1], [1, 1, 1], [128]], target_platform="rk3566") == 0
    assert rk.load_onnx("m.onnx") == 0
    assert rk.build(do_quantization=True, dataset="./dataset.txt") == 0
    assert rk.init_runtime() == 0
    yield rk, [p.astype(np.float32) for p in pixels]
    rk.release()


def test_lower_rank_inputs_get_leading_ones_with_the_vendor_warning(multi_input, caplog):
    rk, hwc = multi_input
    want = rk.inference(inputs=[x[np.newaxis] for x in hwc], data_format=["nhwc"] * 4)
    with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
        got = rk.inference(inputs=hwc, data_format=["nhwc", "nhwc", "nhwc", "nhwc"])
    assert got is not None
    np.testing.assert_array_equal(got[0], want[0])
    warned = [r.getMessage() for r in caplog.records if "expect dims is 4" in r.getMessage()]
    assert "The dims of input(ndarray) shape (16, 16, 1) is wrong, expect dims is 4! Try expand dims to " \
           "(1, 16, 16, 1)!" in warned[-1]
    assert len(warned) == 4


def test_data_format_list_mixes_layouts(multi_input):
    rk, hwc = multi_input
    want = rk.inference(inputs=[x[np.newaxis] for x in hwc])
    mixed = [hwc[0][np.newaxis], hwc[1].transpose(2, 0, 1)[np.newaxis], hwc[2][np.newaxis],
             hwc[3].transpose(2, 0, 1)[np.newaxis]]
    got = rk.inference(inputs=mixed, data_format=["nhwc", "nchw", "NHWC", "nchw"])
    np.testing.assert_array_equal(got[0], want[0])


def test_data_format_list_of_the_wrong_length_or_value_fails(multi_input, caplog):
    rk, hwc = multi_input
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert rk.inference(inputs=hwc, data_format=["nhwc", "nhwc"]) is None
        assert rk.inference(inputs=hwc, data_format=["nhwc", "nhwc", "nhwc", "bogus"]) is None
    text = caplog.text
    assert "data_format must be 'nhwc' or 'nchw', or a list with one per input (4)" in text
    assert "'bogus' is invalid" in text


def test_higher_rank_is_never_squeezed(multi_input, caplog):
    rk, hwc = multi_input
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert rk.inference(inputs=[x[np.newaxis, np.newaxis] for x in hwc]) is None
    assert "inference" in caplog.text and "expect dims" not in caplog.text
