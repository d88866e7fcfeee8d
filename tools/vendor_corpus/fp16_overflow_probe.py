"""What RKNN-Toolkit2's float16 path does when activations exceed float16's range (evidence tool).

Runs in the vendor-toolkit venv (it does not import rknnlite)::

    /var/tmp/rkt/bin/python tools/vendor_corpus/fp16_overflow_probe.py [model ...]
    /var/tmp/rkt/bin/python tools/vendor_corpus/fp16_overflow_probe.py --toy

Light models: each ``onnx/backend/test/data/light/light_<name>.onnx`` (default: squeezenet,
bvlc_alexnet, resnet50 and the in-range control shufflenet) is built by the vendor toolkit
for rk3588 in float16 (``build(do_quantization=False)``, mean 0 / std 1, the model's own
input shape), simulated (``init_runtime()`` without a target) on the input onnx's test
runner feeds it (``arange(n).reshape(shape) / n`` as float32, NCHW), and compared with the
stored ``light_<name>_output_0.pb``.  Each model runs in a child process with a time limit
(``--timeout``, seconds) so a model too slow for the simulator is reported as skipped.

Toys (``--toy``): tiny graphs whose float32 intermediates pass 65504 while the final
output is back in float16's range, so the simulator's output tells float32-internal math,
a 65504-saturated intermediate and an inf intermediate apart.  ``--analysis`` additionally
runs ``accuracy_analysis`` on the toys (per-layer simulator dumps under the work dir).

All vendor console output goes to ``<work>/<name>.log``; only the result table is printed.
Temporary ``.rknn``/``.onnx`` files live under ``--work`` (default ``/var/tmp/fp16probe``).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

DEFAULT_MODELS = ["squeezenet", "bvlc_alexnet", "resnet50", "shufflenet"]
FP16_MAX = 65504.0


# ----------------------------------------------------------------------------- helpers

def light_dir() -> str:
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def cosine(a, b) -> float:
    """Cosine similarity in float64; nan as soon as either side has a non-finite entry."""
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("nan")
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def finite_or_zero(a) -> np.ndarray:
    return np.nan_to_num(np.asarray(a, np.float64), nan=0.0, posinf=0.0, neginf=0.0)


def stats(out, ref) -> dict:
    out = np.asarray(out)
    fin = out[np.isfinite(out)]
    return {
        "shape": list(out.shape), "dtype": str(out.dtype),
        "n_inf": int(np.isinf(out).sum()), "n_nan": int(np.isnan(out).sum()),
        "max_abs_finite": float(np.abs(fin).max()) if fin.size else float("nan"),
        "max_abs_ref": float(np.abs(np.asarray(ref, np.float64)).max()),
        "cos": cosine(out, ref), "cos_nonfinite0": cosine(finite_or_zero(out), ref),
    }


@contextlib.contextmanager
def vendor_log(path: str):
    """Send the vendor's console chatter (Python and C level, fd 1/2) to ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "a") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def vendor_run(onnx_path: str, inputs: list, shapes: list, names: list, log_path: str,
               analysis_dir: str | None = None) -> tuple:
    """Build ``onnx_path`` in float16 for rk3588 and simulate it; ``(outputs, build_s, run_s)``."""
    from rknn.api import RKNN

    rknn = RKNN(verbose=False)
    with vendor_log(log_path):
        try:
            t0 = time.perf_counter()
            chans = [s[1] for s in shapes]
            steps = [
                ("config", lambda: rknn.config(target_platform="rk3588", float_dtype="float16",
                                               mean_values=[[0.0] * c for c in chans],
                                               std_values=[[1.0] * c for c in chans])),
                ("load_onnx", lambda: rknn.load_onnx(model=onnx_path, inputs=names, input_size_list=shapes)),
                ("build", lambda: rknn.build(do_quantization=False)),
                ("export_rknn", lambda: rknn.export_rknn(onnx_path[:-5] + ".rknn")),
                ("init_runtime", lambda: rknn.init_runtime()),
            ]
            for step, call in steps:
                ret = call()
                if ret not in (0, None):
                    raise RuntimeError(f"{step} returned {ret} (see {log_path})")
            build_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            outs = rknn.inference(inputs=inputs, data_format=["nchw"] * len(inputs))
            run_s = time.perf_counter() - t0
            if outs is None:
                raise RuntimeError(f"inference returned None (see {log_path})")
            if analysis_dir is not None:
                npys = []
                for k, x in enumerate(inputs):
                    p = os.path.join(analysis_dir, f"in{k}.npy")
                    os.makedirs(analysis_dir, exist_ok=True)
                    np.save(p, x)
                    npys.append(p)
                ret = rknn.accuracy_analysis(inputs=npys, output_dir=analysis_dir)
                if ret not in (0, None):
                    raise RuntimeError(f"accuracy_analysis returned {ret} (see {log_path})")
        finally:
            rknn.release()
    return [np.asarray(o) for o in outs], build_s, run_s


