"""int8 lookup-table activations of vendor files run from the file's own tables (issue 11).

The corpus files ``conv_{sigmoid,swish,hardswish,hardsigmoid}_i8`` (tests/data/vendor, RKNN-Toolkit2
2.5.0, rk3588) carry the DPU tables in their register stream; the references are the vendor
simulator's outputs.  Doctored copies check that registers outside the observed layout are
refused by name.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import rknnlite
from rknnlite import ModelInvalidError
from rknnlite.backends.software.ops import KERNELS
from rknnlite.backends.software.ops.vendor_lut import vendor_lut_activation
from rknnlite.model.loader import load_model
from rknnlite.model.rknn_graph import lower as vendor_lower
from rknnlite.model.rknn_graph.graph import read_vendor_graph
from rknnlite.model.rknn_graph.lut import lut_stage, read_lut_tables
from rknnlite.model.rknn_graph.regcmd import TARGET_DPU, node_registers, read_tasks

from corpus import CORPUS, corpus_arrays
from vendor_files import tensor_bytes

LUT_FILES = ["conv_sigmoid_i8", "conv_swish_i8", "conv_hardswish_i8", "conv_hardsigmoid_i8",
             "conv_hardsigmoid_rk3576_i8"]

needs_corpus = pytest.mark.skipif(not (CORPUS / "conv_sigmoid_i8.rknn").is_file(), reason="no vendor corpus")


def _conv_registers(name):
    """(regcmd bytes, tasks, the conv node's index, its conv-task registers) of a corpus file."""
    path = str(CORPUS / f"{name}.rknn")
    loaded = load_model(path)
    vf = read_vendor_graph(loaded.payload, loaded.model.header_size, loaded.model.model_size, path)
    sg = vf.subgraphs[0]
    kind = {t.kind: t for t in sg.tensors}
    regcmd = bytes(vf.tensor_data(sg, kind["regcmd"]))
    tasks = read_tasks(vf.tensor_data(sg, kind["task"]), path)
    node = next(n for n in sg.nodes if n.op.startswith("Conv"))
    return regcmd, tasks, node.index, node_registers(regcmd, tasks, node.index, path)


def _doctored(name, reg, old, new) -> bytes:
    """The file's bytes with every DPU write of ``old`` to ``reg`` made a write of ``new``."""
    raw = (CORPUS / f"{name}.rknn").read_bytes()
    pack = lambda v: struct.pack("<Q", (TARGET_DPU << 48) | (v << 16) | reg)  # noqa: E731
    assert raw.count(pack(old)) >= 1
    return raw.replace(pack(old), pack(new))


# -- decoding the tables and the index map -------------------------------------------------------------


@needs_corpus
def test_tables_are_two_513_entry_int16_tables_over_the_index_ranges():
    regcmd, tasks, index, regs = _conv_registers("conv_hardsigmoid_i8")
    tables = read_lut_tables(regcmd, tasks, index, "t")
    stage = lut_stage(regs, "t")
    assert (stage.le_start, stage.le_end, stage.lo_start, stage.lo_end, stage.entry_shift) == (-16384, 0, 0, 16384, 5)
    assert tables.le.dtype == np.int16 and len(tables.le) == len(tables.lo) == 513
    # HardSigmoid's table is the ramp 16384 + u (32768 = 1.0), clipped to int16
    np.testing.assert_array_equal(tables.le, np.arange(-16384, 1, 32) + 16384)
    assert tables.lo[0] == 16384 and tables.lo[-1] == 32767
    assert np.all(np.abs(tables.lo - np.minimum(np.arange(0, 16385, 32) + 16384, 32767)) <= 1)
    regcmd, tasks, index, _ = _conv_registers("conv_sigmoid_i8")
    sig = read_lut_tables(regcmd, tasks, index, "t")
    assert sig.le[0] == 59 and sig.lo[0] == 16384 and sig.lo[-1] == 32708  # sigmoid(+-6.31) * 32768
    assert np.all(np.diff(sig.le.astype(int)) >= 0) and np.all(np.diff(sig.lo.astype(int)) >= 0)
    regcmd, tasks, index, _ = _conv_registers("conv_swish_i8")
    assert read_lut_tables(regcmd, tasks, index, "t").le.min() < 0  # x*sigmoid(x)'s negative lobe


@needs_corpus
def test_index_map_and_slopes_from_the_conv_registers():
    _, _, _, regs = _conv_registers("conv_hardsigmoid_i8")
    stage = lut_stage(regs, "t")
    assert (stage.index_mul, stage.index_shift) == (29076, 14)
    # beta = 0.5 + A / (2^s * 32768): the file's HardSigmoid(alpha=0.3, beta=0.4)
    assert 0.5 + stage.index_add / (2 ** stage.index_shift * 32768) == pytest.approx(0.4, abs=1e-5)
    assert stage.le_uflow_slope == 0 and stage.lo_oflow_slope == 0  # clamps at both ends
    _, _, _, regs = _conv_registers("conv_swish_i8")
    stage = lut_stage(regs, "t")
    assert stage.index_add == 0 and stage.lo_oflow_slope == 0x4032 / 2 ** 13 and stage.le_uflow_slope == 0
    _, _, _, regs = _conv_registers("conv_hardswish_i8")
    assert lut_stage(regs, "t").lo_oflow_slope == 2.0


def _attrs(**kw):
    attrs = {"index_scale": [1.0], "index_offset": 0.0, "le_table": [0, 32, 64], "lo_table": [64, 100, 120],
             "le_start": -64, "le_end": 0, "lo_start": 0, "lo_end": 64, "index_shift": 5,
             "le_uflow_slope": 0.0, "lo_oflow_slope": 0.25, "out_multiplier": 1.0, "out_zero_point": 0,
             "out_scale": 1.0}
    attrs.update(kw)
    return KERNELS["VendorLutActivation"].prepare(attrs, [None])


def test_lut_kernel_interpolates_extends_and_requantizes():
    acc = np.array([-100, -64, -48, -1, 0, 16, 48, 64, 80, 200], np.float32).reshape(1, 1, 1, -1)
    (y,) = vendor_lut_activation([acc], _attrs())
    # LE: 0 @-64, 32 @-32, 64 @0; LO: 64 @0, 100 @32, 120 @64; below: clamp; above: + 0.25 per unit; int8 clip
    np.testing.assert_array_equal(y.ravel(), [0, 0, 16, 63, 64, 82, 110, 120, 124, 127])
    assert y.dtype == np.float32
    # index map per channel and the output conversion (multiplier, zero point, scale)
    acc2 = np.array([[8.0], [8.0]], np.float32).reshape(1, 2, 1, 1)
    (y2,) = vendor_lut_activation([acc2], _attrs(index_scale=[1.0, 2.0], index_offset=-16.0, out_multiplier=0.25,
                                                  out_zero_point=-10, out_scale=0.5))
    # u = -8 -> t = 56 -> q = 14 (-10 zp) -> 7.0; u = 0 -> t = 64 -> q = 16 -> 8.0
    np.testing.assert_array_equal(y2.ravel(), [7.0, 8.0])


def _lut_reference(acc, a):
    """The module doc's formula, element by element in Python floats."""
    out = np.empty(acc.shape, np.float32)
    step = float(1 << a["index_shift"])
    le, lo = list(a["le_table"]), list(a["lo_table"])
    for idx in np.ndindex(acc.shape):
        u = float(acc[idx]) * a["index_scale"][idx[1]] + a["index_offset"]
        if u > a["lo_end"]:
            t = lo[-1] + (u - a["lo_end"]) * a["lo_oflow_slope"]
        elif u < a["le_start"]:
            t = le[0] + (u - a["le_start"]) * a["le_uflow_slope"]
        else:
            table, start = (lo, a["lo_start"]) if u >= a["lo_start"] else (le, a["le_start"])
            pos = (u - start) / step
            k = min(int(np.floor(pos)), len(table) - 2)
            t = table[k] + (table[k + 1] - table[k]) * (pos - k)
        q = min(127.0, max(-128.0, np.floor(t * a["out_multiplier"] + 0.5) + a["out_zero_point"]))
        out[idx] = (q - a["out_zero_point"]) * a["out_scale"]
    return out


def test_lut_kernel_matches_the_formula_over_every_region():
    rng = np.random.default_rng(11)
    attrs = _attrs(index_scale=[0.7, 1.3, 2.1], index_offset=-3.5, le_table=rng.integers(-300, 300, 5).tolist(),
                   lo_table=rng.integers(-300, 300, 5).tolist(), le_start=-64, le_end=0, lo_start=0, lo_end=64,
                   index_shift=4, le_uflow_slope=0.375, lo_oflow_slope=-1.25, out_multiplier=0.4,
                   out_zero_point=7, out_scale=0.05)
    acc = rng.uniform(-150, 150, (2, 3, 4, 5)).astype(np.float32)  # below, inside both tables and above
    acc[0, 0, 0, :3] = [0.0, 3.5 / 0.7, np.nan]  # u = -3.5, u = 0 exactly (the LO table's start), nan
    acc[1, 2, 3, :2] = [np.inf, -np.inf]  # the slopes (LO's negative) take both to -inf
    (y,) = vendor_lut_activation([acc], attrs)
    ref = _lut_reference(np.where(np.isnan(acc), 0, acc), attrs)
    ok = ~np.isnan(acc)
    np.testing.assert_array_equal(y[ok], ref[ok])
    assert np.isnan(y[0, 0, 0, 2]) and np.all(y[1, 2, 3, :2] == np.float32(-6.75))  # -inf slope ends: int8 -128
    out = [np.full(acc.shape, 9.0, np.float32)]  # into the executor's buffer
    assert vendor_lut_activation([acc], attrs, out)[0] is out[0]
    np.testing.assert_array_equal(out[0][ok], ref[ok])


def test_lut_kernel_refuses_inconsistent_attributes():
    with pytest.raises(ModelInvalidError, match="LO table has 2 entries"):
        _attrs(lo_table=[0, 1])
    with pytest.raises(ModelInvalidError, match="adjacent ascending ranges"):
        _attrs(lo_start=32)
    with pytest.raises(ModelInvalidError, match="channels"):
        vendor_lut_activation([np.zeros((1, 3, 2, 2), np.float32)], _attrs())


# -- the corpus files against the vendor simulator -----------------------------------------------------


def _against_the_simulator(name):
    """(outputs, the simulator's outputs, each output's quantization step) of corpus file ``name``."""
    data = corpus_arrays(name)
    with rknnlite.Context(str(CORPUS / f"{name}.rknn"), backend="software") as ctx:
        outputs = ctx.run([data["in0"]], data_format="nchw")
        steps = [o.scale for o in ctx.outputs]
    return outputs, [data[f"out{k}"].reshape(y.shape) for k, y in enumerate(outputs)], steps


@needs_corpus
@pytest.mark.parametrize("name", LUT_FILES)
def test_lut_file_matches_the_vendor_simulator(name):
    (y, *_), (ref, *_), (step, *_) = _against_the_simulator(name)
    a, b = y.ravel().astype(np.float64), ref.ravel().astype(np.float64)
    assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) >= 0.99999
    steps = np.rint(np.abs(y - ref) / step)
    assert steps.max() <= 1 and np.mean(steps == 0) >= 0.99  # single steps, at .5 boundaries and past the tables


