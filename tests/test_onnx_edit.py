"""``onnx_edit`` (seed 001 §2.1.9): every formula example of the seed applied to a model's
input and to its output, checked with onnxruntime against the original model and numpy
references; names kept, the caller's model untouched, the dataset rewritten, and every
bad input logged with -1 and nothing written."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from test_formula import SEED_EXAMPLES  # noqa: E402  (the seed's formulas with numpy references)

from rknnlite.toolkit import onnx_edit  # noqa: E402

LOGGER = "rknnlite.toolkit"


def _elementwise(shape, name_in="x", name_out="y", seed=0):
    """``y = x * W + B`` with random constants of ``shape``: every element is distinct, so any
    layout mistake changes the output."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), "B")
    nodes = [helper.make_node("Mul", [name_in, "W"], ["t"], name="mul"),
             helper.make_node("Add", ["t", "B"], [name_out], name="add")]
    graph = helper.make_graph(nodes, "ew", [helper.make_tensor_value_info(name_in, TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info(name_out, TensorProto.FLOAT, list(shape))], [w, b])
    return _finish(graph)


def _concat_block():
    """Like the seed's concat_block: ``k_cache = Concat(k_past, k_in * W, axis=2)``, plus an
    untouched input ``v`` and output ``other``.  No output shapes are declared (inferred)."""
    rng = np.random.default_rng(1)
    past = numpy_helper.from_array(rng.standard_normal((2, 3, 4, 5)).astype(np.float32), "k_past")
    w = numpy_helper.from_array(rng.standard_normal((2, 3, 4, 5)).astype(np.float32), "W")
    nodes = [helper.make_node("Mul", ["k_in", "W"], ["kw"]),
             helper.make_node("Concat", ["k_past", "kw"], ["k_cache"], axis=2),
             helper.make_node("Add", ["v", "kw"], ["other"])]
    graph = helper.make_graph(
        nodes, "concat_block",
        [helper.make_tensor_value_info("k_in", TensorProto.FLOAT, [2, 3, 4, 5]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 3, 4, 5])],
        [helper.make_tensor_value_info("k_cache", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("other", TensorProto.FLOAT, None)], [past, w])
    return _finish(graph)


def _finish(graph, opset=13):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _run(model, feeds):
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else open(model, "rb").read()
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _rand(shape, seed=2):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _added_ops(original, edited):
    return [n.op_type for n in edited.graph.node][: len(edited.graph.node) - len(original.graph.node)]


@pytest.mark.parametrize("formula,shape,reference", SEED_EXAMPLES, ids=[e[0] for e in SEED_EXAMPLES])
def test_seed_example_on_an_input(tmp_path, formula, shape, reference):
    model = _elementwise(shape)
    out = tmp_path / "edited.onnx"
    assert onnx_edit(model, str(out), inputs_transform={"x": formula}) == 0
    edited = onnx.load(str(out))
    onnx.checker.check_model(edited)
    x = _rand(shape)
    new_x = reference(x)  # the user's data in the new layout, computed independently
    assert [d.dim_value for d in edited.graph.input[0].type.tensor_type.shape.dim] == list(new_x.shape)
    assert [vi.name for vi in edited.graph.input] == ["x"] and [vi.name for vi in edited.graph.output] == ["y"]
    (want,) = _run(model, {"x": x})
    (got,) = _run(edited, {"x": np.ascontiguousarray(new_x)})
    np.testing.assert_array_equal(got, want)
    assert len(edited.graph.node) - len(model.graph.node) <= 3


@pytest.mark.parametrize("formula,shape,reference", SEED_EXAMPLES, ids=[e[0] for e in SEED_EXAMPLES])
def test_seed_example_on_an_output(tmp_path, formula, shape, reference):
    model = _elementwise(shape)
    out = tmp_path / "edited.onnx"
    assert onnx_edit(model, out, outputs_transform={"y": formula}) == 0  # a PathLike works too
    edited = onnx.load(str(out))
    onnx.checker.check_model(edited)
    x = _rand(shape)
    (want,) = _run(model, {"x": x})
    (got,) = _run(edited, {"x": x})
    np.testing.assert_array_equal(got, reference(want))
    assert [d.dim_value for d in edited.graph.output[0].type.tensor_type.shape.dim] == list(reference(want).shape)
    assert [vi.name for vi in edited.graph.output] == ["y"]
    assert len(edited.graph.node) - len(model.graph.node) <= 3


def test_interface_example_with_dataset(tmp_path, monkeypatch):
    """The seed's usage example: k_in 'a,b,c,d->1,ad,b,c', k_cache 'a,b,c,d->1,ab,c,d', dataset."""
    monkeypatch.chdir(tmp_path)  # dataset paths are relative to the working directory
    model = _concat_block()
    onnx.save(model, "concat_block.onnx")
    os.makedirs("data")
    samples = []
    with open("dataset.txt", "w") as f:
        for n in range(3):
            k, v = _rand((2, 3, 4, 5), 10 + n), _rand((2, 3, 4, 5), 20 + n)
            np.save(f"data/k{n}.npy", k)
            np.save(f"data/v{n}.npy", v)
            f.write(f"data/k{n}.npy data/v{n}.npy\n")
            samples.append((k, v))
        f.write("\n")  # blank lines are skipped
    os.makedirs("out")
    ret = onnx_edit(model="./concat_block.onnx", export_path="./out/concat_block_edited.onnx",
                    inputs_transform={"k_in": "a,b,c,d->1,ad,b,c"},
                    outputs_transform={"k_cache": "a,b,c,d->1,ab,c,d"},
                    dataset="./dataset.txt")
    assert ret == 0
    edited = onnx.load("out/concat_block_edited.onnx")
    assert [vi.name for vi in edited.graph.input] == ["k_in", "v"]
    assert [vi.name for vi in edited.graph.output] == ["k_cache", "other"]

    # The vendor's names, beside export_path: dataset_for_<export stem>.txt and folder.
    lines = open("out/dataset_for_concat_block_edited.txt").read().split("\n")
    assert lines[-1] == "" and len(lines) == 4
    for n, ((k, v), line) in enumerate(zip(samples, lines)):
        k_path, v_path = line.split()
        folder = str(tmp_path / "out" / "dataset_for_concat_block_edited")
        assert (k_path, v_path) == (os.path.join(folder, f"k{n}.npy"), os.path.join(folder, f"v{n}.npy"))
        # the untransformed input is a byte copy of its source file
        assert open(v_path, "rb").read() == open(f"data/v{n}.npy", "rb").read()
        new_k, new_v = np.load(k_path), np.load(v_path)
        np.testing.assert_array_equal(new_k, k.transpose(0, 3, 1, 2).reshape(1, 10, 3, 4))
        np.testing.assert_array_equal(new_v, v)
        want_cache, want_other = _run(model, {"k_in": k, "v": v})
        got_cache, got_other = _run(edited, {"k_in": new_k, "v": new_v})
        assert got_cache.shape == (1, 6, 8, 5)
        np.testing.assert_array_equal(got_cache, want_cache.reshape(1, 6, 8, 5))
        np.testing.assert_array_equal(got_other, want_other)


def test_dataset_with_images_becomes_npy_in_the_new_layout(tmp_path, monkeypatch):
    """An NCHW image input edited to NHWC: the dataset's images are decoded as the build
    reads them (CHW) and written as NHWC .npy arrays for the edited model."""
    image = pytest.importorskip("PIL.Image")
    monkeypatch.chdir(tmp_path)
    pixels = np.random.default_rng(3).integers(0, 256, (4, 5, 3), dtype=np.uint8)  # HWC
    image.fromarray(pixels, "RGB").save("img.png")
    with open("ds.txt", "w") as f:
        f.write("img.png\n")
    model = _elementwise((1, 3, 4, 5))
    assert onnx_edit(model, "nhwc.onnx", {"x": "a,b,c,d->a,c,d,b"}, dataset="ds.txt") == 0
    (path,) = open("dataset_for_nhwc.txt").read().split()
    assert path == str(tmp_path / "dataset_for_nhwc" / "img.png.npy")  # a transformed image: <name>.npy
    sample = np.load(path)
    assert sample.dtype == np.float32
    np.testing.assert_array_equal(sample, pixels[np.newaxis].astype(np.float32))
    (want,) = _run(model, {"x": pixels.transpose(2, 0, 1)[np.newaxis].astype(np.float32)})
    (got,) = _run(onnx.load("nhwc.onnx"), {"x": sample})
    np.testing.assert_array_equal(got, want)


def test_the_same_tensor_edited_as_input_and_its_consumer_output(tmp_path):
    model = _elementwise((4, 6))
    assert onnx_edit(model, tmp_path / "e.onnx", {"x": "a,b->b,a"}, {"y": "a,bc[c=2]->c,b,a"}) == 0
    edited = onnx.load(str(tmp_path / "e.onnx"))
    x = _rand((4, 6))
    (want,) = _run(model, {"x": x})
    (got,) = _run(edited, {"x": np.ascontiguousarray(x.T)})
    np.testing.assert_array_equal(got, want.reshape(4, 3, 2).transpose(2, 1, 0))


def test_plans_are_reshape_transpose_reshape_at_most(tmp_path):
    model = _elementwise((32, 4, 1, 64))
    assert onnx_edit(model, tmp_path / "e.onnx", {"x": "ab,c,d,qk[a=2,k=8]->aq,cd,1,kb"}) == 0
    edited = onnx.load(str(tmp_path / "e.onnx"))
    assert _added_ops(model, edited) == ["Reshape", "Transpose", "Reshape"]
    # a pure merge is one Reshape; an identity formula adds nothing
    assert onnx_edit(model, tmp_path / "m.onnx", {"x": "a,b,c,d->ab,c,d"}) == 0
    assert _added_ops(model, onnx.load(str(tmp_path / "m.onnx"))) == ["Reshape"]
    assert onnx_edit(model, tmp_path / "i.onnx", {"x": "a,b,1,d->a,b,1,d"}) == 0
    assert len(onnx.load(str(tmp_path / "i.onnx")).graph.node) == len(model.graph.node)


def test_caller_model_is_not_modified_and_bytes_work(tmp_path):
    model = _elementwise((2, 3))
    before = model.SerializeToString()
    assert onnx_edit(model, tmp_path / "a.onnx", {"x": "a,b->b,a"}, {"y": "a,b->b,a"}) == 0
    assert model.SerializeToString() == before
    assert onnx_edit(before, tmp_path / "b.onnx", {"x": "a,b->b,a"}) == 0
    assert [d.dim_value for d in onnx.load(str(tmp_path / "b.onnx")).graph.input[0].type.tensor_type.shape.dim] \
        == [3, 2]


def test_no_transforms_copies_the_model(tmp_path):
    model = _elementwise((2, 3))
    assert onnx_edit(model, tmp_path / "same.onnx") == 0
    assert onnx_edit(model, tmp_path / "same2.onnx", {}, {}) == 0
    x = _rand((2, 3))
    np.testing.assert_array_equal(_run(str(tmp_path / "same.onnx"), {"x": x})[0], _run(model, {"x": x})[0])


def test_generated_names_do_not_clash(tmp_path):
    # a model that already uses the names onnx_edit would pick
    shape = (2, 3)
    nodes = [helper.make_node("Relu", ["x"], ["x_onnx_edit_restored"], name="x_onnx_edit_restored_onnx_edit_"
                              "transpose_0"),
             helper.make_node("Neg", ["x_onnx_edit_restored"], ["y_onnx_edit_src"]),
             helper.make_node("Add", ["y_onnx_edit_src", "x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    model = _finish(graph)
    assert onnx_edit(model, tmp_path / "e.onnx", {"x": "a,b->b,a"}, {"y": "a,b->b,1,a"}) == 0
    edited = onnx.load(str(tmp_path / "e.onnx"))
    onnx.checker.check_model(edited)
    x = _rand(shape)
    (want,) = _run(model, {"x": x})
    (got,) = _run(edited, {"x": np.ascontiguousarray(x.T)})
    np.testing.assert_array_equal(got, want.T.reshape(3, 1, 2))


def test_input_read_inside_a_subgraph_is_rewired(tmp_path):
    shape = (2, 3)
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, list(shape))])
    else_g = helper.make_graph([helper.make_node("Relu", ["x"], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, list(shape))])
    cond = numpy_helper.from_array(np.array(True), "cond")
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], [cond])
    model = _finish(graph)
    assert onnx_edit(model, tmp_path / "e.onnx", {"x": "a,b->b,a"}) == 0
    x = _rand(shape)
    (got,) = _run(str(tmp_path / "e.onnx"), {"x": np.ascontiguousarray(x.T)})
    np.testing.assert_array_equal(got, -x)


