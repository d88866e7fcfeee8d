"""toolkit.build: ``RKNN.build`` is a pipeline of named steps that the facade only checks
arguments for and translates into 0 / -1; the toolkit has no import cycle through the facade."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper  # noqa: E402
from onnx_builders import init, model, vi  # noqa: E402

import rknnlite  # noqa: E402
import rknnlite.toolkit  # noqa: E402
from rknnlite import ModelInvalidError  # noqa: E402
from rknnlite.toolkit import RKNN, build  # noqa: E402
from toolkit_logs import errors  # noqa: E402

ORDER = ["optimize", "prune", "custom_ops", "shape_sets", "quantize", "float16", "sparsity", "batch", "write",
         "load_check"]


def conv_model():
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return model(nodes, [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 8, 8])],
                 [init("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
                  init("b", rng.standard_normal(4).astype(np.float32))])


def loaded(**config) -> RKNN:
    r = RKNN()
    assert r.config(target_platform="rk3588", **config) == 0
    assert r.load_onnx(conv_model().SerializeToString()) == 0
    return r


def test_build_runs_the_named_steps_in_order(toolkit_log):
    assert list(build.STEP_NAMES) == ORDER
    r = loaded()
    try:
        assert r.build(rknn_batch_size=2) == 0
    finally:
        r.release()
    steps = [rec.getMessage()[len("build step: "):] for rec in toolkit_log.records
             if rec.getMessage().startswith("build step: ")]
    assert steps == ORDER


def test_do_quantization_not_given_follows_the_vendors_default(tmp_path, toolkit_log):
    """RKNN-Toolkit2's build() quantizes by default: build(dataset=...) is an int8 build there (it
    was a float one here, the dataset 'ignored'); build() without a dataset, which the vendor
    refuses, builds float here with a warning."""
    np.save(tmp_path / "a.npy", np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32))
    (tmp_path / "ds.txt").write_text("a.npy\n")
    built = {}
    for name, kwargs in (("dataset", dict(dataset=str(tmp_path / "ds.txt"))), ("none", {}),
                         ("float", dict(do_quantization=False))):
        r = loaded()
        try:
            toolkit_log.clear()
            assert r.build(**kwargs) == 0
            assert r.export_rknn(str(tmp_path / f"{name}.rknn")) == 0
            built[name] = [rec.getMessage() for rec in toolkit_log.records if rec.levelname == "WARNING"]
        finally:
            r.release()
    with rknnlite.Context(str(tmp_path / "dataset.rknn")) as ctx:
        assert ctx.outputs[0].qnt_type.name == "AFFINE_ASYMMETRIC"  # int8
    for name in ("none", "float"):
        with rknnlite.Context(str(tmp_path / f"{name}.rknn")) as ctx:
            assert ctx.outputs[0].qnt_type.name == "NONE"
    assert any("do_quantization is not given and there is no dataset" in w for w in built["none"])
    assert not any("do_quantization" in w for w in built["float"] + built["dataset"])


def test_the_facade_only_hands_the_job_to_the_pipeline():
    """``prepare`` + ``run_build`` with the object's configuration give RKNN.build's bytes."""
    r = loaded(mean_values=[[1, 2, 3]], std_values=[[2, 2, 2]])
    try:
        assert r.build(rknn_batch_size=2) == 0
        job = build.prepare(r._imported, r._config, quantize=False, dataset=None, hybrid=None, batch=2,
                            auto_hybrid=False, custom_ops={}, log=logging.getLogger("rknnlite.toolkit"),
                            verbose=False, quant_problem=lambda: None)
        assert job.preprocess == [([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])]
        assert build.run_build(job).data == r._model_bytes
        assert job.steps_run == ORDER
    finally:
        r.release()


def test_a_failing_step_stops_the_build_and_is_logged(monkeypatch, caplog):
    ran = []

    def refuse(job):
        raise ModelInvalidError("the quantize step refuses this graph", op="build")

    steps = [(name, refuse if name == "quantize" else (lambda job, f=f, name=name: (ran.append(name), f(job))))
             for name, f in build.STEPS]
    monkeypatch.setattr(build, "STEPS", tuple(steps))
    r = loaded()
    try:
        with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
            assert r.build() == -1
        assert ran == ORDER[:ORDER.index("quantize")]
        assert "build: the quantize step refuses this graph" in errors(caplog)
        assert r._model_bytes is None
    finally:
        r.release()


def test_bad_preparation_is_refused_before_any_step(toolkit_log):
    r = loaded(mean_values=[[1, 2]], std_values=[[1, 1]])
    try:
        assert r.build() == -1
    finally:
        r.release()
    assert any("mean_values/std_values for input 0" in m for m in errors(toolkit_log))
    assert not any(rec.getMessage().startswith("build step: ") for rec in toolkit_log.records)


def _toolkit_imports() -> dict:
    """``{module: {toolkit modules it imports}}`` over rknnlite/toolkit (relative imports,
    function-level ones included), names relative to the package (``"loaders.tflite"``)."""
    folder = Path(rknnlite.toolkit.__file__).parent

    def is_module(parts):
        return bool(parts) and (folder.joinpath(*parts).with_suffix(".py").exists()
                                or folder.joinpath(*parts, "__init__.py").exists())

    graph = {}
    for path in folder.rglob("*.py"):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        package = parts[:-1]
        name = ".".join(p for p in parts if p != "__init__")
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level == 0 or node.level - 1 > len(package):
                continue  # absolute, or above the toolkit package
            stem = package[:len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            for alias in node.names:
                found = next((c for c in (stem + [alias.name], stem) if is_module(c)), None)
                if found:
                    targets.add(".".join(found))
        graph[name] = targets - {name}
    return graph


def _reachable(graph: dict, start: str) -> set:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_import_cycle_in_the_toolkit():
    """No toolkit module imports itself back through others (sparsity.py imported the RKNN
    facade, which imports sparsity, for its software runner)."""
    graph = _toolkit_imports()
    assert {"sparsity", "build"} <= graph["rknn"] and "build" in _reachable(graph, "rknn")
    assert [name for name in sorted(graph) if name in _reachable(graph, name)] == []


def test_a_model_its_kernels_refuse_fails_the_build_not_the_first_load(toolkit_log):
    # an Unsqueeze naming axis 1 twice: the float build wrote a file init_runtime then refused
    axes = init("axes", np.array([1, 1], np.int64))
    m = model([helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="twice")], [vi("x", [1, 3, 8, 8])],
              [vi("y", None)], [axes])
    r = RKNN()
    try:
        assert r.config(target_platform="rk3588") == 0
        assert r.load_onnx(m.SerializeToString()) == 0
        assert r.build(do_quantization=False) == -1
    finally:
        r.release()
    logged = [rec.getMessage() for rec in toolkit_log.records if rec.levelname == "ERROR"]
    assert any("build:" in e and "'twice' (Unsqueeze)" in e and "duplicates" in e for e in logged), logged
