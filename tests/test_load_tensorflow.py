"""``RKNN.load_tensorflow``: frozen TensorFlow graphs converted with tf2onnx, compared with
TensorFlow's own output.

TensorFlow is only ever imported in child processes (it changes environment variables and
logging when imported): the test graphs are built and run by a script this file starts,
and the loader converts in a child process of its own.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")

from rknnlite.errors import ModelInvalidError  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.loaders import tensorflow as tf_loader  # noqa: E402
from toolkit_logs import errors  # noqa: E402

# Builds each frozen graph of a spec list, runs it in TensorFlow and saves graph, input and output.
_MAKER = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    def make(name, kind, shape, seed, fq=None):
        rng = np.random.default_rng(seed)
        const = lambda *s: tf.constant((rng.standard_normal(s) * 0.5).astype(np.float32))

        def fake_quant(v, lo, hi, narrow=False, name=None):
            return tf.quantization.fake_quant_with_min_max_vars(v, tf.constant(lo), tf.constant(hi),
                                                                narrow_range=narrow, name=name)

        def body(x):
            if kind == "qat":  # weights FakeQuant'd on fq = [lo, hi, narrow]; the input stays float
                lo, hi, narrow = fq
                w1 = fake_quant(tf.clip_by_value(const(3, 3, 3, 8), lo, hi), lo, hi, narrow)
                y = fake_quant(tf.nn.relu6(tf.nn.conv2d(x, w1, strides=1, padding="SAME")), 0.0, 3.0)
                w2 = fake_quant(tf.clip_by_value(const(3, 3, 8, 4), lo, hi), lo, hi, narrow)
                return fake_quant(tf.nn.conv2d(y, w2, strides=1, padding="SAME"), -4.0, 4.0, name="out")
            if kind in ("qat_dw", "qat_dense"):  # a depthwise conv or a Dense, its weight FakeQuant'd
                lo, hi, narrow = fq
                w1 = fake_quant(tf.clip_by_value(const(3, 3, 3, 8), lo, hi), lo, hi, narrow)
                y = fake_quant(tf.nn.relu6(tf.nn.conv2d(x, w1, strides=1, padding="SAME")), 0.0, 3.0)
                if kind == "qat_dw":
                    wd = fake_quant(tf.clip_by_value(const(3, 3, 8, 1), lo, hi), lo, hi, narrow)
                    y = tf.nn.depthwise_conv2d(y, wd, strides=[1, 1, 1, 1], padding="SAME")
                else:
                    wf = fake_quant(tf.clip_by_value(const(8 * 8 * 8, 5) * 0.2, lo, hi), lo, hi, narrow)
                    y = tf.matmul(tf.reshape(y, [1, -1]), wf)
                return fake_quant(y, -4.0, 4.0, name="out")
            if kind == "convnet":
                y = tf.nn.conv2d(x, const(3, 3, 3, 6), strides=1, padding="SAME")
                y = tf.nn.relu(tf.nn.bias_add(y, const(6)))
                y = tf.nn.max_pool2d(y, ksize=2, strides=2, padding="VALID")
                y = tf.reshape(y, [1, -1])
                y = tf.matmul(y, const(4 * 4 * 6, 5)) + const(5)
                return tf.nn.softmax(y, name="prob")
            if kind == "affine":
                return tf.identity(x * 2.0 + 1.0, name="out")
            if kind == "sin":
                return tf.identity(tf.math.sin(x), name="out")
            raise ValueError(kind)

        fn = tf.function(body, input_signature=[tf.TensorSpec(shape, tf.float32, name="x")])
        graph_def = convert_variables_to_constants_v2(fn.get_concrete_function()).graph.as_graph_def()
        with open(os.path.join(out, name + ".pb"), "wb") as f:
            f.write(graph_def.SerializeToString())
        x = rng.standard_normal([d or 4 for d in shape]).astype(np.float32)
        np.save(os.path.join(out, name + "_x.npy"), x)
        np.save(os.path.join(out, name + "_y.npy"), fn(tf.constant(x)).numpy())

    specs = json.loads(sys.argv[1]); out = sys.argv[2]
    for spec in specs:
        make(**spec)
""")

