"""The vendor ``.rknn`` corpus in ``tests/data/vendor`` is well-formed and self-consistent.

The corpus is built by ``tools/vendor_corpus/build_corpus.py`` with Rockchip's
RKNN-Toolkit2 (in its own venv); these tests need only the project and numpy:

* every ``.rknn`` parses with the project's reader and its I/O (names, shapes,
  NPU dtypes, target platform) matches ``manifest.json``;
* every ``.npz`` holds the simulator outputs with the recorded shapes, and
  their recorded agreement with onnxruntime holds (the inputs are not stored:
  the recorded generator and seed give them; nor are onnxruntime's outputs);
* the manifest and the directory list the same files, and the corpus stays small.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from rknnlite.model.loader import ROCKCHIP, load_model

from corpus import CORPUS, MODELS, corpus_arrays, inputs_of, onnxruntime_outputs

#: the main 2.5.0 corpus, the builds of 2.2.0, 2.3.0 and 2.3.2, and per-platform cases: every file
#: validates a (platform, toolkit, op) combination.  What the corpus costs a clone is what git stores:
#: each file zlib-compressed.  The .rknn files are mostly padding (zeros between aligned sections) and
#: compress to about a quarter, so the bound is on that compressed size; at 21 MiB on disk the corpus
#: cost 7.7 MiB; at 40.8 MiB (2026-12-05) 11.98 MiB, and 12.72 MiB with the rv1106/rv1103 files
#: (43 of 10-200 KB: the conv attributes, classifier, MobileNetV3, YOLOv8, UNet and deconv families per
#: platform and toolkit release); 13.34 MiB (47.0 MiB on disk) with the 29 files that validate the
#: YOLOv8 and UNet families of rk3576/rv1126b int8 once their convs requantized as the registers say,
#: the older releases' rv1103 families and int8 depthwise deconv, and 2.3.2's int8 GELU; 13.99 MiB
#: (50.0 MiB) with the int8 encoder layers of rk3576/rv1126b/rk3562/rk3566 and of the older releases,
#: YOLO11's attention and the GELU in the rv1106/rv1103 container; 14.44 MiB (51.1 MiB) with the files
#: random graphs called for (2026-12-06: conv_abs_*, conv_leaky_rk3566/rv1126b, split_unused,
#: scores_dh24, encoder_layer_dh24_rk3566, encoder_layer_dh2, conv_prelu); 15.33 MiB (54.1 MiB) with the
#: standalone activations of five platforms (standalone_ops_*, standalone_elu_*), avgpool_attrs and
#: grouped_conv, deconv_depthwise*, input_odd; 15.57 MiB (54.8 MiB) with the fused ConvTranspose activations
#: of rk3588/rk3566 (deconv_acts_*, deconv_relu_clip_*, and a refused rk3562 one); 16.22 MiB (57.2 MiB) with
#: what random graphs of rk3566, rk3576, rk3562 and rv1126b called for: Pad, Slice, Sub, Mul and
#: AveragePool (shape_ops_*), rk3566's shifted clip, six rk3588 files quantized per layer, the compact
#: input conv (input_compact_*, input_wide_*), int8 Softmax heads (softmax_*), fp16 ops their int8
#: builds refuse (standalone_fp16_*) and Sqrt on five platforms (standalone_sqrt_*); 16.31 MiB (57.5 MiB)
#: with rk3576/rv1126b's convs on graph inputs and one-channel deconv (input_depthwise_*, input_packed_*,
#: input_gap_*, deconv_one_channel_*); 16.55 MiB (58.2 MiB) with their other LeakyRelu form
#: (conv_leaky_input_*), rk3562's depthwise input conv, ConvPRelu and ConvTanh (input_depthwise_rk3562,
#: depthwise_prelu_rk3562, standalone_ops_rk3562 rebuilt with them), AveragePool's attributes on rk3576,
#: rk3562 and rv1126b and ReduceMin on rk3576/rv1126b (standalone_reducemin_*), pools on graph inputs
#: (input_pools_*); 17.09 MiB (60.0 MiB) with RKNN-Toolkit2 2.3.2's rk3588 standalone activations, pads, Slice,
#: Sub, LeakyRelu and PRelu convs, fused deconv activations, exSwish and Sqrt (*_tk232), which random 2.3.2
#: graphs called for (47 of 200 ran before, 192 now); 17.37 MiB (61.1 MiB) with 2.3.2's rk3576 standalone
#: activations, shape ops, ConvSigmoid and depthwise deconv (33 -> 130 of 200); 17.65 MiB (61.9 MiB) with
#: rk3562's fused deconv activations (deconv_acts_rk3562, deconv_relu_clip_rk3562, replacing the refused
#: deconv_relu_rk3562) and the asymmetric convs and deconvs that fixed the kernel register's field order
#: (deconv_asymmetric_*, conv_asymmetric_rv1106); 18.04 MiB (63.4 MiB) with rk3562's depthwise LeakyRelu
#: conv and deconv on the graph input (depthwise_leaky*, deconv_input_rk3562), pads beyond the int8 grid
#: (pad_saturated*) and the 2.3.2 rk3576 files of LeakyRelu convs, ReduceMin, Softmax's exDataConvert,
#: Sqrt, HardSwish, HardSigmoid, exSwish and AveragePool (15 *_rk3576_*_tk232; random 2.3.2 rk3576 graphs
#: 130 -> 189 of 200 within the bounds); 18.27 MiB (64.1 MiB) with rk3576's deconv CNA map (its fused
#: activations as 2.3.2 compiles them, deconv_acts_rk3576, deconv_relu_clip_rk3576, deconv_asymmetric_rk3576).
#: 18.99 MiB (66.5 MiB) with the standalone int8 HardSigmoid of four platforms (standalone_hardsigmoid*)
#: and RKNN-Toolkit2 2.3.2's rk3562 and rk3566 files of the op families 2.5.0's validate (standalone_ops,
#: shape_ops, deconv_depthwise, softmax, LUT convs: 34 *_tk232; random 2.3.2 graphs 41 -> 187 of 200 on
#: rk3562, 26 -> 155 of 167 on rk3566); 19.14 MiB (67.0 MiB) with their 2.3.2 fused deconv activations
#: (deconv_acts_rk3562/rk3566_fp16_tk232); 19.62 MiB (68.6 MiB) with RKNN-Toolkit2 2.3.0's rk3588 files of
#: the families random 2.3.0 graphs called for (27 *_tk230: 29 -> 112 of 120 within the bounds); 21.78 MiB
#: (76.4 MiB) with 2.3.0's rk3576, rk3562 and rk3566 files of the same families (58 *_tk230; random 2.3.0
#: graphs 21 -> 110, 24 -> 114 and 19 -> 114 of 120), 2.2.0's rk3588 ones (27 *_tk220; 31 -> 114 of 120)
#: and the pooled channel shuffle both compile to a Gather (pooled_shuffle*, deconv_input_rk3576*); 22.17 MiB
#: (79.1 MiB) with the LSTM files of five platforms (lstm*: silero-vad's exLSTM; their NPU command
#: buffers pad them to 120-510 KB on disk); 23.66 MiB (84.4 MiB) with 2.2.0's rk3576, rk3562 and rk3566
#: files of the families 2.3.0's there hold (58 *_tk220; random 2.2.0 graphs 23 -> 110, 26 -> 114 and
#: 19 -> 114 of 120); 24.24 MiB (85.9 MiB) with rv1106/rv1103 LeakyRelu (fused, depthwise, standalone)
#: and the ops without attributes of every release (conv_leaky_rv110*, conv_abs_rv110*, depthwise_leaky_rv1106,
#: standalone_leaky_rv110*, standalone_attr_free_rv110*) and Ultralytics' one-value mean (ultralytics_norm*);
#: 24.51 MiB (86.6 MiB) with rv1106's images of 1, 2 and 4 channels, its dilated convs and unread Split part
#: (image_channels*_rv1106, dilated_rv1106, split_unused_rv1106, every release); 24.55 MiB (86.7 MiB) with
#: their CPU reductions (standalone_reduce_rv110*); 25.84 MiB (90.4 MiB) with rv1106's Softmax heads, reflect
#: and edge Pads, the compiler's depthwise conv on an input and a narrow Concat (classifier_heads_rv110*,
#: pad_modes_rv110*, input_depthwise_rv110*, concat_narrow_rv110*, every release); 25.93 MiB (90.6 MiB) with its
#: asymmetric depthwise deconvs (deconv_depthwise_rv110*); 26.14 MiB (91.1 MiB) with its ConvSigmoid and standalone
#: HardSwish (conv_sigmoid_rv110*, gemm_hardswish_rv110*), which random graphs of every release hold; 26.39 MiB
#: (91.7 MiB) with its padded pools and column tiles (padded_pools_rv110*) and the older releases' unsized first
#: operands (constants_first_rv110*), every release; 26.65 MiB (92.7 MiB) with its Pow, standalone HardSigmoid
#: and image-input convs of every release, and the older releases' Gather and folded Pad (standalone_pow_rv110*,
#: standalone_hardsigmoid_rv110*, image_lanes_rv110*, pooled_shuffle_rv110*, folded_pad_rv110*); 26.68 MiB
#: (92.8 MiB) with 2.3.2's rv1106/rv1103 lookup tables (standalone_lut_rv110*_tk232: its exSwish); 26.73 MiB
#: (92.9 MiB) with their deconvs of the image input (deconv_input_rv110*, every release); 27.26 MiB (95.0 MiB)
#: with rv1106/rv1103's one-channel deconvs, Clips below 0, Softmax over the width and past 16 values, a Pad
#: whose input overlaps its map and Sqrt (deconv_one_channel_rv110*, clip_below_zero_rv110*,
#: softmax_axes_rv110*, pad_batch_overlap_rv110*, standalone_sqrt_rv110*, every release); 28.42 MiB
#: (96.3 MiB) with the PRelu conv whose multipliers are normalised to 2^16 (prelu_shift16_rv110*); 28.50 MiB
#: (96.5 MiB) with the depthwise 1x1 conv of stride 2 (depthwise_stride2_rv110*); 28.66 MiB (97.4 MiB) with
#: the int8 builds that keep every op in float16 (float_only_rv110*, every release); 28.84 MiB (98.2 MiB) with
#: rk3576/rv1126b's ReduceMax run as NPU tasks and softmaxes over more than 32 channels (reducemax_npu_*,
#: softmax_axes_rk3576/rv1126b); 29.09 MiB (99.0 MiB) with their LeakyRelu slope stage of 12 bits, grouped
#: and one-channel-deconv input convs and one-channel lookup-table convs (leaky_wide_*, grouped_input_*,
#: deconv_one_channel_input_*, one_channel_lut_*); 29.28 MiB (100.0 MiB) with the int8 attentions whose q or k
#: has zero point 0 (attention_q0_*, attention_k0_rk3566); 29.64 MiB (102.7 MiB) with the int8 LSTMs of the
#: five rk35xx/rv1126b platforms (lstm*_i8: silero-vad's int8 exLSTM); 29.80 MiB (103.2 MiB) with the int8
#: convs of tiny accumulator steps of seven platforms (tiny_steps*: silero-vad's int8 STFT); 29.84 MiB
#: (103.3 MiB) with rk3576/rv1126b's weight scales below float16's range (weight_underflow_*); 29.96 MiB
#: (103.8 MiB) with their table convs of subnormal weight scales and truncated accumulators and their slope
#: stages of fewer bits (table_conv_scales_*); 30.17 MiB (104.6 MiB) with the truncated convs of rk3588,
#: rk3566, rk3562 and rv1106 (truncated_convs*: a silent wrong result before), the bounds raised by one MiB.
#: The checkout's own size has a looser bound.
MAX_CORPUS_COMPRESSED_BYTES = 31 * 1024 * 1024
MAX_CORPUS_BYTES = 105 * 1024 * 1024
#: models (and their copies for other platforms, ``<model>_rk...``, ``<model>_rv...``) whose int8
#: build ends in a float16 op, so that its output stays float16
FLOAT16_OUTPUT_MODELS = ("softmax", "classifier_heads", "softmax_axes")
#: models whose int8 build quantizes nothing (no op of them does), inputs and outputs float16
FLOAT16_MODELS = ("float_only",)


def _manifest() -> dict:
    # no fallback: without its manifest the corpus's tests must not quietly become none
    with open(CORPUS / "manifest.json") as f:
        return json.load(f)


MANIFEST = _manifest()
ENTRIES = sorted(MANIFEST["files"].items())
IDS = [stem for stem, _ in ENTRIES]

pytestmark = pytest.mark.skipif(not ENTRIES, reason="tests/data/vendor/manifest.json is missing")


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / denom) if denom else 1.0


def test_manifest_and_directory_list_the_same_files():
    on_disk = {p.name for p in CORPUS.glob("*.rknn")} | {p.name for p in CORPUS.glob("*.npz")}
    listed = {e["file"] for _, e in ENTRIES} | {e["npz"] for _, e in ENTRIES}
    assert on_disk == listed
    for stem, e in ENTRIES:
        assert e["file"] == f"{stem}.rknn" and e["npz"] == f"{stem}.npz"
        assert stem == f"{e['model']}_{e['variant']}{e['suffix']}"


def test_manifest_records_vendor_versions():
    versions = MANIFEST["versions"]
    assert versions["rknn-toolkit2"] == "2.5.0"
    for key in ("onnx", "onnxruntime", "numpy", "python"):
        assert versions[key]
    # every toolkit release that built a file has its environment recorded
    built = {e["toolkit_version"] for _, e in ENTRIES}
    assert built == set(MANIFEST["toolkits"]) == {"2.5.0", "2.3.2", "2.3.0", "2.2.0"}
    for stem, e in ENTRIES:
        assert (e["suffix"] == "") == (e["toolkit_version"] == "2.5.0"), stem


def test_corpus_stays_small():
    files = [p for p in CORPUS.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < MAX_CORPUS_BYTES
    compressed = sum(len(zlib.compress(p.read_bytes(), 6)) for p in files)  # git's default level
    assert compressed < MAX_CORPUS_COMPRESSED_BYTES


@pytest.mark.parametrize("stem,entry", ENTRIES, ids=IDS)
def test_rknn_file_parses_and_matches_manifest(stem, entry):
    path = CORPUS / entry["file"]
    data = path.read_bytes()
    assert len(data) == entry["rknn_size"]
    assert hashlib.sha256(data).hexdigest() == entry["rknn_sha256"]

    loaded = load_model(str(path))
    assert loaded.format == ROCKCHIP
    model = loaded.model
    # rv1106/rv1103 files are the 0x1004 container, whose graph section is a FlatBuffer too; their
    # dynamic-shape builds are FlatBuffer files (format 6)
    container = entry["config"]["target_platform"] in ("rv1106", "rv1103") and not entry["config"].get("dynamic_input")
    assert model.format_version == (0x1004 if container else 6)
    assert model.flatbuffer
    assert model.toolkit_version == entry["toolkit_version"]
    assert model.target_platform == entry["config"]["target_platform"]
    assert model.target_platforms == [entry["config"]["target_platform"]]
    sets = entry["config"].get("dynamic_input")
    if sets:  # one subgraph per shape set (the file keeps its own order of the sets)
        assert model.is_dynamic and model.num_subgraphs == len(sets)
        assert sorted([list(s) for s in shape_set] for shape_set in model.dynamic_shapes) == sorted(sets)
    else:
        assert model.num_subgraphs == 1 and not model.is_dynamic

    quantized = entry["build"]["do_quantization"]
    for specs, expected in ((model.inputs, entry["inputs"]), (model.outputs, entry["outputs"])):
        assert [s.name for s in specs] == [e["name"] for e in expected]
        assert [list(s.shape) for s in specs] == [e["shape"] for e in expected]
        # an int8 file whose last op runs in float16 (exSoftmax13) keeps that output float16
        family = re.sub(r"_r[kv]\d.*$", "", entry["model"])
        float16_out = specs is model.outputs and family in FLOAT16_OUTPUT_MODELS
        npu_dtype = "float16" if not quantized or family in FLOAT16_MODELS or float16_out else "int8"
        for s, e in zip(specs, expected):
            # int64 token ids stay int64 (an embedding's Gather reads them), as do ArgMax's labels
            if e.get("kind") == "tokens" or e.get("sim_dtype") == "int64":
                assert s.dtype == "int64" and s.quant is None, s
                continue
            assert s.dtype == npu_dtype, s
            if npu_dtype == "int8":
                assert s.quant is not None and len(s.quant.scale) == 1
                assert s.quant.scale[0] > 0 and -128 <= s.quant.zero_point[0] <= 127
            else:
                assert s.quant is None


def _usable_agreement(entry: dict) -> tuple:
    """``(cosine, share of equal labels)`` above which a file's simulator outputs agree with
    onnxruntime's.  RKNN-Toolkit2 2.2.0 and 2.3.0 compile a bilinear Resize into a depthwise
    ConvTranspose (kernel [1, 3, 3, 1] / 4 squared) that differs from ONNX's half-pixel Resize at the
    image border: their segmenter files agree with onnxruntime to cosine 0.998 and 98.4 % of the
    ArgMax labels (fp16 and int8).  YOLO11's attention without its positional conv's residual
    (``psa_attention_nope_*``) outputs the attention's mix alone, whose int8 probabilities (codes
    0..127 over ``[0, max]``) put the simulator at cosine 0.99879 from float, and raw int8 attention
    scores (``scores_dh24``: two int8 projections' product, no softmax) at 0.99827; so do a square and a
    PRelu of small slopes on one int8 grid (``standalone_ops_*``: Pow 0.99839, ConvPRelu 0.99806; the
    square alone, ``standalone_pow_*``, 0.99840) and a sum of 16 int8 channels into one
    (``folded_pad_*``'s ReduceSum: 0.99831), and a SiLU of a depthwise 1x1 conv on the input's grid
    (``depthwise_stride2_*``: 0.99802), and one-channel deconvs of a one-channel input on int8 grids
    (``deconv_one_channel_input_*``: 0.99859); an attention alone over 16 tokens of 8 channels a head
    (``attention_q0_*``: 0.98570, ``attention_k0_rk3566``: 0.99545), whose mix of v by probabilities on
    127 levels is all its output; int8 LSTMs of 8 to 16 hidden units over 2 to 3 steps (``lstm*_i8``:
    0.9715 to 0.9993), whose gates read their inputs, states and weights on int8 grids and whose
    outputs of 8 to 60 values are on grids of their own; a Gemm of 8 int8 means onto 10 outputs without
    bias (``truncated_convs*``' head: 0.92942), each output a sum of 8 products of codes of a tiny
    range.  Two
    cases differ from ONNX by what they validate: ``pad_saturated_*`` pads 40 onto a Sigmoid's grid,
    which saturates it to 1 (cosine 0.774), and ``depthwise_leaky*``'s simulator rounds each depthwise
    conv's output to an int8 grid of its own before the LeakyRelu (0.995).
    Off-board runs follow the simulator, not ONNX."""
    if entry["model"].startswith("segmenter_ops") and entry["toolkit_version"] in ("2.2.0", "2.3.0"):
        return 0.997, 0.98
    if entry["model"].startswith(("psa_attention_nope", "scores_dh24", "standalone_ops", "standalone_pow",
                                  "folded_pad", "depthwise_stride2", "deconv_one_channel_input")):
        return 0.998, 0.98
    if entry["model"].startswith(("attention_q0", "attention_k0")):
        return 0.985, 0.98
    if entry["model"].startswith("lstm") and entry["variant"] == "i8":
        return 0.97, 0.98
    if entry["model"].startswith("pad_saturated"):
        return 0.77, 0.98
    if entry["model"].startswith("truncated_convs"):
        return 0.92, 0.98
    if entry["model"].startswith("depthwise_leaky"):
        return 0.995, 0.98
    return (0.9999, 1.0) if entry["variant"] == "fp16" else (0.999, 0.98)


@pytest.mark.parametrize("stem,entry", ENTRIES, ids=IDS)
def test_npz_matches_manifest(stem, entry):
    with np.load(CORPUS / entry["npz"]) as z:
        stored = set(z.files)
    n_out = len(entry["outputs"])
    # only the simulator's outputs are stored: the inputs follow from the recorded generator and
    # seed, onnxruntime's outputs from the case's ONNX
    assert stored == {f"out{k}" for k in range(n_out)}
    arrays = corpus_arrays(stem)
    inputs = inputs_of(arrays)
    assert len(inputs) == len(entry["inputs"])
    for x, spec in zip(inputs, entry["inputs"]):
        assert x.dtype == (np.int64 if spec["kind"] == "tokens" else np.float32) and list(x.shape) == spec["shape"]

    refs = onnxruntime_outputs(entry["model"], inputs)
    assert len(refs) == n_out
    for k, (spec, ref) in enumerate(zip(entry["outputs"], refs)):
        sim = arrays[f"out{k}"]
        assert list(ref.shape) == spec["shape"]
        assert list(sim.shape) == spec["sim_shape"] and str(sim.dtype) == spec["sim_dtype"]
        assert np.isfinite(sim).all() and np.isfinite(ref).all()
        # The recorded agreement is that of the simulator's outputs with onnxruntime's (this
        # onnxruntime, on this CPU, may sum in another order than the build's: 1.4e-7 of the
        # output's scale at most on a Zen 5, hence the margin) ...
        scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
        assert _cos(sim, ref) == pytest.approx(spec["cos"], abs=1e-6)
        assert float(np.max(np.abs(sim.astype(np.float64).reshape(ref.shape) - ref))) == pytest.approx(
            spec["max_abs"], abs=1e-5 * scale)
        # ... and the simulator agrees with onnxruntime (the files are a usable reference).
        cosine, labels = _usable_agreement(entry)
        if spec["sim_dtype"] == "int64":  # ArgMax's labels: int8 ties and one-step moves change a few
            assert np.mean(sim.reshape(ref.shape) == ref) >= labels
        else:
            assert spec["cos"] > cosine


# ---------------------------------------------------------------------------
# Format facts recorded in docs/vendor-format-notes.md, checked on the corpus files with the
# project's FlatBuffer reader (through tools/vendor_corpus/rkdump.py and investigate_params.py).

TOOLS = Path(__file__).resolve().parent.parent / "tools" / "vendor_corpus"


def _load_tool(name: str, extra: dict):
    spec = importlib.util.spec_from_file_location(f"_vendor_corpus_{name}", TOOLS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    saved = {k: sys.modules.get(k) for k in extra}
    sys.modules.update(extra)  # the tools import each other by plain name
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(spec.name, None)
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mod


def test_a_rebuild_keeps_the_recorded_environments_and_records_its_own(tmp_path, monkeypatch):
    # build_corpus.py --only rebuilds entries in another environment than the corpus was first built in:
    # the manifest's top-level versions stay, each new entry records the environment it was built in
    import onnx

    build_corpus = _load_tool("build_corpus", {"models": MODELS})
    recorded = {"rknn-toolkit2": "2.5.0", "onnxruntime": "1.26.0"}
    now = {"rknn-toolkit2": "2.5.0", "onnxruntime": "1.32.0"}
    (tmp_path / "manifest.json").write_text(json.dumps({"files": {}, "versions": recorded,
                                                        "toolkits": {"2.5.0": recorded}}))
    onnx.save(MODELS.case_named("maxpool").build(), str(tmp_path / "tiny.onnx"))
    monkeypatch.setattr(build_corpus, "_versions", lambda: now)
    monkeypatch.setattr(build_corpus, "build_one", lambda case, variant, *args, **kwargs: {"outputs": [],
                                                                                            "rknn_size": 1})
    assert build_corpus.main(["--onnx-dir", str(tmp_path)]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["versions"] == recorded and manifest["toolkits"] == {"2.5.0": recorded}
    assert {stem: e["environment"] for stem, e in manifest["files"].items()} == {"tiny_fp16": now, "tiny_i8": now}


@pytest.fixture(scope="module")
def facts():
    """``investigate_params`` (decoding rules) with ``rkdump`` (file access) loaded by path."""
    rkdump = _load_tool("rkdump", {})
    return _load_tool("investigate_params", {"rkdump": rkdump})


def _open(facts, stem):
    return facts.RknnFile(str(CORPUS / f"{stem}.rknn"))


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_fact_leaky_relu_slope_is_in_the_bn_multiplier(facts, variant):
    for stem, alpha in (("conv_leaky01", 0.1), ("conv_leaky03", 0.3)):
        f = _open(facts, f"{stem}_{variant}")
        node = facts.first_node(f, "Conv")
        assert node.op == "ConvLeakyRelu"
        assert facts.leaky_slope(f, node) == pytest.approx(alpha, abs=2e-4)


@pytest.mark.parametrize("variant,tol", [("fp16", 1e-6), ("i8", 1e-3)])
def test_fact_clip_bounds_are_in_bn_and_ew_registers(facts, variant, tol):
    for stem, bounds in (("conv_clip", (-1.0, 2.0)), ("conv_relu6", (0.0, 6.0))):
        f = _open(facts, f"{stem}_{variant}")
        node = facts.first_node(f, "Conv")
        assert node.op == "ConvClip"
        assert facts.clip_bounds(f, node) == pytest.approx(bounds, abs=tol)


def test_fact_hardsigmoid_alpha_beta_are_recoverable(facts):
    f = _open(facts, "conv_hardsigmoid_fp16")
    alpha, beta = facts.hardsigmoid_params(f, facts.first_node(f, "ConvHardSigmoid"))
    assert alpha == pytest.approx(0.3, abs=1e-3) and beta == pytest.approx(0.4, abs=1e-4)
    f = _open(facts, "conv_hardsigmoid_i8")
    _, beta = facts.hardsigmoid_params(f, facts.first_node(f, "ConvHardSigmoid"))
    assert beta == pytest.approx(0.4, abs=1e-4)


def test_fact_lut_activations_load_two_513_entry_tables(facts):
    tables = facts.lut_tables(_open(facts, "conv_sigmoid_fp16"))
    assert sorted(tables) == [0x20000, 0x30000]
    low, high = tables[0x20000], tables[0x30000]
    assert len(low) == len(high) == 513
    assert low[-1] == high[0] == 16384  # sigmoid(0) = 0.5 at a 1.0 = 32768 scale
    assert np.all(np.diff(low) >= 0) and np.all(np.diff(high) >= 0)


def test_fact_standalone_sigmoid_is_an_npu_lookup_table(facts):
    # int8 and fp16 alike: an NPU node (slot 3 = 2) whose first task loads the two tables and whose
    # next task runs the DPU alone (no CNA) with BN_CFG = 0x20040 (LUT)
    for variant in ("fp16", "i8"):
        f = _open(facts, f"sigmoid_mul_{variant}")
        node = facts.first_node(f, "Sigmoid")
        assert node.table.u8(3) == 2
        tasks = [t for t in f.tasks() if t.op_idx == node.index]
        assert all(not t.enable_mask & 1 for t in tasks)
        tables = facts.lut_tables(f)
        assert sorted(tables) == [0x20000, 0x30000] and tables[0x20000][-1] == tables[0x30000][0] == 16384
        runs = [dict(((tgt, reg), val) for tgt, reg, val in f.task_regs(t)) for t in tasks]
        assert any(regs.get((0x1001, 0x4060)) == 0x20040 for regs in runs)


def test_fact_per_layer_int8_keeps_minus_weight_zero_point_in_bs_ow_op(facts):
    f = _open(facts, "convnet_i8_layer")
    tensors = f.tensors()
    for node in (n for n in f.nodes() if n.op.startswith("Conv")):
        regs = facts.node_dpu_regs(f, node.index)
        assert regs[facts.BS_MUL_CFG] == 0
        weight = tensors[node.inputs[1]]
        bias = tensors[node.inputs[2]]
        assert bias.npu_shape == (32,) and bias.size == 128  # plain i32, padded to 32 channels
        minus_zp = facts.s32(regs[facts.BS_OW_OP])
        # Padded input lanes of a tile (when there are any) hold the same weight zero point.
        raw = np.frombuffer(f.tensor_data(weight), np.int8)
        nob, nib, kh, kw, ob, ib = weight.npu_shape[:6]
        o, i = weight.shape[0], weight.shape[1]
        if nib * ib > i:
            q = raw[: nob * nib * kh * kw * ob * ib].reshape(nob, nib, kh, kw, ob, ib)
            pad = q[0, 0, :, :, :o, i:]
            assert np.all(pad == -minus_zp)
    f = _open(facts, "convnet_i8")
    for node in (n for n in f.nodes() if n.op.startswith("Conv")):
        assert facts.node_dpu_regs(f, node.index)[facts.BS_MUL_CFG] == 0xE01


def test_fact_resize_param_strings(facts):
    f = _open(facts, "resize_nearest_fp16")
    assert facts.param_strings(facts.first_node(f, "Resize")) == {0: "asymmetric", 4: "nearest", 5: "floor"}
    f = _open(facts, "resize_bilinear_fp16")
    assert facts.param_strings(facts.first_node(f, "Resize")) == {
        0: "half_pixel", 4: "linear", 5: "round_prefer_floor"}


def test_fact_node_slot3_marks_cpu_ops(facts):
    f = _open(facts, "slice_fp16")
    node = facts.first_node(f, "Slice")
    assert node.table.u8(3) == 0  # CPU
    assert not [t for t in f.tasks() if t.op_idx == node.index]
    assert facts.first_node(f, "Conv").table.u8(3) == 2  # NPU


def test_fact_rk3576_stores_per_channel_weight_scales(facts):
    f = _open(facts, "convnet_rk3576_i8")
    tensors = {t.name: t for t in f.tensors()}
    scales = np.frombuffer(f.tensor_data(tensors["w1_w4a16_weight"]), "<f2").astype(np.float64)
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    model = onnx.load(str(CORPUS / "onnx" / "convnet_rk3576.onnx"))
    w = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}["w1"].reshape(16, -1)
    expected = (np.maximum(w.max(1), 0) - np.minimum(w.min(1), 0)) / 255.0
    np.testing.assert_allclose(scales[:16], expected, rtol=1e-3)


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_fact_dynamic_shape_files_store_shared_weights_once(facts, vendor_fixtures, variant):
    f = facts.RknnFile(str(vendor_fixtures / "rknn" / f"dyn_conv_{variant}.rknn"))
    shared = f.root.strings(18)
    assert shared == ["w1", "w2"] and len(f.subgraphs) == 3
    # Subgraph k is compiled for DynamicShapes entry k (file order, not config order).
    order = [tuple(s.scalars(0, "i32")) for s in f.root.tables(17)[0].tables(0)]
    for sg, shape in enumerate(order):
        x = next(t for t in f.tensors(sg) if t.kind == 1)
        assert x.shape == shape
        for t in f.tensors(sg):
            if t.name in shared:
                assert (len(f.tensor_data(t)) > 0) == (sg == 0)
            elif t.kind == 4 and t.name.startswith("b"):
                assert len(f.tensor_data(t)) > 0  # biases are duplicated per subgraph


def _bias_blocks(raw: bytes, channels: int, per_block: int):
    """(bias i32, -zp_w i16, mul u16) per channel from int8 per-channel bias blocks."""
    block = per_block * 8
    bias, mzp, mul = [], [], []
    for start in range(0, channels, per_block):
        off = start // per_block * block
        bias += list(np.frombuffer(raw, "<i4", per_block, off))
        mzp += list(np.frombuffer(raw, "<i2", per_block, off + 4 * per_block))
        mul += list(np.frombuffer(raw, "<u2", per_block, off + 6 * per_block))
    return np.array(bias[:channels]), np.array(mzp[:channels]), np.array(mul[:channels])


def test_fact_rk3566_bias_blocks_hold_four_channels(facts):
    ref = _open(facts, "convnet_i8")
    lite = _open(facts, "convnet_rk3566_i8")
    for name, channels in (("b2", 16), ("b8", 24), ("b14", 10)):
        t_ref = next(t for t in ref.tensors() if t.name == name)
        t_lite = next(t for t in lite.tensors() if t.name == name)
        expected = _bias_blocks(ref.tensor_data(t_ref), channels, 8)
        got = _bias_blocks(lite.tensor_data(t_lite), channels, 4)
        for a, b in zip(expected, got):
            np.testing.assert_array_equal(a, b)
        assert np.all(expected[2] > 0) and expected[2].max() == 1 << 14


def test_fact_rk3576_int8_first_conv_weight_layout(facts):
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    f = _open(facts, "convnet_rk3576_i8")
    tensors = {t.name: t for t in f.tensors()}
    w_t = tensors["w1"]
    assert w_t.npu_shape == (1, 1, 3, 3, 16, 4) and w_t.size == 1152
    raw = np.frombuffer(f.tensor_data(w_t), np.int8)
    # [kh][o][16 bytes]: kw0(i0,i1,i2,zp) kw1(..) kw2(..) then 4 zero bytes.
    rows = raw[: 3 * 16 * 16].reshape(3, 16, 16)
    assert np.all(rows[:, :, 12:] == 0) and np.all(raw[3 * 16 * 16:] == 0)
    q = rows[:, :, :12].reshape(3, 16, 3, 4).astype(np.float64)  # kh, o, kw, lane
    zp = q[0, :, 0, 3]
    assert np.all(q[..., 3] == zp[None, :, None])
    scales = np.frombuffer(f.tensor_data(tensors["w1_w4a16_weight"]), "<f2").astype(np.float64)[:16]
    deq = (q[..., :3] - zp[None, :, None, None]) * scales[None, :, None, None]
    model = onnx.load(str(CORPUS / "onnx" / "convnet_rk3576.onnx"))
    w = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}["w1"]
    np.testing.assert_allclose(deq.transpose(1, 3, 0, 2), w, atol=scales.max() * 0.51)


def test_layer_evidence_reads_float16_snapshots_as_the_values_the_simulator_held(tmp_path):
    # accuracy_analysis prints every tensor with 6 decimals; a float16 sum of printed values can fall
    # off a tie and round the other way, so each layer must read its inputs back as float16.  A
    # snapshot printed from rknnlite's own values must then give every layer 100 % equal as printed.
    from rknnlite.backends.software.executor import Executor
    from rknnlite.model.loader import load_model
    from rknnlite.model.rknn_graph import lower_rockchip

    layer_evidence = _load_tool("layer_evidence", {})
    assert "100.00 % equal as printed" in layer_evidence._figures(
        np.float32([3.6035156, -0.0000004]), np.float64([3.603516, -0.0]), None)[1]
    shutil.copy(CORPUS / "c2f_fp16.rknn", tmp_path / "model.rknn")
    loaded = load_model(str(tmp_path / "model.rknn"))
    model = lower_rockchip(loaded.payload, loaded.model, validate=False, fuse=False)
    g = model.graph
    raw = np.random.default_rng(5).uniform(0, 255, loaded.model.inputs[0].shape).astype(np.float32)
    np.save(tmp_path / "in0.npy", raw)
    snapshot = tmp_path / "snapshot" / "simulator"
    snapshot.mkdir(parents=True)
    # the vendor's tensors (the lowering's own, such as a conv's output before its fused part,
    # have no snapshot)
    named = [o for n in g.nodes for o in n.outputs if o and o not in g.keep_float and "__" not in o]
    got = Executor(g, model.metadata.float_dtype, expose=named).run(model.graph_inputs([raw]))
    for name, value in zip(list(g.outputs) + named, got):
        np.savetxt(snapshot / f"{name}.txt", np.asarray(value, np.float64).ravel(), fmt="%f")
    rows, end = layer_evidence.compare(str(tmp_path))
    assert {op for op, _, _ in rows} >= {"Add", "Split", "Concat"}
    assert all("100.00 % equal as printed" in figures for _, _, (_, figures) in rows), rows
    assert "100.00 % equal as printed" in end


def test_layer_evidence_finds_snapshots_through_the_toolkits_name_map(tmp_path):
    # accuracy_analysis writes "/model/a.b/Conv_output_0" as "_model_a_b_Conv_output_0.txt" and
    # lists the mapping in map_name_to_file.txt (torchvision's DeepLabV3 export)
    layer_evidence = _load_tool("layer_evidence", {})
    snapshot = tmp_path / "snapshot"
    (snapshot / "simulator").mkdir(parents=True)
    (snapshot / "map_name_to_file.txt").write_text(
        "layer_name    file_name\n" + "-" * 30 + "\nx    x.txt\n/model/a.b/Conv_output_0    _model_a_b_Conv_output_0.txt\n")
    (snapshot / "simulator" / "_model_a_b_Conv_output_0.txt").write_text("1.5\n2.5\n")
    (snapshot / "simulator" / "x.txt").write_text("3\n")
    got = layer_evidence._snapshot(str(tmp_path), "/model/a.b/Conv_output_0", (1, 2))
    assert got.tolist() == [[1.5, 2.5]]
    assert layer_evidence._snapshot(str(tmp_path), "x", (1,)).tolist() == [3.0]
    assert layer_evidence._snapshot(str(tmp_path), "missing", (1,)) is None