# ----------------------------------------------------------------------------- light models

def run_light(name: str, work: str) -> dict:
    import onnx
    from onnx import numpy_helper, version_converter

    src = os.path.join(light_dir(), f"light_{name}.onnx")
    model = onnx.load(src)
    inits = {t.name for t in model.graph.initializer}
    names, shapes, inputs = [], [], []
    for x in model.graph.input:
        if x.name in inits:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim]
        n = int(np.prod(shape))
        # The onnx test runner's non-random dummy input (Runner.generate_dummy_data, random=False).
        inputs.append((np.arange(n).reshape(shape) / n).astype(np.float32))
        names.append(x.name)
        shapes.append(shape)
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(light_dir(), f"light_{name}_output_0.pb")))
    # The vendor rejects opset-9 Dropout ("Not support 'Dropout' of opset-9"); onnx's own
    # version converter to opset 13 keeps the graph's meaning and is accepted.
    model = version_converter.convert_version(model, 13)
    onnx_path = os.path.join(work, f"light_{name}.onnx")
    onnx.save(model, onnx_path)
    log_path = os.path.join(work, f"light_{name}.log")
    if os.path.exists(log_path):
        os.remove(log_path)
    outs, build_s, run_s = vendor_run(onnx_path, inputs, shapes, names, log_path)
    res = stats(outs[0], expected)
    res.update(model=name, build_s=round(build_s, 1), run_s=round(run_s, 1), n_outputs=len(outs),
               range_warnings=range_warnings(log_path))
    return res


def range_warnings(log_path: str) -> list:
    """The simulator's own "The range [lo, hi] of '<tensor>' is out of the float16!" warnings."""
    pat = re.compile(r"The range \[([^,\]]+), ([^\]]+)\] of '([^']+)' is out of the float16")
    with open(log_path, errors="replace") as f:
        return [(m.group(3), m.group(1), m.group(2)) for m in pat.finditer(f.read())]


def run_children(models: list, work: str, timeout: float) -> list:
    rows = []
    for name in models:
        out_json = os.path.join(work, f"light_{name}.json")
        if os.path.exists(out_json):
            os.remove(out_json)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--work", work, "--_one", name],
                                  timeout=timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            rows.append({"model": name, "skipped": f"over {timeout:.0f} s in the simulator"})
            continue
        if proc.returncode != 0 or not os.path.exists(out_json):
            rows.append({"model": name, "skipped": f"failed (rc {proc.returncode}): {proc.stderr.strip()[-400:]}"})
            continue
        with open(out_json) as f:
            row = json.load(f)
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
    return rows


def print_light(rows: list) -> None:
    print("float16 build for rk3588 (vendor simulator) vs stored light_<name>_output_0.pb")
    print(f"{'model':14} {'shape':18} {'inf':>6} {'nan':>6} {'max|finite|':>12} {'max|ref|':>11} "
          f"{'cosine':>9} {'cos(nf->0)':>10} {'build s':>8} {'run s':>6}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['model']:14} SKIPPED: {r['skipped']}")
            continue
        print(f"{r['model']:14} {str(tuple(r['shape'])):18} {r['n_inf']:6d} {r['n_nan']:6d} "
              f"{r['max_abs_finite']:12.5g} {r['max_abs_ref']:11.4g} {r['cos']:9.6f} {r['cos_nonfinite0']:10.6f} "
              f"{r['build_s']:8.1f} {r['run_s']:6.1f}")
    for r in rows:
        w = r.get("range_warnings")
        if w:
            first = ", ".join(f"{t} [{lo}, {hi}]" for t, lo, hi in w[:3])
            print(f"  {r['model']}: simulator warned {len(w)} tensors out of float16 range, first: {first}")


# ----------------------------------------------------------------------------- toys

def _conv_weights(cout: int, cin: int, k: int, value) -> np.ndarray:
    w = np.empty((cout, cin, k, k), np.float32)
    w[...] = value
    return w