_GRAPHS = [
    {"name": "convnet", "kind": "convnet", "shape": [1, 8, 8, 3], "seed": 0},
    {"name": "convnet3", "kind": "convnet", "shape": [1, 8, 8, 3], "seed": 3},
    {"name": "affine4d", "kind": "affine", "shape": [1, 2, 3, 4], "seed": 0},
    {"name": "affine2d", "kind": "affine", "shape": [1, 5], "seed": 0},
    {"name": "sin", "kind": "sin", "shape": [1, 8], "seed": 0},
    {"name": "affine_dyn", "kind": "affine", "shape": [1, None, None, 3], "seed": 0},
    {"name": "qat_narrow", "kind": "qat", "shape": [1, 8, 8, 3], "seed": 1, "fq": [-0.9, 0.9, True]},
    {"name": "qat_wide", "kind": "qat", "shape": [1, 8, 8, 3], "seed": 1, "fq": [-0.9, 0.9, False]},
    {"name": "qat_asym", "kind": "qat", "shape": [1, 8, 8, 3], "seed": 1, "fq": [-0.5, 1.0, False]},
    {"name": "qat_dw", "kind": "qat_dw", "shape": [1, 8, 8, 3], "seed": 1, "fq": [-0.5, 1.0, False]},
    {"name": "qat_dense", "kind": "qat_dense", "shape": [1, 8, 8, 3], "seed": 1, "fq": [-0.9, 0.9, True]},
]


@pytest.fixture(scope="module")
def tf_graphs(tmp_path_factory):
    """``graph(name)`` -> (pb path, input, TensorFlow's output) of the generated graphs
    (one TensorFlow process builds them all)."""
    if importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("tf2onnx") is None:
        pytest.skip("tensorflow and tf2onnx are not installed")
    out = tmp_path_factory.mktemp("tf_graphs")
    proc = subprocess.run([sys.executable, "-c", _MAKER, json.dumps(_GRAPHS), str(out)], capture_output=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]

    def graph(name):
        return str(out / f"{name}.pb"), np.load(out / f"{name}_x.npy"), np.load(out / f"{name}_y.npy")

    return graph


def convert_and_run(pb, inputs, sizes, outputs, feeds, input_is_nchw=False, data_format=None):
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", float_dtype="float32") == 0
    assert rknn.load_tensorflow(pb, inputs, sizes, outputs, input_is_nchw=input_is_nchw) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    result = rknn.inference(feeds, data_format=data_format)
    specs = (rknn._imported.input_specs, rknn._imported.output_specs)
    rknn.release()
    return result, specs


def test_convnet_matches_tensorflow(tf_graphs):
    pb, x, expected = tf_graphs("convnet")
    (y,), (ins, outs) = convert_and_run(pb, ["x"], [[1, 8, 8, 3]], ["prob"], [x])
    # the 4-D NHWC input became an NCHW model input; inference takes NHWC data by default
    assert [(s.name, tuple(s.shape)) for s in ins] == [("x", (1, 3, 8, 8))]
    assert [s.name for s in outs] == ["prob"]
    assert y.shape == expected.shape == (1, 5)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_tensor_names_and_none_batch_dim(tf_graphs, caplog):
    pb, x, expected = tf_graphs("convnet3")
    caplog.set_level(logging.WARNING, logger="rknnlite.toolkit")
    (y,), (ins, outs) = convert_and_run(pb, ["x:0"], [[None, 8, 8, 3]], ["prob:0"], [x])
    assert [s.name for s in ins] == ["x:0"] and [s.name for s in outs] == ["prob:0"]
    assert any("fixed to 1" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_input_is_nchw_keeps_the_layout(tf_graphs):
    pb, x, expected = tf_graphs("affine4d")
    (y,), (ins, _) = convert_and_run(pb, ["x"], [[1, 2, 3, 4]], ["out"], [x], input_is_nchw=True,
                                     data_format="nchw")
    assert tuple(ins[0].shape) == (1, 2, 3, 4)
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_unsupported_op_is_named(tf_graphs, caplog):
    pb, _, _ = tf_graphs("sin")
    rknn = RKNN()
    caplog.set_level(logging.ERROR, logger="rknnlite.toolkit")
    assert rknn.load_tensorflow(pb, ["x"], [[1, 8]], ["out"]) == -1
    msg = " ".join(errors(caplog))
    assert "unsupported op 'Sin'" in msg and "supported ops:" in msg
    rknn.release()


def test_malformed_and_missing_files(tf_graphs, tmp_path, caplog):
    rknn = RKNN()
    caplog.set_level(logging.ERROR, logger="rknnlite.toolkit")
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\x0a\xff\xff\xff this is not a graph")
    assert rknn.load_tensorflow(str(bad), ["x"], [[1, 4]], ["y"]) == -1
    assert "bad.pb" in errors(caplog)[-1] and "not a binary TensorFlow GraphDef" in errors(caplog)[-1]
    assert rknn.load_tensorflow(str(tmp_path / "absent.pb"), ["x"], [[1, 4]], ["y"]) == -1
    assert "TensorFlow model file not found" in errors(caplog)[-1]
    pb, _, _ = tf_graphs("affine2d")  # the object stays usable
    assert rknn.load_tensorflow(pb, ["x"], [[1, 5]], ["out"]) == 0
    rknn.release()


def test_unknown_input_name(tf_graphs):
    pb, _, _ = tf_graphs("affine2d")
    with pytest.raises(ModelInvalidError, match=r"inputs: 'nope' is not a node of the graph; its nodes: .*x"):
        tf_loader.load_tensorflow(pb, ["nope"], [[1, 5]], ["out"])


def test_missing_framework_names_the_install(monkeypatch, caplog, tmp_path):
    real = importlib.util.find_spec
    # tensorflow present (whether or not this environment has it), tf2onnx missing
    present = {"tf2onnx": None, "tensorflow": object()}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: present[name] if name in present else real(name, *a))
    rknn = RKNN()
    caplog.set_level(logging.ERROR, logger="rknnlite.toolkit")
    assert rknn.load_tensorflow(str(tmp_path / "m.pb"), ["x"], [[1, 4]], ["y"]) == -1
    msg = errors(caplog)[-1]
    assert "tf2onnx is not installed" in msg and "pip install 'rknnlite-runtime[tensorflow]'" in msg
    rknn.release()


