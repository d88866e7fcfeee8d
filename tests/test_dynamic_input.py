"""Dynamic shapes in the toolkit: ``config(dynamic_input=[[shape_in0, ...], ...])`` builds one
shape-generic graph that runs every shape set (rknnlite.toolkit.shapes, onnx_import, RKNN.build)."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from onnx_builders import init, model, vi  # noqa: E402
from toolkit_logs import errors  # noqa: E402

from rknnlite import ModelInvalidError  # noqa: E402
from rknnlite.model.loader import load_model  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.onnx_import import import_onnx  # noqa: E402
from rknnlite.toolkit.optimize import optimize  # noqa: E402
from rknnlite.toolkit.shapes import (  # noqa: E402
    MAX_DYNAMIC_SHAPE_NUM,
    cover_shape_sets,
    fit_to_shape,
    match_set,
    merge_shapes,
    validate_shape_sets,
    verify_shape_sets,
)

F = TensorProto.FLOAT
RNG = np.random.default_rng(11)
DYN_SETS = [[[1, 3, 32, 32]], [[1, 3, 16, 16]], [[1, 3, 24, 40]]]
DYN_CASES = ["s0_32x32", "s1_16x16", "s2_24x40"]





def conv_model():
    """x[N,3,H,W] -> Conv 3->4 3x3 pad 1 -> Relu -> y[N,4,H,W]."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return model(nodes, [vi("x", ["N", 3, "H", "W"])], [vi("y", ["N", 4, "H", "W"])],
                  [init("w", w), init("b", b)]), (w, b)


def flatten_by_shape_model(stale_value_info=False, stale_output=False):
    """y = Reshape(Relu(x), Concat(Shape(r)[0:2], [-1])): a Shape-dependent chain.  With
    ``stale_value_info`` the file declares the Relu output as 1x3x8x8 (one particular size);
    with ``stale_output`` the Relu output is also a graph output declared 1x3x8x8."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape", start=0, end=2),
        helper.make_node("Concat", ["s", "minus1"], ["target"], axis=0, name="concat"),
        helper.make_node("Reshape", ["r", "target"], ["y"], name="reshape"),
    ]
    vinfo = [vi("r", [1, 3, 8, 8])] if stale_value_info else []
    outputs = [vi("y", [1, 3, None])] + ([vi("r", [1, 3, 8, 8])] if stale_output else [])
    return model(nodes, [vi("x", [1, 3, "H", "W"])], outputs, [init("minus1", np.array([-1], np.int64))], vinfo)


def fixed_reshape_model():
    """Reshape to a constant 1x192: only runs 8x8 inputs."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["y"], name="fixed_reshape")]
    return model(nodes, [vi("x", [1, 3, "H", "W"])], [vi("y", [1, 192])],
                  [init("shape", np.array([1, 192], np.int64))])


