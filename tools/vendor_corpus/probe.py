"""Build throw-away probe ``.rknn`` files for the format experiments (not part of the corpus).

Each probe family varies ONE attribute of a fixed graph with fixed weights, so a
field-by-field diff (``rkdiff.py``, ``regtable.py``) shows where the attribute is
stored.  Runs in the vendor-toolkit venv, like ``build_corpus.py``::

    /var/tmp/rkt/bin/python tools/vendor_corpus/probe.py --out /tmp/rkprobe [family ...]

Families: ``hardsigmoid`` (alpha/beta grid), ``clip`` (bounds), ``leaky`` (slopes),
``plain`` (Conv without activation, the baseline), ``resize`` (mode and
coordinate mode), ``dynamic`` (three input shapes), ``platforms`` (one model for
rk3562/rk3566/rk3568/rk3576/rk3588/rv1126b), ``rk3576_acts`` (LeakyRelu 0.1/0.2/0.3,
Clip (0,6)/(-1,2)/(0,3) with three weight seeds and the plain conv for rk3576; a
few of them for rv1126b), ``rk3576_lut`` (HardSigmoid grid on rk3576 and rk3588, Sigmoid,
HardSwish, Swish on rk3576, HardSigmoid and Sigmoid on rv1126b), ``rk3576_fp16_clip`` (more
Clip bounds on rk3576, for the first clamp pair of fp16 files), ``rk3562_i8`` (nine corpus
models rebuilt for rk3562, int8), ``rk3562_acts`` (Clip bounds, HardSigmoid, LeakyRelu,
HardSwish, Swish and the plain conv on rk3562: its fused-activation registers), ``standalone_lut``
(the corpus case of that name, Sigmoid and exSwish after a Concat, on rk3562, rk3588, rk3576 and
rv1126b: the DPU-only lookup-table task).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from build_corpus import build_one  # noqa: E402
from models import IMG, Case, _clip, _conv_act, _hardsigmoid, _hardswish, _leaky, _sigmoid, _swish, _G  # noqa: E402

import numpy as np  # noqa: E402


def _plain():
    g = _G(103)
    y = g.conv("x", 3, 20)
    return g.model([("x", IMG[1])], [(y, "y")])


def _resize(mode: str, ctm: str, nearest_mode: str = "floor", scale: float = 2.0):
    def build():
        g = _G(307)
        y = g.conv("x", 3, 20)
        attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
        if mode == "nearest":
            attrs["nearest_mode"] = nearest_mode
        r = g.node("Resize", [y, g.const(np.zeros(0, np.float32)),
                              g.const(np.array([1, 1, scale, scale], np.float32))], **attrs)[0]
        return g.model([("x", IMG[1])], [(r, "y")])
    return build


def families():
    img = [IMG]
    fam = {
        "plain": [Case("p_plain", "Conv 3->20 (weights of conv_leaky01)", _plain, img)],
        "hardsigmoid": [Case(f"p_hsig_a{a}_b{b}", f"HardSigmoid({a},{b})", _conv_act(106, _hardsigmoid(a, b)), img)
                        for a, b in ((0.3, 0.4), (0.3, 0.6), (0.2, 0.5), (0.5, 0.5), (0.1, 0.9))],
        "clip": [Case(f"p_clip_{lo}_{hi}", f"Clip({lo},{hi})", _conv_act(102, _clip(lo, hi)), img)
                 for lo, hi in ((-1.0, 2.0), (-2.0, 2.0), (0.0, 6.0), (0.5, 4.0), (0.0, 1.0))],
        "leaky": [Case(f"p_leaky_{a}", f"LeakyRelu({a})", _conv_act(103, _leaky(a)), img)
                  for a in (0.01, 0.1, 0.2, 0.3, 0.5)],
        "resize": [Case(f"p_resize_{m}_{c}_{s}", f"Resize {m} {c} x{s}", _resize(m, c, scale=s), img)
                   for m, c, s in (("nearest", "asymmetric", 2.0), ("nearest", "half_pixel", 2.0),
                                   ("linear", "half_pixel", 2.0), ("linear", "align_corners", 2.0),
                                   ("linear", "asymmetric", 2.0), ("nearest", "asymmetric", 3.0),
                                   ("linear", "half_pixel", 3.0))],
        "rk3576_acts": [Case(f"p3576_leaky_{a}", f"LeakyRelu({a}) on rk3576", _conv_act(103, _leaky(a)), img,
                             platform="rk3576") for a in (0.1, 0.2, 0.3)] +
                       [Case(f"p3576_clip_{lo}_{hi}", f"Clip({lo},{hi}) on rk3576", _conv_act(102, _clip(lo, hi)),
                             img, platform="rk3576")
                        for lo, hi in ((0.0, 6.0), (-1.0, 2.0), (0.0, 3.0), (0.5, 4.0), (-6.0, 6.0))] +
                       [Case(f"p3576_clip_s{seed}_{lo}_{hi}", f"Clip({lo},{hi}) on rk3576, weights seed {seed}",
                             _conv_act(seed, _clip(lo, hi)), img, platform="rk3576")
                        for seed in (104, 105) for lo, hi in ((0.0, 3.0), (-1.0, 2.0))] +
                       [Case(f"p1126b_clip_{lo}_{hi}", f"Clip({lo},{hi}) on rv1126b", _conv_act(102, _clip(lo, hi)),
                             img, platform="rv1126b") for lo, hi in ((0.0, 3.0), (-1.0, 2.0))] +
                       [Case("p1126b_leaky_0.1", "LeakyRelu(0.1) on rv1126b", _conv_act(103, _leaky(0.1)), img,
                             platform="rv1126b")] +
                       [Case("p3576_plain", "Conv 3->20 (weights of the leaky probes) on rk3576", _plain, img,
                             platform="rk3576")],
        "rk3576_lut": [Case(f"p{plat[2:]}_hsig_a{a}_b{b}", f"HardSigmoid({a},{b}) on {plat}",
                            _conv_act(106, _hardsigmoid(a, b)), img, platform=plat)
                       for plat in ("rk3576", "rk3588") for a, b in ((0.3, 0.4), (0.2, 0.5), (0.1, 0.9))] +
                      [Case("p1126b_hsig_a0.3_b0.4", "HardSigmoid(0.3,0.4) on rv1126b",
                            _conv_act(106, _hardsigmoid(0.3, 0.4)), img, platform="rv1126b"),
                       Case("p1126b_sigmoid", "Sigmoid on rv1126b", _conv_act(105, _sigmoid), img,
                            platform="rv1126b")] +
                      [Case(f"p3576_{n}", f"{n} on rk3576", _conv_act(s, f), img, platform="rk3576")
                       for n, f, s in (("sigmoid", _sigmoid, 105), ("hardswish", _hardswish, 107),
                                       ("swish", _swish, 108))],
        "rk3576_fp16_clip": [Case(f"p3576c_{lo}_{hi}", f"Clip({lo},{hi}) on rk3576", _conv_act(102, _clip(lo, hi)),
                                  img, platform="rk3576")
                             for lo, hi in ((-2.0, 2.0), (-1.0, 3.0), (-1.0, 6.0), (-0.5, 2.0), (-3.0, 2.0),
                                            (-1.0, 1.0), (-4.0, 4.0), (-1.5, 2.0), (-0.25, 2.0), (-8.0, 2.0),
                                            (-2.0, 8.0), (-0.1, 0.3), (1.0, 3.0), (-5.0, -1.0))],
        "rk3562_acts": [Case(f"p3562_clip_{lo}_{hi}", f"Clip({lo},{hi}) on rk3562", _conv_act(102, _clip(lo, hi)),
                             img, platform="rk3562")
                        for lo, hi in ((0.0, 6.0), (0.0, 3.0), (-1.0, 2.0), (0.5, 4.0), (-6.0, 6.0))] +
                       [Case(f"p3562_hsig_a{a}_b{b}", f"HardSigmoid({a},{b}) on rk3562",
                             _conv_act(106, _hardsigmoid(a, b)), img, platform="rk3562")
                        for a, b in ((0.3, 0.4), (0.2, 0.5), (0.1, 0.9))] +
                       [Case(f"p3562_leaky_{a}", f"LeakyRelu({a}) on rk3562", _conv_act(103, _leaky(a)), img,
                             platform="rk3562") for a in (0.1, 0.2)] +
                       [Case(f"p3562_{n}", f"{n} on rk3562", _conv_act(s, f), img, platform="rk3562")
                        for n, f, s in (("sigmoid", _sigmoid, 105), ("hardswish", _hardswish, 107),
                                        ("swish", _swish, 108))] +
                       [Case("p3562_plain", "Conv 3->20 (weights of the leaky probes) on rk3562", _plain, img,
                             platform="rk3562")] +
                       [Case(f"p{p[2:]}_act_ops", "corpus activation_ops", __import__("models")._activation_ops(),
                             [("x", (1, 3, 8, 8), "image")], platform=p) for p in ("rk3562", "rk3588")],
        # standalone lookup-table ops (a DPU-only task): the corpus case standalone_lut on every platform
        "standalone_lut": [Case(f"p{p[2:]}_sa", "corpus standalone_lut", __import__("models")._standalone_lut(),
                                [("x", (1, 3, 8, 8), "image")], platform=p)
                           for p in ("rk3562", "rk3588", "rk3576", "rv1126b")],
        "platforms": [Case(f"p_plat_{p}", "convnet", __import__("models")._convnet(), img, platform=p)
                      for p in ("rk3562", "rk3566", "rk3568", "rk3576", "rk3588", "rv1126b")],
        # corpus models rebuilt for rk3562 (run with --variants i8 i8_layer): which int8 files the
        # rk3562 map of docs/vendor-format-notes.md §1c runs, and that the rest are refused by name
        "rk3562_i8": [dataclasses.replace(c, name=f"p3562_{c.name}", platform="rk3562")
                      for c in __import__("models").CASES
                      if c.name in ("convnet", "conv_add_relu", "concat", "maxpool", "conv_relu6",
                                    "conv_leaky01", "conv_sigmoid", "mbblock", "bench")],
    }
    return fam


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/rkprobe")
    ap.add_argument("--variants", nargs="*", default=["fp16", "i8"])
    ap.add_argument("families", nargs="*")
    args = ap.parse_args(argv)
    import onnx

    os.makedirs(args.out, exist_ok=True)
    fam = families()
    chosen = args.families or list(fam)
    summary = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in chosen:
            for case in fam[name]:
                onnx_path = os.path.join(tmp, case.name + ".onnx")
                onnx.save(case.build(), onnx_path)
                for variant in args.variants:
                    try:
                        entry = build_one(case, variant, onnx_path, tmp, out_dir=args.out)
                        summary[entry["file"]] = {k: entry[k] for k in ("graph", "outputs", "config")}
                        print("ok  ", entry["file"], flush=True)
                    except Exception as e:
                        print("FAIL", case.name, variant, str(e)[:300], file=sys.stderr, flush=True)
    with open(os.path.join(args.out, "summary.json"), "a") as f:
        f.write(json.dumps(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
