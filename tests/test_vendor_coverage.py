"""tools/vendor_corpus/coverage.py's parts that need no vendor toolkit: the refusal reasons, the
build errors, the Markdown table, and the user's view (validation on) of a corpus file."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from corpus import CORPUS as VENDOR
from corpus import corpus_arrays

TOOLS = Path(__file__).resolve().parent.parent / "tools" / "vendor_corpus"


@pytest.fixture(scope="module")
def coverage():
    spec = importlib.util.spec_from_file_location("_vendor_corpus_coverage", TOOLS / "coverage.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up there
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def test_refusal_reason_of_the_validated_table(coverage):
    label = "/tmp/x/resnet18_like_i8_rk3566_tk250.rknn"
    message = (f"{label}: target platform 'rk3566' was not validated (validated: rk3588, rv1126b); its off-board "
               "results were never checked against the vendor simulator, so it is refused rather than risk wrong "
               "outputs (docs/vendor-offboard.md lists what is validated); set RKNNLITE_VENDOR_UNVALIDATED=1 to "
               "run it anyway")
    assert coverage.refusal_reason(message, label) == "target platform 'rk3566' was not validated"
    # without the label given, a leading file name is dropped all the same
    assert coverage.refusal_reason(message) == "target platform 'rk3566' was not validated"
    ops = ("a.rknn: vendor op types exGelu, exNorm in int8 rk3588 files from RKNN-Toolkit2 2.3.2 were not "
           "validated (validated there: Conv, Add (x)); its off-board results ...")
    assert coverage.refusal_reason(ops) == ("vendor op types exGelu, exNorm in int8 rk3588 files from "
                                            "RKNN-Toolkit2 2.3.2 were not validated")


def test_refusal_reason_of_the_lowering(coverage):
    message = ("m.rknn: vendor op type 'exFoo' (node 3 of subgraph 0) cannot run off-board; unsupported here: exFoo; "
               "register a custom op; supported: Add, Conv")
    assert coverage.refusal_reason(message) == "vendor op type 'exFoo' (node 3 of subgraph 0) cannot run off-board"
    assert coverage.refusal_reason("m.rknn: format 0x1003 files (rv1106 container) keep their graph in a section that "
                                   "could not be read: x; such a file cannot be run off-board") == \
        "format 0x1003 files (rv1106 container) keep their graph in a section that could not be read: x"


def test_build_error_takes_the_toolkit_error_line(coverage):
    exc = RuntimeError("x_fp16_rv1106_tk250: build returned -1\nI rknn building ...")
    console = "\x1b[1;33mW\x1b[0m warn\n\x1b[1;31mE\x1b[0m \x1b[1;31mbuild: rv1106 not support fp16!\x1b[0m\n"
    assert coverage.build_error(exc, console) == "build returned -1: build: rv1106 not support fp16!"
    assert coverage.build_error(RuntimeError("s: export_rknn returned -1")) == "export_rknn returned -1"
    raised = RuntimeError("Traceback (most recent call last):\n  File ...\nE config: Invalid target_platform 'x'!")
    assert coverage.build_error(raised) == "config: Invalid target_platform 'x'!"
    assert coverage.short_reason(coverage.build_error(raised)) == "the toolkit does not know the platform"
    assert coverage.toolkit_tag("2.5.0") == "250" and coverage.toolkit_tag("2.3.2+b1") == "232"
    assert coverage.stem("unet_like", "i8", "rk3562", "232") == "unet_like_i8_rk3562_tk232"


def test_short_reasons_group_the_refusals(coverage):
    short = coverage.short_reason
    assert short("vendor op types ArgMax, Concat, ConvTranspose, MaxPool, Resize in fp16 rk3562 files from "
                 "RKNN-Toolkit2 2.5.0 were not validated") == "ops not validated: ArgMax, Concat, ConvTranspose +2"
    assert short("vendor op type Split in int8 rk3566 files from RKNN-Toolkit2 2.5.0 was not validated") == \
        "ops not validated: Split"
    assert short("node 1 (ConvClip 'Conv:Conv4'): DPU register OUT_CVT_SHIFT (0x4088) = 0x80000000 sets bits "
                 "outside 0x3f, whose meaning is unknown") == "OUT_CVT_SHIFT bit 31"
    assert short("node 3 (ConvClip 'Conv:Conv20') weight 'w17': weight tiles [(1, 1, 3, 3, 1, 32)] hold 288 bytes "
                 "but the tensor's NPU size is 576") == "weight tiles of another size"
    assert short("format 0x1004 files (rv1106 container) keep their graph in a section that could not be read: its "
                 "section table (...) ends at 0x1e4") == "rv1106 container, graph section not located"
    assert short("vendor op types ConvClip, MaxPool in an rv1106/rv1103 container cannot run off-board: its graph "
                 "stores no attributes") == "rv1106 container, registers not decoded: ConvClip, MaxPool"
    assert short("build returned -1: build: Current target_platform(rv1103) not support do_quantization = False!") \
        == "the toolkit builds no fp16 file"
    assert short("RKNN-Toolkit2 2.3.2 was not validated for rk3562") == "toolkit release not validated for the platform"
    assert short("node 9 (Foo 'x'): something new") == "Foo: something new"
    assert short("node 1 (ConvExSwish 'Conv:Conv4'): ConvExSwish in an int8 rk3562 file: the registers of its fused "
                 "Swish were not decoded (plain, Relu and residual AddRelu convs were)") == \
        "ConvExSwish: rk3562 int8 fused Swish not decoded"


def test_markdown_table(coverage):
    O = coverage.Outcome
    rk3566 = "vendor op types MaxPool, Reshape in fp16 rk3566 files from RKNN-Toolkit2 2.5.0 were not validated"
    found = [
        O("resnet18_like", "fp16", "rk3588", "2.5.0", "runs", "max |diff| 0.0002 (bound 0.001)", True),
        O("resnet18_like", "i8", "rk3588", "2.5.0", "runs", "cos 0.9999500, 99.90 % within 1 step", True),
        O("resnet18_like", "fp16", "rk3566", "2.5.0", "refused", rk3566, unvalidated="meets the bounds, cos 1"),
        O("resnet18_like", "i8", "rk3566", "2.5.0", "refused", rk3566.replace("fp16", "int8")),
        O("resnet18_like", "fp16", "rv1106", "2.5.0", "not built", "build returned -1: no fp16"),
        O("resnet18_like", "i8", "rv1106", "2.5.0", "runs", "cos 0.99", False),
        O("resnet18_like", "fp16", "rk3588", "2.3.2", "refused", "RKNN-Toolkit2 2.3.2 was not validated for rk3588"),
    ]
    lines = coverage.markdown(found).splitlines()
    assert lines[0] == "RKNN-Toolkit2 2.5.0:"  # the newest release first
    assert lines[2] == "| architecture | precision | rk3588 | rk3566 | rv1106 |"
    assert lines[4] == ("| resnet18_like | fp16 | runs (max\\|d\\| 0.0002, bound 0.001) | refused: ops not "
                        "validated: MaxPool, Reshape; unvalidated: meets the bounds, cos 1 | not built: build "
                        "returned -1: no fp16 |")
    assert lines[5] == ("| resnet18_like | int8 | runs (cos 0.9999500, 99.90 % in 1 step) | refused: ops not "
                        "validated: MaxPool, Reshape | runs, outside the bounds (cos 0.99) |")
    assert lines[7] == "RKNN-Toolkit2 2.3.2:"
    assert lines[11] == "| resnet18_like | fp16 | refused: toolkit release not validated for the platform |"
    assert lines[13] == "Why (files per toolkit release; one full reason):"
    assert lines[15] == f"- refused: ops not validated: 2 with 2.5.0; e.g. resnet18_like fp16 rk3566 (2.5.0): {rk3566}"
    assert "- not built: build returned -1: no fp16: 1 with 2.5.0; e.g. resnet18_like fp16 rv1106 (2.5.0): " \
           "build returned -1: no fp16" in lines
    assert "- refused: toolkit release not validated for the platform: 1 with 2.3.2; e.g. resnet18_like fp16 " \
           "rk3588 (2.3.2): RKNN-Toolkit2 2.3.2 was not validated for rk3588" in lines


def test_outcomes_of_a_validated_corpus_file(coverage, tmp_path, monkeypatch):
    """A validated file (rk3588, 2.5.0) runs with validation on and meets the bounds."""
    monkeypatch.delenv("RKNNLITE_VENDOR_UNVALIDATED", raising=False)
    shutil.copy(VENDOR / "add_relu_fp16.rknn", tmp_path / "add_relu_fp16_rk3588_tk250.rknn")
    # coverage's builds keep their inputs beside the outputs (the corpus's are regenerated)
    np.savez(tmp_path / "add_relu_fp16_rk3588_tk250.npz", **corpus_arrays("add_relu_fp16"))
    (tmp_path / coverage.MANIFEST).write_text(json.dumps({
        "add_relu_fp16_rk3588_tk250": {"case": "add_relu", "variant": "fp16", "platform": "rk3588",
                                       "toolkit": "2.5.0", "built": True},
        "add_relu_fp16_rv1106_tk250": {"case": "add_relu", "variant": "fp16", "platform": "rv1106",
                                       "toolkit": "2.5.0", "built": False, "error": "build returned -1"}}))
    found = {o.platform: o for o in coverage.outcomes(str(tmp_path))}
    assert found["rk3588"].status == "runs" and found["rk3588"].ok, found["rk3588"]
    assert found["rv1106"].status == "not built"
    assert "| add_relu | fp16 | runs (max\\|d\\| 0, bound " in coverage.markdown(list(found.values()))
