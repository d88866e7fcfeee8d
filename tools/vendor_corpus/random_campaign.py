#!/usr/bin/env python3
"""Random graphs built by RKNN-Toolkit2, run off-board, compared with its simulator.

The seeded graphs of ``tests/random_graphs.py`` (``image``: CNN blocks; ``tokens``: transformer
layers) are op combinations no corpus case lists.  Each file that rknnlite runs (validation on, as a
user loads it) must meet the corpus bounds (``evidence.output_fidelity``); a file outside them is a
wrong answer or drift to look into, a refused one is fine (the refusal names why).  Two steps::

    # in the vendor venv (see build_corpus.py): build, export, simulate
    /var/tmp/rkt/bin/python tools/vendor_corpus/random_campaign.py build DIR --family image \\
        --variant int8 --platform rk3588 --seeds 0:200
    # with the project's Python: load each file as a user does, compare, count
    python tools/vendor_corpus/random_campaign.py compare DIR

``DIR`` gets ``<family>_<seed>_<variant>_<platform>.rknn`` and ``.npz`` (the input and the
simulator's outputs).  int8 builds calibrate on four random samples and the input itself.
``--stress`` scales each graph's conv and Gemm weights, their biases and the input by seeded powers
of ten (:func:`stressed`): the ranges where the compiler picks its rarer requantization forms.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests"))
sys.path.insert(0, str(HERE))


def stressed(model, seed: int) -> float:
    """Scale ``model``'s Conv and Gemm weights by 10^U(-4, 1) and their biases by 10^U(-2, 2), each
    node drawing its own (seeded); returns the factor, 10^U(-2, 2), to scale the input by."""
    from onnx import numpy_helper

    rng = np.random.default_rng(seed + 7919)
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type not in ("Conv", "Gemm"):
            continue
        for position, (low, high) in zip((1, 2), ((-4.0, 1.0), (-2.0, 2.0))):
            if position < len(node.input) and node.input[position] in inits:
                tensor = inits[node.input[position]]
                value = numpy_helper.to_array(tensor) * np.float32(10.0 ** rng.uniform(low, high))
                tensor.CopyFrom(numpy_helper.from_array(value.astype(np.float32), tensor.name))
    return float(10.0 ** rng.uniform(-2.0, 2.0))


def build(out: Path, family: str, variant: str, platform: str, seeds: range, stress: bool = False) -> int:
    """Convert, export and simulate each seed's graph into ``out``; prints one line per seed."""
    import onnx
    from rknn.api import RKNN

    import random_graphs

    make = {"image": random_graphs.image_graph, "tokens": random_graphs.token_graph,
            "idiom": random_graphs.idiom_graph}[family]
    out.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        stem = f"{family}_{seed}_{variant}_{platform}"
        model, shape = make(seed)
        gain = stressed(model, seed) if stress else 1.0
        x = (gain * np.random.default_rng(seed + 1).standard_normal(shape)).astype(np.float32)
        log = io.StringIO()
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "model.onnx")
            onnx.save(model, source)
            config = {"target_platform": platform}
            if family == "image":  # the vendor wants an image input's mean/std: the identity
                config.update(mean_values=[[0.0] * shape[1]], std_values=[[1.0] * shape[1]])
            options = {"do_quantization": variant == "int8"}
            if variant == "int8":
                rng = np.random.default_rng(seed + 100)
                names = []
                samples = [(gain * rng.standard_normal(shape)).astype(np.float32) for _ in range(4)]
                for i, sample in enumerate(samples + [x]):
                    names.append(os.path.join(tmp, f"sample{i}.npy"))
                    np.save(names[-1], sample)
                options["dataset"] = os.path.join(tmp, "dataset.txt")
                Path(options["dataset"]).write_text("\n".join(names) + "\n")
            try:
                with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                    rknn = RKNN(verbose=False)
                    steps = (lambda: rknn.config(**config), lambda: rknn.load_onnx(model=source),
                             lambda: rknn.build(**options), lambda: rknn.export_rknn(str(out / f"{stem}.rknn")),
                             lambda: rknn.init_runtime())
                    for step in steps:
                        if step() != 0:
                            raise RuntimeError("a toolkit call returned -1")
                    sims = rknn.inference(inputs=[x], data_format=["nchw"] if len(shape) == 4 else None)
                    rknn.release()
                if sims is None:
                    raise RuntimeError("inference returned None")
                np.savez(out / f"{stem}.npz", in0=x, **{f"out{k}": np.asarray(v) for k, v in enumerate(sims)})
                print(stem, "built", flush=True)
            except Exception as e:  # the toolkit refuses many random graphs: keep going
                print(stem, f"toolkit failed: {e}; {log.getvalue()[-200:]!r}", flush=True)
    return 0


def compare(folder: Path) -> int:
    """Run every built file of ``folder`` off-board and print ``within`` / ``OUTSIDE`` / ``refused``
    per file, then the counts; 1 when a file runs outside the bounds."""
    import rknnlite
    from evidence import output_fidelity

    counts = {}
    for path in sorted(folder.glob("*.rknn")):
        if not path.with_suffix(".npz").exists():
            continue
        data = np.load(path.with_suffix(".npz"))
        x = data["in0"]
        sims = [data[k] for k in sorted((k for k in data if k.startswith("out")), key=lambda k: int(k[3:]))]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ctx = rknnlite.Context(str(path), backend="software")
        except rknnlite.RKNNError as e:
            verdict, detail = "refused", str(e).split(": ", 2)[-1][:160]
        else:
            with ctx:
                outputs = ctx.run([x], data_format="nchw" if x.ndim == 4 else None)
                scales = [a.scale if a.type.name == "INT8" else None for a in ctx.outputs]
            results = [output_fidelity(o, s, sc, "_int8_" in path.name) for o, s, sc in zip(outputs, sims, scales)]
            ok = len(outputs) == len(sims) and all(passed for passed, _ in results)
            verdict, detail = ("within" if ok else "OUTSIDE"), "; ".join(d for _, d in results)
        counts[verdict] = counts.get(verdict, 0) + 1
        print(path.stem, verdict, detail)
    print(counts)
    return 1 if counts.get("OUTSIDE") else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="in the vendor venv: build, export and simulate")
    b.add_argument("folder", type=Path)
    b.add_argument("--family", choices=("image", "tokens", "idiom"), default="image")
    b.add_argument("--variant", choices=("fp16", "int8"), default="fp16")
    b.add_argument("--platform", default="rk3588")
    b.add_argument("--seeds", default="0:100", help="START:STOP")
    b.add_argument("--stress", action="store_true", help="scale weights, biases and the input (see stressed)")
    c = sub.add_parser("compare", help="with the project's Python: run off-board and compare")
    c.add_argument("folder", type=Path)
    args = ap.parse_args(argv)
    if args.command == "build":
        start, stop = (int(v) for v in args.seeds.split(":"))
        return build(args.folder, args.family, args.variant, args.platform, range(start, stop), args.stress)
    return compare(args.folder)


if __name__ == "__main__":
    sys.exit(main())
