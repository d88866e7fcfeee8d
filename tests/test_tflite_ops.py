"""TFLite builtin ops of real vision and audio models (PRELU, TRANSPOSE_CONV, SOFTMAX, SPLIT,
SPLIT_V, STRIDED_SLICE, TRANSPOSE, BATCH_MATMUL, GATHER, SQUARED_DIFFERENCE, RSQRT,
DEPTH_TO_SPACE): small
models converted here by TensorFlow's own TFLite converter, loaded with ``RKNN.load_tflite``
and compared with the TFLite interpreter (float build: cosine >= 0.999 and close values)."""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("onnx")
if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("tensorflow is needed to write the TFLite models", allow_module_level=True)

from rknnlite.errors import ModelInvalidError  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.loaders.tflite import load_tflite  # noqa: E402

from tflite_builder import TFLiteBuilder, interpret, interpreter  # noqa: E402


def _convert(fn, *shapes) -> bytes:
    """A float TFLite model of ``fn`` on float32 inputs of ``shapes`` (TensorFlow's converter)."""
    import tensorflow as tf

    # autograph=False: no re-reading of the lambdas' source (plain tensor code needs no conversion)
    concrete = tf.function(fn, autograph=False).get_concrete_function(*[tf.TensorSpec(s, tf.float32) for s in shapes])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], tf.Module())
    return converter.convert()


def _ops_of(data: bytes):
    import tflite as T
    from tflite.utils import BUILTIN_OPCODE2NAME

    m = T.Model.GetRootAsModel(data, 0)
    return {BUILTIN_OPCODE2NAME[max(m.OperatorCodes(i).BuiltinCode(), m.OperatorCodes(i).DeprecatedBuiltinCode())]
            for i in range(m.OperatorCodesLength())}


def _prelu_layer(shared_axes, alpha):
    """Keras' PReLU layer (what the converter turns into the PRELU builtin) with slopes ``alpha``."""
    import tensorflow as tf

    layer = tf.keras.layers.PReLU(shared_axes=shared_axes)
    layer.build((1, 5, 6, 4))
    layer.set_weights([np.asarray(alpha, np.float32)])
    return lambda x: layer(x)


def _cases():
    import tensorflow as tf

    rng = np.random.default_rng(5)
    w_t = tf.constant(rng.standard_normal((3, 3, 6, 4)).astype(np.float32) * 0.3)  # HWOI for conv2d_transpose
    prelu_hw = _prelu_layer([1, 2], rng.uniform(0.05, 0.5, (1, 1, 4)))  # one slope per channel
    prelu_full = _prelu_layer(None, rng.uniform(0.05, 0.5, (5, 6, 4)))  # one slope per element
    return {
        # name: (function, input shapes, the op the model must contain)
        "PRELU": (prelu_hw, [(1, 5, 6, 4)], "PRELU"),
        "PRELU_elementwise": (prelu_full, [(1, 5, 6, 4)], "PRELU"),
        "TRANSPOSE_CONV_same": (lambda x: tf.nn.conv2d_transpose(x, w_t, (1, 10, 12, 6), 2, "SAME"),
                                [(1, 5, 6, 4)], "TRANSPOSE_CONV"),
        "TRANSPOSE_CONV_valid": (lambda x: tf.nn.conv2d_transpose(x, w_t, (1, 11, 13, 6), 2, "VALID"),
                                 [(1, 5, 6, 4)], "TRANSPOSE_CONV"),
        "TRANSPOSE_CONV_same_odd": (lambda x: tf.nn.conv2d_transpose(x, w_t, (1, 9, 11, 6), 2, "SAME"),
                                    [(1, 5, 6, 4)], "TRANSPOSE_CONV"),
        "SOFTMAX": (lambda x: tf.nn.softmax(x * 2.0, axis=-1), [(1, 3, 4, 7)], "SOFTMAX"),
        "SPLIT": (lambda x: tf.concat([t * float(k + 1) for k, t in enumerate(tf.split(x, 3, axis=-1))], axis=1),
                  [(1, 4, 5, 6)], "SPLIT"),
        "SPLIT_V": (lambda x: [t + 1.0 for t in tf.split(x, [2, 5], axis=1)], [(2, 7, 3)], "SPLIT_V"),
        "STRIDED_SLICE": (lambda x: x[:, 1:7:2, ::-1, 1:3] * 2.0, [(1, 8, 6, 4)], "STRIDED_SLICE"),
        "STRIDED_SLICE_shrink": (lambda x: x[:, 2, 1:, :] + 1.0, [(1, 8, 6, 4)], "STRIDED_SLICE"),
        "TRANSPOSE": (lambda x: tf.transpose(x, [0, 2, 1, 3]) * 3.0, [(1, 4, 5, 6)], "TRANSPOSE"),
        "BATCH_MATMUL": (lambda a, b: tf.matmul(a, b), [(2, 4, 5), (2, 5, 3)], "BATCH_MATMUL"),
        "BATCH_MATMUL_adjoint": (lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True),
                                 [(2, 5, 4), (2, 3, 5)], "BATCH_MATMUL"),
        "GATHER": (lambda x: tf.gather(x, [3, 0, 2, 2], axis=-1) * 2.0, [(1, 4, 5, 4)], "GATHER"),
        "GATHER_rows": (lambda x: tf.gather(x, [4, 1], axis=1) + 1.0, [(3, 6, 2)], "GATHER"),
        "SQUARED_DIFFERENCE": (lambda a, b: tf.math.squared_difference(a, b), [(1, 4, 5, 3), (1, 4, 5, 3)],
                               "SQUARED_DIFFERENCE"),
        "RSQRT": (lambda x: tf.math.rsqrt(x * x + 0.5), [(1, 4, 5, 3)], "RSQRT"),
        "DEPTH_TO_SPACE": (lambda x: tf.nn.depth_to_space(x, 2) * 2.0, [(1, 3, 4, 12)], "DEPTH_TO_SPACE"),
    }


