"""Full-integer uint8 TFLite probe (a MobileNetV1-like block stack), built and run by RKNN-Toolkit2.

A maintainer tool for the ``tflite/mobilenet_v1_qat`` comparison (docs/vendor-examples.md):
writes a small Keras MobileNetV1-like net (conv 3x3/2, depthwise-separable blocks with ReLU6,
global average pool, 1x1 conv classifier, softmax) converted by TensorFlow's own converter to a
full-integer TFLite file with uint8 (``--int8``: int8) input and output, then builds it with RKNN-Toolkit2
(``do_quantization=False``, rk3566) and runs the simulator (its ``accuracy_analysis`` refuses
a quantized model without a board: "The QAT model need set 'target'!").  Run it in the vendor-toolkit venv::

    PYTHONPATH=. /var/tmp/rkt/bin/python tools/vendor_corpus/tflite_uint8_probe.py --out /tmp/tfl8

Saves ``model.tflite``, ``x.npy`` (the uint8 NHWC image), ``tflite.npy`` (the interpreter's
output) and ``vendor.npy`` (the simulator's); with ``--features`` also ``tflite1.npy`` and
``vendor1.npy`` (the second output, in the interpreter's output order).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

SIZE = 64


def make_model(seed: int = 3, qtype: str = "uint8", features: bool = False):
    import tensorflow as tf

    tf.keras.utils.set_random_seed(seed)
    L = tf.keras.layers
    x = inp = L.Input((SIZE, SIZE, 3), batch_size=1)
    x = L.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(x)
    x = L.BatchNormalization()(x)
    x = L.ReLU(6.0)(x)
    for filters, stride in ((32, 1), (64, 2), (64, 1), (128, 2)):
        x = L.DepthwiseConv2D(3, strides=stride, padding="same", use_bias=False)(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU(6.0)(x)
        x = L.Conv2D(filters, 1, use_bias=False)(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU(6.0)(x)
    feat = x
    x = L.GlobalAveragePooling2D(keepdims=True)(x)
    x = L.Conv2D(10, 1)(x)
    x = L.Reshape((10,))(x)
    out = L.Softmax()(x)
    model = tf.keras.Model(inp, [feat, out] if features else out)
    rng = np.random.default_rng(seed)
    images = [rng.uniform(-1, 1, (8, SIZE, SIZE, 3)).astype(np.float32) for _ in range(4)]
    # batch-norm statistics measured on the images, so activations stay in range
    for layer in model.layers:
        if isinstance(layer, L.BatchNormalization):
            probe = tf.keras.Model(inp, layer.input)
            v = np.concatenate([probe(b).numpy() for b in images]).reshape(-1, layer.input.shape[-1])
            gamma, beta = rng.uniform(0.5, 1.5, v.shape[1]), rng.uniform(-0.2, 0.5, v.shape[1])
            layer.set_weights([gamma, beta, v.mean(0), v.var(0)])

    def rep():
        for b in images:
            for i in range(b.shape[0]):
                yield [b[i:i + 1]]

    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = rep
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = getattr(tf, qtype)
    conv.inference_output_type = getattr(tf, qtype)
    return conv.convert()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--platform", default="rk3566")
    ap.add_argument("--int8", action="store_true", help="int8 input and output instead of uint8")
    ap.add_argument("--features", action="store_true",
                    help="also output the last block's feature map (8 x 8 x 128): a per-element comparison")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    os.chdir(args.out)
    import tensorflow as tf

    with open("model.tflite", "wb") as f:
        f.write(make_model(qtype="int8" if args.int8 else "uint8", features=args.features))
    lo = -128 if args.int8 else 0
    x = np.random.default_rng(11).integers(lo, lo + 256, (1, SIZE, SIZE, 3)).astype(np.int8 if args.int8 else np.uint8)
    np.save("x.npy", x)
    interp = tf.lite.Interpreter(model_path="model.tflite")
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    for k, d in enumerate(interp.get_output_details()):
        np.save(f"tflite{k or ''}.npy", interp.get_tensor(d["index"]))

    from rknn.api import RKNN

    r = RKNN(verbose=False)
    r.config(target_platform=args.platform)
    assert r.load_tflite("model.tflite") == 0
    assert r.build(do_quantization=False) == 0
    assert r.export_rknn("model.rknn") == 0
    assert r.init_runtime() == 0
    for k, y in enumerate(r.inference(inputs=[x])):
        np.save(f"vendor{k or ''}.npy", y)
    r.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
