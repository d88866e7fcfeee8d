"""Attribute parity between twins (issue 20): a portable model reports what librknnrt reports
for the vendor file built from the same ONNX with the same config, and one application runs
unchanged on both.

The vendor twins are RKNN-Toolkit2 2.5.0 builds committed in ``tests/data/vendor`` (cases
``convnet``, ``twoin``, ``dynconv`` and their ``_rk3566`` copies of
``tools/vendor_corpus/models.py``); the context on a vendor file reports its attributes as
librknnrt does (checked against the npu backend over the fake librknnrt in
test_vendor_offboard.py).  The portable twins are built here by ``rknnlite.toolkit.RKNN``
from the same ONNX file, config (target platform, mean/std, quantization settings,
``dynamic_input``) and calibration samples.

Every field of every attribute and every query answer is compared.  Values that two
different quantizers legitimately choose differently (an int8 tensor's scale and zero
point; the weight bytes in ``mem_size``) are compared by kind, not by value: both
affine-quantized with a positive scale and an int8 zero point; both with weights.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import rknnlite
from rknnlite import QntType, QueryCmd, RKNNError, TensorFormat, TensorType
from rknnlite.tensors.perf import MemSize

from corpus import CORPUS

pytest.importorskip("onnx", reason="building the portable twins needs the onnx package (extra toolkit)")

MANIFEST = json.loads((CORPUS / "manifest.json").read_text())["files"]
CALIB_SEED, CALIB_SAMPLES = 4321, 4  # tools/vendor_corpus/build_corpus.py's calibration
TWINS = [f"{model}{platform}_{variant}" for model in ("convnet", "twoin", "dynconv")
         for platform in ("", "_rk3566") for variant in ("fp16", "i8")]
#: cosine similarity the outputs of the two twins reach on the same data, per variant: both
#: compute in float16, or both in int8 with their own quantizer's scales
FIDELITY = {"fp16": 0.9999, "i8": 0.99}


@pytest.fixture(scope="module")
def twin(tmp_path_factory, corpus_cases):
    """``twin(stem)`` -> (vendor file path, portable file path), the portable one built once."""
    from rknnlite.toolkit import RKNN

    cases = corpus_cases
    out = tmp_path_factory.mktemp("twins")
    built = {}

    def build(stem: str):
        if stem not in built:
            entry = MANIFEST[stem]
            case = cases[entry["model"]]
            dataset = None
            if entry["build"]["do_quantization"]:
                lines = []
                for s in range(CALIB_SAMPLES):
                    paths = []
                    for k, x in enumerate(case.make_inputs(CALIB_SEED + s)):
                        np.save(out / f"{stem}_c{s}_in{k}.npy", x)
                        paths.append(str(out / f"{stem}_c{s}_in{k}.npy"))
                    lines.append(" ".join(paths))
                dataset = out / f"{stem}_dataset.txt"
                dataset.write_text("\n".join(lines) + "\n")
            rk = RKNN()
            try:
                assert rk.config(**entry["config"]) == 0
                assert rk.load_onnx(str(CORPUS / entry["onnx"])) == 0
                assert rk.build(do_quantization=entry["build"]["do_quantization"],
                                dataset=str(dataset) if dataset else None) == 0
                assert rk.export_rknn(str(out / f"{stem}.rknn")) == 0
            finally:
                rk.release()
            built[stem] = (str(CORPUS / entry["file"]), str(out / f"{stem}.rknn"))
        return built[stem]

    return build


def _assert_same_attr(vendor, portable, what):
    v, p = vendor.to_dict(), portable.to_dict()
    if v["qnt_type"] == QntType.AFFINE_ASYMMETRIC.name:  # by kind: each quantizer picks its own
        for d in (v, p):
            assert d["scale"] > 0 and -128 <= d["zp"] <= 127, (what, d)
            d["scale"], d["zp"] = "scale > 0", "int8 zero point"
    assert p == v, what


def _assert_same_answer(vendor, portable, what):
    if isinstance(vendor, list):
        assert isinstance(portable, list) and len(portable) == len(vendor), what
        for k, (v, p) in enumerate(zip(vendor, portable)):
            _assert_same_answer(v, p, f"{what}[{k}]")
    elif isinstance(vendor, rknnlite.TensorAttr):
        _assert_same_attr(vendor, portable, what)
    elif isinstance(vendor, MemSize):  # by kind: the weight bytes are each build's own
        v, p = vendor.to_dict(), portable.to_dict()
        assert set(v) == set(p) and v["total_weight_size"] > 0 and p["total_weight_size"] > 0, what
    else:
        assert portable == vendor, what


def _answer(ctx, cmd):
    try:
        return ctx.query(cmd)
    except RKNNError as e:  # a refusal must be the same refusal
        return type(e)


@pytest.mark.parametrize("stem", TWINS)
def test_twins_report_the_same_attributes_and_queries(twin, stem):
    vendor_path, portable_path = twin(stem)
    with rknnlite.Context(vendor_path, backend="software") as vendor, rknnlite.Context(portable_path) as portable:
        for kind in ("inputs", "outputs", "native_inputs", "native_outputs", "current_inputs", "current_outputs",
                     "current_native_inputs", "current_native_outputs"):
            _assert_same_answer(getattr(vendor, kind), getattr(portable, kind), kind)
        for cmd in QueryCmd:
            v, p = _answer(vendor, cmd), _answer(portable, cmd)
            if cmd == QueryCmd.PERF_RUN and isinstance(v, int):  # a duration: by kind
                assert isinstance(p, int) and p > 0 and v > 0
            else:
                _assert_same_answer(v, p, cmd.name)
        assert portable.custom_string == vendor.custom_string
        image = portable.inputs[0]
        assert (image.fmt, image.type) == (TensorFormat.NHWC, vendor.inputs[0].type)  # the 3-channel input
        if stem.startswith("twoin"):  # the 16-channel input stays NCHW on both
            assert portable.inputs[1].fmt == TensorFormat.NCHW and portable.inputs[1].dims == (1, 16, 16, 16)
        if stem.startswith("dynconv"):  # the shape sets in the order the file keeps them, in NHWC
            (ranges,) = portable.input_ranges()
            assert list(ranges.dyn_range) == [(1, 12, 12, 3), (1, 8, 16, 3), (1, 8, 8, 3)]
            for shape in ranges.dyn_range:
                portable.set_input_shapes([shape])
                vendor.set_input_shapes([shape])
                for kind in ("current_inputs", "current_outputs", "current_native_inputs", "current_native_outputs"):
                    _assert_same_answer(getattr(vendor, kind), getattr(portable, kind), f"{kind} at {shape}")


def application(ctx, frames):
    """What an application written for a board does, unchanged on either twin: sizes from the
    attributes (NHWC image input, as the Rockchip C demos read them), ``run`` with NHWC
    frames, then a zero-copy loop binding the image input as UINT8 NHWC (its native attribute,
    rows ``w_stride`` apart) and the others as FLOAT32 NHWC (``NATIVE_NHWC_INPUT_ATTR``).  Returns the outputs
    of the last frame from both paths."""
    image, *others = ctx.inputs
    if image.dims[1] == -1:  # dynamic: pick the smallest shape set, as given by the runtime
        shapes = [r.dyn_range[-1] for r in ctx.input_ranges()]
        ctx.set_input_shapes(shapes)
        image, *others = ctx.current_inputs
    n, h, w, c = image.dims
    extra = [np.linspace(-1, 1, a.n_elems, dtype=np.float32).reshape(a.dims) for a in others]
    copied = None
    for frame in frames(h, w, c):
        copied = ctx.run([frame] + extra)
    in_attr = ctx.current_native_inputs[0].replace(type=TensorType.UINT8)  # NHWC, rows w_stride apart
    mems = [ctx.create_mem(in_attr.size_with_stride)]
    ctx.set_io_mem(mems[0], in_attr)
    for a, x in zip(others, extra):  # zero-copy inputs are NHWC ("npu only support NHWC in zero copy mode")
        a = ctx.query(QueryCmd.NATIVE_NHWC_INPUT_ATTR, a.index).replace(type=TensorType.FLOAT32)
        mems.append(ctx.create_mem(a.size_with_stride))
        ctx.set_io_mem(mems[-1], a)
        mems[-1].view(a)[...] = x.transpose(0, 2, 3, 1)
    outs = []
    for a in ctx.current_outputs:
        a = a.replace(type=TensorType.FLOAT32)
        mems.append(ctx.create_mem(a.size_with_stride))
        ctx.set_io_mem(mems[-1], a)
        outs.append(mems[-1].array(np.float32, a.dims))
    view = mems[0].view(in_attr)
    for frame in frames(h, w, c):
        view[...] = frame
        ctx.run_bound()
    return copied, [o.copy() for o in outs]


def camera(h, w, c, count=3):
    ramp = np.add.outer(np.arange(h), np.arange(w)).astype(np.uint16)
    for k in range(count):
        yield np.stack([(ramp * (ch + 1) + 37 * k) % 256 for ch in range(c)], axis=-1).astype(np.uint8)[None]


def _cos(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("stem", ["convnet_fp16", "convnet_i8", "twoin_rk3566_fp16", "twoin_i8", "dynconv_fp16",
                                  "dynconv_rk3566_i8"])
def test_one_application_runs_unchanged_on_both_twins(twin, stem):
    vendor_path, portable_path = twin(stem)
    with rknnlite.Context(vendor_path, backend="software") as vendor, rknnlite.Context(portable_path) as portable:
        v_copied, v_bound = application(vendor, camera)
        p_copied, p_bound = application(portable, camera)
    for v, p, vb, pb in zip(v_copied, p_copied, v_bound, p_bound):
        np.testing.assert_array_equal(vb, v)  # zero-copy and copying paths agree on each twin
        np.testing.assert_array_equal(pb, p)
        assert p.shape == v.shape
        assert _cos(p, v) >= FIDELITY[stem.rsplit("_", 1)[1]]