@needs_corpus
def test_int8_hard_sigmoid_runs_through_its_table():
    from rknnlite.model.loader import load_model as load
    from rknnlite.model.rknn_graph import lower_rockchip

    loaded = load(str(CORPUS / "conv_hardsigmoid_i8.rknn"))
    lowered = lower_rockchip(loaded.payload, loaded.model)
    ops = [n.op for n in lowered.graph.nodes]
    assert ops == ["VendorCodes", "Conv", "VendorLutActivation"]
    conv = lowered.graph.nodes[1]
    weight = lowered.graph.constants[conv.inputs[1]]
    assert np.array_equal(weight, np.round(weight)) and conv.attrs["_winograd"] is False  # integer accumulator
    assert not hasattr(vendor_lower, "_LUT_INDEX_SCALE")  # no per-function constant


@needs_corpus
@pytest.mark.parametrize("reg, old, new, named", [
    (0x410C, 0x50500, 0x60500, "0x410c"),          # LE/LO entry spacings that differ
    (0x4068, 0x71940E00, 0x71940E01, "0x4068"),    # bits below the shift
    (0x4108, 0x68, 0x69, "0x4108"),                # a LUT_CFG never seen
])
def test_a_doctored_lookup_register_is_refused_by_name(reg, old, new, named):
    raw = _doctored("conv_hardsigmoid_i8", reg, old, new)
    with pytest.raises(ModelInvalidError, match=named):
        rknnlite.Context(raw, backend="software")


