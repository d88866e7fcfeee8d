"""Tiny int8 Conv -> HardSwish / HardSigmoid models built by RKNN-Toolkit2 2.5.0 (rk3588): how
its simulator computes a fused ``ConvHardSwish`` (issue 21 point 4).  Two steps::

    /var/tmp/rkt/bin/python tools/vendor_corpus/hardswish_sim.py build OUT
    PYTHONPATH=. python tools/vendor_corpus/hardswish_sim.py export OUT tests/data/vendor_lut/conv_hardswish_sim.npz

``build`` writes, for each case of :data:`CASES` (8 -> 16 channels 3x3 pad 1 on 12x12, or
depthwise 8 -> 8; fixed-seed weights, 4 calibration samples and one test input drawn from
the case's input range), the ONNX model, the ``.rknn`` (mean 0, std 1, ``normal``,
``channel``), the simulator's output on the test input, ``hybrid_quantization_step1``'s
``.quantization.cfg`` (the calibrated grid of the conv output ``pre``, which the file does
not hold) and an ``accuracy_analysis`` snapshot.  ``export`` prints, per case, how many of
the simulator's output codes three computations reproduce (the exact function on the real
accumulator ``acc * s_x * s_w[c]``, the same on the conv output put on ``pre``'s grid
first, and the file's lookup table run by rknnlite) and writes the test data of the cases
in :data:`EXPORTED`: for case ``c``, ``c/x`` (test input), ``c/w_codes`` (the file's
``q_w - zp_w``), ``c/w_scale`` (``(max - min) / 255`` of the float weight per output
channel, the vendor's asymmetric per-channel scale), ``c/w_zero_point``, ``c/bias_acc``
(the int32 bias in accumulator units, zero point folded in), ``c/quant`` (``s_x, zp_x,
s_pre, zp_pre, s_y, zp_y``), ``c/group`` and ``c/sim`` (the simulator's int8 output codes).
"""

import contextlib
import io
import os
import sys

import numpy as np

CASES = {  # name: (input low, input high, weight std, bias std, group, activation)
    "c0": (-1.0, 1.0, 0.3, 0.5, 1, "HardSwish"),
    "c1": (0.0, 4.0, 0.05, 0.1, 1, "HardSwish"),
    "c2": (-10.0, 10.0, 1.0, 2.0, 1, "HardSwish"),
    "c3": (-0.2, 0.2, 0.2, 0.05, 1, "HardSwish"),
    "c4": (-2.0, 2.0, 0.4, 0.5, 8, "HardSwish"),
    "c5": (-1.0, 1.0, 0.3, 0.5, 1, "HardSigmoid"),
    "c6": (-3.0, 3.0, 0.15, 1.0, 1, "HardSwish"),
}
EXPORTED = ("c0", "c2", "c4")


def _model(name, lo, hi, wstd, bstd, group, act, seed):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    cin, cout = 8, (8 if group > 1 else 16)
    w = (rng.standard_normal((cout, cin // group, 3, 3)) * wstd).astype(np.float32)
    b = (rng.standard_normal(cout) * bstd).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["pre"], pads=[1, 1, 1, 1], group=group, kernel_shape=[3, 3])]
    if act == "HardSwish":
        nodes.append(helper.make_node("HardSwish", ["pre"], ["y"]))
    else:
        nodes.append(helper.make_node("HardSigmoid", ["pre"], ["y"], alpha=1 / 6, beta=0.5))
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, 12, 12])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.save(m, f"{name}.onnx")
    calib = [rng.uniform(lo, hi, (1, cin, 12, 12)).astype(np.float32) for _ in range(4)]
    return calib, rng.uniform(lo, hi, (1, cin, 12, 12)).astype(np.float32)


