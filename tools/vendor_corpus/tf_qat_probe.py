"""TensorFlow quantization-aware probe graphs, built and run by RKNN-Toolkit2 (a maintainer tool).

Writes frozen TF1 graphs with ``tf.contrib.quantize``'s naming, which the vendor's QAT reader
needs (``<scope>/weights_quant/FakeQuantWithMinMaxVars`` on a weight, its ``min``/``max``
constants read through ``/read`` Identities; ``<scope>/act_quant/...`` on an activation), builds
each with RKNN-Toolkit2 (``do_quantization=False``: the graph's own grids), runs the simulator
and saves, per probe: the ``.pb``, the input, TensorFlow's output, the vendor's output, and
every int8 weight of the vendor file (its codes, scale and zero point, decoded with
``rkdump``).  Run it in the vendor-toolkit venv (TensorFlow 2.15 and ``rknn-toolkit2`` installed,
see docs/vendor-format-notes.md)::

    PYTHONPATH=. /var/tmp/rkt/bin/python tools/vendor_corpus/tf_qat_probe.py --out /tmp/tfq

Probes: ``dw`` (conv -> Relu6 -> depthwise conv with a FakeQuant'd weight -> Relu6 -> conv),
``dense`` (conv -> Relu6 -> flatten -> MatMul with a FakeQuant'd weight), each with a
narrow-range symmetric weight grid (``_narrow``) and an asymmetric one (``_asym``).  Compare with
``rknnlite.toolkit`` on the same ``.pb`` (``tests/test_load_tensorflow.py`` pins what was found).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SHAPE = [1, 8, 8, 3]
WEIGHT_RANGES = {"narrow": (-0.9, 0.9, True), "asym": (-0.5, 1.0, False)}


def build_graph(kind: str, weight_range, seed: int = 1):
    """The frozen ``GraphDef`` of one probe, and a function running it on an input."""
    import tensorflow as tf

    lo, hi, narrow = weight_range
    rng = np.random.default_rng(seed)
    g = tf.Graph()
    with g.as_default():
        def var(name, value):
            c = tf.constant(np.asarray(value, np.float32), name=name)
            return tf.identity(c, name=name + "/read")

        def fake_quant(v, scope, lo_, hi_, narrow_=False):
            return tf.quantization.fake_quant_with_min_max_vars(
                v, var(scope + "/min", lo_), var(scope + "/max", hi_), narrow_range=narrow_,
                name=scope + "/FakeQuantWithMinMaxVars")

        def weight(scope, shape):
            w = var(scope + "/weights", np.clip(rng.standard_normal(shape) * 0.5, lo, hi))
            return fake_quant(w, scope + "/weights_quant", lo, hi, narrow)

        x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="input")
        y = tf.nn.conv2d(x, weight("Conv1", (3, 3, 3, 8)), strides=1, padding="SAME", name="Conv1/Conv2D")
        y = fake_quant(tf.nn.relu6(y, name="Conv1/Relu6"), "Conv1/act_quant", 0.0, 6.0)
        if kind == "dw":
            y = tf.nn.depthwise_conv2d(y, weight("DW", (3, 3, 8, 1)), strides=[1, 1, 1, 1], padding="SAME",
                                       name="DW/depthwise")
            y = fake_quant(tf.nn.relu6(y, name="DW/Relu6"), "DW/act_quant", 0.0, 6.0)
            y = tf.nn.conv2d(y, weight("Conv2", (1, 1, 8, 4)), strides=1, padding="SAME", name="Conv2/Conv2D")
        elif kind == "conv":
            y = tf.nn.conv2d(y, weight("Conv2", (3, 3, 8, 4)), strides=1, padding="SAME", name="Conv2/Conv2D")
        elif kind == "first":
            tf.identity(y, name="out")
            return g.as_graph_def(), _runner(g)
        elif kind == "dense":
            y = tf.reshape(y, [1, -1], name="Flatten")
            y = tf.matmul(y, weight("FC", (8 * 8 * 8, 10)), name="FC/MatMul")
        else:
            raise ValueError(kind)
        out = fake_quant(y, "Out/act_quant", -8.0, 8.0)
        tf.identity(out, name="out")
    return g.as_graph_def(), _runner(g)


def _runner(g):
    import tensorflow as tf

    def run(inp):
        with tf.compat.v1.Session(graph=g) as s:
            return s.run("out:0", {"input:0": inp})

    return run


def vendor_build(pb: str, rknn_path: str, inp: np.ndarray, platform: str):
    from rknn.api import RKNN

    r = RKNN(verbose=False)
    r.config(target_platform=platform)
    assert r.load_tensorflow(pb, inputs=["input"], input_size_list=[SHAPE], outputs=["out"]) == 0
    assert r.build(do_quantization=False) == 0
    assert r.export_rknn(rknn_path) == 0
    assert r.init_runtime() == 0
    (y,) = r.inference(inputs=[inp])
    r.release()
    return y


def vendor_weights(rknn_path: str):
    """Every int8 constant of the vendor file: {name: (codes OIHW, scale, zero point)}."""
    from rkdump import RknnFile
    from rknnlite.model.rknn_graph.weights import decode_weight

    f = RknnFile(rknn_path)
    out = {}
    for t in f.tensors():
        if t.kind == 4 and t.dtype == 3 and len(t.shape) == 4:
            codes = decode_weight(f.tensor_data(t), t.npu_shape, t.shape, "int8", t.name)
            out[t.name] = (codes, list(t.scale), list(t.zp))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--platform", default="rk3566")
    ap.add_argument("kinds", nargs="*", default=["dw", "dense"], help="probe kinds (default: all)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    inp = np.random.default_rng(7).uniform(-1, 1, SHAPE).astype(np.float32)
    for kind in args.kinds:
        for rname, wr in WEIGHT_RANGES.items():
            name = f"{kind}_{rname}"
            graph_def, run = build_graph(kind, wr)
            pb = os.path.join(args.out, name + ".pb")
            with open(pb, "wb") as f:
                f.write(graph_def.SerializeToString())
            np.save(os.path.join(args.out, name + "_x.npy"), inp)
            np.save(os.path.join(args.out, name + "_tf.npy"), run(inp))
            rk = os.path.join(args.out, name + ".rknn")
            np.save(os.path.join(args.out, name + "_vendor.npy"), vendor_build(pb, rk, inp, args.platform))
            weights = vendor_weights(rk)
            np.savez(os.path.join(args.out, name + "_weights.npz"), **{k: v[0] for k, v in weights.items()})
            with open(os.path.join(args.out, name + "_grids.json"), "w") as f:
                json.dump({k: v[1:] for k, v in weights.items()}, f, indent=1)
            print(name, {k: (v[0].shape, v[1][:2], v[2][:2]) for k, v in weights.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
