"""Custom operators in vendor files (issue 19 point 5).

``cst_softmax_{fp16,i8}`` (tests/data/vendor) were built by RKNN-Toolkit2 2.5.0 with a custom
operator registered (``models.CstChannelSoftmax``, softmax over its ``axis`` attribute) between
two convs.  Off-board the file runs once the op is registered, the two ways librknnrt offers:
``Context(file, custom_ops=[obj])`` with RKNN-Toolkit2's class form, or a ``librkcst_<op>.so``
plugin (the rknn_custom_op C ABI) found in ``RKNNLITE_OP_PLUGIN_DIR``.  Without either the file
is refused at load, naming the op and both ways.
"""

from __future__ import annotations

import numpy as np
import pytest

import rknnlite
from rknnlite.errors import ModelInvalidError
from rknnlite.backends.plugins import PLUGIN_DIR_ENV

from corpus import CORPUS, MODELS, REPO, corpus_arrays

PLUGIN_SOURCE = REPO / "tests" / "native" / "cst_softmax_plugin.c"
OP = MODELS.CstChannelSoftmax


def _io(variant):
    data = corpus_arrays(f"cst_softmax_{variant}")
    return str(CORPUS / f"cst_softmax_{variant}.rknn"), data["in0"], data["out0"]


def _check(ctx, x, sim):
    y = np.asarray(ctx.run([x], data_format="nchw")[0], np.float64)
    attr = ctx.outputs[0]
    if attr.type == rknnlite.TensorType.INT8:
        assert np.abs(y - sim).max() <= attr.scale * 1.0001  # one int8 step at most
    else:
        assert np.abs(y - sim).max() <= 1e-3 * max(1.0, np.abs(sim).max())


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_a_python_custom_op_runs_the_vendor_files_node(variant):
    path, x, sim = _io(variant)
    with rknnlite.Context(path, backend="software", custom_ops=[OP()]) as ctx:
        _check(ctx, x, sim)


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_without_a_registration_the_file_is_refused_naming_both_ways(variant, monkeypatch, tmp_path):
    monkeypatch.setenv(PLUGIN_DIR_ENV, str(tmp_path))  # an empty plugin dir
    path, _, _ = _io(variant)
    with pytest.raises(ModelInvalidError) as info:
        rknnlite.Context(path, backend="software")
    message = str(info.value)
    for part in ("cstChannelSoftmax", "custom_ops=[obj]", "librkcst_cstChannelSoftmax.so", PLUGIN_DIR_ENV):
        assert part in message


def test_a_plugin_in_the_plugin_dir_runs_it(compile_c, monkeypatch):
    from rknnlite._native import custom_op_plugin

    custom_op_plugin.export_symbols()
    lib = compile_c([PLUGIN_SOURCE], "librkcst_cstChannelSoftmax.so", shared=True,
                    args=['-DCST_OP_TYPE="cstChannelSoftmax"', "-lm"])
    monkeypatch.setenv(PLUGIN_DIR_ENV, str(lib.parent))
    for variant in ("fp16", "i8"):
        path, x, sim = _io(variant)
        with rknnlite.Context(path, backend="software") as ctx:
            _check(ctx, x, sim)


def test_the_attributes_reach_the_operator():
    seen = []

    class Recording(OP):
        def compute(self, node, inputs):
            from rknnlite.toolkit.custom_op import get_node_attr

            seen.append((get_node_attr(node, "axis"), inputs[0].shape, inputs[0].dtype))
            return super().compute(node, inputs)

    path, x, _ = _io("fp16")
    with rknnlite.Context(path, backend="software", custom_ops=[Recording()]) as ctx:
        ctx.run([x], data_format="nchw")
    assert seen == [(1, (1, 8, 16, 16), np.float32)]


def test_inspect_names_the_custom_op_to_register(capsys, monkeypatch, tmp_path):
    from rknnlite.cli import main

    monkeypatch.setenv(PLUGIN_DIR_ENV, str(tmp_path))
    assert main(["inspect", str(CORPUS / "cst_softmax_fp16.rknn")]) == 0
    out = capsys.readouterr().out
    assert "cstChannelSoftmax" in out and "NOT supported" in out and "custom_ops=[obj]" in out