@needs_corpus
def test_a_table_entry_that_is_not_an_int16_is_refused():
    raw = _doctored("conv_hardsigmoid_i8", 0x4104, 32, 0x10020)  # LE entry 1 (32) with bit 16 set
    with pytest.raises(ModelInvalidError, match="not a sign-extended int16"):
        rknnlite.Context(raw, backend="software")


# -- rk3576 / rv1126b: the same tables, the index map in <output>_BnCfg_BNcfgTensor (.f2act) ------------


def _lut_attrs(name):
    from rknnlite.model.rknn_graph import lower_rockchip

    loaded = load_model(str(CORPUS / f"{name}.rknn"))
    graph = lower_rockchip(loaded.payload, loaded.model).graph
    assert [n.op for n in graph.nodes] == ["VendorCodes", "Conv", "VendorLutActivation"]
    return graph.nodes[2].attrs


@needs_corpus
def test_rk3576_hard_sigmoid_index_map_is_the_rk3588_one():
    # same model and weights on both platforms: rk3588 keeps M, s, A*M in registers 0x4068/0x4064, rk3576 keeps A,
    # M, s in the BnCfg tensor and adds A before multiplying
    ours, theirs = _lut_attrs("conv_hardsigmoid_rk3576_i8"), _lut_attrs("conv_hardsigmoid_i8")
    np.testing.assert_allclose(ours["index_scale"], theirs["index_scale"], rtol=1e-6)
    assert ours["index_offset"] == pytest.approx(theirs["index_offset"], rel=1e-3)
    for key in ("le_table", "lo_table", "le_start", "le_end", "lo_start", "lo_end", "index_shift", "le_uflow_slope",
                "lo_oflow_slope"):
        assert ours[key] == theirs[key], key


