"""The Ultralytics-built models of tests/data/vision, converted for the vision tests."""

from __future__ import annotations

import numpy as np

from conftest import REPO
from rknnlite.toolkit import RKNN

DATA = REPO / "tests" / "data" / "vision"


def convert(name, tmp_path, quantize=False, images=None, model=None) -> str:
    """Convert fixture ``name`` (or ONNX bytes ``model``) to a .rknn file in ``tmp_path``."""
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]],
                       float_dtype="float32") == 0
    assert rknn.load_onnx(model if model is not None else str(DATA / f"{name}.onnx")) == 0
    dataset = None
    if quantize:
        lines = []
        for i, img in enumerate(images):
            np.save(tmp_path / f"img{i}.npy", img.transpose(2, 0, 1)[None].astype(np.float32))
            lines.append(f"img{i}.npy")
        (tmp_path / "dataset.txt").write_text("\n".join(lines) + "\n")
        dataset = str(tmp_path / "dataset.txt")
    assert rknn.build(do_quantization=quantize, dataset=dataset) == 0
    path = tmp_path / f"{name}.rknn"
    assert rknn.export_rknn(str(path)) == 0
    rknn.release()
    return str(path)


def model_zoo_split(name: str) -> bytes:
    """The Ultralytics model with its head split the way Rockchip's model zoo exports it:
    per stride the box distribution (1, 64, H, W), the class scores after a sigmoid
    (1, nc, H, W) and their sum clipped to [0, 1] (1, 1, H, W), instead of the one
    concatenated, decoded output."""
    import onnx
    from onnx import helper

    m = onnx.load(str(DATA / f"{name}.onnx"))
    g = m.graph
    outputs = []
    for i in range(3):
        box = f"/model.22/cv2.{i}/cv2.{i}.2/Conv_output_0"
        cls = f"/model.22/cv3.{i}/cv3.{i}.2/Conv_output_0"
        g.node.extend([
            helper.make_node("Sigmoid", [cls], [f"cls{i}"]),
            helper.make_node("ReduceSum", [f"cls{i}", f"axes{i}"], [f"sum{i}_raw"], keepdims=1),
            helper.make_node("Clip", [f"sum{i}_raw", "zero", "one"], [f"sum{i}"]),
        ])
        g.initializer.append(onnx.numpy_helper.from_array(np.array([1], np.int64), f"axes{i}"))
        outputs += [box, f"cls{i}", f"sum{i}"]
    g.initializer.extend([onnx.numpy_helper.from_array(np.array(0, np.float32), "zero"),
                          onnx.numpy_helper.from_array(np.array(1, np.float32), "one")])
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs])
    return m.SerializeToString()
