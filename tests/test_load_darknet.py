"""``RKNN.load_darknet`` / :mod:`rknnlite.toolkit.loaders.darknet`: Darknet cfg + weights.

The oracle is an independent numpy model of Darknet's forward pass written here (batch
norm applied explicitly, Darknet's max-pool window loop), fed the same random weights
that the test serialises into the ``.weights`` file.
"""

from __future__ import annotations

import logging
import sys

import numpy as np
import pytest

pytest.importorskip("onnx")

from rknnlite import ModelInvalidError  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402
from rknnlite.toolkit.loaders.darknet import load_darknet, parse_cfg, read_weights, yolo_heads  # noqa: E402

# -- the network description used by both the cfg writer and the reference ------------------


def conv(filters, size=3, stride=1, bn=1, act="leaky", pad=1, groups=1, **extra):
    opts = dict(batch_normalize=bn, filters=filters, size=size, stride=stride, pad=pad, activation=act)
    if groups != 1:
        opts["groups"] = groups
    opts.update(extra)
    return ("convolutional", opts)


def maxpool(size=2, stride=2, **extra):
    return ("maxpool", dict(size=size, stride=stride, **extra))


YOLO_A = dict(mask="3,4,5", anchors="10,14, 23,27, 37,58, 81,82, 135,169, 344,319", classes=2, num=6)
YOLO_B = dict(mask="0,1,2", anchors="10,14, 23,27, 37,58, 81,82, 135,169, 344,319", classes=2, num=6)
HEAD = 3 * (5 + 2)

# yolov3-tiny's layer structure with 1/8 of its filters and a 96x96 input (3x3 at the end).
YOLOV3_TINY = [
    conv(2), maxpool(), conv(4), maxpool(), conv(8), maxpool(), conv(16), maxpool(), conv(32), maxpool(),
    conv(64), maxpool(2, 1), conv(128), conv(32, 1), conv(64), conv(HEAD, 1, bn=0, act="linear"),
    ("yolo", YOLO_A),
    ("route", dict(layers="-4")), conv(16, 1), ("upsample", dict(stride=2)), ("route", dict(layers="-1, 8")),
    conv(32), conv(HEAD, 1, bn=0, act="linear"), ("yolo", YOLO_B),
]

# yolov4-tiny style: grouped route (CSP split), mish/swish, shortcut, SPP-like pools.
CSP = [
    conv(8, 3, 2, act="mish"), conv(8, act="swish"),
    ("route", dict(layers="-1", groups=2, group_id=1)), conv(4, act="mish"), conv(4, act="leaky"),
    ("route", dict(layers="-1,-2")), conv(8, 1), ("shortcut", dict(**{"from": "-6"}, activation="linear")),
    ("route", dict(layers="-7, -1")), maxpool(2, 2),
    maxpool(5, 1), ("route", dict(layers="-2")), maxpool(3, 1), ("route", dict(layers="-1,-3,-4")),
    conv(6, 3, 1, groups=2), ("shortcut", dict(**{"from": "-1"}, alpha=0.5, beta=2.0, activation="leaky")),
    conv(HEAD, 1, bn=0, act="linear"), ("yolo", YOLO_B),
]


def cfg_text(layers, c=3, h=96, w=96, net_extra="") -> bytes:
    lines = ["# written by the test", "[net]", "batch=64", "subdivisions=8", f"width={w}", f"height={h}",
             f"channels={c}", "momentum=0.9", net_extra, ""]
    for kind, opts in layers:
        lines.append(f"[{kind}]")
        lines += [f"{k} = {v}" for k, v in opts.items()]
        lines.append("")
    return "\n".join(lines).encode()


def header(major=0, minor=2, revision=0, seen=32013312) -> bytes:
    wide = major * 10 + minor >= 2 and major < 1000 and minor < 1000
    return np.array([major, minor, revision], "<i4").tobytes() + np.array([seen], "<i8" if wide else "<i4").tobytes()