@pytest.mark.parametrize("kwargs, match", [
    ({"inputs": "x"}, "inputs must be a non-empty list"),
    ({"outputs": []}, "outputs must be a non-empty list"),
    ({"input_size_list": [[1, 4], [1, 4]]}, "one shape per input"),
    ({"input_size_list": [[1, 0]]}, "positive ints"),
    ({"tf_pb": 42}, "tf_pb must be a path or bytes"),
])
def test_bad_arguments(monkeypatch, kwargs, match):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())  # as if installed
    args = {"tf_pb": b"", "inputs": ["x"], "input_size_list": [[1, 4]], "outputs": ["y"]}
    args.update(kwargs)
    with pytest.raises(ModelInvalidError, match=match):
        tf_loader.load_tensorflow(**args)


def test_dynamic_input_shapes_are_given_as_tensorflow_sees_them(tf_graphs):
    pb, _, _ = tf_graphs("affine_dyn")
    rknn = RKNN()
    sets = [[[1, 4, 4, 3]], [[1, 6, 2, 3]]]
    assert rknn.config(target_platform="rk3588", float_dtype="float32", dynamic_input=sets) == 0
    assert rknn.load_tensorflow(pb, ["x"], [[1, 4, 4, 3]], ["out"]) == 0
    assert rknn._imported.dynamic_shapes == (((1, 3, 4, 4),), ((1, 3, 6, 2),))  # NCHW model inputs
    assert rknn.build(do_quantization=False) == 0 and rknn.init_runtime() == 0
    for (shape,) in sets:
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        (y,) = rknn.inference([x])
        np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)
    rknn.release()


def test_the_conversion_child_has_a_fixed_hash_seed(monkeypatch, tmp_path):
    """tf2onnx names some nodes in set order: without a fixed PYTHONHASHSEED the same .pb gave
    hybrid_quantization_step1 different tensor names (and .cfg keys) from run to run."""
    seen = {}

    def fake_run(cmd, input=None, stdout=None, stderr=None, env=None, check=False):
        seen.update(env)
        return subprocess.CompletedProcess(cmd, 1, b"", b"stopped here")

    monkeypatch.setenv("PYTHONHASHSEED", "random")
    monkeypatch.setattr(tf_loader.subprocess, "run", fake_run)
    with pytest.raises(ModelInvalidError, match="stopped here"):
        tf_loader._run_child({"out": str(tmp_path / "m.onnx")}, str(tmp_path / "m.pb"))
    assert seen["PYTHONHASHSEED"] == "0"