# -- bad input: -1, an error line, nothing written --------------------------------------------


def _fails(caplog, tmp_path, *args, words, **kwargs):
    out = tmp_path / "bad.onnx"
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert onnx_edit(args[0], out, *args[1:], **kwargs) == -1
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("onnx_edit: ")
    for w in words:
        assert w in errors[0], errors[0]
    assert not out.exists()
    assert not (tmp_path / "dataset_for_bad.txt").exists()
    return errors[0]


@pytest.mark.parametrize("formula,words", [
    ("a,b,c,d->a,d,b,c", ["'a,b,c,d->a,d,b,c'", "has rank 3"]),  # rank mismatch
    ("ab,c,qk[a=5,k=8]->aq,c,kb", ["b=6.4", "position 8"]),     # non-integer inferred size
    ("a,c,d->ac,1", ["'d' is missing on the right"]),
    ("a,2,d->a,2,d", ["only number allowed", "position 2"]),
    ("a,b,c", ["'->'"]),
    ("ab,c,d->a,b,c,d", ["cannot infer"]),
    ("a,1,d->a,d", ["'1' stands over axis 1"]),
])
def test_formula_errors(caplog, tmp_path, formula, words):
    model = _elementwise((32, 4, 64))
    _fails(caplog, tmp_path, model, {"x": formula}, words=words)
    _fails(caplog, tmp_path, model, outputs_transform={"y": formula}, words=words)