def width_scaled_model():
    """y = x * W (the input's width, read with Shape): the activation range grows with W."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape", start=3, end=4),
        helper.make_node("Cast", ["s"], ["wf"], to=F, name="cast"),
        helper.make_node("Mul", ["x", "wf"], ["y"], name="mul"),
    ]
    return model(nodes, [vi("x", [1, 1, 4, "W"])], [vi("y", [1, 1, 4, "W"])])


def two_input_model():
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    return model(nodes, [vi("a", [1, "L"]), vi("b", [1, "L"])], [vi("y", [1, "L"])])


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def build(model, sets, *, quantize=False, dataset=None, **config):
    r = RKNN()
    assert r.config(target_platform="rk3588", dynamic_input=sets, **config) == 0
    assert r.load_onnx(model.SerializeToString()) == 0
    assert r.build(do_quantization=quantize, dataset=dataset) == 0
    return r


# -- config validation -----------------------------------------------------------------------


@pytest.mark.parametrize("value, words", [
    ("1,3,8,8", ["non-empty list of shape sets"]),
    ([], ["non-empty list of shape sets"]),
    ([[1, 3, 8, 8]], ["dynamic_input[0][0]", "list of ints"]),
    ([[[1, 3, 8, 8]], []], ["dynamic_input[1]", "one shape per model input"]),
    ([[[1, 3, 8.5, 8]]], ["dynamic_input[0][0]", "input 0 of set 0", "list of ints"]),
    ([[[1, 3, True, 8]]], ["dynamic_input[0][0]", "list of ints"]),
    ([[[1, 3, 8, 8]], [[1, 3, 0, 8]]], ["dynamic_input[1][0]", "input 0 of set 1", "> 0"]),
    ([[[1, 3, 8, 8]], [[1, 3, -1, 8]]], ["dynamic_input[1][0]", "> 0"]),
    ([[[1, 3, 8, 8]], [[1, 3, 8]]], ["dynamic_input[1][0]", "rank 3", "rank 4"]),
    ([[[1, 3, 8, 8], [1, 4]], [[1, 3, 8, 8]]], ["dynamic_input[1]", "1 shapes", "has 2"]),
    ([[[1, 3, 8, 8]], [[1, 3, 8, 8]]], ["dynamic_input[1] repeats dynamic_input[0]"]),
    ([[[1, 3, 8, k]] for k in range(1, MAX_DYNAMIC_SHAPE_NUM + 2)], ["513 shape sets", "at most 512"]),
])
def test_config_rejects_bad_shape_sets(toolkit_log, value, words):
    r = RKNN()
    assert r.config(target_platform="rk3588", dynamic_input=value) == -1
    msg = errors(toolkit_log)[-1]
    for w in words:
        assert w in msg, msg
    # the object stays usable
    assert r.config(target_platform="rk3588", dynamic_input=[[[1, 3, 8, 8]], [[1, 3, 4, 4]]]) == 0
    r.release()


def test_config_accepts_512_sets_and_numpy_ints():
    sets = [[[1, 3, 8, k]] for k in range(1, MAX_DYNAMIC_SHAPE_NUM + 1)]
    assert len(validate_shape_sets(sets)) == 512
    assert validate_shape_sets([[np.array([1, 3, 4, 4])]]) == (((1, 3, 4, 4),),)


@pytest.mark.parametrize("model_fn, sets, input_size_list, words", [
    (lambda: conv_model()[0], [[[1, 3, 8, 8], [1, 3, 8, 8]]], None, ["2 shape(s) each", "1 input(s)"]),
    (lambda: conv_model()[0], [[[1, 3, 8]]], None, ["dynamic_input[0][0]", "'x'", "rank 4"]),
    (lambda: conv_model()[0], [[[1, 3, 8, 8]], [[1, 5, 8, 8]]], None,
     ["dynamic_input[1][0]", "'x'", "fixes axis 1 to 3"]),
    (two_input_model, [[[1, 4], [1, 4]], [[1, 6], [2, 6]]], None, ["dynamic_input[1][1]", "'b'", "axis 0"]),
    (lambda: conv_model()[0], [[[1, 3, 8, 8]], [[1, 3, 4, 4]]], [[1, 3, 6, 6]], ["input_size_list", "none of"]),
])
def test_load_onnx_checks_the_sets_against_the_model(toolkit_log, model_fn, sets, input_size_list, words):
    r = RKNN()
    assert r.config(target_platform="rk3588", dynamic_input=sets) == 0
    assert r.load_onnx(model_fn().SerializeToString(), input_size_list=input_size_list) == -1
    msg = errors(toolkit_log)[-1]
    for w in words:
        assert w in msg, msg
    r.release()


# -- import keeps varying dims symbolic ------------------------------------------------------


def test_import_marks_only_varying_dims_dynamic():
    m, _ = conv_model()
    im = import_onnx(m, dynamic_input=[[[1, 3, 8, 8]], [[1, 3, 4, 6]]])
    assert im.input_specs[0].shape == (1, 3, -1, -1)  # N agrees in every set: fixed to 1
    assert im.shapes["c"] == (1, 4, -1, -1)
    assert im.dynamic_shapes == (((1, 3, 8, 8),), ((1, 3, 4, 6),))
    # a static import is unchanged
    assert import_onnx(m, input_size_list=[[1, 3, 8, 8]]).dynamic_shapes == ()


def test_input_size_list_may_name_one_of_the_sets():
    m, _ = conv_model()
    im = import_onnx(m, input_size_list=[[1, 3, 4, 6]], dynamic_input=[[[1, 3, 8, 8]], [[1, 3, 4, 6]]])
    assert im.input_specs[0].shape == (1, 3, -1, -1)


def test_import_rejects_bad_sets_with_typed_errors():
    m, _ = conv_model()
    with pytest.raises(ModelInvalidError, match="dynamic_input"):
        import_onnx(m, dynamic_input=[[[1, 3, 0, 8]]])


@pytest.mark.parametrize("stale", ["none", "value_info", "output"])
def test_shape_dependent_chain_is_not_folded_and_runs_every_set(stale):
    m = flatten_by_shape_model(stale_value_info=stale == "value_info", stale_output=stale == "output")
    sets = [[[1, 3, 8, 8]], [[1, 3, 4, 6]], [[1, 3, 5, 2]]]
    im = import_onnx(m, dynamic_input=sets)
    assert im.shapes["r"] == (1, 3, -1, -1)
    g = optimize(im.graph, im.shapes)
    assert "Shape" in [n.op for n in g.nodes]  # kept as a runtime op: its value varies across the sets
    r = build(m, sets, float_dtype="float32")
    assert r.init_runtime() == 0
    for (shape,) in sets:
        x = RNG.standard_normal(shape).astype(np.float32)
        outs = r.inference([x], data_format="nchw")
        np.testing.assert_array_equal(outs[0], np.maximum(x, 0).reshape(1, 3, -1))
        if stale == "output":
            np.testing.assert_array_equal(outs[1], np.maximum(x, 0))
    meta = load_model(r._model_bytes).model.metadata
    assert [t.shape for t in meta.outputs] == [(1, 3, -1)] + ([(1, 3, -1, -1)] if stale == "output" else [])
    r.release()


def test_shape_of_dims_static_across_the_sets_still_folds():
    m = flatten_by_shape_model()
    # H and W are symbolic in the file but every set agrees: everything is static and folds
    im = import_onnx(m, dynamic_input=[[[1, 3, 8, 8]]])
    g = optimize(im.graph, im.shapes)
    assert "Shape" not in [n.op for n in g.nodes]


# -- build: verification, metadata, outputs --------------------------------------------------


def test_build_stores_the_sets_and_runs_each_of_them():
    m, (w, b) = conv_model()
    sets = [[[1, 3, 8, 8]], [[1, 3, 5, 7]], [[2, 3, 6, 6]]]
    r = build(m, sets, float_dtype="float32")
    meta = load_model(r._model_bytes).model.metadata
    # in the order RKNN-Toolkit2 stores them: the largest (total elements) first
    assert meta.dynamic_shapes == (((2, 3, 6, 6),), ((1, 3, 8, 8),), ((1, 3, 5, 7),))
    assert meta.inputs[0].shape == (-1, 3, -1, -1) and meta.outputs[0].shape == (-1, 4, -1, -1)
    assert meta.outputs[0].layout == "NCHW"
    assert r.init_runtime() == 0
    for (shape,) in sets:
        x = RNG.standard_normal(shape).astype(np.float32)
        (y,) = r.inference([x], data_format="nchw")
        assert y.shape == (shape[0], 4, shape[2], shape[3])
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        ref = np.zeros_like(y)
        for i in range(shape[2]):
            for j in range(shape[3]):
                ref[:, :, i, j] = np.einsum("nckl,ockl->no", xp[:, :, i:i + 3, j:j + 3], w) + b
        np.testing.assert_allclose(y, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)
    r.release()


def test_exported_dynamic_model_runs_every_set_through_context(tmp_path):
    import rknnlite

    m = flatten_by_shape_model()
    sets = [[[1, 3, 8, 8]], [[1, 3, 2, 5]]]
    r = build(m, sets, float_dtype="float32")
    path = tmp_path / "dyn.rknn"
    assert r.export_rknn(str(path)) == 0
    r.release()
    with rknnlite.Context(str(path), backend="software") as ctx:
        assert ctx.inputs[0].dims == (1, -1, -1, 3)  # an image input: NHWC
        for (shape,) in sets:
            x = RNG.standard_normal(shape).astype(np.float32)
            (y,) = ctx.run([x], data_format="nchw")
            np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(1, 3, -1))


class cstDouble:
    """A custom op (RKNN-Toolkit2's Python form): y = 2 * x, any shape."""

    op_type = "cstDouble"

    def shape_infer(self, node, in_shapes, in_dtypes):
        return in_shapes.copy(), in_dtypes.copy()

    def compute(self, node, inputs):
        return [inputs[0] * 2]


def test_custom_op_models_run_every_set():
    m = model([helper.make_node("cstDouble", ["x"], ["y"], name="double")],
               [vi("x", [1, "L"])], [vi("y", [1, "L"])])
    r = RKNN()
    assert r.config(target_platform="rk3588", float_dtype="float32", dynamic_input=[[[1, 3]], [[1, 7]]]) == 0
    assert r.reg_custom_op(cstDouble()) == 0
    assert r.load_onnx(m.SerializeToString()) == 0
    assert r.build() == 0
    assert r.init_runtime() == 0
    for n in (3, 7):
        x = RNG.standard_normal((1, n)).astype(np.float32)
        np.testing.assert_array_equal(r.inference([x])[0], 2 * x)
    r.release()


def test_static_build_keeps_no_shape_sets():
    m, _ = conv_model()
    r = RKNN()
    assert r.config(target_platform="rk3588") == 0
    assert r.load_onnx(m.SerializeToString(), input_size_list=[[1, 3, 8, 8]]) == 0
    assert r.build() == 0
    meta = load_model(r._model_bytes).model.metadata
    assert meta.dynamic_shapes == () and meta.inputs[0].shape == (1, 3, 8, 8)
    r.release()


def test_a_model_that_cannot_run_a_set_fails_the_build_naming_set_and_node(toolkit_log):
    r = RKNN()
    assert r.config(target_platform="rk3588", dynamic_input=[[[1, 3, 8, 8]], [[1, 3, 4, 4]]]) == 0
    assert r.load_onnx(fixed_reshape_model().SerializeToString()) == 0
    assert r.build() == -1
    msg = errors(toolkit_log)[-1]
    assert "dynamic_input[1]" in msg and "[1, 3, 4, 4]" in msg and "fixed_reshape" in msg, msg
    # the same model with its one valid shape builds
    r2 = build(fixed_reshape_model(), [[[1, 3, 8, 8]]])
    r2.release()
    r.release()


def test_verify_shape_sets_gives_each_sets_output_shapes():
    m = two_input_model()
    sets = validate_shape_sets([[[1, 4], [1, 4]], [[1, 9], [1, 9]]])
    im = import_onnx(m, dynamic_input=sets)
    assert verify_shape_sets(im.graph, sets, im.input_specs) == [[(1, 4)], [(1, 9)]]


def test_two_inputs_pair_their_shapes_by_set():
    m = two_input_model()
    r = build(m, [[[1, 4], [1, 4]], [[1, 9], [1, 9]]], float_dtype="float32")
    assert r.init_runtime() == 0
    for n in (4, 9):
        a, b = RNG.standard_normal((1, n)).astype(np.float32), RNG.standard_normal((1, n)).astype(np.float32)
        np.testing.assert_array_equal(r.inference([a, b])[0], a + b)
    r.release()


# -- calibration over the sets ---------------------------------------------------------------


def test_merge_match_and_fit_helpers():
    sets = validate_shape_sets([[[1, 3, 8, 8], [2]], [[1, 3, 4, 8], [2]]])
    assert merge_shapes(sets) == [(1, 3, -1, 8), (2,)]
    assert match_set([(1, 3, 4, 8), (2,)], sets) == 1 and match_set([(1, 3, 5, 8), (2,)], sets) is None
    x = np.arange(6.0).reshape(1, 6)
    np.testing.assert_array_equal(fit_to_shape(x, (1, 2)), [[2.0, 3.0]])  # centre crop
    np.testing.assert_array_equal(fit_to_shape(x[:, :2], (1, 5)), [[1.0, 0.0, 1.0, 0.0, 1.0]])  # wrapped


def test_cover_shape_sets_adds_samples_for_uncovered_sets():
    sets = validate_shape_sets([[[1, 2, 4]], [[1, 2, 2]], [[1, 2, 6]]])
    samples = [[RNG.standard_normal((1, 2, 4)).astype(np.float32)] for _ in range(3)]
    out, added = cover_shape_sets(samples, sets)
    assert added == [1, 2] and len(out) == 9
    assert out[0][0] is samples[0][0]
    assert sorted({x[0].shape for x in out}) == [(1, 2, 2), (1, 2, 4), (1, 2, 6)]
    # many uncovered sets: at least one sample each, at most about twice the dataset in all
    many = validate_shape_sets([[[1, 2, 4]]] + [[[1, 2, k]] for k in range(5, 25)])
    out, added = cover_shape_sets(samples, many)
    assert added == list(range(1, 21)) and len(out) == 3 + 20
    assert sorted({x[0].shape[2] for x in out}) == list(range(4, 25))
    with pytest.raises(ValueError, match="calibration sample 0 .* none of the dynamic_input sets"):
        cover_shape_sets([[np.zeros((1, 2, 5), np.float32)]], sets)


def _write_dataset(tmp_path, arrays):
    lines = []
    for k, a in enumerate(arrays):
        np.save(tmp_path / f"s{k}.npy", a)
        lines.append(f"s{k}.npy")
    (tmp_path / "dataset.txt").write_text("\n".join(lines) + "\n")
    return "dataset.txt"


def test_int8_calibration_covers_sets_without_samples(tmp_path, monkeypatch):
    # y = x * W: calibrated only on W=4 samples, the W=64 set would clip at 1/16 of its range
    monkeypatch.chdir(tmp_path)
    arrays = [RNG.uniform(-1, 1, (1, 1, 4, 4)).astype(np.float32) for _ in range(4)]
    arrays[0][0, 0, 0, :2] = [-1, 1]  # the samples span [-1, 1]
    dataset = _write_dataset(tmp_path, arrays)
    r = build(width_scaled_model(), [[[1, 1, 4, 4]], [[1, 1, 4, 64]]], quantize=True, dataset=dataset)
    assert r.init_runtime() == 0
    x = RNG.uniform(-1, 1, (1, 1, 4, 64)).astype(np.float32)
    (y,) = r.inference([x], data_format="nchw")
    ref = x * 64
    assert cosine(y, ref) >= 0.999 and float(np.max(np.abs(y - ref))) < 1.0
    r.release()


def test_int8_dataset_sample_outside_the_sets_fails(tmp_path, monkeypatch, toolkit_log):
    monkeypatch.chdir(tmp_path)
    dataset = _write_dataset(tmp_path, [np.zeros((1, 1, 4, 5), np.float32)])
    r = RKNN()
    assert r.config(target_platform="rk3588", dynamic_input=[[[1, 1, 4, 4]], [[1, 1, 4, 8]]]) == 0
    assert r.load_onnx(width_scaled_model().SerializeToString()) == 0
    assert r.build(do_quantization=True, dataset=dataset) == -1
    msg = errors(toolkit_log)[-1]
    assert "sample 0" in msg and "[1, 1, 4, 5]" in msg and "dynamic_input" in msg, msg
    assert r.build() == 0  # still usable
    r.release()


# -- vendor agreement on dyn_conv ------------------------------------------------------------


def _dyn_conv_config(fixtures):
    manifest = json.loads((fixtures / "manifest.json").read_text())
    run = next(r for r in manifest["runs"] if r["model"] == "dyn_conv" and r["variant"] == "fp16")
    cfg = dict(run["config"])
    assert cfg["dynamic_input"] == DYN_SETS
    return cfg


def _dyn_conv_build(fixtures, quantize):
    r = RKNN()
    assert r.config(**_dyn_conv_config(fixtures)) == 0
    assert r.load_onnx(str(fixtures / "onnx" / "dyn_conv.onnx")) == 0
    assert r.build(do_quantization=quantize, dataset=str(fixtures / "dataset_dyn_conv.txt") if quantize else None) == 0
    assert r.init_runtime() == 0
    return r


def test_dyn_conv_fp16_matches_the_vendor_simulator_on_every_shape(vendor_fixtures):
    r = _dyn_conv_build(vendor_fixtures, quantize=False)
    meta = load_model(r._model_bytes).model.metadata
    # the vendor file's order: the largest first (32x32, 24x40, 16x16)
    assert [[list(s) for s in st] for st in meta.dynamic_shapes] == [DYN_SETS[0], DYN_SETS[2], DYN_SETS[1]]
    assert meta.inputs[0].shape == (1, 3, -1, -1)
    for case in DYN_CASES:
        x = np.load(vendor_fixtures / "io" / f"dyn_conv_{case}_in0.npy")
        want = np.load(vendor_fixtures / "io" / f"dyn_conv_fp16_{case}_sim_out0.npy")
        (y,) = r.inference([x], data_format="nchw")
        assert y.shape == want.shape
        err = float(np.max(np.abs(y - want)))
        assert err <= 5e-3, f"{case}: max abs error {err}"
    r.release()


def test_dyn_conv_int8_matches_the_vendor_simulator_and_onnxruntime(vendor_fixtures, monkeypatch):
    monkeypatch.chdir(vendor_fixtures / "io")  # the dataset's paths are read from its own folder
    r = _dyn_conv_build(vendor_fixtures, quantize=True)
    assert load_model(r._model_bytes).model.metadata.quantization == "int8"
    for case in DYN_CASES:
        x = np.load(vendor_fixtures / "io" / f"dyn_conv_{case}_in0.npy")
        vendor = np.load(vendor_fixtures / "io" / f"dyn_conv_i8_{case}_sim_out0.npy")
        float_ref = np.load(vendor_fixtures / "io" / f"dyn_conv_{case}_onnx_out0.npy")
        (y,) = r.inference([x], data_format="nchw")
        assert y.shape == vendor.shape
        assert cosine(y, vendor) >= 0.999, case
        assert cosine(y, float_ref) >= 0.999, case
    r.release()