def build(out):
    from rknn.api import RKNN

    os.makedirs(out, exist_ok=True)
    os.chdir(out)

    def toolkit():
        r = RKNN(verbose=False)
        r.config(mean_values=[[0] * 8], std_values=[[1] * 8], target_platform="rk3588")
        return r

    for k, (name, case) in enumerate(CASES.items()):
        calib, test = _model(name, *case, seed=300 + k)
        with open(f"{name}_ds.txt", "w") as f:
            for j, a in enumerate(calib):
                np.save(f"{name}_c{j}.npy", a)
                f.write(f"{name}_c{j}.npy\n")
        np.save(f"{name}_test.npy", test)
        with contextlib.redirect_stdout(io.StringIO()):
            r = toolkit()
            assert r.load_onnx(f"{name}.onnx") == 0
            assert r.hybrid_quantization_step1(dataset=f"{name}_ds.txt") == 0
            r.release()
            r = toolkit()
            assert r.load_onnx(f"{name}.onnx") == 0
            assert r.build(do_quantization=True, dataset=f"{name}_ds.txt") == 0
            assert r.export_rknn(f"{name}.rknn") == 0
            assert r.accuracy_analysis(inputs=[f"{name}_test.npy"], output_dir=f"{name}_snap") == 0
            r.release()
            r = toolkit()
            assert r.load_onnx(f"{name}.onnx") == 0
            assert r.build(do_quantization=True, dataset=f"{name}_ds.txt") == 0
            assert r.init_runtime() == 0
            y = r.inference(inputs=[test], data_format="nchw")[0]
            r.release()
        np.save(f"{name}_sim.npy", y)
        print(name, "built", flush=True)


def export(out, npz):
    import onnx
    import yaml
    from onnx import numpy_helper

    from rknnlite.backends.software.executor import Executor
    from rknnlite.model.graph import Graph
    from rknnlite.model.loader import load_model
    from rknnlite.model.rknn_graph import lower_rockchip

    functions = {"HardSwish": lambda v: v * np.clip(v + 3, 0, 6) / 6,
                 "HardSigmoid": lambda v: np.clip(v / 6 + 0.5, 0, 1)}
    data = {}
    for name, case in CASES.items():
        path = os.path.join(out, name)
        loaded = load_model(path + ".rknn")
        g = lower_rockchip(loaded.payload, loaded.model).graph
        conv = g.nodes[1]
        (sx,), (zx,) = g.quant["x"].scale, g.quant["x"].zero_point
        (sy,), (zy,) = g.quant["y"].scale, g.quant["y"].zero_point
        with open(path + ".quantization.cfg") as cfg:
            pre_q = yaml.safe_load(cfg)["quantize_parameters"]["pre"]
        sp, zpp = pre_q["scale"][0], pre_q["zero_point"][0]
        w = {i.name: numpy_helper.to_array(i) for i in onnx.load(path + ".onnx").graph.initializer}["w"]
        wf = w.reshape(len(w), -1).astype(np.float64)
        sw = (wf.max(1) - wf.min(1)) / 255
        codes = g.constants[conv.inputs[1]]
        assert np.abs(w / sw[:, None, None, None] - codes).max() < 0.5
        x = np.load(path + "_test.npy")
        xq = ((np.clip(np.rint(x / sx) + zx, -128, 127) - zx) * sx).astype(np.float32)
        acc, y_lut = Executor(Graph(g.nodes, ["x"], [conv.outputs[0], "y"], g.constants, g.quant), "float32").run([xq])
        pre = acc.astype(np.float64) * sx * sw[None, :, None, None]
        f = functions[case[5]]
        sim = np.clip(np.rint(np.load(path + "_sim.npy") / sy) + zy, -128, 127)

        on_grid = (np.clip(np.rint(pre / sp) + zpp, -128, 127) - zpp) * sp
        exact, gridded, lut = (np.clip(np.rint(v / sy) + zy, -128, 127) for v in (f(pre), f(on_grid), y_lut))
        print(f"{name} {case[5]:11s} group {case[4]}: simulator codes equal to exact(real acc) "
              f"{np.mean(sim == exact):.2%}, exact(acc on pre's grid) {np.mean(sim == gridded):.2%}, "
              f"the file's table {np.mean(sim == lut):.2%}")
        if name in EXPORTED:
            zp_w = np.clip(-128 - codes.reshape(len(codes), -1).min(1), -128, 127).astype(np.int64)
            data.update({f"{name}/x": x, f"{name}/w_codes": codes.astype(np.int16), f"{name}/w_scale": sw,
                         f"{name}/w_zero_point": zp_w, f"{name}/bias_acc": g.constants[conv.inputs[2]].astype(np.int64),
                         f"{name}/quant": np.array([sx, zx, sp, zpp, sy, zy], np.float64),
                         f"{name}/group": np.array(case[4]), f"{name}/sim": sim.astype(np.int8)})
    np.savez_compressed(npz, **data)


if __name__ == "__main__":
    {"build": build, "export": export}[sys.argv[1]](*sys.argv[2:])
