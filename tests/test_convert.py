"""``rknnlite convert``: yml batch conversion (RKNN-Toolkit2's rknn_convert), its options and errors."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("yaml")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import rknnlite  # noqa: E402
from rknnlite.cli import main  # noqa: E402
from rknnlite.toolkit.convert import ConvertError, convert, read_config  # noqa: E402


def _conv_model(path):
    """data (1x3x8x8) -> Conv 3->4 3x3 pad 1 -> Relu -> out (1x4x8x8), fixed random weights."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.2, "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["data", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["out"])],
        "conv", [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8])], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


@pytest.fixture()
def project(tmp_path):
    """A yml project as rknn_convert users lay it out: model, dataset and samples beside the yml."""
    _conv_model(tmp_path / "conv.onnx")
    samples = tmp_path / "samples"
    samples.mkdir()
    rng = np.random.default_rng(1)
    for i in range(3):
        np.save(samples / f"s{i}.npy", rng.uniform(0, 255, (1, 3, 8, 8)).astype(np.float32))
    (tmp_path / "dataset.txt").write_text("".join(f"samples/s{i}.npy\n" for i in range(3)))
    return tmp_path


def write_yml(directory, body: str, name="model_config.yml"):
    path = directory / name
    path.write_text(textwrap.dedent(body))
    return path


BASIC = """\
    models:
      name: conv
      platform: onnx
      model_file_path: ./conv.onnx
      subgraphs:
        input_size_list:
          - 1,3,8,8
        inputs:
          - data
        outputs:
          - out
      quantize: {quantize}
      dataset: ./dataset.txt
      configs:
        quantized_dtype: asymmetric_quantized-8
        mean_values: [127.5, 127.5, 127.5]
        std_values: [128.0, 128.0, 128.0]
        quant_img_RGB2BGR: false
        quantized_algorithm: normal
"""


def _reference(project, x):
    """The float model's output computed independently: ((x - 127.5) / 128) -> Conv -> Relu."""
    m = onnx.load(str(project / "conv.onnx"))
    w, b = (numpy_helper.to_array(t) for t in m.graph.initializer)
    xn = np.pad((x - 127.5) / 128.0, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 4, 8, 8))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xn[:, :, i:i + 8, j:j + 8], w[:, :, i, j])
    return np.maximum(out + b[None, :, None, None], 0)


@pytest.mark.parametrize("quantize", [False, True])
def test_convert_builds_a_runnable_model(project, capsys, quantize):
    yml = write_yml(project, BASIC.format(quantize=str(quantize).lower()))
    out_dir = project / "out"
    assert main(["convert", "-i", str(yml), "-o", str(out_dir), "-t", "rk3588"]) == 0
    assert f"conv: wrote {out_dir / 'conv.rknn'}" in capsys.readouterr().out
    x = np.load(project / "samples" / "s0.npy")
    with rknnlite.Context(str(out_dir / "conv.rknn")) as ctx:
        assert ctx.inputs[0].name == "data" and ctx.outputs[0].name == "out"
        y = ctx.run([x], data_format="nchw")[0]  # the samples are NCHW
    expected = _reference(project, x)
    if quantize:
        cos = float((y.ravel() @ expected.ravel()) / np.linalg.norm(y) / np.linalg.norm(expected))
        assert cos > 0.999
        assert ctx.outputs[0].qnt_type == rknnlite.QntType.AFFINE_ASYMMETRIC
    else:
        np.testing.assert_allclose(y, expected, rtol=2e-2, atol=2e-2)  # float16 build


def test_models_list_and_accuracy_and_eval(project, capsys):
    yml = write_yml(project, """\
        models:
          - name: a
            platform: onnx
            model_file_path: conv.onnx
            quantize: true
            dataset: dataset.txt
          - name: b
            platform: ONNX
            model_file_path: conv.onnx
            configs:
              float_dtype: float32
    """)
    files = f"{project / 'samples' / 's0.npy'} {project / 'samples' / 's1.npy'}"
    assert main(["convert", "-i", str(yml), "-o", str(project / "o"), "-t", "rk3566", "-a", files, "-e"]) == 0
    out = capsys.readouterr().out
    assert "a: wrote" in out and "b: wrote" in out
    cosines = [float(line.rsplit(" ", 1)[1]) for line in out.splitlines() if line.startswith("  accuracy ")]
    assert len(cosines) == 4 and all(c > 0.99 for c in cosines)
    assert sum(c == pytest.approx(1.0, abs=1e-6) for c in cosines) == 2  # the float32 build is exact
    assert out.count("ms per inference (software backend)") == 2 and "model_bytes" in out


def test_convert_api_results(project):
    yml = write_yml(project, BASIC.format(quantize="false"))
    (result,) = convert(yml, project / "api", "rk3588", accuracy_inputs=[str(project / "samples" / "s2.npy")],
                        evaluate=True, eval_runs=2)
    assert result.name == "conv" and result.path.endswith("conv.rknn")
    assert len(result.cosine) == 1 and result.cosine[0][0] > 0.999
    assert result.latency_ms > 0 and result.memory["model_bytes"] > 0


def test_dataset_paths_are_relative_to_the_dataset_file(project, monkeypatch, tmp_path_factory):
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    yml = write_yml(project, BASIC.format(quantize="true"))
    assert main(["convert", "-i", str(yml), "-o", str(project / "o"), "-t", "rk3588"]) == 0