def test_unknown_names_and_bad_arguments(caplog, tmp_path):
    model = _elementwise((2, 3))
    _fails(caplog, tmp_path, model, {"nope": "a,b->b,a"}, words=["no input 'nope'", "['x']"])
    _fails(caplog, tmp_path, model, outputs_transform={"x": "a,b->b,a"}, words=["no output 'x'", "['y']"])
    _fails(caplog, tmp_path, model, {"W": "a,b->b,a"}, words=["no input 'W'"])  # an initializer
    _fails(caplog, tmp_path, model, ["a,b->b,a"], words=["must be a dict"])
    _fails(caplog, tmp_path, model, {"x": 3}, words=["formulas (str)"])
    _fails(caplog, tmp_path, str(tmp_path / "missing.onnx"), words=["not found"])
    _fails(caplog, tmp_path, b"not an onnx model", words=["cannot read the ONNX model"])
    _fails(caplog, tmp_path, 42, words=["path, bytes or an onnx.ModelProto"])
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert onnx_edit(model, str(tmp_path / "no_dir" / "e.onnx"), {"x": "a,b->b,a"}) == -1
    assert "cannot write" in caplog.records[-1].getMessage()


def test_dynamic_dims_are_refused(caplog, tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    model = _finish(graph)
    _fails(caplog, tmp_path, model, {"x": "a,b->b,a"}, words=["input 'x'", "every dim known"])
    _fails(caplog, tmp_path, model, outputs_transform={"y": "a,b->b,a"}, words=["output 'y'", "every dim known"])


def test_tensor_that_is_both_input_and_output(caplog, tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])])
    model = _finish(graph)
    _fails(caplog, tmp_path, model, {"x": "a,b->b,a"}, words=["also a graph output"])
    _fails(caplog, tmp_path, model, outputs_transform={"x": "a,b->b,a"}, words=["not computed by a node"])


