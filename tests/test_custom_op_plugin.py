"""Native custom operators (issue 6 point 5): C plugins following the rknn_custom_op ABI on
the software backend, registered with Context.register_custom_op after creation, checked
against the Python form of the same operator (seed 000's cstSoftmax)."""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

import rknnlite  # noqa: E402
from conftest import REPO  # noqa: E402
from rknnlite.errors import InvalidParamError, ModelInvalidError, RKNNError  # noqa: E402
from rknnlite.backends import plugins  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.custom_op import get_node_attr  # noqa: E402

custom_op_plugin = pytest.importorskip("rknnlite._native.custom_op_plugin")

PLUGIN_SOURCE = REPO / "tests" / "native" / "cst_softmax_plugin.c"
RNG = np.random.default_rng(3)
X = RNG.standard_normal((1, 4, 3, 5)).astype(np.float32)
BIAS = RNG.standard_normal((1, 4, 1, 1)).astype(np.float32)


class cstSoftmax:
    """The seed's Python operator."""

    op_type = "cstSoftmax"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes.copy(), in_dtypes.copy()

    def compute(self, node, inputs):
        x = inputs[0]
        axis = get_node_attr(node, "axis")
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return [e / np.sum(e, axis=axis, keepdims=True)]


def expected(x, axis=1):
    a = x + BIAS
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return 2.0 * e / e.sum(axis=axis, keepdims=True)