# -- quantization-aware graphs: the grids of FakeQuant'd weights --------------------------------


@pytest.mark.parametrize("lo, hi, narrow, grid", [
    (-0.9, 0.9, True, (np.float32(1.8) / np.float32(254), 0)),
    (-0.9, 0.9, False, (np.float32(1.8) / np.float32(255), 0)),   # zero point 127.5 rounds to 128
    (-0.5, 1.0, False, (np.float32(1.5) / np.float32(255), -43)),  # 85 - 128
    (0.5, 2.0, False, (np.float32(1.5) / np.float32(255), -128)),  # 0 outside: clamped to code 0
    (-2.0, -0.5, True, (np.float32(1.5) / np.float32(254), 127)),  # clamped to code 255
])
def test_fake_quant_grids_are_tensorflows_nudged_ones(lo, hi, narrow, grid):
    scale, zp = tf_loader.nudged_grid(lo, hi, narrow)
    assert np.float32(scale) == grid[0] and zp == grid[1]


def _conv_graph(x_quant):
    """x -> Conv(w, b) -> y, x on ``x_quant`` (or float when None)."""
    from rknnlite.model.graph import Graph, Node
    from rknnlite.model.spec import QuantParams

    w = np.array([-1.0, -0.5, 0.0, 0.5, 0.99, 1.0], np.float32).reshape(2, 3, 1, 1)
    g = Graph([Node("Conv", "conv", ["x", "w", "b"], ["y"], {})], ["x"], ["y"],
              {"w": w, "b": np.zeros(2, np.float32)})
    g.quant = {} if x_quant is None else {"x": QuantParams("int8", x_quant, (0,))}
    return g


@pytest.mark.parametrize("zp, lowest", [(0, -127), (-43, -128)])
def test_weight_grids_keep_the_fake_quants_grid(zp, lowest):
    """RKNN-Toolkit2 2.5.0 (rk3566, build(do_quantization=False), codes decoded from its files):
    a FakeQuant'd weight keeps the FakeQuant's scale and zero point, not the x 128/127 grid a
    QDQ weight with zero point 0 gets; with zero point 0 a code of -128 becomes -127.  With
    the same input the second conv of each probe equalled its simulator bit for bit."""
    g = _conv_graph((0.05,))
    scale = 1.0 / 128
    tf_loader.weight_grids(g, {"w": (scale, zp), "gone": (0.1, 0)})
    q = g.quant["w"]
    assert (q.dtype, q.scale, q.zero_point, q.axis) == ("int8", (float(np.float32(scale)),), (zp,), None)
    codes = g.constants["w"] / np.float32(scale) + zp
    w = np.array([-1.0, -0.5, 0.0, 0.5, 0.99, 1.0]).reshape(2, 3, 1, 1)
    np.testing.assert_array_equal(codes, np.clip(np.rint(w * 128) + zp, lowest, 127))
    assert "gone" not in g.quant and "gone" not in g.constants


def test_weight_grids_leave_float_convs_and_gridded_weights_alone():
    g = _conv_graph(None)  # a conv reading a float input runs in float16 in the vendor's build
    w = g.constants["w"].copy()
    tf_loader.weight_grids(g, {"w": (1.0 / 128, 0)})
    assert "w" not in g.quant
    np.testing.assert_array_equal(g.constants["w"], w)
    g = _conv_graph((0.05,))
    from rknnlite.model.spec import QuantParams
    g.quant["w"] = QuantParams("int8", (0.02,), (0,))
    tf_loader.weight_grids(g, {"w": (1.0 / 128, 0)})
    assert g.quant["w"].scale == (0.02,)
    np.testing.assert_array_equal(g.constants["w"], w)