_NAMES = ["PRELU", "PRELU_elementwise", "TRANSPOSE_CONV_same", "TRANSPOSE_CONV_valid", "TRANSPOSE_CONV_same_odd",
          "SOFTMAX", "SPLIT", "SPLIT_V", "STRIDED_SLICE", "STRIDED_SLICE_shrink", "TRANSPOSE", "BATCH_MATMUL",
          "BATCH_MATMUL_adjoint", "GATHER", "GATHER_rows", "SQUARED_DIFFERENCE", "RSQRT", "DEPTH_TO_SPACE"]


def _cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@functools.lru_cache(maxsize=None)
def _model(name: str) -> bytes:
    fn, shapes, opname = _cases()[name]
    data = _convert(fn, *shapes)
    assert opname in _ops_of(data)  # the converter really emitted the op under test
    return data


def _inputs(data: bytes, seed: int):
    """Random inputs in the model's own input order (the converter may reorder the
    function's arguments); 4-D ones NHWC, as the interpreter takes them."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(d["shape"])).astype(np.float32) for d in interpreter(data).get_input_details()]


@pytest.mark.parametrize("name", _NAMES)
def test_op_matches_interpreter(name):
    data = _model(name)
    inputs = _inputs(data, 17)
    want = interpret(data, inputs)
    r = RKNN()
    assert r.config(target_platform="rk3588", float_dtype="float32") == 0
    assert r.load_tflite(data) == 0
    assert r.build(do_quantization=False) == 0
    assert r.init_runtime() == 0
    got = r.inference(inputs=inputs)
    r.release()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert _cosine(g, w) >= 0.999
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", _NAMES)
def test_op_calibrated_int8_stays_close(name, tmp_path):
    """The same models built int8 (calibrated on 4 random samples, .npy in NCHW for 4-D
    inputs): each output keeps cosine >= 0.99 against the interpreter's float result."""
    data = _model(name)
    lines = []
    for k in range(4):
        paths = []
        for j, a in enumerate(_inputs(data, 100 + k)):
            path = tmp_path / f"s{k}_{j}.npy"
            np.save(path, a.transpose(0, 3, 1, 2) if a.ndim == 4 else a)
            paths.append(str(path))
        lines.append(" ".join(paths))
    (tmp_path / "ds.txt").write_text("\n".join(lines) + "\n")
    inputs = _inputs(data, 17)
    want = interpret(data, inputs)
    r = RKNN()
    assert r.config(target_platform="rk3588") == 0
    assert r.load_tflite(data) == 0
    assert r.build(do_quantization=True, dataset=str(tmp_path / "ds.txt")) == 0
    assert r.init_runtime() == 0
    got = r.inference(inputs=inputs)
    r.release()
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert _cosine(g, w) >= 0.99