def _toy_model(kind: str):
    """``(onnx model, input, {hypothesis: float32 output})`` for one toy graph."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def conv(x, w, out):
        nodes.append(helper.make_node("Conv", [x, init(out + "_w", w)], [out], kernel_shape=list(w.shape[2:])))
        return out

    def np_conv1x1_or_kxk(x, w):
        # valid convolution, stride 1, float64 accumulation
        n, c, h, wd = x.shape
        o, _, k, _ = w.shape
        y = np.zeros((n, o, h - k + 1, wd - k + 1))
        for i in range(k):
            for j in range(k):
                y += np.einsum("nchw,oc->nohw", x[:, :, i:i + h - k + 1, j:j + wd - k + 1], w[:, :, i, j])
        return y

    cin, hw = 16, 8
    if kind == "conv_relu_conv":
        # conv1 (0.02, 3x3, 16 ch) of 30000 -> 86400 > 65504; Relu; conv2 1x1 (1e-3) brings it back
        x = np.full((1, cin, hw, hw), 30000.0, np.float32)
        w1, w2 = _conv_weights(16, cin, 3, 0.02), _conv_weights(4, 16, 1, 1e-3)
        conv("x", w1, "c1")
        nodes.append(helper.make_node("Relu", ["c1"], ["r1"]))
        conv("r1", w2, "y")
        mid = np.maximum(np_conv1x1_or_kxk(x.astype(np.float64), w1), 0)
        hyp = {"fp32 internal": np_conv1x1_or_kxk(mid, w2),
               "intermediate saturated to 65504": np_conv1x1_or_kxk(np.minimum(mid, FP16_MAX), w2),
               "intermediate inf": np_conv1x1_or_kxk(np.where(mid > FP16_MAX, np.inf, mid), w2)}
    elif kind == "conv_conv":
        # the same without the Relu between (no activation fusion to hide behind)
        x = np.full((1, cin, hw, hw), 30000.0, np.float32)
        w1, w2 = _conv_weights(16, cin, 3, 0.02), _conv_weights(4, 16, 1, 1e-3)
        conv("x", w1, "c1")
        conv("c1", w2, "y")
        mid = np_conv1x1_or_kxk(x.astype(np.float64), w1)
        hyp = {"fp32 internal": np_conv1x1_or_kxk(mid, w2),
               "intermediate saturated to 65504": np_conv1x1_or_kxk(np.minimum(mid, FP16_MAX), w2),
               "intermediate inf": np_conv1x1_or_kxk(np.where(mid > FP16_MAX, np.inf, mid), w2)}
    elif kind == "conv_out":
        # a single conv whose OUTPUT passes 65504 (86400): what the graph output holds
        x = np.full((1, cin, hw, hw), 30000.0, np.float32)
        w1 = _conv_weights(4, cin, 3, 0.02)
        conv("x", w1, "y")
        mid = np_conv1x1_or_kxk(x.astype(np.float64), w1)
        hyp = {"fp32 internal": mid, "intermediate saturated to 65504": np.minimum(mid, FP16_MAX),
               "intermediate inf": np.where(mid > FP16_MAX, np.inf, mid)}
    elif kind == "conv_accum":
        # partial sums pass 65504 (8 channels x 9 taps x 0.05 x 30000 = 108000) but the
        # output is 13500: does the accumulator overflow?
        x = np.full((1, cin, hw, hw), 30000.0, np.float32)
        w1 = _conv_weights(4, cin, 3, 0.05)
        w1[:, 8:15] = -0.05
        w1[:, 15] = 0.0
        conv("x", w1, "y")
        mid = np_conv1x1_or_kxk(x.astype(np.float64), w1)
        hyp = {"fp32 internal": mid, "accumulator overflow (nan)": np.full_like(mid, np.nan)}
    elif kind == "add_add":
        # elementwise: x + x = 80000 > 65504, then * 1e-3 via a second Add with a negative const
        x = np.full((1, cin, hw, hw), 40000.0, np.float32)
        nodes.append(helper.make_node("Add", ["x", "x"], ["a1"]))
        nodes.append(helper.make_node("Mul", ["a1", init("k", np.full((1, cin, 1, 1), 1e-3))], ["y"]))
        mid = x.astype(np.float64) * 2
        hyp = {"fp32 internal": mid * 1e-3, "intermediate saturated to 65504": np.minimum(mid, FP16_MAX) * 1e-3,
               "intermediate inf": np.where(mid > FP16_MAX, np.inf, mid) * 1e-3}
    elif kind == "input_big":
        # the INPUT is 100000 (> 65504): conv 1x1 with 1e-3 weights; how is the input converted?
        x = np.full((1, cin, hw, hw), 100000.0, np.float32)
        w1 = _conv_weights(4, cin, 1, 1e-3)
        conv("x", w1, "y")
        xin = x.astype(np.float64)
        hyp = {"fp32 input": np_conv1x1_or_kxk(xin, w1),
               "input saturated to 65504": np_conv1x1_or_kxk(np.minimum(xin, FP16_MAX), w1),
               "input inf": np_conv1x1_or_kxk(np.where(xin > FP16_MAX, np.inf, xin), w1)}
    elif kind == "input_big_mul":
        # the INPUT is 100000 and the first op is elementwise (x * 1e-3): input conversion without a conv
        x = np.full((1, cin, hw, hw), 100000.0, np.float32)
        nodes.append(helper.make_node("Mul", ["x", init("k", np.full((1, cin, 1, 1), 1e-3))], ["y"]))
        xin = x.astype(np.float64)
        hyp = {"fp32 input": xin * 1e-3, "input saturated to 65504": np.minimum(xin, FP16_MAX) * 1e-3,
               "input inf": np.where(xin > FP16_MAX, np.inf, xin) * 1e-3}
    else:
        raise ValueError(kind)

    graph = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, x, hyp


TOYS = ["conv_relu_conv", "conv_conv", "conv_out", "conv_accum", "add_add", "input_big", "input_big_mul"]


def run_toys(work: str, analysis: bool) -> None:
    import onnx

    print("\ntoys: float16 build for rk3588 (vendor simulator); closeness of the output to each hypothesis")
    for kind in TOYS:
        model, x, hyp = _toy_model(kind)
        onnx_path = os.path.join(work, f"toy_{kind}.onnx")
        onnx.save(model, onnx_path)
        adir = os.path.join(work, f"toy_{kind}_analysis") if analysis else None
        log_path = os.path.join(work, f"toy_{kind}.log")
        if os.path.exists(log_path):
            os.remove(log_path)
        try:
            outs, build_s, run_s = vendor_run(onnx_path, [x], [list(x.shape)], ["x"], log_path, adir)
        except Exception as e:  # a dev tool: report and go on with the next toy
            print(f"  {kind}: FAILED {e}")
            continue
        y = outs[0].astype(np.float64)
        vals = np.unique(y)
        shown = ", ".join(f"{v:.6g}" for v in vals[:4]) + (" ..." if vals.size > 4 else "")
        print(f"  {kind}: output {tuple(y.shape)} values [{shown}] inf {int(np.isinf(y).sum())} "
              f"nan {int(np.isnan(y).sum())}")
        for h, ref in hyp.items():
            ref = np.asarray(ref, np.float64)
            if ref.shape != y.shape:
                print(f"      {h:34} shape {ref.shape} != output shape")
                continue
            rvals = np.unique(ref[np.isfinite(ref)])
            rshown = ", ".join(f"{v:.6g}" for v in rvals[:3]) if rvals.size else "all non-finite"
            if np.all(np.isfinite(ref)):
                rel = np.max(np.abs(y - ref) / np.maximum(np.abs(ref), 1e-30))
                verdict = f"max rel err {rel:.3g}" + ("  <== MATCH (within float16 rounding)" if rel < 2e-3 else "")
            else:
                same = np.array_equal(np.isinf(y), np.isinf(ref)) and np.array_equal(np.isnan(y), np.isnan(ref))
                verdict = "non-finite pattern " + ("identical  <== MATCH" if same else "differs")
            print(f"      {h:34} expects [{rshown}]  {verdict}")
        for t, lo, hi in range_warnings(log_path):
            print(f"      simulator warning: range [{lo}, {hi}] of '{t}' is out of the float16")
        if adir is not None:
            report_analysis(adir)


def report_analysis(adir: str) -> None:
    """Print what accuracy_analysis wrote: the per-layer simulator tensors' ranges."""
    files = sorted(glob.glob(os.path.join(adir, "**", "*"), recursive=True))
    for p in files:
        rel = os.path.relpath(p, adir)
        if p.endswith(".npy") and not rel.startswith("in"):
            a = np.load(p).astype(np.float64)
            print(f"      analysis {rel}: shape {a.shape} min {np.nanmin(a):.6g} max {np.nanmax(a):.6g} "
                  f"inf {int(np.isinf(a).sum())}")
        elif rel.endswith("error_analysis.txt"):
            with open(p) as f:
                for line in f.read().strip().splitlines():
                    print(f"      | {line}")


# ----------------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help=f"light model names (default {' '.join(DEFAULT_MODELS)})")
    ap.add_argument("--work", default="/var/tmp/fp16probe", help="temp dir for .onnx/.rknn/logs")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per light model before skipping it")
    ap.add_argument("--toy", action="store_true", help="run the toy overflow graphs instead of the light models")
    ap.add_argument("--analysis", action="store_true", help="with --toy: also run accuracy_analysis")
    ap.add_argument("--_one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    if args._one:
        res = run_light(args._one, args.work)
        with open(os.path.join(args.work, f"light_{args._one}.json"), "w") as f:
            json.dump(res, f)
        return 0
    if args.toy:
        run_toys(args.work, args.analysis)
        return 0
    print_light(run_children(args.models or DEFAULT_MODELS, args.work, args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