def _bncfg_doctored(change) -> bytes:
    """conv_hardsigmoid_rk3576_i8 with the first 16 int32 words of its BnCfg tensor replaced by ``change(words)``."""
    raw = (CORPUS / "conv_hardsigmoid_rk3576_i8.rknn").read_bytes()
    words = [-1846, 0, 0, 0, -1846, 0, 0, 0, 29076, 0, 0, 0, 0x0E0E, 0, 0, 0]
    old = struct.pack("<16i", *words)
    assert raw.count(old) == 1
    return raw.replace(old, struct.pack("<16i", *change(list(words))))


@needs_corpus
@pytest.mark.parametrize("raw, named", [
    (lambda: _bncfg_doctored(lambda w: w[:4] + [-1845] + w[5:]), r"index-map words \[-1846, 0, 0, 0, -1845"),
    (lambda: _bncfg_doctored(lambda w: w[:12] + [0x0E0F] + w[13:]), r"index-map words .* s \| s << 8"),
    (lambda: _bncfg_doctored(lambda w: w[:1] + [7] + w[2:]), r"index-map words \[-1846, 7,"),
    (lambda: _doctored("conv_hardsigmoid_rk3576_i8", 0x4108, 0x02000006, 0x68), r"0x4108 = 0x68, not 0x2000006"),
    (lambda: _doctored("conv_hardsigmoid_rk3576_i8", 0x4170, 0, 0x40004000),
     r"the LO overflow slope registers \['0x40004000', '0x0', '0x0'\] are not one 16-bit scale and one shift"),
    (lambda: _doctored("conv_hardsigmoid_rk3576_i8", 0x4194, 0x7FFF7FFF, 0x7FFE7FFE), r"0x4194 .* not 0x7fff7fff"),
    (lambda: _doctored("conv_hardsigmoid_rk3576_i8", 0x4144, 0x4000, 0x2000), r"0x4140..0x414c \[8192, 16384\]"),
])
def test_rk3576_lookup_layout_outside_the_observed_one_is_refused_by_name(raw, named):
    with pytest.raises(ModelInvalidError, match=r"ConvHardSigmoid on rk3576/rv1126b: .*" + named):
        rknnlite.Context(raw(), backend="software")


# -- standalone lookup-table ops (a DPU-only task): rk3576/rv1126b and rk3562 maps -----------------------------


def _lut_nodes(name):
    loaded = load_model(str(CORPUS / f"{name}.rknn"))
    graph = vendor_lower.lower_rockchip(loaded.payload, loaded.model).graph
    return [n for n in graph.nodes if n.op == "VendorLutActivation"]


@needs_corpus
@pytest.mark.parametrize("name", ["standalone_lut_rk3576_i8", "standalone_lut_rk3562_i8"])
def test_standalone_sigmoid_and_swish_run_their_dpu_only_task(name):
    # exSwish then Sigmoid of one Concat; the slopes outside the tables are rk3588's values: Sigmoid's LE
    # underflow 0x5a43 / 2^22 (rk3576: 0x4150/0x4154 and 0x4160; rk3562: 0x4120/0x4124), exSwish's LO
    # overflow 0x4032 / 2^13 (rk3576: 0x4170/0x4174 and 0x4184; rk3562: 0x4128/0x412c)
    swish, sigmoid = _lut_nodes(name)
    assert (swish.attrs["le_uflow_slope"], swish.attrs["lo_oflow_slope"]) == (0.0, 0x4032 / 2 ** 13)
    assert (sigmoid.attrs["le_uflow_slope"], sigmoid.attrs["lo_oflow_slope"]) == (0x5A43 / 2 ** 22, 0.0)
    for y, ref, step in zip(*_against_the_simulator(name)):
        assert np.mean(np.abs(y - ref) <= step * 1.01) >= 0.99