def _custom(code: str) -> bytes:
    b = TFLiteBuilder()
    x = b.tensor("x", [1, 4])
    y = b.tensor("y", [1, 4])
    b.op("CUSTOM", [x], [y], custom_code=code)
    return b.finish([x], [y])


@pytest.mark.parametrize("code", ["Convolution2DTransposeBias", "MaxPoolingWithArgmax2D",
                                  "TFLite_Detection_PostProcess"])
def test_framework_custom_ops_are_refused_by_name(code):
    """Custom ops of one framework (MediaPipe's, TF's detection post-processing) have no
    builtin semantics here: refused with their name and the framework they belong to."""
    with pytest.raises(ModelInvalidError, match=rf"CUSTOM\({code}\).*custom op"):
        load_tflite(_custom(code))


def test_strided_slice_ellipsis_is_refused():
    b = TFLiteBuilder()
    x = b.tensor("x", [1, 4, 4, 2])
    consts = [b.tensor(n, [4], dtype=np.int32, data=np.array(v, np.int32))
              for n, v in (("b", [0, 0, 0, 0]), ("e", [1, 2, 4, 2]), ("s", [1, 1, 1, 1]))]
    y = b.tensor("y", [1, 2, 4, 2])
    b.op("STRIDED_SLICE", [x] + consts, [y], "StridedSliceOptions", EllipsisMask=1)
    with pytest.raises(ModelInvalidError, match="ellipsis_mask"):
        load_tflite(b.finish([x], [y]))


def test_gather_batch_dims_is_refused():
    b = TFLiteBuilder()
    x = b.tensor("x", [2, 3])
    ind = b.tensor("i", [2, 1], dtype=np.int32, data=np.array([[0], [2]], np.int32))
    y = b.tensor("y", [2, 1])
    b.op("GATHER", [x, ind], [y], "GatherOptions", Axis=1, BatchDims=1)
    with pytest.raises(ModelInvalidError, match="batch_dims"):
        load_tflite(b.finish([x], [y]))


def _sparse_model(block: bool) -> bytes:
    """Weights mostly zero, written sparse by the converter (``EXPERIMENTAL_SPARSITY``):
    element-wise CSR expanded by DENSIFY ops (conv and dense layer, MediaPipe's sparse
    detectors' form), or 1x4 blocks that FULLY_CONNECTED reads sparse itself."""
    import tensorflow as tf

    rng = np.random.default_rng(9)
    fc = rng.standard_normal((32, 24)).astype(np.float32)
    w = rng.standard_normal((3, 3, 16, 32)).astype(np.float32)
    w[rng.random(w.shape) < 0.8] = 0
    if block:
        fc[np.repeat(rng.random((8, 24)) < 0.8, 4, axis=0)] = 0
        shape = (2, 32)
    else:
        fc[rng.random(fc.shape) < 0.8] = 0
        shape = (1, 8, 8, 16)

    def fn(x):
        if block:
            return tf.matmul(x, tf.constant(fc))
        features = tf.nn.relu(tf.nn.conv2d(x, tf.constant(w), 1, "SAME"))
        return tf.matmul(tf.reduce_mean(features, axis=[1, 2]), tf.constant(fc))

    concrete = tf.function(fn, autograph=False).get_concrete_function(tf.TensorSpec(shape, tf.float32))
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], tf.Module())
    converter.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
    return converter.convert()


@pytest.mark.parametrize("block", [False, True], ids=["csr", "block_1x4"])
def test_sparse_weights_through_densify(block):
    import tflite as T

    data = _sparse_model(block)
    assert ("DENSIFY" in _ops_of(data)) != block
    g = T.Model.GetRootAsModel(data, 0).Subgraphs(0)
    sparse = [g.Tensors(i).Sparsity() for i in range(g.TensorsLength()) if g.Tensors(i).Sparsity() is not None]
    assert sparse and any(s.BlockMapLength() for s in sparse) == block
    x = np.random.default_rng(4).standard_normal(tuple(interpreter(data).get_input_details()[0]["shape"]))
    x = x.astype(np.float32)
    (want,) = interpret(data, [x])
    r = RKNN()
    assert r.config(target_platform="rk3588", float_dtype="float32") == 0
    assert r.load_tflite(data) == 0
    assert r.build(do_quantization=False) == 0
    assert r.init_runtime() == 0
    (got,) = r.inference(inputs=[x])
    r.release()
    assert _cosine(got, want) >= 0.999
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