BAD_YML = [
    ("models:\n  - 3\n", "models[0] must be a mapping"),
    ("model:\n  name: x\n", "expected a top-level 'models:' entry"),
    ("models: {name: conv, platform: onnx, model_file_path: conv.onnx}\nextra: 1\n", "unknown top-level key 'extra'"),
    ("models: {name: conv, platform: onnx, model_file_path: conv.onnx, colour: red}\n", "unknown key 'colour'"),
    ("models: {name: conv, platform: onnx, model_file_path: conv.onnx, subgraphs: {shapes: [1]}}\n",
     "models.subgraphs: unknown key 'shapes'"),
    ("models: {name: conv, platform: onnx, model_file_path: conv.onnx, configs: {mean_value: [1]}}\n",
     "models.configs: unknown key 'mean_value'"),
    ("models: {name: conv, platform: onnx, model_file_path: conv.onnx, configs: {target_platform: rk3588}}\n",
     "give the platform with -t"),
    ("models: {name: conv, platform: onnx, model_file_path: conv.onnx, quantize: 'yes'}\n",
     "models.quantize must be a bool, not str"),
    ("models: {name: 7, platform: onnx, model_file_path: conv.onnx}\n", "models.name must be a str, not int"),
    ("models: {platform: onnx, model_file_path: conv.onnx}\n", "the key 'name' is required"),
    ("models: {name: conv, platform: caffe, model_file_path: conv.onnx}\n", "platform 'caffe' is not supported"),
    ("models: {name: conv, platform: onnx, model_file_path: missing.onnx}\n", "missing.onnx does not exist"),
    ("models: {name: conv, platform: onnx, model_file_path: conv.onnx, quantize: true}\n",
     "quantize is true but no dataset"),
    ("models: {name: conv, platform: onnx, model_file_path: conv.onnx, dataset: nope.txt}\n", "nope.txt does not exist"),
    ("models: {name: conv, platform: onnx, model_file_path: conv.onnx, subgraphs: {input_size_list: [1x3]}}\n",
     "input_size_list[0] must be a shape like 1,3,224,224"),
    ("models: {name: conv, platform: onnx, model_file_path: conv.onnx, subgraphs: {inputs: [1]}}\n",
     "subgraphs.inputs must be a list of tensor names"),
    ("models: [{name: c, platform: onnx, model_file_path: conv.onnx}, {name: c, platform: onnx, "
     "model_file_path: conv.onnx}]\n", "two models are named 'c'"),
    ("models: [unclosed\n", "not valid yml"),
]


@pytest.mark.parametrize("body, message", BAD_YML)
def test_bad_yml_names_the_key_and_the_file(project, capsys, body, message):
    yml = write_yml(project, body)
    with pytest.raises(ConvertError) as info:
        read_config(yml)
    assert message in str(info.value) and str(yml) in str(info.value)
    assert main(["convert", "-i", str(yml), "-o", str(project / "o"), "-t", "rk3588"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rknnlite: error: ") and message in err


def test_missing_dataset_file_names_the_line(project, capsys):
    (project / "dataset.txt").write_text("samples/s0.npy\nsamples/gone.npy\n")
    yml = write_yml(project, BASIC.format(quantize="true"))
    assert main(["convert", "-i", str(yml), "-o", str(project / "o"), "-t", "rk3588"]) == 1
    err = capsys.readouterr().err
    assert "line 2" in err and "gone.npy" in err
    assert "model 'conv': build failed" in err


def test_bad_config_value_fails_the_config_step(project, capsys):
    yml = write_yml(project, BASIC.format(quantize="false").replace("std_values: [128.0, 128.0, 128.0]",
                                                                     "std_values: [0, 1, 1]"))
    assert main(["convert", "-i", str(yml), "-o", str(project / "o"), "-t", "rk3588"]) == 1
    err = capsys.readouterr().err
    assert "std_values must not contain 0" in err and "config failed" in err


def test_unknown_target_platform(project, capsys):
    yml = write_yml(project, BASIC.format(quantize="false"))
    assert main(["convert", "-i", str(yml), "-o", str(project / "o"), "-t", "rk9999"]) == 1
    assert "target_platform 'rk9999' is not supported" in capsys.readouterr().err


def test_missing_yml(tmp_path, capsys):
    assert main(["convert", "-i", str(tmp_path / "none.yml"), "-o", str(tmp_path), "-t", "rk3588"]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_a_binary_file_as_the_yml_is_named(tmp_path, capsys):
    """A model given as -i (a UnicodeDecodeError traceback before)."""
    (tmp_path / "m.rknn").write_bytes(b"\x89RKNN\x00\xff")
    assert main(["convert", "-i", str(tmp_path / "m.rknn"), "-o", str(tmp_path), "-t", "rk3588"]) == 1
    assert "m.rknn: not a yml text file (byte 0 is not UTF-8)" in capsys.readouterr().err


def test_device_id_warns_and_uses_the_software_backend(project, capsys):
    yml = write_yml(project, BASIC.format(quantize="false"))
    assert main(["convert", "-i", str(yml), "-o", str(project / "o"), "-t", "rk3588", "-e", "-d", "abc"]) == 0
    captured = capsys.readouterr()
    assert "board-connected evaluation is not available" in captured.err
    assert "ms per inference" in captured.out


def test_verbose_prints_the_toolkit_log(project, capsys, monkeypatch):
    yml = write_yml(project, BASIC.format(quantize="false"))
    monkeypatch.chdir(project)
    assert main(["convert", "-i", str(yml), "-o", str(project / "o"), "-t", "rk3588", "-v"]) == 0
    assert "I Loading" in capsys.readouterr().err
    # the toolkit's verbose build() writes check*.onnx into the cwd; a conversion does not
    assert not list(project.glob("check*.onnx"))


def test_cli_leaves_no_handler_behind(project):
    import logging

    before = list(logging.getLogger("rknnlite").handlers)
    yml = write_yml(project, BASIC.format(quantize="false"))
    main(["convert", "-i", str(yml), "-o", str(project / "o"), "-t", "rk3588"])
    assert logging.getLogger("rknnlite").handlers == before