def test_old_opset_is_refused(caplog, tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    _fails(caplog, tmp_path, _finish(graph, opset=4), {"x": "a,b->b,a"}, words=["opset 4", "opset 5"])


def test_dataset_errors_name_the_line_and_write_nothing(caplog, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = _elementwise((2, 3))
    np.save("good.npy", _rand((2, 3)))
    np.save("wrong.npy", _rand((3, 3)))
    with open("ds.txt", "w") as f:
        f.write("good.npy\nmissing.npy\n")
    _fails(caplog, tmp_path, model, {"x": "a,b->b,a"}, dataset="ds.txt", words=["line 2", "missing.npy"])
    with open("ds.txt", "w") as f:
        f.write("good.npy\nwrong.npy\n")
    _fails(caplog, tmp_path, model, {"x": "a,b->b,a"}, dataset="ds.txt", words=["line 2", "[3, 3]", "[2, 3]"])
    _fails(caplog, tmp_path, model, {"x": "a,b->b,a"}, dataset="nothere.txt", words=["cannot read dataset"])
    assert not (tmp_path / "dataset_for_bad").exists()


def test_importing_the_toolkit_does_not_import_onnx():
    import subprocess
    import sys

    code = "import sys, rknnlite.toolkit; from rknnlite.toolkit import onnx_edit; print('onnx' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "False"
