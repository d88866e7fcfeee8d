"""``RKNN.load_pytorch`` / :mod:`rknnlite.toolkit.loaders.pytorch`: TorchScript models.

The oracle is the torch module itself: the converted model's outputs on the software
backend must match the module's within float32 tolerance.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
torch = pytest.importorskip("torch")  # CI installs torch (test extra); skip only where it is absent

from rknnlite import ModelInvalidError  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.loaders.pytorch import load_pytorch, torchscript_to_onnx  # noqa: E402
from toolkit_logs import errors  # noqa: E402

nn = torch.nn
F = torch.nn.functional


class Net(nn.Module):
    """conv, bn, relu, maxpool, linear, add, concat, upsample; two inputs, two outputs."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False)
        self.side = nn.Conv2d(1, 8, 1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, image, extra):
        a = F.relu(self.bn1(self.conv1(image)))               # (1, 8, 16, 16)
        b = F.max_pool2d(a, 2)                                 # (1, 8, 8, 8)
        c = self.conv2(b) + self.side(extra)                   # add, (1, 8, 8, 8)
        up = F.interpolate(c, scale_factor=2.0, mode="nearest")  # (1, 8, 16, 16)
        cat = torch.cat([a, up], dim=1)                        # (1, 16, 16, 16)
        pooled = F.max_pool2d(cat, 4)                          # (1, 16, 4, 4)
        return self.fc(torch.flatten(pooled, 1)), cat


def randomize_bn(module, seed=0):
    g = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.num_features, generator=g) - 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.rand(m.num_features, generator=g) - 0.5)
    return module


