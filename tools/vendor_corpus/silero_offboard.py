#!/usr/bin/env python3
"""silero-vad built by RKNN-Toolkit2, run off-board, compared with the toolkit's simulator.

The model is ``silero_vad_openvino_16k.onnx`` from the ``silero-vad==6.2.3`` wheel (fixed
``input`` [1, 576] and ``state`` [2, 1, 128]; a Conv front end and an LSTM, which RKNN-Toolkit2
2.5.0 compiles to an ``exLSTM``).  Two steps::

    # in the vendor venv (see build_corpus.py): build fp16 and int8 files, simulate one window
    /var/tmp/rkt/bin/python tools/vendor_corpus/silero_offboard.py build MODEL DIR --platforms rk3588 rk3576
    # with the project's Python: load each file as a user does, compare with the simulator
    python tools/vendor_corpus/silero_offboard.py compare DIR

``build`` calibrates int8 files on four random windows and states; the compared window is a
tone with a little noise from a random state.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def _window(seed: int):
    rng = np.random.default_rng(seed)
    t = np.arange(576) / 16000
    x = (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(576)).astype(np.float32)[None]
    return x, (0.1 * rng.standard_normal((2, 1, 128))).astype(np.float32)


def build(model: str, out: Path, platforms) -> None:
    from rknn.api import RKNN

    out.mkdir(parents=True, exist_ok=True)
    samples = []
    for k in range(4):
        x, state = _window(100 + k)
        samples.append(f"{out}/calib_x{k}.npy {out}/calib_s{k}.npy")
        np.save(out / f"calib_x{k}.npy", x)
        np.save(out / f"calib_s{k}.npy", state)
    (out / "dataset.txt").write_text("\n".join(samples) + "\n")
    x, state = _window(1)
    for platform in platforms:
        for variant in ("fp16", "int8"):
            stem = f"silero_{variant}_{platform}"
            rknn = RKNN(verbose=False)
            steps = (lambda: rknn.config(target_platform=platform), lambda: rknn.load_onnx(model=model),
                     lambda: rknn.build(do_quantization=variant == "int8", dataset=str(out / "dataset.txt")),
                     lambda: rknn.export_rknn(str(out / f"{stem}.rknn")), lambda: rknn.init_runtime())
            if any(step() != 0 for step in steps):
                print(stem, "not built", flush=True)
                continue
            outs = rknn.inference(inputs=[x, state])
            rknn.release()
            np.savez(out / f"{stem}.npz", in0=x, in1=state, **{f"out{k}": np.asarray(v) for k, v in enumerate(outs)})
            print(stem, "built", flush=True)


def compare(folder: Path) -> None:
    import rknnlite

    for path in sorted(folder.glob("silero_*.rknn")):
        arrays = np.load(path.with_suffix(".npz"))
        try:
            with rknnlite.Context(str(path), backend="software") as ctx:
                outs = ctx.run([arrays["in0"], arrays["in1"]])
        except rknnlite.errors.RKNNError as e:
            print(path.stem, "refused:", str(e).split(": ", 2)[-1][:160])
            continue
        prob, state = (np.asarray(o, np.float32).reshape(arrays[f"out{k}"].shape) for k, o in enumerate(outs))
        reference = arrays["out1"]
        print(f"{path.stem} runs: speech probability {float(prob.ravel()[0]):.6f} (simulator "
              f"{float(arrays['out0'].ravel()[0]):.6f}), state max |d| {float(np.abs(state - reference).max()):.3g} "
              f"of max |state| {float(np.abs(reference).max()):.3g}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="in the vendor venv: build, export and simulate")
    b.add_argument("model")
    b.add_argument("folder", type=Path)
    b.add_argument("--platforms", nargs="+", default=["rk3588"])
    c = sub.add_parser("compare", help="with the project's Python: run off-board and compare")
    c.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "build":
        build(args.model, args.folder, args.platforms)
    else:
        compare(args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