@pytest.mark.parametrize("name", ["qat_narrow", "qat_wide", "qat_asym"])
def test_fake_quantized_weights_keep_their_grid_through_tf2onnx(tf_graphs, name):
    """TensorFlow's constant folding turns a FakeQuant on a weight into a plain constant inside
    tf2onnx; the loader gives it back its grid when its conv reads an int8 input."""
    pb, x, y_tf = tf_graphs(name)
    lo, hi, narrow = next(g["fq"] for g in _GRAPHS if g["name"] == name)
    imported = tf_loader.load_tensorflow(pb, ["x"], [[1, 8, 8, 3]], ["out"])
    graph = imported.graph
    convs = [n for n in graph.nodes if n.op == "Conv"]
    assert len(convs) == 2
    first, second = (n.inputs[1] for n in convs)
    assert first not in graph.quant  # its input is the float model input
    scale, zp = tf_loader.nudged_grid(lo, hi, narrow)
    q = graph.quant[second]
    assert (q.scale, q.zero_point) == ((scale,), (zp,))
    codes = graph.constants[second] / np.float32(scale) + zp
    np.testing.assert_allclose(codes, np.rint(codes), atol=1e-3)
    assert codes.min() >= (-127 if zp == 0 else -128)
    _assert_qat_build_follows_tensorflow(pb, x, y_tf)


def _assert_qat_build_follows_tensorflow(pb, x, y_tf):
    """An int8 build of the graph on its own grids (rk3566) within 2.5 steps of the output
    FakeQuant ([-4, 4]) from TensorFlow's output."""
    rknn = RKNN()
    assert rknn.config(target_platform="rk3566") == 0
    assert rknn.load_tensorflow(pb, ["x"], [[1, 8, 8, 3]], ["out"]) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    (y,) = rknn.inference([x])
    rknn.release()
    step = 8.0 / 255  # the output FakeQuant's
    assert np.abs(y.reshape(y_tf.shape) - y_tf).max() <= 2.5 * step


@pytest.mark.parametrize("name, op", [("qat_dw", "Conv"), ("qat_dense", "MatMul")])
def test_depthwise_and_dense_weights_keep_their_grid(tf_graphs, name, op):
    """tf2onnx transposes a depthwise weight and folds it again under a name of its own
    (``const_fold_opt__N``); the conversion finds its FakeQuant by value.  A Dense's MatMul
    reads the FakeQuant'd conv output through a flatten (grid implied through the layout
    ops).  RKNN-Toolkit2 2.5.0 cannot load either graph (the depthwise one: "The
    const_fold_opt__35 dismatch name in QAT information !"; the Dense one crashes its build,
    rk3566, ``tools/vendor_corpus/tf_qat_probe.py``), so the rule is its conv rule:
    the FakeQuant's own scale and zero point."""
    pb, x, y_tf = tf_graphs(name)
    lo, hi, narrow = next(g["fq"] for g in _GRAPHS if g["name"] == name)
    graph = tf_loader.load_tensorflow(pb, ["x"], [[1, 8, 8, 3]], ["out"]).graph
    node = [n for n in graph.nodes if n.op == op][-1]
    weight = node.inputs[1]
    scale, zp = tf_loader.nudged_grid(lo, hi, narrow)
    q = graph.quant[weight]
    assert (q.scale, q.zero_point) == ((scale,), (zp,))
    codes = graph.constants[weight] / np.float32(scale) + zp
    np.testing.assert_allclose(codes, np.rint(codes), atol=1e-3)
    _assert_qat_build_follows_tensorflow(pb, x, y_tf)


_VENDOR_TF = Path(__file__).parent / "data" / "vendor_tf"


@pytest.mark.parametrize("name", ["conv_narrow", "conv_asym"])
def test_a_fake_quant_graph_equals_the_vendors_simulator(name):
    """conv (float input, FakeQuant'd weights) -> Relu6 -> FakeQuant -> conv -> FakeQuant, as
    RKNN-Toolkit2 2.5.0 builds and simulates it (tests/data/vendor_tf/README.md): equal on every
    value.  The first conv runs in float16 on the unrounded float32 input, as the vendor's does;
    rounding the input to float16 first gave 95-97 % of these values."""
    if importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("tf2onnx") is None:
        pytest.skip("tensorflow and tf2onnx are not installed")
    sim = np.load(_VENDOR_TF / f"{name}_sim.npz")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3566") == 0
    assert rknn.load_tensorflow(str(_VENDOR_TF / f"{name}.pb"), ["input"], [[1, 8, 8, 3]], ["out"]) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    (y,) = rknn.inference([sim["x"]])
    rknn.release()
    step = 16.0 / 255  # the output FakeQuant's ([-8, 8])
    codes = np.rint(y.reshape(sim["vendor"].shape) / step)
    np.testing.assert_array_equal(codes, np.rint(sim["vendor"] / step))
