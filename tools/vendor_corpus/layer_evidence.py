"""Check real architectures layer by layer against RKNN-Toolkit2's simulator.

A deep network's end-to-end outputs drift from the simulator's through dozens of layers of
single-step (int8) or single-ulp (fp16) differences, so its final outputs say little about
whether each op is lowered right.  This tool compares every layer on the simulator's own
inputs instead: RKNN-Toolkit2's ``accuracy_analysis`` dumps the simulator's value of every
tensor, and each lowered node runs on those values and is compared with the simulator's
output of that node.  Two steps, in two Pythons::

    # 1. in the venv that holds RKNN-Toolkit2 (see build_corpus.py): build and dump
    /var/tmp/rkt/bin/python tools/vendor_corpus/layer_evidence.py build OUT_DIR [--only NAME ...] [--platform P]
    # 2. with the project's Python: compare, one row per architecture file
    python tools/vendor_corpus/layer_evidence.py compare OUT_DIR

``OUT_DIR/<case>_<variant>/`` holds ``model.rknn``, ``in0.npy`` (raw NCHW input) and the
``snapshot/`` the toolkit writes.  The cases are ``models.ARCHITECTURES`` (and corpus cases named with ``--only``); the variants those
of ``build_corpus.py`` (fp16 and per-channel int8).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import sys
from typing import Dict, List, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from models import ARCHITECTURES, CASES, Case  # noqa: E402

INPUT_SEED = 1234
CALIB_SEED = 4321
VARIANTS = ("fp16", "i8")
#: decimals of the toolkit's snapshot text files (``%f``): float values are compared as printed
_PRINTED_DECIMALS = 6


def build(case: Case, variant: str, out: str) -> None:
    """Convert ``case`` with the vendor toolkit, export it and dump the simulator's tensors."""
    import onnx
    from rknn.api import RKNN

    os.makedirs(out, exist_ok=True)
    onnx_path = os.path.join(out, "model.onnx")
    onnx.save(case.build(), onnx_path)
    np.save(os.path.join(out, "in0.npy"), case.make_inputs(INPUT_SEED)[0])
    mean, std = case.mean_std()
    rknn = RKNN(verbose=False)
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        rknn.config(target_platform=case.platform, mean_values=mean, std_values=std)
        rknn.load_onnx(model=onnx_path)
        if variant == "fp16":
            ret = rknn.build(do_quantization=False)
        else:
            lines = []
            for s in range(4):
                path = os.path.join(out, f"calib{s}.npy")
                np.save(path, case.make_inputs(CALIB_SEED + s)[0])
                lines.append(path)
            with open(os.path.join(out, "dataset.txt"), "w") as f:
                f.write("\n".join(lines) + "\n")
            ret = rknn.build(do_quantization=True, dataset=os.path.join(out, "dataset.txt"))
        ret = ret or rknn.export_rknn(os.path.join(out, "model.rknn"))
        ret = ret or rknn.accuracy_analysis(inputs=[os.path.join(out, "in0.npy")],
                                            output_dir=os.path.join(out, "snapshot"))
        rknn.release()
    if ret:
        raise RuntimeError(f"{case.name} {variant}: the toolkit returned {ret}\n{log.getvalue()[-2000:]}")


def compare(folder: str) -> Tuple[List[Tuple[str, str, Tuple[float, str]]], str]:
    """``([(node op, tensor, (badness, figures))], end-to-end figures)`` for one built folder: every
    lowered node run on the simulator's values of its inputs against the simulator's output."""
    from rknnlite.backends.software.executor import Executor
    from rknnlite.model.loader import load_model
    from rknnlite.model.rknn_graph import lower_rockchip
    from rknnlite.model.rknn_graph.lower import VendorGraph

    loaded = load_model(os.path.join(folder, "model.rknn"))
    model = lower_rockchip(loaded.payload, loaded.model, validate=False, fuse=False)  # every vendor tensor kept
    g = model.graph
    float16 = model.metadata.float_dtype == "float16"
    raw = np.load(os.path.join(folder, "in0.npy"))
    # the lowered graph takes its inputs in its own layout (NCHW here), normalised by graph_inputs
    values: Dict[str, np.ndarray] = dict(zip(g.inputs, model.graph_inputs([raw])))
    chained = dict(values)
    rows = []
    for node in g.nodes:
        ins = [n for n in dict.fromkeys(node.inputs) if n and n not in g.constants]
        consts = {n: g.constants[n] for n in node.inputs if n in g.constants}
        outs = [o for o in node.outputs if o]
        names = set(ins) | set(consts) | set(outs)
        one = VendorGraph([node], ins, outs, consts, {k: v for k, v in g.quant.items() if k in names},
                          keep_float=[k for k in g.keep_float if k in names],
                          round_fp16=[k for k in g.round_fp16 if k in names])
        results = Executor(one, model.metadata.float_dtype).run([values[n] for n in ins])
        chained.update(zip(outs, Executor(one, model.metadata.float_dtype).run([chained[n] for n in ins])))
        for name, ours in zip(outs, results):
            sim = _snapshot(folder, name, ours.shape)
            if sim is None:
                values[name] = ours
                continue
            quant = g.quant.get(name)
            # the snapshot prints a float16 tensor to 6 decimals: the next node reads the float16
            # value the simulator held, not the printed one (a sum of printed values can fall off
            # a float16 tie and round the other way)
            held = quant is None and (float16 or name in g.round_fp16)
            values[name] = (sim.astype(np.float16) if held else sim).astype(np.float32)
            rows.append((node.op, name, _figures(ours, sim, quant)))
    final = g.outputs[0]
    sim = _snapshot(folder, final, chained[final].shape)
    end = _figures(chained[final], sim, g.quant.get(final))[1] if sim is not None else "no snapshot of the output"
    return rows, end