def build_model(path, op_type="cstSoftmax", axis=1):
    """x (1,4,3,5) -> Add(bias) -> Softmax(axis) renamed to ``op_type`` -> Mul(2) -> y, built
    with the toolkit in float32 and exported."""
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]),
             helper.make_node("Softmax", ["a"], ["s"], name="soft0", axis=axis),
             helper.make_node("Mul", ["s", "k"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 3, 5])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 3, 5])],
                          [numpy_helper.from_array(BIAS, "b"),
                           numpy_helper.from_array(np.array(2.0, np.float32), "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.graph.node[1].op_type = op_type
    onnx_path = str(path) + ".onnx"
    onnx.save(m, onnx_path)
    rk = RKNN()
    assert rk.config(target_platform="rk3588", float_dtype="float32") == 0
    if op_type.startswith("cst"):
        assert rk.reg_custom_op(cstSoftmax()) == 0
    assert rk.load_onnx(onnx_path) == 0
    assert rk.build(do_quantization=False) == 0
    assert rk.export_rknn(str(path)) == 0
    rk.release()
    return str(path)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("cst") / "cst.rknn")


@pytest.fixture(scope="module")
def builtin_model(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("builtin") / "softmax.rknn", op_type="Softmax")


@pytest.fixture(scope="module")
def plugin(compile_c):
    """``plugin(name, **defines)`` -> path of ``librkcst_<name>.so`` built from the test plugin."""
    built = {}

    def make(name="softmax", **defines):
        if name not in built:
            args = [f"-D{k}={v}" for k, v in defines.items()] + ["-lm"]
            built[name] = compile_c([PLUGIN_SOURCE], f"librkcst_{name}.so", shared=True, args=args)
        return built[name]

    custom_op_plugin.export_symbols()  # before ctypes opens a plugin to read its counters
    return make


class Counters:
    """The plugin's exported counters (the library stays loaded while this object lives)."""

    NAMES = ("init", "prepare", "compute", "destroy")

    def __init__(self, path):
        self.lib = ctypes.CDLL(str(path))

    def __getitem__(self, name):
        return ctypes.c_int.in_dll(self.lib, f"cst_{name}_calls").value

    def snapshot(self):
        return {n: self[n] for n in self.NAMES}

    def delta(self, before):
        return {n: self[n] - before[n] for n in self.NAMES}

    def value(self, ctype, name):
        return ctype.in_dll(self.lib, name).value


def run(ctx, x=X):
    return ctx.run([x], data_format="nchw")[0]


def test_native_softmax_matches_the_python_operator(model, plugin):
    path = plugin()
    counters = Counters(path)
    before = counters.snapshot()
    with rknnlite.Context(model, custom_ops=[cstSoftmax()]) as py_ctx:
        reference = run(py_ctx)
    np.testing.assert_allclose(reference, expected(X), rtol=1e-5, atol=1e-7)
    with rknnlite.Context(model) as ctx:
        ctx.register_custom_op(str(path))
        assert counters.delta(before) == {"init": 1, "prepare": 0, "compute": 0, "destroy": 0}
        # init saw the node's input attributes (from the probe run), axis read through the ABI
        assert counters.value(ctypes.c_uint32, "cst_init_n_elems") == 60
        assert counters.value(ctypes.c_uint32, "cst_init_channels") == 4
        for k in range(3):
            x = X * (k + 1)
            np.testing.assert_allclose(run(ctx, x), run_python(model, x), rtol=1e-6, atol=1e-7)
        assert counters.delta(before) == {"init": 1, "prepare": 3, "compute": 3, "destroy": 0}
        assert counters.value(ctypes.c_int64, "cst_last_axis") == 1
        assert counters.value(ctypes.c_uint32, "cst_last_in_n_dims") == 4
        name = (ctypes.c_char * 256).in_dll(counters.lib, "cst_last_name").value
        assert name == b"soft0"
        # the output sat at a non-zero offset in its buffer: the plugin used virt_addr + offset
        assert counters.value(ctypes.c_int32, "cst_last_out_offset") >= 64
    assert counters.delta(before)["destroy"] == 1


def run_python(model, x):
    with rknnlite.Context(model) as ctx:
        ctx.register_custom_op(cstSoftmax)  # a class is instantiated
        return run(ctx, x)


def test_missing_custom_op_fails_at_first_run_naming_it(model, plugin):
    ctx = rknnlite.Context(model)  # the vendor registers after rknn_init: creation succeeds
    try:
        with pytest.raises(ModelInvalidError, match=r"'cstSoftmax' \(node 'soft0'\).*register_custom_op"):
            run(ctx)
        ctx.register_custom_op(str(plugin()))
        np.testing.assert_allclose(run(ctx), expected(X), rtol=1e-5, atol=1e-7)
    finally:
        ctx.close()


def test_python_operator_registered_after_creation(model):
    with rknnlite.Context(model) as ctx:
        ctx.register_custom_op(cstSoftmax())
        np.testing.assert_allclose(run(ctx), expected(X), rtol=1e-5, atol=1e-7)
        with pytest.raises(InvalidParamError, match="registered on this context already"):
            ctx.register_custom_op(cstSoftmax())
        with pytest.raises(InvalidParamError, match="Python operator"):
            ctx.register_custom_op(42)
        np.testing.assert_allclose(run(ctx), expected(X), rtol=1e-5, atol=1e-7)  # still usable


def test_plugin_found_by_name_in_the_plugin_dir(model, plugin, monkeypatch, tmp_path):
    path = plugin()
    monkeypatch.setenv(plugins.PLUGIN_DIR_ENV, os.pathsep.join([str(tmp_path), str(path.parent)]))
    assert plugins.find_plugin("softmax") == str(path)
    assert plugins.find_plugin("librkcst_softmax.so") == str(path)
    with rknnlite.Context(model) as ctx:
        ctx.register_custom_op("softmax")
        np.testing.assert_allclose(run(ctx), expected(X), rtol=1e-5, atol=1e-7)


def test_plugin_not_found_lists_the_paths_searched(model, monkeypatch, tmp_path):
    monkeypatch.setenv(plugins.PLUGIN_DIR_ENV, str(tmp_path))
    with rknnlite.Context(model) as ctx:
        with pytest.raises(InvalidParamError) as info:
            ctx.register_custom_op("nosuchop")
        message = str(info.value)
        assert str(tmp_path / "librkcst_nosuchop.so") in message
        assert "/usr/lib/rknpu/op_plugins/librkcst_nosuchop.so" in message
        with pytest.raises(InvalidParamError, match="does not exist"):
            ctx.register_custom_op(str(tmp_path / "librkcst_gone.so"))


def test_library_without_the_getter_or_not_a_library(model, plugin, tmp_path):
    no_getter = plugin("nogetter", CST_NO_GETTER=1)
    junk = tmp_path / "librkcst_junk.so"
    junk.write_bytes(b"not an ELF file")
    with rknnlite.Context(model) as ctx:
        with pytest.raises(InvalidParamError, match=r"does not export get_rknn_custom_op\(\)"):
            ctx.register_custom_op(str(no_getter))
        with pytest.raises(InvalidParamError, match="cannot load custom operator plugin"):
            ctx.register_custom_op(str(junk))
        ctx.register_custom_op(str(plugin()))  # nothing half-registered
        np.testing.assert_allclose(run(ctx), expected(X), rtol=1e-5, atol=1e-7)


def test_register_by_ctypes_pointer(model, plugin):
    lib = ctypes.CDLL(str(plugin()))
    lib.cst_softmax_op.restype = ctypes.c_void_p
    pointer = ctypes.c_void_p(lib.cst_softmax_op())
    with rknnlite.Context(model) as ctx:
        ctx.register_custom_op(pointer)
        np.testing.assert_allclose(run(ctx), expected(X), rtol=1e-5, atol=1e-7)
    with pytest.raises(InvalidParamError, match="NULL"):
        plugins.native_op_from_address(ctypes.c_void_p(0))


def test_init_skip_falls_back_to_the_builtin_op(builtin_model, model, plugin):
    path = plugin("skip", CST_OP_TYPE='"Softmax"', CST_INIT_RESULT=-14)
    counters = Counters(path)
    before = counters.snapshot()
    with rknnlite.Context(builtin_model) as ctx:
        ctx.register_custom_op(str(path))
        np.testing.assert_allclose(run(ctx), expected(X), rtol=1e-5, atol=1e-7)
    # init asked for the built-in Softmax: compute never ran; destroy still ran at close
    assert counters.delta(before) == {"init": 1, "prepare": 0, "compute": 0, "destroy": 1}

    no_builtin = plugin("skipcst", CST_INIT_RESULT=-14)
    with rknnlite.Context(model) as ctx:
        with pytest.raises(InvalidParamError, match=r"returned RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE \(-14\).*no "
                                                    r"built-in cstSoftmax"):
            ctx.register_custom_op(str(no_builtin))
        with pytest.raises(ModelInvalidError, match="cstSoftmax"):
            run(ctx)  # nothing stayed registered


def test_native_op_overrides_a_builtin_op(builtin_model, plugin):
    path = plugin("builtin", CST_OP_TYPE='"Softmax"')
    counters = Counters(path)
    before = counters.snapshot()
    with rknnlite.Context(builtin_model) as ctx:
        run(ctx)  # a plan made with the built-in kernel is dropped at registration
        ctx.register_custom_op(str(path))
        np.testing.assert_allclose(run(ctx), expected(X), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(run(ctx), expected(X), rtol=1e-5, atol=1e-7)
    assert counters.delta(before) == {"init": 1, "prepare": 2, "compute": 2, "destroy": 1}


def test_compute_error_raises_naming_the_op(model, plugin):
    path = plugin("fail", CST_COMPUTE_RESULT=-5)
    counters = Counters(path)
    before = counters.snapshot()
    ctx = rknnlite.Context(model)
    ctx.register_custom_op(str(path))
    with pytest.raises(InvalidParamError) as info:
        run(ctx)
    assert info.value.code == -5
    assert "'cstSoftmax' (node 'soft0'" in str(info.value) and "RKNN_ERR_PARAM_INVALID" in str(info.value)
    with pytest.raises(RKNNError):
        run(ctx)  # the context stays usable and reports again
    ctx.close()
    ctx.close()
    assert counters.delta(before) == {"init": 1, "prepare": 2, "compute": 2, "destroy": 1}


def test_dup_gets_its_own_native_contexts(model, plugin):
    path = plugin()
    counters = Counters(path)
    before = counters.snapshot()
    ctx = rknnlite.Context(model)
    ctx.register_custom_op(str(path))
    twin = ctx.dup()
    assert counters.delta(before)["init"] == 2
    np.testing.assert_allclose(run(twin), expected(X), rtol=1e-5, atol=1e-7)
    ctx.close()
    assert counters.delta(before)["destroy"] == 1
    np.testing.assert_allclose(run(twin), expected(X), rtol=1e-5, atol=1e-7)  # unaffected
    twin.close()
    assert counters.delta(before)["destroy"] == 2


def test_gpu_operators_are_refused(model, plugin):
    path = plugin("gpu", CST_TARGET=2)
    with rknnlite.Context(model) as ctx:
        with pytest.raises(InvalidParamError, match="CPU operators"):
            ctx.register_custom_op(str(path))


def test_bad_shape_infer_is_refused(model, plugin):
    with rknnlite.Context(model) as ctx:
        with pytest.raises(InvalidParamError, match="shape_infer"):
            ctx.register_custom_op(str(plugin()), shape_infer=lambda node, shapes, dtypes: ([], []))
        ctx.register_custom_op(str(plugin()), shape_infer=cstSoftmax().shape_infer)
        np.testing.assert_allclose(run(ctx), expected(X), rtol=1e-5, atol=1e-7)


def test_get_op_attr_with_a_foreign_context_is_safe():
    custom_op_plugin.export_symbols()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
        custom_op_plugin.get_op_attr_address())
    fake_ctx = (ctypes.c_uint8 * 48)()
    out = (ctypes.c_uint8 * 272)(*([0xAB] * 272))
    fn(ctypes.addressof(fake_ctx), b"axis", ctypes.addressof(out))
    assert bytes(out) == bytes(272)  # no such context here: an empty attribute, no crash
    fn(ctypes.addressof(fake_ctx), b"axis", None)


def test_closed_context_refuses_registration(model, plugin):
    ctx = rknnlite.Context(model)
    ctx.close()
    with pytest.raises(rknnlite.ContextInvalidError):
        ctx.register_custom_op(str(plugin()))


def test_compute_runs_without_the_gil(model, plugin):
    """compute blocks until this thread, which needs the GIL, sets a flag in the plugin; a
    callback holding the GIL would wait out its bound and fail with RKNN_ERR_TIMEOUT."""
    import threading

    path = plugin("wait", CST_WAIT_FOR_GO=1)
    lib = ctypes.CDLL(str(path))
    waiting = ctypes.c_int.in_dll(lib, "cst_waiting")
    go = ctypes.c_int.in_dll(lib, "cst_go")
    go.value = 0
    results = {}
    with rknnlite.Context(model) as ctx:
        ctx.register_custom_op(str(path))

        def body():
            try:
                results["y"] = run(ctx)
            except RKNNError as e:
                results["error"] = e

        worker = threading.Thread(target=body)
        worker.start()
        while not waiting.value and worker.is_alive():
            pass  # spins with the GIL, so only a GIL-free compute can have set the flag
        go.value = 1
        worker.join()
    assert "error" not in results, results.get("error")
    np.testing.assert_allclose(results["y"], expected(X), rtol=1e-5, atol=1e-7)