def make_weights(layers, c, seed=0):
    """Random weights per conv layer (index -> dict) and their darknet serialisation."""
    rng = np.random.default_rng(seed)
    params, chunks, channels = {}, [], []
    for i, (kind, o) in enumerate(layers):
        if kind == "convolutional":
            cin = channels[-1] if channels else c
            f, k, g = o["filters"], o.get("size", 1), o.get("groups", 1)
            fan_in = cin // g * k * k
            p = dict(bias=rng.uniform(-0.5, 0.5, f), kernel=rng.standard_normal((f, cin // g, k, k)) / np.sqrt(fan_in))
            if o["batch_normalize"]:
                p.update(scale=rng.uniform(0.5, 1.5, f), mean=rng.uniform(-0.3, 0.3, f), var=rng.uniform(0.5, 1.5, f))
                order = ("bias", "scale", "mean", "var", "kernel")
            else:
                order = ("bias", "kernel")
            p = {k: v.astype(np.float32) for k, v in p.items()}
            params[i] = p
            chunks += [p[n].ravel() for n in order]
        channels.append(_out_channels(kind, o, channels, c, i))
    blob = np.concatenate(chunks).astype("<f4").tobytes() if chunks else b""
    return params, blob


def _out_channels(kind, o, channels, c, i):
    prev = channels[-1] if channels else c
    if kind == "convolutional":
        return o["filters"]
    if kind == "route":
        idx = [int(v) for v in str(o["layers"]).split(",")]
        return sum(channels[i + v if v < 0 else v] for v in idx) // o.get("groups", 1)
    return prev


# -- the reference -----------------------------------------------------------------------------


def ref_conv(x, kernel, stride, pad, groups):
    cin, h, w = x.shape
    f, _, k, _ = kernel.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    out = np.zeros((f, oh, ow))
    cg, fg = cin // groups, f // groups
    for g in range(groups):
        for i in range(k):
            for j in range(k):
                patch = xp[g * cg:(g + 1) * cg, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
                out[g * fg:(g + 1) * fg] += np.einsum("fc,chw->fhw", kernel[g * fg:(g + 1) * fg, :, i, j], patch)
    return out


def ref_maxpool(x, size, stride, padding):
    c, h, w = x.shape
    oh, ow = (h + padding - size) // stride + 1, (w + padding - size) // stride + 1
    off = -(padding // 2)
    out = np.full((c, oh, ow), -np.inf)
    for i in range(oh):
        for j in range(ow):
            for n in range(size):
                for m in range(size):
                    r, s = off + i * stride + n, off + j * stride + m
                    if 0 <= r < h and 0 <= s < w:
                        out[:, i, j] = np.maximum(out[:, i, j], x[:, r, s])
    return out


def ref_act(x, act):
    return {
        "linear": lambda v: v,
        "leaky": lambda v: np.where(v > 0, v, 0.1 * v),
        "relu": lambda v: np.maximum(v, 0),
        "relu6": lambda v: np.clip(v, 0, 6),
        "logistic": lambda v: 1 / (1 + np.exp(-v)),
        "tanh": np.tanh,
        "elu": lambda v: np.where(v >= 0, v, np.exp(v) - 1),
        "mish": lambda v: v * np.tanh(np.log1p(np.exp(v))),
        "swish": lambda v: v / (1 + np.exp(-v)),
    }[act](x)


def ref_forward(layers, params, x):
    """Darknet's forward pass on one (C, H, W) float64 image; returns the [yolo] inputs
    (or the last output when there are none)."""
    outs, heads = [], []
    cur = x
    for i, (kind, o) in enumerate(layers):
        if kind == "convolutional":
            p = params[i]
            size = o.get("size", 1)  # Darknet's defaults: size 1, stride 1, no padding
            pad = size // 2 if o.get("pad") else o.get("padding", 0)
            y = ref_conv(cur, p["kernel"].astype(np.float64), o.get("stride", 1), pad, o.get("groups", 1))
            if o["batch_normalize"]:
                y = (y - p["mean"][:, None, None]) / np.sqrt(p["var"][:, None, None] + .00001)
                y = y * p["scale"][:, None, None] + p["bias"][:, None, None]
            else:
                y = y + p["bias"][:, None, None]
            cur = ref_act(y, o.get("activation", "logistic"))
        elif kind == "maxpool":
            cur = ref_maxpool(cur, o["size"], o["stride"], o.get("padding", o["size"] - 1))
        elif kind == "route":
            parts = []
            for v in str(o["layers"]).split(","):
                src = outs[i + int(v) if int(v) < 0 else int(v)]
                g, gid = o.get("groups", 1), o.get("group_id", 0)
                n = src.shape[0] // g
                parts.append(src[gid * n:(gid + 1) * n])
            cur = np.concatenate(parts, axis=0)
        elif kind == "shortcut":
            src = outs[i + int(o["from"])]
            cur = ref_act(o.get("alpha", 1.0) * cur + o.get("beta", 1.0) * src, o.get("activation", "linear"))
        elif kind == "upsample":
            cur = cur.repeat(o["stride"], axis=1).repeat(o["stride"], axis=2)
        elif kind == "yolo":
            heads.append(cur)
        outs.append(cur)
    return heads or [cur]


# -- helpers -------------------------------------------------------------------------------------


def messages(caplog, level=logging.ERROR):
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def write_model(tmp_path, layers, c=3, h=96, w=96, seed=0, ver=(0, 2, 0)):
    params, blob = make_weights(layers, c, seed)
    cfg, weights = tmp_path / "net.cfg", tmp_path / "net.weights"
    cfg.write_bytes(cfg_text(layers, c, h, w))
    weights.write_bytes(header(*ver) + blob)
    return cfg, weights, params


def convert_and_run(cfg, weights, x, dynamic_input=None):
    rknn = RKNN()
    assert rknn.config(float_dtype="float32", dynamic_input=dynamic_input) == 0
    assert rknn.load_darknet(model=str(cfg), weight=str(weights)) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    outs = rknn.inference([x], data_format="nchw")
    rknn.release()
    return outs


def assert_close(out, ref):
    ref = np.asarray(ref)
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def image(c, h, w, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (1, c, h, w)).astype(np.float32)


# -- conversion against the reference -------------------------------------------------------------


def test_yolov3_tiny_matches_darknet_reference(tmp_path):
    cfg, weights, params = write_model(tmp_path, YOLOV3_TINY)
    x = image(3, 96, 96)
    outs = convert_and_run(cfg, weights, x)
    refs = ref_forward(YOLOV3_TINY, params, x[0].astype(np.float64))
    assert [o.shape for o in outs] == [(1, HEAD, 3, 3), (1, HEAD, 6, 6)]
    for out, ref in zip(outs, refs):
        assert_close(out, ref[None])


def test_full_size_yolov3_tiny_converts():
    """The real yolov3-tiny layout (416x416, 80 classes): the weights it needs add up to the
    size of the published yolov3-tiny.weights (35434956 bytes), and it converts."""
    full = [conv(16), maxpool(), conv(32), maxpool(), conv(64), maxpool(), conv(128), maxpool(), conv(256),
            maxpool(), conv(512), maxpool(2, 1), conv(1024), conv(256, 1), conv(512),
            conv(255, 1, bn=0, act="linear"), ("yolo", dict(YOLO_A, classes=80)), ("route", dict(layers="-4")),
            conv(128, 1), ("upsample", dict(stride=2)), ("route", dict(layers="-1, 8")), conv(256),
            conv(255, 1, bn=0, act="linear"), ("yolo", dict(YOLO_B, classes=80))]
    cfg = cfg_text(full, 3, 416, 416)
    with pytest.raises(ModelInvalidError, match="a file of 35434956 bytes; found 20 bytes"):
        load_darknet(cfg, header())
    weights = header() + np.random.default_rng(0).uniform(-0.05, 0.05, 8858734).astype("<f4").tobytes()
    imported = load_darknet(cfg, weights)
    assert [(s.name, s.shape) for s in imported.output_specs] == [("yolo_16", (1, 255, 13, 13)),
                                                                  ("yolo_23", (1, 255, 26, 26))]


def test_io_names_and_yolo_heads(tmp_path):
    cfg, weights, _ = write_model(tmp_path, YOLOV3_TINY)
    imported = load_darknet(str(cfg), str(weights))
    assert [(s.name, s.shape, s.layout) for s in imported.input_specs] == [("input", (1, 3, 96, 96), "NCHW")]
    assert [(s.name, s.shape) for s in imported.output_specs] == [("yolo_16", (1, HEAD, 3, 3)),
                                                                  ("yolo_23", (1, HEAD, 6, 6))]
    heads = yolo_heads(str(cfg))
    assert [h["output"] for h in heads] == ["yolo_16", "yolo_23"]
    assert heads[0]["mask"] == [3, 4, 5] and heads[1]["mask"] == [0, 1, 2]
    assert heads[0]["anchors"][5] == (344.0, 319.0) and len(heads[0]["anchors"]) == 6
    assert heads[0]["classes"] == 2 and heads[0]["layer"] == 16


def test_csp_route_groups_shortcut_mish_swish(tmp_path):
    cfg, weights, params = write_model(tmp_path, CSP, h=20, w=18, seed=3)
    x = image(3, 20, 18, seed=4)
    (out,) = convert_and_run(cfg, weights, x)
    (ref,) = ref_forward(CSP, params, x[0].astype(np.float64))
    assert_close(out, ref[None])


@pytest.mark.parametrize("act", ["linear", "leaky", "relu", "relu6", "logistic", "tanh", "elu", "mish", "swish",
                                 None])
def test_activations(tmp_path, act):
    layer = conv(4, 3, 1, bn=0, act=act)
    if act is None:
        del layer[1]["activation"]  # Darknet's default is logistic
    layers = [layer]
    cfg, weights, params = write_model(tmp_path, layers, c=2, h=7, w=5)
    x = image(2, 7, 5) * 4
    (out,) = convert_and_run(cfg, weights, x)
    assert_close(out, ref_forward(layers, params, x[0].astype(np.float64))[0][None])


@pytest.mark.parametrize("pool,size", [
    (dict(size=2, stride=2), 13),           # odd input: the far edge is padded -> 7x7
    (dict(size=2, stride=1), 13),           # yolov3-tiny's 13 -> 13
    (dict(size=3, stride=2), 12),
    (dict(size=3, stride=2, padding=0), 9),
    (dict(size=5, stride=1), 6),            # SPP
    (dict(size=2, stride=2, padding=3), 8),
])
def test_maxpool_windows_match_darknet(tmp_path, pool, size):
    layers = [conv(3, 1, 1, bn=0, act="linear"), ("maxpool", pool)]
    cfg, weights, params = write_model(tmp_path, layers, c=3, h=size, w=size)
    x = image(3, size, size)
    (out,) = convert_and_run(cfg, weights, x)
    assert_close(out, ref_forward(layers, params, x[0].astype(np.float64))[0][None])


def test_conv_options_stride_padding_default_size(tmp_path):
    layers = [conv(4, 3, 2, pad=0, padding=2, act="relu"), ("convolutional", dict(batch_normalize=0, filters=3,
                                                                                 activation="linear")),
              ("upsample", dict(stride=3)), ("dropout", dict(probability=0.5)), ("avgpool", {})]
    cfg, weights, params = write_model(tmp_path, layers, c=3, h=11, w=10)
    x = image(3, 11, 10)
    (out,) = convert_and_run(cfg, weights, x)
    ref = ref_forward(layers[:4], params, x[0].astype(np.float64))[0]
    assert out.shape == (1, 3, 1, 1)
    assert_close(out, ref.mean(axis=(1, 2), keepdims=True)[None])


def test_upsample_scale(tmp_path):
    layers = [conv(2, 1, 1, bn=0, act="linear"), ("upsample", dict(stride=2, scale=0.5))]
    cfg, weights, params = write_model(tmp_path, layers, c=2, h=3, w=4)
    x = image(2, 3, 4)
    (out,) = convert_and_run(cfg, weights, x)
    assert_close(out, 0.5 * ref_forward(layers, params, x[0].astype(np.float64))[0][None])


def test_stride_x_stride_y(tmp_path):
    """Separate strides equal the stride-1 result subsampled along that axis."""
    layers = [conv(3, 3, 1, act="leaky", stride_x=2, stride_y=1), maxpool(3, 1, stride_y=2)]
    cfg, weights, params = write_model(tmp_path, layers, c=2, h=9, w=11)
    x = image(2, 9, 11)
    (out,) = convert_and_run(cfg, weights, x)
    plain = [conv(3, 3, 1, act="leaky"), maxpool(3, 1)]
    c0 = ref_forward(plain[:1], params, x[0].astype(np.float64))[0][:, :, ::2]
    ref = ref_maxpool(c0, 3, 1, 2)[:, ::2, :]
    assert_close(out, ref[None])


def test_region_head_output(tmp_path):
    layers = [conv(10, 1, 1, bn=0, act="linear"), ("region", dict(anchors="1,2,3,4", classes=0, num=2))]
    params, blob = make_weights(layers, 2)
    cfg = cfg_text(layers, 2, 4, 4)
    imported = load_darknet(cfg, header() + blob)
    assert [(s.name, s.shape) for s in imported.output_specs] == [("region_1", (1, 10, 4, 4))]
    (head,) = yolo_heads(cfg)
    assert head["type"] == "region" and head["anchors"] == [(1.0, 2.0), (3.0, 4.0)] and head["mask"] == [0, 1]


@pytest.mark.parametrize("ver", [(0, 1, 0), (0, 2, 0), (1, 0, 0), (1000, 2, 0)])
def test_weights_header_versions(tmp_path, ver):
    layers = [conv(3, 3, 1, act="leaky")]
    cfg, weights, params = write_model(tmp_path, layers, c=2, h=5, w=5, ver=ver)
    parsed = read_weights(str(weights))
    wide = ver[0] * 10 + ver[1] >= 2 and ver[0] < 1000
    assert parsed.version == ver and parsed.header_size == (20 if wide else 16) and parsed.seen == 32013312
    x = image(2, 5, 5)
    (out,) = convert_and_run(cfg, weights, x)
    assert_close(out, ref_forward(layers, params, x[0].astype(np.float64))[0][None])


def test_bytes_inputs_and_no_yolo_output_name(tmp_path):
    layers = [conv(3, 3, 1, act="leaky"), maxpool()]
    params, blob = make_weights(layers, 2)
    imported = load_darknet(cfg_text(layers, 2, 6, 6), header() + blob)
    assert [s.name for s in imported.output_specs] == ["output"]
    assert imported.output_specs[0].shape == (1, 3, 3, 3)


def test_dynamic_input_sizes(tmp_path):
    cfg, weights, params = write_model(tmp_path, YOLOV3_TINY[:16] + [YOLOV3_TINY[16]], h=64, w=64)
    sets = [[[1, 3, 64, 64]], [[1, 3, 96, 128]]]
    rknn = RKNN()
    assert rknn.config(float_dtype="float32", dynamic_input=sets) == 0
    assert rknn.load_darknet(str(cfg), str(weights)) == 0
    assert rknn.build() == 0 and rknn.init_runtime() == 0
    for shape in ([1, 3, 64, 64], [1, 3, 96, 128]):
        x = image(*shape[1:])
        (out,) = rknn.inference([x], data_format="nchw")
        assert_close(out, ref_forward(YOLOV3_TINY[:17], params, x[0].astype(np.float64))[0][None])
    rknn.release()


# -- errors ------------------------------------------------------------------------------------------


def test_unknown_section_names_section_and_line(tmp_path, toolkit_log):
    text = cfg_text([conv(2), ("fancylayer", dict(size=2)), conv(2)], 3, 8, 8)
    line = text.decode().splitlines().index("[fancylayer]") + 1
    params, blob = make_weights([conv(2)], 3)
    with pytest.raises(ModelInvalidError, match=rf"line {line}: section \[fancylayer\] \(layer 1\) is not supported"):
        load_darknet(text, header() + blob)
    cfg = tmp_path / "bad.cfg"
    cfg.write_bytes(text)
    (tmp_path / "w.weights").write_bytes(header() + blob)
    rknn = RKNN()
    assert rknn.load_darknet(str(cfg), str(tmp_path / "w.weights")) == -1
    (err,) = messages(toolkit_log)
    assert "[fancylayer]" in err and f"line {line}" in err and str(cfg) in err and "supported:" in err


def test_short_weights_names_expected_and_found_bytes(tmp_path, toolkit_log):
    cfg, weights, _ = write_model(tmp_path, YOLOV3_TINY)
    data = weights.read_bytes()
    need = len(data) - 20
    weights.write_bytes(data[:-40])
    rknn = RKNN()
    assert rknn.load_darknet(str(cfg), str(weights)) == -1
    (err,) = messages(toolkit_log)
    assert f"{need} bytes" in err and f"a file of {need + 20} bytes" in err and f"found {len(data) - 40} bytes" in err
    assert str(weights) in err
    # the object stays usable
    weights.write_bytes(data)
    assert rknn.load_darknet(str(cfg), str(weights)) == 0


def test_a_forged_layer_size_is_a_short_weights_file_not_a_memory_error():
    """filters=99999999 wanted 26.8 GiB of zeros before the short file was refused (a cfg
    mutation run found it); sizes past the weights' end allocate nothing now."""
    cfg = cfg_text([conv(99999999, 3), conv(8, 3)], 3, 8, 8)
    with pytest.raises(ModelInvalidError, match=r"the network needs \d+ float32 values"):
        load_darknet(cfg, header() + np.zeros(10, "<f4").tobytes())


def test_weights_shorter_than_header(tmp_path):
    layers = [conv(2)]
    cfg = cfg_text(layers, 3, 8, 8)
    with pytest.raises(ModelInvalidError, match="is 8 bytes"):
        load_darknet(cfg, header()[:8])
    with pytest.raises(ModelInvalidError, match=r"is 16 bytes; its header \(version 0.2.0\) needs 20 bytes"):
        load_darknet(cfg, header()[:16])


def test_trailing_weights_warn(tmp_path, toolkit_log):
    cfg, weights, _ = write_model(tmp_path, [conv(2)], h=8, w=8)
    weights.write_bytes(weights.read_bytes() + b"\0" * 12)
    assert RKNN().load_darknet(str(cfg), str(weights)) == 0
    assert any("12 bytes after the last layer" in m for m in messages(toolkit_log, logging.WARNING))


def test_missing_files(tmp_path, toolkit_log):
    cfg, weights, _ = write_model(tmp_path, [conv(2)], h=8, w=8)
    rknn = RKNN()
    assert rknn.load_darknet(str(tmp_path / "nope.cfg"), str(weights)) == -1
    assert rknn.load_darknet(str(cfg), str(tmp_path / "nope.weights")) == -1
    errs = messages(toolkit_log)
    assert "cfg file not found" in errs[0] and "nope.cfg" in errs[0]
    assert "weights file not found" in errs[1] and "nope.weights" in errs[1]
    with pytest.raises(ModelInvalidError, match="must be a path or bytes"):
        load_darknet(123, str(weights))


@pytest.mark.parametrize("text,match", [
    (b"[convolutional]\nfilters=2\n", r"first section is \[convolutional\]"),
    (b"filters=2\n[net]\n", "line 1: option 'filters' before the first"),
    (b"[net]\nwidth=8\nthis is not an option\n", "line 3: expected 'key=value'"),
    (b"[net]\nwidth=8\n[\n", "line 3: malformed section header"),
    (b"# nothing\n", "has no sections"),
    (b"\xff\xfe[net]", "not a text file"),
    (b"[net]\nwidth=8\nheight=8\n", "needs positive channels"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n", "no layers"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=two\n", "line 6: .* filters='two' is not an"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=2\nactivation=gelu\n",
     "line 7: activation 'gelu' .* not supported; supported: linear, leaky"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=2\ndilation=2\n",
     r"line 7: \[convolutional\] dilation=2 is not supported"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=2\nsize=11\n", "does not fit"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[convolutional]\nfilters=3\ngroups=2\n", "groups=2 must divide"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[route]\nlayers=-1\n", "not an earlier layer"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[maxpool]\n[route]\nlayers=5\n", r"refers to layer 5 -> 5"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[maxpool]\n[shortcut]\nfrom=-1\nweights_type=per_channel\n",
     "weights_type=per_channel is not supported"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[maxpool]\n[yolo]\n[route]\nlayers=-1\n",
     r"reads the decoded output of \[yolo\] layer 1"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[maxpool]\n[yolo]\n[maxpool]\n", r"decoded output of \[yolo\]"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[maxpool]\n[maxpool]\nstride=2\n[route]\nlayers=0,1\n",
     "concatenates outputs of different sizes"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[maxpool]\n[maxpool]\nstride=2\n[shortcut]\nfrom=0\n",
     "only equal shapes"),
    (b"[net]\nwidth=8\nheight=8\nchannels=3\n[maxpool]\n[route]\nlayers=0\ngroups=2\ngroup_id=0\n",
     "groups=2 does not divide the 3 channels"),
])
def test_malformed_cfg(text, match):
    with pytest.raises(ModelInvalidError, match=match):
        load_darknet(text, header() + b"\0" * 4000)


def test_unknown_option_warns_and_training_keys_do_not(toolkit_log, tmp_path):
    layers = [conv(2, 3, 1, flavour=7, stopbackward=1)]
    cfg, weights, _ = write_model(tmp_path, layers, h=8, w=8)
    assert RKNN().load_darknet(str(cfg), str(weights)) == 0
    warns = messages(toolkit_log, logging.WARNING)
    assert any("option 'flavour' is not used" in m for m in warns)
    assert not any("stopbackward" in m or "momentum" in m for m in warns)


def test_parse_cfg_keeps_first_of_repeated_keys():
    (net, c) = parse_cfg(b"[net]\n width = 8 \n[convolutional]\nfilters=2\nfilters=3\n")
    assert net.type == "net" and net.options == {"width": "8"} and c.options["filters"] == "2" and c.line == 3


def test_missing_onnx_gives_install_hint(tmp_path, toolkit_log, monkeypatch):
    cfg, weights, _ = write_model(tmp_path, [conv(2)], h=8, w=8)
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` raises ImportError
    rknn = RKNN()
    assert rknn.load_darknet(str(cfg), str(weights)) == -1
    (err,) = messages(toolkit_log)
    assert "pip install 'rknnlite-runtime[toolkit]'" in err