@needs_corpus
@pytest.mark.parametrize("reg, old, new, named", [
    (0x4154, 0x5A435A43, 0x5A425A43, r"the LE underflow slope registers \['0x5a435a43', '0x5a425a43', '0x16161616'\]"),
    (0x4184, 0x0D0D0D0D, 0x0D0D0D0C, r"the LO overflow slope registers .*'0xd0d0d0c'\]"),
    (0x40B0, 0x17F81, 0x7F81, r"OUT_CVT scale/shift 0x7f81/0x16 .* a 16-bit scale with bit 16 set"),
])
def test_rk3576_standalone_lookup_task_outside_the_observed_layout_is_refused_by_name(reg, old, new, named):
    with pytest.raises(ModelInvalidError, match=r"on rk3576/rv1126b: .*" + named):
        rknnlite.Context(_doctored("standalone_lut_rk3576_i8", reg, old, new), backend="software")


@needs_corpus
@pytest.mark.parametrize("name, old, named", [
    # a lookup-table conv of several channels: never seen with a plain bias (one of one channel has it)
    ("conv_hardsigmoid_rk3576_i8", 0x80011111, r"BS_ALU_CFG \(0x4050\) = 0x80021111 on an rk3576/rv1126b int8 conv: "
                                               r"bias layout 2 \(bits 16..19\); only per-channel bias blocks \(1\)"),
    # a conv: reads the weight zero point from the BScfgTensor, which holds a per-channel conv's words here
    ("conv_relu6_rk3576_i8", 0x80011111,
     r"'y_BScfgTensor' \(NPU shape \[1, 1, 1, 1, 8\]\) starts \[3598, 0, .*the negated weight zero point"),
])
def test_rk3576_plain_bias_layout_is_refused_by_name(name, old, named):
    # 0x4050 bits 16..19 = 2: a plain int32 bias (per-layer files; YOLOv8's one-channel DFL conv, whose weight
    # zero point of -128 was read as 0 from a bias block before: 255 steps off), where the file is not one
    raw = _doctored(name, 0x4050, old, old + 0x10000)
    with pytest.raises(ModelInvalidError, match=named):
        rknnlite.Context(raw, backend="software")


@needs_corpus
@pytest.mark.parametrize("name", ["one_channel_lut_rk3576_i8", "one_channel_lut_rv1126b_i8"])
def test_a_lookup_table_conv_of_one_channel_takes_a_plain_bias(name, tmp_path):
    # HardSigmoid, Sigmoid and HardSwish after a Conv 4->1: BS_ALU_CFG bias layout 2, no multiplier stage, the
    # weight zero point negated in word 0 of its BScfgTensor (random graph 109: refused before)
    assert len(_lut_nodes(name)) == 3
    (y, *_), (ref, *_), (step, *_) = _against_the_simulator(name)
    assert np.mean(np.abs(y - ref) <= step * 1.0001) >= 0.99

    data = bytearray((CORPUS / f"{name}.rknn").read_bytes())
    view = tensor_bytes(data, "hsig_BScfgTensor")
    assert struct.unpack_from("<i", view, 4)[0] == 0
    struct.pack_into("<i", view, 4, 7)  # word 1, zero after the zero point
    path = tmp_path / "doctored.rknn"
    path.write_bytes(bytes(data))
    with pytest.raises(ModelInvalidError, match=r"'hsig_BScfgTensor' .* starts .*the negated weight zero point"):
        rknnlite.Context(str(path), backend="software")


@needs_corpus
def test_rk3576_hard_swish_convs_run_from_the_file_s_tables():
    # with the slopes beyond the tables decoded, rk3576's int8 ConvHardSwish runs its own table (the exact
    # function matched 90.6 % of hardswish_ops' first output exactly, the table 97.5 %)
    name = "hardswish_ops_rk3576_i8"
    # the two HardSwish convs (a linear slope above their tables) and the HardSigmoid gate (none)
    tables = [n.attrs["lo_oflow_slope"] for n in _lut_nodes(name)]
    assert len(tables) == 3 and sum(slope > 0 for slope in tables) == 2
    (y, *_), (ref, *_), (step, *_) = _against_the_simulator(name)
    assert np.mean(np.abs(y - ref) < step / 2) >= 0.97
