"""Measure RKNN-Toolkit2's ``kl_divergence`` ranges for ``tests/kl_vendor_cases.py``.

Runs ONLY in the vendor's venv (see ``docs/vendor-format-notes.md``)::

    /var/tmp/rkt/bin/python tools/vendor_corpus/kl_ranges.py

For each case it builds ``[1, 1, 64, 64]`` -> identity 1x1 Conv (-> Relu) -> output,
calibrates with ``quantized_algorithm='kl_divergence'`` (rk3588, mean 0, std 1) through
``hybrid_quantization_step1`` and prints the output tensor's ``min``/``max`` from the
``.quantization.cfg`` it writes (and the input's, in a comment), as Python literals for the test.
"""

import contextlib
import io
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from kl_vendor_cases import CASES  # noqa: E402


def _model(path, kind):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if kind == "relu" else "y"])]
    if kind == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 64, 64])],
        [numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w"),
         numpy_helper.from_array(np.zeros(1, np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.save(model, path)


def measure(samples, kind):
    from rknn.api import RKNN
    from ruamel.yaml import YAML

    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            _model("m.onnx", kind)
            for i, s in enumerate(samples):
                np.save(f"s{i}.npy", s[None, None])
            with open("ds.txt", "w") as f:
                f.write("".join(f"s{i}.npy\n" for i in range(len(samples))))
            rknn = RKNN(verbose=False)
            with contextlib.redirect_stdout(io.StringIO()):
                rknn.config(target_platform="rk3588", quantized_algorithm="kl_divergence",
                            quantized_method="layer", mean_values=[[0]], std_values=[[1]])
                assert rknn.load_onnx("m.onnx") == 0
                assert rknn.hybrid_quantization_step1(dataset="ds.txt") == 0
            rknn.release()
            cfg = YAML(typ="safe").load(open("m.quantization.cfg"))["quantize_parameters"]
            return tuple((cfg[t]["min"][0], cfg[t]["max"][0]) for t in ("x_int8", "y_int8"))
        finally:
            os.chdir(cwd)


if __name__ == "__main__":
    for name, (make, kind) in CASES.items():
        (xlo, xhi), (lo, hi) = measure(make(), kind)
        print(f"    {name!r}: ({lo!r}, {hi!r}),  # input x: ({xlo!r}, {xhi!r})", flush=True)