def examples(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(1, 3, 16, 16, generator=g) * 2 - 1, torch.rand(1, 1, 8, 8, generator=g) * 2 - 1


def save_traced(module, path, example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own TorchScript deprecation notices
        torch.jit.trace(module.eval(), example).save(str(path))
    return path


def run_rknn(model, sizes, inputs):
    rknn = RKNN()
    assert rknn.config(float_dtype="float32") == 0
    assert rknn.load_pytorch(model=model, input_size_list=sizes) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    outs = rknn.inference([x.numpy() for x in inputs], data_format="nchw")
    rknn.release()
    return outs


def assert_close(out, ref):
    ref = ref.detach().numpy()
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


def test_traced_module_matches_torch(tmp_path):
    net = randomize_bn(Net()).eval()
    ex = examples()
    path = save_traced(net, tmp_path / "net.pt", ex)
    outs = run_rknn(str(path), [[1, 3, 16, 16], [1, 1, 8, 8]], ex)
    with torch.no_grad():
        refs = net(*ex)
    assert len(outs) == 2
    for out, ref in zip(outs, refs):
        assert_close(out, ref)


class Scripted(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        return torch.cat([y, F.max_pool2d(y, 3, 1, 1)], 1) + 1.5


def test_scripted_module_bytes_and_names(tmp_path):
    net = randomize_bn(Scripted(), seed=3).eval()
    path = tmp_path / "s.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(net).save(str(path))
    x = torch.rand(1, 2, 9, 11) - 0.5
    (out,) = run_rknn(path.read_bytes(), [[1, 2, 9, 11]], [x])
    with torch.no_grad():
        assert_close(out, net(x))
    imported = load_pytorch(str(path), [np.array([1, 2, 9, 11])])  # numpy ints are fine too
    assert [(s.name, s.shape) for s in imported.input_specs] == [("x", (1, 2, 9, 11))]
    assert [(s.name, s.shape) for s in imported.output_specs] == [("output0", (1, 8, 5, 6))]


def test_opset_and_io_names_of_the_export(tmp_path):
    path = save_traced(Net().eval(), tmp_path / "net.pt", examples())
    proto = torchscript_to_onnx(str(path), [[1, 3, 16, 16], [1, 1, 8, 8]])
    assert [i.name for i in proto.graph.input] == ["image", "extra"]
    assert [o.name for o in proto.graph.output] == ["output0", "output1"]
    assert [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")] == [17]


def test_dynamic_input(tmp_path):
    net = randomize_bn(Scripted(), seed=5).eval()
    path = save_traced(net, tmp_path / "s.pt", (torch.rand(1, 2, 8, 8),))
    rknn = RKNN()
    sets = [[[1, 2, 8, 8]], [[1, 2, 12, 10]]]
    assert rknn.config(float_dtype="float32", dynamic_input=sets) == 0
    assert rknn.load_pytorch(str(path), [[1, 2, 8, 8]]) == 0
    assert rknn.build() == 0 and rknn.init_runtime() == 0
    for shape in ([1, 2, 8, 8], [1, 2, 12, 10]):
        x = torch.rand(*shape) - 0.5
        (out,) = rknn.inference([x.numpy()], data_format="nchw")
        with torch.no_grad():
            assert_close(out, net(x))
    rknn.release()


def test_no_torch_warnings_reach_the_user(tmp_path, toolkit_log, recwarn):
    path = save_traced(Net().eval(), tmp_path / "net.pt", examples())
    filters = list(warnings.filters)
    assert RKNN().load_pytorch(str(path), [[1, 3, 16, 16], [1, 1, 8, 8]]) == 0
    assert len(recwarn) == 0
    assert warnings.filters == filters
    assert not [r for r in toolkit_log.records if r.levelno >= logging.WARNING and ": torch: " in r.getMessage()]


def test_relevant_torch_warnings_are_passed_on(toolkit_log):
    from rknnlite.toolkit.loaders import pytorch as loader

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("shape may be wrong", torch.jit.TracerWarning)
        warnings.warn("operator foo exported approximately", UserWarning)
        warnings.warn("old API", FutureWarning)
        warnings.warn("legacy exporter", DeprecationWarning)
        warnings.warn("no signature found for <ScriptMethod>, skipping _decide_input_format", UserWarning)
    heard = []
    loader._record(caught, heard.append)
    assert heard == ["torch: shape may be wrong", "torch: operator foo exported approximately"]
    debug = [r.getMessage() for r in toolkit_log.records if r.levelno == logging.DEBUG]
    assert any("old API" in m for m in debug) and any("no signature found" in m for m in debug)


# -- errors ------------------------------------------------------------------------------------


def test_state_dict_and_pickled_module_are_refused(tmp_path, toolkit_log):
    net = Net()
    torch.save(net.state_dict(), str(tmp_path / "sd.pt"))
    torch.save(net, str(tmp_path / "module.pt"))
    (tmp_path / "junk.pt").write_bytes(b"\x00garbage" * 10)
    rknn = RKNN()
    for name in ("sd.pt", "module.pt", "junk.pt"):
        assert rknn.load_pytorch(str(tmp_path / name), [[1, 3, 16, 16], [1, 1, 8, 8]]) == -1
    errs = errors(toolkit_log)
    assert len(errs) == 3
    for name, err in zip(("sd.pt", "module.pt", "junk.pt"), errs):
        assert name in err and "is not a TorchScript model" in err and "torch.jit.trace" in err
    with pytest.raises(ModelInvalidError, match="plain torch.nn.Module"):
        load_pytorch(net, [[1, 3, 16, 16], [1, 1, 8, 8]])
    with pytest.raises(ModelInvalidError, match="not found"):
        load_pytorch(str(tmp_path / "missing.pt"), [[1, 3, 16, 16]])
    # the object stays usable
    path = save_traced(Net().eval(), tmp_path / "net.pt", examples())
    assert rknn.load_pytorch(str(path), [[1, 3, 16, 16], [1, 1, 8, 8]]) == 0


@pytest.mark.parametrize("sizes,match", [
    (None, "input_size_list is required"),
    ([], "input_size_list is empty"),
    ("1,3,16,16", "input_size_list is required"),
    (5, "must be a list of shapes"),
    ([[1, 3, 16, 16], 7], r"input_size_list\[1\] must be a list of dims"),
    ([[1, 3, 16, 16], [1, 0, 8, 8]], r"input_size_list\[1\] must hold positive ints"),
    ([[1, 3, 16, 16], [1, 1.5, 8, 8]], "must hold positive ints"),
    ([[1, 3, 16, 16], [True, 1, 8, 8]], "must hold positive ints"),
    ([[1, 3, 16, 16]], "gives 1 shapes, but the model's forward takes 2 inputs"),
    ([[1, 3, 16, 16], [1, 1, 8, 8], [1]], "gives 3 shapes"),
    ([[1, 3, 16, 16], [1, 2, 8, 8]], r"cannot export .* with input_size_list \[\[1, 3, 16, 16\], \[1, 2, 8, 8\]\]"),
])
def test_bad_input_size_list(tmp_path, toolkit_log, sizes, match):
    path = save_traced(Net().eval(), tmp_path / "net.pt", examples())
    with pytest.raises(ModelInvalidError, match=match):
        load_pytorch(str(path), sizes)
    assert RKNN().load_pytorch(str(path), sizes) == -1
    assert len(errors(toolkit_log)) == 1


class CumSum(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, 1)


def test_unsupported_op_is_named(tmp_path, toolkit_log):
    path = save_traced(CumSum(), tmp_path / "c.pt", (torch.rand(1, 5),))
    assert RKNN().load_pytorch(str(path), [[1, 5]]) == -1
    (err,) = errors(toolkit_log)
    assert "unsupported op 'CumSum'" in err and "(node " in err and "supported ops:" in err


def test_missing_torch_gives_install_hint(tmp_path, toolkit_log, monkeypatch):
    path = save_traced(Scripted().eval(), tmp_path / "s.pt", (torch.rand(1, 2, 8, 8),))
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    assert RKNN().load_pytorch(str(path), [[1, 2, 8, 8]]) == -1
    (err,) = errors(toolkit_log)
    assert "pip install torch" in err and "download.pytorch.org/whl/cpu" in err and "CUDA" in err


def test_missing_onnx_gives_install_hint(tmp_path, toolkit_log, monkeypatch):
    path = save_traced(Scripted().eval(), tmp_path / "s.pt", (torch.rand(1, 2, 8, 8),))
    monkeypatch.setitem(sys.modules, "onnx", None)
    assert RKNN().load_pytorch(str(path), [[1, 2, 8, 8]]) == -1
    (err,) = errors(toolkit_log)
    assert "pip install 'rknnlite-runtime[toolkit]'" in err


_VENDOR_TORCH = Path(__file__).parent / "data" / "vendor_torch"


def test_quantized_layers_take_the_modules_float_bias():
    """PyTorch's exporter writes a quantized conv's bias as int32 on the file's scales; the
    loader gives the conv the float bias the module keeps instead (RKNN-Toolkit2 2.5.0
    quantizes that one, once, on its own build's scales)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.load's deprecation notice
        module = torch.jit.load(str(_VENDOR_TORCH / "mobilenet_like_qnnpack.pt"))
    proto = torchscript_to_onnx(module, [[1, 3, 32, 32]])
    inits = {i.name: i for i in proto.graph.initializer}
    convs = [n for n in proto.graph.node if n.op_type == "Conv"]
    assert len(convs) == 7 and all(n.input[2] in inits for n in convs)
    from onnx import numpy_helper

    stem = dict(module.named_modules())["body.0"]
    _, bias = torch.ops.quantized.conv2d_unpack(stem._packed_params)
    np.testing.assert_array_equal(numpy_helper.to_array(inits[convs[0].input[2]]), bias.detach().numpy())
    assert not [n for n in proto.graph.node if n.op_type == "DequantizeLinear"
                and any(o == c.input[2] for c in convs for o in n.output)]


@pytest.mark.parametrize("name, shape, equal", [("mobilenet_like_qnnpack", [1, 3, 32, 32], 0.998),
                                                ("mobilenet_like_skip_qnnpack", [1, 3, 32, 32], 1.0),
                                                ("conv_add_fbgemm", [1, 16, 8, 8], 1.0)])
def test_quantized_model_equals_the_vendors_simulator(name, shape, equal):
    """Quantized TorchScript modules (tests/data/vendor_torch/README.md) against RKNN-Toolkit2
    2.5.0's simulator: a MobileNet-like feature map after seven quantized convs equal on at
    least 99.8 % of the values, every one within a step (88.7 % with the exporter's int32
    biases, a double rounding the vendor does not make); ``add(x, conv1x1(x))`` equal on every
    value, alone and after that net (79 % and 66 % before the Add was folded into the conv's
    weight as the vendor folds it; 98.5 % for the net with the folded weight's codes rounded in
    float32)."""
    ref = np.load(_VENDOR_TORCH / f"{name}_sim.npz")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3566") == 0
    assert rknn.load_pytorch(str(_VENDOR_TORCH / f"{name}.pt"), [shape]) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    (y,) = rknn.inference([ref["x"]], data_format="nchw")
    rknn.release()
    steps = np.abs(y.reshape(ref["output"].shape) - ref["output"]) / ref["grid"][0]
    assert steps.max() <= 1.01 and (steps < 0.01).mean() >= equal
