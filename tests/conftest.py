"""Shared pytest fixtures."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# The conv kernels' measured Winograd/direct crossover (backends/software/ops/conv_costs.py)
# depends on timing; the suite keeps the built-in rule so that every run takes the same
# paths (tests/test_calibration.py turns it on where it is the subject).  Set here, before
# any test imports the backend, so subprocesses inherit it too.
os.environ["RKNNLITE_CALIBRATION"] = "off"
# The same for the caches the conv kernels block for (backends/software/host_cpu.py): the
# thresholds that choose a layer's banding and thread split are fractions of them, and the
# tests' layer sizes sit on either side of those the CPU the kernels were tuned on gives (an
# EPYC with 32K L1d, 1M L2, 32M L3).  Pinned, every machine (or a chroot without /sys) plans the
# same; tests/test_host_cpu.py and tests/test_blocking.py give the detection their own
# environment where it is the subject.
os.environ["RKNNLITE_CPU_CACHES"] = "l1d=32K,l2=1M,l3=32M"


#: the suite's markers, registered here rather than in pyproject.toml: packaging/run_tests.sh runs
#: the tests against an installed wheel from outside the tree, where pyproject.toml is not read
MARKERS = (
    "npu: needs a Rockchip NPU and librknnrt.so (skipped elsewhere)",
    "slow: takes more than a few seconds",
    "fake_rknnrt_case: a vendor-behaviour test whose models the fake librknnrt can run (it gets a fake-npu case)",
)


def pytest_configure(config):
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)


#: Real Rockchip files, their ONNX sources, datasets and outputs (see its README.md).
VENDOR_FIXTURES = REPO / "tests" / "data" / "rknn-toolkit2"


@pytest.fixture(scope="session")
def vendor_fixtures() -> Path:
    """``tests/data/rknn-toolkit2``: real Rockchip files, their ONNX sources and outputs.
    Part of the repository: ``tests/test_fixture_data.py`` fails when any file is missing."""
    return VENDOR_FIXTURES


@pytest.fixture(scope="session")
def corpus_cases() -> dict:
    """``tools/vendor_corpus/models.py`` cases by name: the sources of the vendor corpus in
    ``tests/data/vendor`` (see ``tests/corpus.py``)."""
    from corpus import MODELS

    return {c.name: c for c in MODELS.CASES}


@pytest.fixture(scope="session")
def vendor_rknn_files(vendor_fixtures) -> list:
    """Every real Rockchip ``.rknn`` file among the fixtures."""
    return sorted((vendor_fixtures / "rknn").glob("*.rknn"))


def _conv_relu_model(platform: str = "rk3588", batch: int = 1, channels: int = 8, size: int = 16,
                     float_dtype: str = "float32", seed: int = 0) -> bytes:
    """Portable bytes of Conv(channels -> 2*channels, 3x3, pad 1) + Relu on a (1, C, size, size)
    NCHW float32 input, built by hand; ``batch`` > 1 writes a multi-batch model (metadata
    ``batch_size`` and I/O axis 0 multiplied, graph for one sample)."""
    import numpy as np

    from rknnlite.model.graph import Graph, Node
    from rknnlite.model.metadata import build_metadata
    from rknnlite.model.portable import write_portable
    from rknnlite.model.spec import TensorSpec

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((2 * channels, channels, 3, 3)) * 0.2).astype(np.float32)
    b = rng.standard_normal(2 * channels).astype(np.float32)
    graph = Graph([Node("Conv", "conv0", ["x", "w", "b"], ["c"], {"pads": [1, 1, 1, 1]}),
                   Node("Relu", "relu0", ["c"], ["y"])], ["x"], ["y"], {"w": w, "b": b})
    meta = build_metadata([TensorSpec("x", (batch, channels, size, size), "float32", "NCHW")],
                          [TensorSpec("y", (batch, 2 * channels, size, size), "float32", "NCHW")],
                          target_platforms=(platform,), batch_size=batch, float_dtype=float_dtype)
    return write_portable(meta, graph)


def _json_probe(code: str, *args, env=None, timeout: float = 120) -> dict:
    """Run ``code`` in a fresh interpreter with ``args`` as ``sys.argv[1:]`` and ``env`` (default
    this process's environment); the JSON it prints.  Fails the test, with its stderr, when
    the interpreter fails."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


#: Python source for the Ctrl-C probes: ``interrupt_while_retaking(cond, errors)`` waits until a
#: thread waits on ``cond``, holds its lock and wakes it, then sends this process SIGINT while that
#: thread waits to take the lock back; an exception leaving the ``with`` block (the lock released
#: under it) goes to ``errors``
CTRL_C_WHILE_RETAKING = r"""
import os, signal, time

def interrupt_while_retaking(cond, errors):
    try:
        while not cond._waiters:
            time.sleep(0.01)
        with cond:
            cond.notify_all()  # the waiter wakes and waits to take the lock back ...
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGINT)  # ... when Ctrl-C arrives
            time.sleep(0.3)
    except BaseException as e:
        errors.append(repr(e))
"""


def _ctrl_c_probe(code: str, *args, timeout: float = 60.0) -> dict:
    """Run ``code`` (it sends itself SIGINT) in a fresh interpreter that imports this checkout, with
    SIGINT at its default disposition: a run started in the background (``cmd &``) has SIGINT
    ignored, which a child inherits, and Python then installs no KeyboardInterrupt handler.  The
    JSON of the last line it prints; fails the test, with its stderr, when it fails."""
    import json
    import os
    import signal
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True,
                         timeout=timeout, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def ctrl_c_probe():
    """``ctrl_c_probe(code, *args)`` -> the JSON ``code`` prints last, run where Ctrl-C raises
    KeyboardInterrupt whatever this run's own SIGINT disposition (see ``_ctrl_c_probe``)."""
    return _ctrl_c_probe


@pytest.fixture(scope="session")
def json_probe():
    """``json_probe(code, *args, env=None, timeout=120)`` -> the JSON ``code`` prints in a fresh
    interpreter: for what a process reads once (environment variables, CPU paths)."""
    return _json_probe


@pytest.fixture
def set_kernel_isa(monkeypatch, request):
    """``set_kernel_isa(level)`` -> the level now in use: the conv micro-kernels (compiled and
    the Python side's ``_ISA``) and the float32 pooling passes take path ``level`` (2 AVX-512, 1 AVX2 or NEON, 0 generic;
    never above the CPU's) until the test ends, as ``RKNNLITE_ISA`` would for a process.  Weights
    must be prepared after the call (packing follows the path)."""
    from rknnlite._native import conv_kernels as ck
    from rknnlite._native import pool_kernels as pk
    from rknnlite.backends.software.ops import conv as conv_mod

    before, pool_before = ck.gemm_isa(), pk.isa_level()
    request.addfinalizer(lambda: (ck.limit_isa(before), pk.limit_isa(pool_before)))

    def set_level(level: int) -> int:
        used = ck.limit_isa(level)
        monkeypatch.setattr(conv_mod, "_ISA", used)
        if pk.limit_isa(level) != used:
            raise AssertionError(f"the pooling passes took level {pk.isa_level()}, the conv kernels {used}")
        return used

    return set_level


def _micro_kernel_paths():
    from rknnlite.backends.software.isa import ISA_LEVELS

    return [name for name, level in ISA_LEVELS.items() if level > 0]


@pytest.fixture(params=_micro_kernel_paths())
def micro_kernel_isa(request, set_kernel_isa):
    """Each micro-kernel path of this machine's architecture (``RKNNLITE_ISA`` name: avx512 and
    avx2 on x86-64, neon on aarch64), set for the test; a path this CPU cannot execute skips,
    saying so."""
    from rknnlite.backends.software.isa import ISA_LEVELS

    level = ISA_LEVELS[request.param]
    if set_kernel_isa(level) != level:
        pytest.skip(f"this CPU cannot execute the {request.param} micro-kernels")
    return request.param


def _kernel_paths():
    from rknnlite.backends.software.isa import ISA_LEVELS

    return list(ISA_LEVELS)


@pytest.fixture(params=_kernel_paths())
def kernel_isa(request, set_kernel_isa):
    """Each kernel path of this machine's architecture, the generic one included (``RKNNLITE_ISA``
    name: avx512, avx2 and generic on x86-64, neon and generic on aarch64), set for the test; a
    path this CPU cannot execute skips, saying so."""
    from rknnlite.backends.software.isa import ISA_LEVELS

    level = ISA_LEVELS[request.param]
    if set_kernel_isa(level) != level:
        pytest.skip(f"this CPU cannot execute the {request.param} path")
    return request.param


@pytest.fixture(scope="session")
def conv_relu_model():
    """``conv_relu_model(platform="rk3588", batch=1, channels=8, size=16, float_dtype="float32")``
    -> portable model bytes (Conv 3x3 + Relu; weights ``w`` (2C, C, 3, 3) and ``b`` (2C,))."""
    return _conv_relu_model


def _portable_model(nodes, inputs, outputs, constants=None, quant=None, **metadata) -> bytes:
    """Portable bytes of a hand-built graph: ``nodes`` (``Node`` list), ``inputs``/``outputs``
    (``TensorSpec`` lists; graph I/O names follow them), ``constants``/``quant`` as in
    ``Graph``, and ``build_metadata`` fields (``dynamic_shapes``, ``preprocess``, ...)."""
    from rknnlite.model.graph import Graph
    from rknnlite.model.metadata import build_metadata
    from rknnlite.model.portable import write_portable

    graph = Graph(list(nodes), [t.name for t in inputs], [t.name for t in outputs], constants or {}, quant or {})
    return write_portable(build_metadata(list(inputs), list(outputs), **metadata), graph)


@pytest.fixture(scope="session")
def portable_model():
    """``portable_model(nodes, inputs, outputs, constants=None, quant=None, **metadata)`` ->
    portable model bytes of a hand-built graph (see ``_portable_model``)."""
    return _portable_model


@pytest.fixture()
def run_unquantized_build(run_calibrated_build):
    """``run_unquantized_build(graph, feeds, platform="rk3588", opset=13)`` -> the outputs of an
    ONNX ``GraphProto`` (saved as a model of that opset) built by the toolkit without calibration
    (``build(do_quantization=False)``: float16, or a quantization-aware model's own grids) and
    run on ``feeds`` (NCHW) by its simulator."""
    def run(graph, feeds, platform="rk3588", opset=13):
        return run_calibrated_build(graph, None, feeds, platform, opset)

    return run


@pytest.fixture
def run_calibrated_build(tmp_path):
    """``run_calibrated_build(graph, samples, feeds, platform="rk3588", opset=13)``: as
    :func:`run_unquantized_build`, but an int8 build calibrated on ``samples`` (one array per
    dataset line, single-input models; ``None``: no calibration)."""
    def run(graph, samples, feeds, platform="rk3588", opset=13):
        import numpy as np
        import onnx
        from onnx import helper

        from rknnlite.toolkit import RKNN

        path = tmp_path / "model.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
        if samples is not None:
            for i, sample in enumerate(samples):
                np.save(tmp_path / f"sample{i}.npy", sample)
            (tmp_path / "dataset.txt").write_text("\n".join(str(tmp_path / f"sample{i}.npy") for i in range(len(samples))))
        rknn = RKNN()
        try:
            assert rknn.config(target_platform=platform) == 0
            assert rknn.load_onnx(str(path)) == 0
            if samples is None:
                assert rknn.build(do_quantization=False) == 0
            else:
                assert rknn.build(do_quantization=True, dataset=str(tmp_path / "dataset.txt")) == 0
            assert rknn.init_runtime() == 0
            return rknn.inference(list(feeds), data_format="nchw")
        finally:
            rknn.release()

    return run


def _context_models() -> dict:
    """Small hand-built models for the Context tests, by name (portable bytes)."""
    import numpy as np

    from rknnlite.model.graph import Node
    from rknnlite.model.metadata import Preprocess
    from rknnlite.model.spec import QuantParams, TensorSpec

    rng = np.random.default_rng(5)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    b = (rng.standard_normal(4) * 0.1).astype(np.float32)
    q_x, q_y = QuantParams("int8", (0.02,), (-5,)), QuantParams("int8", (0.06,), (3,))
    q_w = QuantParams("int8", tuple(float(s) for s in np.abs(w).reshape(4, -1).max(axis=1) / 127), (0,) * 4, axis=0)
    conv = [Node("Conv", "conv", ["x", "w", "b"], ["y"], {"pads": [1, 1, 1, 1]})]
    x_spec, y_spec = TensorSpec("x", (1, 3, 8, 8), "float32", "NCHW"), TensorSpec("y", (1, 4, 8, 8), "float32", "NCHW")
    add = [Node("Add", "add", ["a", "b"], ["y"])]
    return {
        # y = a + b on two (1, 4) float inputs
        "add": _portable_model(add, [TensorSpec("a", (1, 4), "float32"), TensorSpec("b", (1, 4), "float32")],
                               [TensorSpec("y", (1, 4), "float32")], float_dtype="float32"),
        # float16 Conv 3->4, 3x3 pad 1, with mean/std on its (1, 3, 8, 8) input
        "conv_fp16": _portable_model(conv, [x_spec], [y_spec], {"w": w, "b": b},
                                     preprocess=(Preprocess((10.0, 20.0, 30.0), (2.0, 4.0, 8.0)),)),
        # the same Conv quantized to int8 (x: scale 0.02 zp -5; y: scale 0.06 zp 3), mean/std on x
        "conv_i8": _portable_model(conv, [TensorSpec("x", (1, 3, 8, 8), "float32", "NCHW", q_x)],
                                   [TensorSpec("y", (1, 4, 8, 8), "float32", "NCHW", q_y)], {"w": w, "b": b},
                                   {"x": q_x, "y": q_y, "w": q_w}, quantization="int8",
                                   preprocess=(Preprocess((10.0, 20.0, 30.0), (2.0, 4.0, 8.0)),)),
        # Relu on 13 channels: its native input layout is NC1HWC2
        "relu13": _portable_model([Node("Relu", "relu", ["x"], ["y"])],
                                  [TensorSpec("x", (1, 13, 2, 2), "float32", "NCHW")],
                                  [TensorSpec("y", (1, 13, 2, 2), "float32", "NCHW")], float_dtype="float32"),
        # Identity on int64 and Not on bool: non-float inputs
        "int64_bool": _portable_model([Node("Identity", "id", ["i"], ["j"]), Node("Not", "not", ["m"], ["n"])],
                                      [TensorSpec("i", (2, 3), "int64"), TensorSpec("m", (4,), "bool")],
                                      [TensorSpec("j", (2, 3), "int64"), TensorSpec("n", (4,), "bool")]),
        # dynamic shapes: a + b with two shape sets, and a 1x1 Conv 3->2 + Relu with three
        "dyn_add": _portable_model(add, [TensorSpec("a", (1, -1), "float32"), TensorSpec("b", (1, -1), "float32")],
                                   [TensorSpec("y", (1, -1), "float32")], float_dtype="float32",
                                   dynamic_shapes=(((1, 4), (1, 4)), ((1, 8), (1, 8)))),
        "dyn_conv": _portable_model(
            [Node("Conv", "conv", ["x", "w"], ["c"]), Node("Relu", "relu", ["c"], ["y"])],
            [TensorSpec("x", (1, 3, -1, -1), "float32", "NCHW")], [TensorSpec("y", (1, 2, -1, -1), "float32", "NCHW")],
            {"w": (rng.standard_normal((2, 3, 1, 1))).astype(np.float32)}, float_dtype="float32",
            dynamic_shapes=(((1, 3, 8, 8),), ((1, 3, 4, 6),), ((1, 3, 16, 16),))),
    }


@pytest.fixture(scope="session")
def context_models() -> dict:
    """Small hand-built portable models by name: ``add``, ``conv_fp16``, ``conv_i8``, ``relu13``,
    ``int64_bool``, ``dyn_add``, ``dyn_conv`` (see ``_context_models``)."""
    return _context_models()


#: The vendor's conversion settings of the fixture models (fixtures README / manifest.json).
FIXTURE_CONFIG = {
    "convnet": dict(mean_values=[[0, 128, 64]], std_values=[[255, 64, 32]]),
    "add_mul": {},
    "dyn_conv": dict(mean_values=[[0, 128, 64]], std_values=[[255, 64, 32]],
                     dynamic_input=[[[1, 3, 32, 32]], [[1, 3, 16, 16]], [[1, 3, 24, 40]]]),
}


@pytest.fixture(scope="session")
def converted_fixture(vendor_fixtures, tmp_path_factory):
    """``converted_fixture(name, variant)`` -> path of fixture model ``name`` (convnet, add_mul,
    dyn_conv) converted by rknnlite.toolkit with the vendor's settings; ``variant`` "fp16" or
    "i8" (calibrated on the fixture's dataset).  Built once per session; skips without onnx."""
    pytest.importorskip("onnx", reason="converting the fixtures needs the onnx package (extra toolkit)")
    from rknnlite.toolkit import RKNN

    out_dir = tmp_path_factory.mktemp("converted_fixtures")
    built = {}

    def convert(name: str, variant: str = "fp16"):
        key = (name, variant)
        if key not in built:
            rk = RKNN()
            cwd = os.getcwd()
            os.chdir(vendor_fixtures)  # dataset paths are relative to it, as in the vendor toolkit
            try:
                assert rk.config(target_platform="rk3588", **FIXTURE_CONFIG[name]) == 0
                assert rk.load_onnx(str(vendor_fixtures / "onnx" / f"{name}.onnx")) == 0
                quant = variant == "i8"
                assert rk.build(do_quantization=quant, dataset=f"dataset_{name}.txt" if quant else None) == 0
                path = out_dir / f"{name}_{variant}.rknn"
                assert rk.export_rknn(str(path)) == 0
            finally:
                os.chdir(cwd)
                rk.release()
            built[key] = path
        return built[key]

    return convert


@pytest.fixture(scope="session")
def compile_c(tmp_path_factory):
    """``compile_c(sources, name, shared=False, args=())`` -> Path of the built program or
    ``lib<name>``-style shared library (``name`` is the file name), compiled with the
    system C compiler (``$CC``, ``cc`` or ``gcc``; ``compile_c.cc``) with ``cython/include`` on
    the include path, into a session temp dir.  Skips the test (with the reason) when there is no
    compiler; a compile error fails it, showing the compiler's output."""
    import shutil
    import subprocess

    cc = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if cc is None:
        pytest.skip("no C compiler found ($CC, cc, gcc, clang): the native ABI tests need one")
    out_dir = tmp_path_factory.mktemp("native")

    def build(sources, name: str, shared: bool = False, args=()) -> Path:
        out = out_dir / name
        cmd = [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", f"-I{REPO / 'cython' / 'include'}"]
        if shared:
            cmd += ["-shared", "-fPIC"]
        cmd += [str(s) for s in ([sources] if isinstance(sources, (str, Path)) else sources)]
        cmd += ["-o", str(out), *args]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.fail(f"compiling {name} failed:\n{' '.join(cmd)}\n{done.stdout}{done.stderr}")
        return out

    build.cc = cc  # the compiler, for tests that probe what it supports
    return build


# ---------------------------------------------------------------------------------------------
# The fake librknnrt (tests/fake_rknnrt): contract tests of the NPU binding without a board.

_FAKE_RKNNRT_DIR = REPO / "tests" / "fake_rknnrt"


def _build_fake_rknnrt(compile_c, name: str, defines=()) -> Path:
    sources = sorted(_FAKE_RKNNRT_DIR.glob("*.c"))
    return compile_c(sources, name, shared=True, args=("-fvisibility=hidden", *defines, "-lpthread", "-lm"))


@pytest.fixture(scope="session")
def fake_rknnrt(compile_c) -> Path:
    """Path of the fake ``librknnrt.so`` (runtime version 2.5.0 unless ``FAKE_RKNNRT_VERSION``
    says otherwise), compiled once per session; see ``tests/fake_rknnrt/README.md``.  Models for
    it come from ``tests/fake_model.py``.  Skips when there is no C compiler."""
    return _build_fake_rknnrt(compile_c, "librknnrt.so")


@pytest.fixture(scope="session")
def fake_rknnrt_old(compile_c) -> Path:
    """Path of the fake "old runtime" (``-DFAKE_OLD_RUNTIME``: version 1.4.0, no
    ``rknn_set_core_mask``, ``rknn_set_input_shapes`` or ``rknn_create_mem2``)."""
    return _build_fake_rknnrt(compile_c, "librknnrt-old.so", ("-DFAKE_OLD_RUNTIME",))


class FakeRknnrtLog:
    """The call log of a fake librknnrt loaded from ``path``.

    ``ctypes.CDLL`` of the same path shares the library the binding ``dlopen``\\ s, so this
    reads what the binding did.  Each call is one line ``"<function> key=value ... -> <ret>"``
    written when the call returns; vendor-style messages are lines ``"! E <text>"`` (also
    ``W``/``I``) written before the line of the call that emitted them.
    """

    def __init__(self, path):
        import ctypes

        self.path = Path(path)
        self.lib = ctypes.CDLL(str(path))
        self.lib.fake_rknnrt_log.restype = ctypes.c_uint64
        self.lib.fake_rknnrt_log.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        self.lib.fake_rknnrt_live.restype = ctypes.c_int
        self.lib.fake_rknnrt_live.argtypes = [ctypes.c_char_p]

    def text(self) -> str:
        import ctypes

        size = int(self.lib.fake_rknnrt_log(None, 0)) + 1
        buf = ctypes.create_string_buffer(size)
        self.lib.fake_rknnrt_log(buf, size)
        return buf.value.decode("utf-8", "replace")

    def lines(self) -> list:
        return self.text().splitlines()

    def calls(self, name=None) -> list:
        """Call lines (not messages), only those of function ``name`` when given."""
        out = [ln for ln in self.lines() if not ln.startswith("! ")]
        return [ln for ln in out if ln.split(" ", 1)[0] == name] if name else out

    def names(self) -> list:
        """The functions called, in order."""
        return [ln.split(" ", 1)[0] for ln in self.calls()]

    def messages(self, level=None) -> list:
        """Vendor-style messages (``"E text"``), only of ``level`` (E/W/I) when given."""
        out = [ln[2:] for ln in self.lines() if ln.startswith("! ")]
        return [m[2:] for m in out if m[0] == level] if level else out

    def clear(self) -> None:
        self.lib.fake_rknnrt_log_clear()

    def live(self, what: str) -> int:
        """Live objects: ``"contexts"``, ``"mems"``, ``"outputs"`` (unreleased outputs_get
        buffers) or ``"models"``."""
        return int(self.lib.fake_rknnrt_live(what.encode()))


@pytest.fixture
def fake_rknnrt_log(fake_rknnrt) -> FakeRknnrtLog:
    """The fake runtime's call log (cleared at the start of the test)."""
    log = FakeRknnrtLog(fake_rknnrt)
    log.clear()
    return log


@pytest.fixture
def fake_rknnrt_old_log(fake_rknnrt_old) -> FakeRknnrtLog:
    """The old-runtime fake's call log (cleared at the start of the test)."""
    log = FakeRknnrtLog(fake_rknnrt_old)
    log.clear()
    return log


@pytest.fixture
def fake_rknnrt_env(fake_rknnrt, monkeypatch) -> Path:
    """Points ``LIBRKNNRT_PATH`` at the fake runtime for this test; returns its path."""
    monkeypatch.setenv("LIBRKNNRT_PATH", str(fake_rknnrt))
    return fake_rknnrt


@pytest.fixture
def fake_npu(fake_rknnrt_env, fake_rknnrt_log, monkeypatch) -> FakeRknnrtLog:
    """The fake runtime as librknnrt for this test (version 2.3.2, any board); its call log.
    Skips when the binding is not compiled."""
    pytest.importorskip("rknnlite._native.rknnrt")
    monkeypatch.setenv("FAKE_RKNNRT_VERSION", "2.3.2")
    monkeypatch.delenv("FAKE_RKNNRT_PLATFORM", raising=False)
    return fake_rknnrt_log


# ---------------------------------------------------------------------------------------------
# Threads (tests/test_infer_queue.py, tests/test_pipeline.py): hand-made timeouts and a GIL probe.

#: seconds a threaded test waits for something that must happen; a hang fails the test instead
THREAD_LIMIT = 60.0


def _finishes(fn, limit: float = THREAD_LIMIT):
    """Run ``fn()`` on a daemon thread; fail unless it returned within ``limit`` seconds
    (a test timeout that never hangs the suite); return its result or re-raise its error."""
    import threading

    box = {}

    def body():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            box["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        pytest.fail(f"{getattr(fn, '__name__', fn)} did not finish within {limit} s (deadlock?)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.fixture(scope="session")
def finishes():
    """``finishes(fn, limit=60)`` -> ``fn()``'s result, run on a thread; the test fails
    (instead of hanging) when it does not return within ``limit`` seconds."""
    return _finishes


class GilProbe:
    """Counts how far a Python "ticker" thread gets while the middle op of a model runs.

    Models ``x -> cstBegin -> middle -> cstEnd -> y`` (x: 1x64x128x128 float32) whose
    Python marker ops record the ticker's count: ``conv`` has a big Conv (a compiled kernel)
    in the middle; ``hold`` has ``cstHold``, a Python busy loop that keeps the GIL for 0.1 s,
    as the control.  :meth:`measure` runs with a 1 s GIL switch interval (restored after), so
    a thread holding the GIL keeps it until it releases it itself: the ticker (which yields
    the GIL at every step) advances only while the GIL is really free.
    """

    def __init__(self, portable_model):
        import threading
        import time

        import numpy as np

        from rknnlite.model.graph import Node
        from rknnlite.model.spec import TensorSpec

        self.n = 0
        self.marks: dict = {}
        probe = self

        class Begin:
            op_type = "cstBegin"

            def compute(self, node, inputs):
                probe.marks["begin"] = probe.n
                return [inputs[0]]

        class End:
            op_type = "cstEnd"

            def compute(self, node, inputs):
                probe.marks["end"] = probe.n
                return [inputs[0]]

        class Hold:
            op_type = "cstHold"

            def compute(self, node, inputs):
                t = time.perf_counter() + 0.1
                while time.perf_counter() < t:
                    pass
                return [inputs[0]]

        c, s = 64, 128
        w = (np.random.default_rng(0).standard_normal((c, c, 3, 3)) * 0.05).astype(np.float32)

        def model(middle):
            nodes = [Node("cstBegin", "begin", ["x"], ["a"]), middle, Node("cstEnd", "end", ["m"], ["y"])]
            return portable_model(nodes, [TensorSpec("x", (1, c, s, s), "float32", "NCHW")],
                                  [TensorSpec("y", (1, c, s, s), "float32", "NCHW")], {"w": w},
                                  float_dtype="float32")

        self.ops = [Begin(), End(), Hold()]
        self.conv = model(Node("Conv", "conv", ["a", "w"], ["m"], {"pads": [1, 1, 1, 1]}))
        self.hold = model(Node("cstHold", "hold", ["a"], ["m"]))
        self.x = np.random.default_rng(1).standard_normal((1, c, s, s)).astype(np.float32)
        self._threading = threading
        self._time = time

    def measure(self, run) -> tuple:
        """``(advance during the Conv, advance during cstHold)``: ``run(model, ops, x)`` must
        run ``x`` once through a context made from ``model`` with ``custom_ops=ops``."""
        import sys

        stop = []

        def tick():
            while not stop:
                self.n += 1
                self._time.sleep(0)  # releases the GIL at every step

        ticker = self._threading.Thread(target=tick, daemon=True)
        old = sys.getswitchinterval()
        sys.setswitchinterval(1.0)
        ticker.start()
        try:
            advances = []
            # The Conv's free-GIL window is a few milliseconds: on a loaded machine the ticker
            # may not be scheduled within one of them, so it gets three tries (the best counts).
            # A kernel that holds the GIL gives 0 on every try.
            for model, tries in ((self.conv, 3), (self.hold, 1)):
                best = 0
                for _ in range(tries):
                    self.marks.clear()
                    _finishes(lambda: run(model, self.ops, self.x))
                    best = max(best, self.marks["end"] - self.marks["begin"])
                    if best > 0:
                        break
                advances.append(best)
        finally:
            stop.append(True)
            ticker.join(THREAD_LIMIT)
            sys.setswitchinterval(old)
        return tuple(advances)


@pytest.fixture
def gil_probe(portable_model) -> GilProbe:
    """A :class:`GilProbe`: ``gil_probe.measure(run)`` -> (ticker advance while a Conv kernel
    ran, advance while a GIL-holding Python op ran)."""
    return GilProbe(portable_model)


@pytest.fixture
def toolkit_log(caplog):
    """``caplog`` capturing everything the toolkit (``rknnlite.toolkit``) logs, debug and up."""
    caplog.set_level(logging.DEBUG, logger="rknnlite.toolkit")
    return caplog
