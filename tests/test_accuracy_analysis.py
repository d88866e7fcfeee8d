"""``RKNN.accuracy_analysis``: layer-by-layer comparison of a built model with its float reference."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.accuracy import cosine, euclidean  # noqa: E402

F = onnx.TensorProto.FLOAT
RNG = np.random.default_rng(11)
SAMPLES = RNG.random((4, 3, 8, 8)).astype(np.float32) * 255


def small_model(path):
    w1 = RNG.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.3
    b1 = RNG.standard_normal(6).astype(np.float32) * 0.1
    w2 = RNG.standard_normal((4, 6, 1, 1)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"]),
             helper.make_node("Sigmoid", ["c2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", F, [1, 4, 4, 4])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
                           numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


@pytest.fixture
def int8_rknn(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for i, s in enumerate(SAMPLES):
        np.save(tmp_path / f"s{i}.npy", s)
    (tmp_path / "ds.txt").write_text("\n".join(f"s{i}.npy" for i in range(4)))
    rk = RKNN()
    assert rk.config(mean_values=[[128, 128, 128]], std_values=[[64, 64, 64]], target_platform="rk3588") == 0
    assert rk.load_onnx(small_model(tmp_path / "m.onnx")) == 0
    assert rk.build(do_quantization=True, dataset="ds.txt") == 0
    return rk


ROW = re.compile(r"^\[(\w+)\] (\S+)\s+([0-9.]+) \| (\S+)\s+([0-9.]+) \| (\S+)$")


def parse_report(text):
    rows = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(2)] = (m.group(1), float(m.group(3)), float(m.group(4)), float(m.group(5)),
                                float(m.group(6)))
    return rows


def test_int8_model_report_and_files(int8_rknn, tmp_path, caplog):
    out_dir = tmp_path / "snapshot"
    with caplog.at_level(logging.INFO, logger="rknnlite.toolkit"):
        assert int8_rknn.accuracy_analysis(["s1.npy"], output_dir=str(out_dir)) == 0
    text = (out_dir / "error_analysis.txt").read_text()
    assert "entire" in text and "single" in text and "cos" in text and "euc" in text
    rows = parse_report(text)
    # one row per tensor of the built graph (the Relu is fused into the first Conv)
    assert list(rows) == ["x", "r1", "p1", "c2", "y"]
    assert [r[0] for r in rows.values()] == ["Input", "Conv", "MaxPool", "Conv", "Sigmoid"]
    for name, (op, cos_e, euc_e, cos_s, euc_s) in rows.items():
        assert 0.99 <= cos_e <= 1.0 + 1e-9, (name, cos_e)
        assert 0.99 <= cos_s <= 1.0 + 1e-9, (name, cos_s)
        assert euc_e >= 0 and euc_s >= 0
        golden = np.load(out_dir / "golden" / "npy" / f"{name}.npy")
        sim = np.load(out_dir / "simulator" / "npy" / f"{name}.npy")
        assert golden.shape == sim.shape
        # the vendor's .txt beside: the flattened values, one per line, 6 decimals
        text_values = np.loadtxt(out_dir / "simulator" / f"{name}.txt", ndmin=1)
        np.testing.assert_allclose(text_values, sim.ravel(), atol=5e-7)
        assert (out_dir / "golden" / f"{name}.txt").read_text().split("\n")[0] == f"{golden.ravel()[0]:.6f}"
        # the report's numbers are the files' numbers
        assert abs(cosine(sim, golden) - cos_e) < 1e-5
        assert abs(euclidean(sim, golden) - euc_e) <= 1e-3 * max(1.0, euc_e)
    # int8 is not exact: some tensor shows an error
    assert any(r[2] > 0 for r in rows.values())
    # the golden output is the float model's output on the same sample
    ref = RKNN()
    ref.config(mean_values=[[128, 128, 128]], std_values=[[64, 64, 64]], target_platform="rk3588",
               float_dtype="float32")
    ref.load_onnx(str(tmp_path / "m.onnx"))
    ref.build()
    ref.init_runtime()
    expected = ref.inference([SAMPLES[1][None]], data_format="nchw")[0]
    np.testing.assert_allclose(np.load(out_dir / "golden" / "npy" / "y.npy"), expected, rtol=1e-5, atol=1e-6)
    # map_name_to_file.txt: header, dashes, one row per tensor
    lines = (out_dir / "map_name_to_file.txt").read_text().splitlines()
    assert lines[0].split() == ["layer_name", "file_name"] and set(lines[1]) == {"-"}
    assert [line.split() for line in lines[2:]] == [[n, f"{n}.txt"] for n in rows]
    assert "accuracy_analysis: output y: cos" in caplog.text
    # the table is logged too (the vendor prints it), euclidean distances with 5 decimals
    assert "[Sigmoid] y" in caplog.text
    assert re.search(r"\[Conv\] c2 +\d\.\d{5} \| \d+\.\d{5} +\d\.\d{5} \| \d+\.\d{5}", text), text


def test_output_dir_none_writes_the_tables_into_snapshot(int8_rknn, tmp_path, monkeypatch):
    """Rockchip's functions/quantize_algorithm_mmse and hybrid_quant/step2.py call
    ``accuracy_analysis(inputs=[...], output_dir=None)``: RKNN-Toolkit2 2.5.0 returns 0 and
    writes only ``./snapshot/error_analysis.txt`` and ``map_name_to_file.txt``."""
    monkeypatch.chdir(tmp_path)
    assert int8_rknn.accuracy_analysis(["s1.npy"], output_dir=None) == 0
    assert sorted(p.name for p in (tmp_path / "snapshot").iterdir()) == ["error_analysis.txt",
                                                                          "map_name_to_file.txt"]
    assert list(parse_report((tmp_path / "snapshot" / "error_analysis.txt").read_text())) == \
        ["x", "r1", "p1", "c2", "y"]


def test_image_input_and_ref_outputs(int8_rknn, tmp_path):
    pil = pytest.importorskip("PIL.Image")
    pixels = (RNG.random((8, 8, 3)) * 255).astype(np.uint8)
    pil.fromarray(pixels).save(tmp_path / "img.png")
    np.save(tmp_path / "ref.npy", np.zeros((1, 4, 4, 4), np.float32))
    assert int8_rknn.accuracy_analysis(["img.png"], ref_outputs=["ref.npy"], output_dir="snap2") == 0
    text = (tmp_path / "snap2" / "error_analysis.txt").read_text()
    assert "[Output] y" in text
    golden_x = np.load(tmp_path / "snap2" / "golden" / "npy" / "x.npy")
    np.testing.assert_allclose(golden_x[0], (pixels.transpose(2, 0, 1).astype(np.float32) - 128) / 64, rtol=1e-6)


def test_float16_model_is_nearly_exact(tmp_path):
    rk = RKNN()
    rk.config(target_platform="rk3588")
    rk.load_onnx(small_model(tmp_path / "f.onnx"))
    assert rk.build() == 0
    np.save(tmp_path / "x.npy", SAMPLES[0])
    assert rk.accuracy_analysis([str(tmp_path / "x.npy")], output_dir=str(tmp_path / "o")) == 0
    rows = parse_report((tmp_path / "o" / "error_analysis.txt").read_text())
    assert all(r[1] > 0.9999 and r[3] > 0.9999 for r in rows.values())


def test_bad_inputs_return_minus_one(int8_rknn, tmp_path, caplog):
    cases = [
        (["missing.npy"], {}, "missing.npy"),
        (["s0.npy", "s1.npy"], {}, "1 input"),
        ([str(tmp_path / "ds.txt")], {}, "unsupported file type"),
        ([42], {}, "path"),
        (["s0.npy"], {"target": "rk3588"}, "target"),
        (["s0.npy"], {"output_dir": str(tmp_path / "ds.txt" / "sub")}, "cannot read or write"),
    ]
    np.save(tmp_path / "wrong.npy", np.zeros((3, 4, 4), np.float32))
    cases.append((["wrong.npy"], {}, "shape"))
    for inputs, kwargs, words in cases:
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
            assert int8_rknn.accuracy_analysis(inputs, **kwargs) == -1, (inputs, kwargs)
        assert words in caplog.text, (inputs, caplog.text)
    assert int8_rknn.accuracy_analysis(["s0.npy"], output_dir=str(tmp_path / "ok")) == 0  # still usable
    unbuilt = RKNN()
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert unbuilt.accuracy_analysis(["s0.npy"]) == -1
    assert "not built" in caplog.text


def test_cosine_and_euclidean_edge_cases():
    z = np.zeros(3)
    assert cosine(z, z) == 1.0 and cosine(z, np.ones(3)) == 0.0
    assert np.isnan(cosine(np.array([np.nan, 1.0]), np.ones(2)))
    assert cosine(np.array([1.0, 2.0]), np.array([2.0, 4.0])) == pytest.approx(1.0)
    assert euclidean(np.array([0.0, 3.0]), np.array([4.0, 0.0])) == pytest.approx(5.0)


def _analyse_chain(x: str, a: str, y: str) -> None:
    """Build ``x -> Relu -> a -> Sigmoid -> y`` (float, [1, 4]) in the current directory and run
    accuracy_analysis on one sample into ``snap``."""
    nodes = [helper.make_node("Relu", [x], [a]), helper.make_node("Sigmoid", [a], [y])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(x, F, [1, 4])],
                          [helper.make_tensor_value_info(y, F, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "n.onnx")
    np.save("s.npy", np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4))
    rk = RKNN()
    assert rk.config(target_platform="rk3588") == 0
    assert rk.load_onnx("n.onnx") == 0
    assert rk.build(do_quantization=False) == 0
    assert rk.accuracy_analysis(["s.npy"], output_dir="snap") == 0
    rk.release()


def test_long_tensor_names_get_files_the_file_system_takes(tmp_path, monkeypatch):
    """TFLite's fused tensor names (``a;b;c``, several hundred characters) exceeded the
    255-byte file name limit: accuracy_analysis failed on a Keras MobileNet."""
    monkeypatch.chdir(tmp_path)
    long_a = ";".join(f"model/block_{i}/conv/Relu6" for i in range(20))
    long_b = long_a + ";tail"  # the same first 200 bytes
    _analyse_chain("x", long_a, long_b)
    files = sorted(p.name for p in (tmp_path / "snap" / "golden").glob("*.txt"))
    assert len(files) == 3 and max(len(f.encode()) for f in files) <= 255, files
    text = (tmp_path / "snap" / "map_name_to_file.txt").read_text()
    assert long_a in text and long_b in text


def test_file_names_replace_slash_and_colon_only(tmp_path, monkeypatch):
    """The vendor's file naming: '/' and ':' become '_', other characters (spaces) stay;
    two names that end up equal get distinct files, and the map names them."""
    monkeypatch.chdir(tmp_path)
    _analyse_chain("in put", "blk/act:0", "blk_act_0")
    lines = (tmp_path / "snap" / "map_name_to_file.txt").read_text().splitlines()
    col = lines[0].index("file_name")  # names may hold spaces: the columns are aligned
    rows = {line[:col].rstrip(): line[col:] for line in lines[2:]}
    assert rows == {"in put": "in put.txt", "blk/act:0": "blk_act_0.txt", "blk_act_0": "blk_act_0_1.txt"}
    for fname in rows.values():
        assert (tmp_path / "snap" / "golden" / fname).is_file()
        assert (tmp_path / "snap" / "simulator" / "npy" / fname.replace(".txt", ".npy")).is_file()


def _tanh_relu_model(path):
    """x -> Conv -> Tanh -> Relu -> Conv -> y: the Tanh's output (half of it negative) is read
    only by the Relu, as a pre-activation ResNet's BatchNormalization output is."""
    w1 = RNG.standard_normal((3, 3, 3, 3)).astype(np.float32) * 0.3
    w2 = RNG.standard_normal((4, 3, 1, 1)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Tanh", ["c1"], ["t"]),
             helper.make_node("Relu", ["t"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", F, [1, 4, 8, 8])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


def test_a_tensor_only_a_relu_reads_is_measured_on_what_the_relu_keeps(tmp_path, monkeypatch, caplog):
    """Quantization gives such a tensor the Relu's range (its negatives are lost, and nothing
    reads them): neither build's diagnostics nor the report may call it destroyed (Rockchip's
    functions/accuracy_analysis on a ResNet-50 v2 got 8 such warnings, cosine 0.55)."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(4)
    for i in range(4):
        np.save(tmp_path / f"p{i}.npy", rng.standard_normal((3, 8, 8)).astype(np.float32))
    (tmp_path / "ds.txt").write_text("\n".join(f"p{i}.npy" for i in range(4)))
    rk = RKNN()
    assert rk.config(target_platform="rk3588") == 0
    assert rk.load_onnx(_tanh_relu_model(tmp_path / "tr.onnx")) == 0
    with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
        assert rk.build(do_quantization=True, dataset="ds.txt") == 0
    assert "its int8 output has cosine" not in caplog.text
    assert rk.accuracy_analysis(["p0.npy"], output_dir="snap") == 0
    rows = parse_report((tmp_path / "snap" / "error_analysis.txt").read_text())
    assert rows["t"][0] == "Tanh" and rows["t"][1] > 0.99 and rows["t"][3] > 0.99, rows
    rk.release()


def test_the_simulator_column_is_what_inference_computes(tmp_path):
    """The snapshot of every tensor comes from the same run as ``inference``: a float16
    attention keeps its scores and probabilities float32, which making them outputs of the run
    would round (the output then differed from inference's on most values)."""
    rng = np.random.default_rng(12)
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    shape = [1, 2, 8, 8]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, shape) for n in "qkv"],
                          [helper.make_tensor_value_info("y", F, None)])
    path = tmp_path / "a.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    feeds = [rng.standard_normal(shape).astype(np.float32) * 2 for _ in range(3)]
    for n, x in zip("qkv", feeds):
        np.save(tmp_path / f"{n}.npy", x)
    rk = RKNN()
    rk.config(target_platform="rk3588")
    assert rk.load_onnx(str(path)) == 0 and rk.build(do_quantization=False) == 0
    assert rk.accuracy_analysis([str(tmp_path / f"{n}.npy") for n in "qkv"], output_dir=str(tmp_path / "o")) == 0
    assert rk.init_runtime() == 0
    (y,) = rk.inference(feeds, data_format="nchw")
    rk.release()
    snap = tmp_path / "o" / "simulator" / "npy"
    np.testing.assert_array_equal(np.load(snap / "y.npy").reshape(y.shape), y)
    scores = np.load(snap / "s.npy")
    assert not np.array_equal(scores, scores.astype(np.float16).astype(np.float32))  # kept float32


def test_int8_convs_in_a_row_keep_their_snapshots(tmp_path, monkeypatch):
    """The tensor between two int8 convs, which the run otherwise passes on as codes, is still
    there to snapshot; and the output's snapshot is what inference returns."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(14)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.3 for s in ((6, 3, 3, 3), (4, 6, 1, 1)))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", F, [1, 4, 8, 8])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "c.onnx")
    for i, s in enumerate(SAMPLES):
        np.save(f"s{i}.npy", s[None])
    (tmp_path / "ds.txt").write_text("\n".join(f"s{i}.npy" for i in range(4)))
    rk = RKNN()
    rk.config(target_platform="rk3588")
    assert rk.load_onnx("c.onnx") == 0 and rk.build(do_quantization=True, dataset="ds.txt") == 0
    assert rk.accuracy_analysis(["s0.npy"], output_dir="o") == 0
    assert rk.init_runtime() == 0
    (y,) = rk.inference([SAMPLES[0][None]], data_format="nchw")
    rk.release()
    assert (tmp_path / "o" / "simulator" / "npy" / "r1.npy").exists()
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "simulator" / "npy" / "y.npy").reshape(y.shape), y)