def _snapshot(folder: str, name: str, shape) -> np.ndarray:
    path = os.path.join(folder, "snapshot", "simulator", _snapshot_files(folder).get(name, name + ".txt"))
    if not os.path.exists(path):
        return None
    values = np.loadtxt(path, dtype=np.float64)
    return values.reshape(shape) if values.size == int(np.prod(shape)) else None


def _snapshot_files(folder: str) -> Dict[str, str]:
    """Tensor name -> snapshot file name, from the toolkit's ``map_name_to_file.txt`` (names with
    ``/`` or ``.``, such as torch exports', are written with ``_``); empty when there is none."""
    path = os.path.join(folder, "snapshot", "map_name_to_file.txt")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        rows = [line.split() for line in f.read().splitlines()[2:]]
    return {row[0]: row[1] for row in rows if len(row) == 2}


def _figures(ours: np.ndarray, sim: np.ndarray, quant) -> Tuple[float, str]:
    """``(badness, text)``: the largest difference in quantization steps (int8) or relative to
    the output's scale (float), and the figures in words."""
    diff = np.abs(np.asarray(ours, np.float64) - sim)
    if quant is not None:
        steps = diff / quant.scale[0]
        return float(steps.max()), (f"max {steps.max():.2f} steps, {100 * np.mean(steps < 0.5):.2f} % exact, "
                                    f"{100 * np.mean(steps <= 1.01):.2f} % within one step")
    relative = float(diff.max()) / max(1.0, float(np.abs(sim).max()))
    printed = np.abs(np.round(np.asarray(ours, np.float64), _PRINTED_DECIMALS) - sim) < 1e-9
    return relative, (f"max |diff| {diff.max():.3g} ({relative:.1e} of the output's scale), "
                      f"{100 * printed.mean():.2f} % equal as printed")


def _verdict(folder: str) -> str:
    """One line: whether the file runs off-board (or why not) and how its layers compare."""
    import rknnlite
    from rknnlite.model.loader import load_model
    from rknnlite.model.rknn_graph import lower_rockchip

    loaded = load_model(os.path.join(folder, "model.rknn"))
    try:
        lower_rockchip(loaded.payload, loaded.model)
        runs = "runs"
    except rknnlite.RKNNError as e:
        runs = f"refused ({e.message.replace(os.path.join(folder, 'model.rknn') + ': ', '')})"
    try:
        rows, end = compare(folder)
    except rknnlite.RKNNError:
        return runs
    worst = max(rows, key=lambda r: r[2][0])
    return (f"{runs}; {len(rows)} layers compared, worst {worst[0]} {worst[1]}: {worst[2][1]}; "
            f"end to end: {end}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=("build", "compare"))
    ap.add_argument("out")
    ap.add_argument("--only", nargs="*", help="architecture names")
    ap.add_argument("--platform", help="build for this target platform instead of the case's own")
    args = ap.parse_args(argv)
    for case in ARCHITECTURES + [c for c in CASES if args.only and c.name in args.only]:
        if args.only and case.name not in args.only:
            continue
        if args.platform:
            case = dataclasses.replace(case, platform=args.platform)
        for variant in VARIANTS:
            folder = os.path.join(args.out, f"{case.name}_{variant}")
            if args.step == "build":
                build(case, variant, folder)
                print(f"built {folder}", flush=True)
                continue
            verdict = _verdict(folder) if os.path.isdir(folder) else "not built"
            print(f"{case.name} {variant}: {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
