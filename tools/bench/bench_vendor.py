#!/usr/bin/env python3
"""Off-board latency of real Rockchip ``.rknn`` files against the same model's portable build.

    python tools/bench/bench_vendor.py [--models convnet,add_mul,dyn_conv,bench] [--variants fp16,i8]
                                       [--architectures DIR] [--onnx-dir DIR] [--ultralytics DIR]
                                       [--runs 30] [--clock cpu]

For each model and variant, three things run the same model on the same input, side by side:
  * ``Context(vendor_file, backend="software").run``: the RKNN-Toolkit2 2.5.0 file lowered
    off-board (``rknnlite/model/rknn_graph``; docs/vendor-offboard.md), fed its 3-channel inputs
    in NHWC, the layout its attributes give (as librknnrt's do);
  * ``Context(portable_build).run``: the same ONNX converted by rknnlite's toolkit with the
    vendor file's settings (mean/std, dynamic shapes; int8: asymmetric, normal algorithm,
    channel method, calibrated on the dataset the vendor file was calibrated on);
  * onnxruntime on the ONNX (CPU provider, one intra- and one inter-op thread), fed the
    input already normalised with mean/std (the ONNX does not normalise; the two rknnlite
    columns take the raw input and normalise it inside their run).
Models: the three fixtures of ``tests/data/rknn-toolkit2`` (convnet, add_mul, dyn_conv at
its first shape set 1x3x32x32) and the corpus ``bench`` model of ``tests/data/vendor`` (six 3x3
conv layers up to 192 channels on 1x3x64x64; its ONNX is rebuilt by
``tools/vendor_corpus/models.py`` and its int8 build calibrated on the corpus's 4 samples).
``--onnx-dir DIR`` adds the builds ``build_corpus.py --onnx-dir DIR`` made (torchvision's own
ResNet50 and MobileNets, exported by ``torchvision_export.py``).  ``--ultralytics DIR`` adds the YOLO exports ``tools/vendor_corpus/ultralytics_export.py --out DIR``
writes (Ultralytics' own exporter and RKNN-Toolkit2 2.3.2, e.g. YOLOv8n at 640x640).
All three run single-threaded (BLAS limited to one thread with threadpoolctl, in this script
only; rknnlite with its default one thread).  The runs are interleaved (each round runs the
three once, in turn) so that load from other processes hits them alike; the table gives the
median and the minimum over RUNS rounds after warm-up, and ratios are medians of per-round
ratios.  ``--clock cpu`` times with the calling thread's CPU time instead of wall time.
Prints a Markdown table.  Needs: onnx, onnxruntime, threadpoolctl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rknnlite  # noqa: E402
from common import interleaved_ms, machine, median_ratio  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402

FIXTURE_MODELS = ("convnet", "add_mul", "dyn_conv")
CORPUS = REPO / "tests" / "data" / "vendor"
#: the corpus's calibration: Case.make_inputs(CALIB_SEED + s) for s < CALIB_SAMPLES
#: (tools/vendor_corpus/build_corpus.py)
CALIB_SEED, CALIB_SAMPLES = 4321, 4


def fixtures_dir() -> Path:
    """``tests/data/rknn-toolkit2``: the RKNN-Toolkit2 fixtures kept in the repository."""
    return REPO / "tests" / "data" / "rknn-toolkit2"


class Case:
    """One model/variant: the vendor file, the ONNX, the toolkit settings, one input."""

    def __init__(self, name: str, variant: str, vendor: Path, onnx_model, config: dict,
                 dataset: Optional[str], dataset_root: Optional[Path], inputs: List[np.ndarray]):
        self.name, self.variant, self.vendor = name, variant, vendor
        self.onnx_model, self.config = onnx_model, config
        self.dataset, self.dataset_root, self.inputs = dataset, dataset_root, inputs

    def normalised(self) -> List[np.ndarray]:
        """The inputs after the model's ``(x - mean) / std`` (what the ONNX takes)."""
        means, stds = self.config.get("mean_values"), self.config.get("std_values")
        if not means:
            return list(self.inputs)
        return [((x - np.reshape(np.float32(m), (1, -1, 1, 1))) / np.reshape(np.float32(s), (1, -1, 1, 1)))
                .astype(np.float32) for x, m, s in zip(self.inputs, means, stds)]


def fixture_case(name: str, variant: str) -> Case:
    """A fixture model (settings from the fixtures' manifest.json, input from ``io/``)."""
    root = fixtures_dir()
    manifest = json.loads((root / "manifest.json").read_text())
    run = next(r for r in manifest["runs"] if r["model"] == name and r["variant"] == variant)
    config = {k: v for k, v in run["config"].items() if k != "target_platform"}
    case = sorted(run["cases"])[0]
    inputs = [np.load(p) for p in sorted((root / "io").glob(f"{name}_{case}_in*.npy"))]
    return Case(name, variant, root / run["rknn_file"], str(root / "onnx" / f"{name}.onnx"), config,
                run["build"].get("dataset"), root, inputs)


def corpus_case(name: str, variant: str, tmp: str) -> Case:
    """A corpus model of ``tests/data/vendor`` (settings from its manifest.json, input regenerated
    from its recorded seed, ONNX rebuilt by ``tools/vendor_corpus/models.py``, calibration samples regenerated)."""
    sys.path.insert(0, str(REPO / "tools" / "vendor_corpus"))
    from models import case_named

    return manifest_case(CORPUS, name, variant, case_named(name), tmp)


def onnx_dir_cases(folder: Path, variants: List[str], tmp: str) -> List[Case]:
    """The builds ``build_corpus.py --onnx-dir FOLDER`` made of ``FOLDER/*.onnx`` (e.g. the
    torchvision architectures ``torchvision_export.py`` writes), per variant."""
    sys.path.insert(0, str(REPO / "tools" / "vendor_corpus"))
    from build_corpus import onnx_cases

    files = json.loads((folder / "manifest.json").read_text())["files"]
    return [manifest_case(folder, c.name, v, c, tmp) for c in onnx_cases(str(folder)) for v in variants
            if f"{c.name}_{v}" in files]


def manifest_case(folder: Path, name: str, variant: str, model_case, tmp: str) -> Case:
    """``<name>_<variant>`` of a folder ``build_corpus.py`` wrote (its manifest.json: settings
    and files), ``model_case`` the ``models.Case`` it was built from (ONNX: ``folder/<name>.onnx``
    when there is one, else rebuilt; calibration samples regenerated)."""
    entry = json.loads((folder / "manifest.json").read_text())["files"][f"{name}_{variant}"]
    config = {k: v for k, v in entry["config"].items()
              if k in ("mean_values", "std_values", "quantized_algorithm", "quantized_method", "dynamic_input")}
    dataset = None
    if entry["build"].get("do_quantization"):
        lines = []
        for s in range(CALIB_SAMPLES):
            paths = []
            for k, x in enumerate(model_case.make_inputs(CALIB_SEED + s)):
                paths.append(os.path.join(tmp, f"{name}_c{s}_in{k}.npy"))
                np.save(paths[-1], x)
            lines.append(" ".join(paths))
        dataset = os.path.join(tmp, f"dataset_{name}.txt")
        Path(dataset).write_text("\n".join(lines) + "\n")
    from models import stored_arrays  # tools/vendor_corpus, on the path of both callers

    arrays = stored_arrays(folder / entry["npz"])  # the corpus's inputs are regenerated from their seed
    inputs = [arrays[f"in{k}"] for k in range(len(entry["inputs"]))]
    onnx_path = folder / f"{name}.onnx"
    if not onnx_path.exists():
        onnx_path = Path(tmp) / f"{name}.onnx"
        onnx_path.write_bytes(model_case.build().SerializeToString())
    return Case(name, variant, folder / entry["file"], str(onnx_path), config, dataset, None, inputs)


def architecture_case(folder: Path) -> Case:
    """A real-architecture file built by ``tools/vendor_corpus/layer_evidence.py build`` (folder
    ``<case>_<variant>``: ``model.rknn``, ``model.onnx``, ``in0.npy``, int8: ``dataset.txt``)."""
    sys.path.insert(0, str(REPO / "tools" / "vendor_corpus"))
    from models import ARCHITECTURES

    name, variant = folder.name.rsplit("_", 1)
    model_case = next(c for c in ARCHITECTURES if c.name == name)
    mean, std = model_case.mean_std()
    config = {"mean_values": mean, "std_values": std} if mean is not None else {}
    dataset = folder / "dataset.txt"
    return Case(name, variant, folder / "model.rknn", str(folder / "model.onnx"), config,
                str(dataset) if variant != "fp16" else None, None, [np.load(folder / "in0.npy")])


def ultralytics_cases(folder: Path) -> List[Case]:
    """The exports ``tools/vendor_corpus/ultralytics_export.py --out FOLDER`` wrote: per model,
    ``<stem>_rknn_model/<stem>-rk3588.rknn`` with its ``.npz`` (the uint8 NCHW image) and
    ``<stem>.onnx``; Ultralytics' settings (mean 0, std 255, fp16)."""
    cases = []
    for rknn_file in sorted(folder.glob("*_rknn_model/*.rknn")):
        stem = rknn_file.parent.name[:-len("_rknn_model")]
        with np.load(rknn_file.with_suffix(".npz")) as npz:
            image = npz["in0"].astype(np.float32)
        config = {"mean_values": [[0, 0, 0]], "std_values": [[255, 255, 255]]}
        cases.append(Case(f"{stem} {image.shape[-1]}x{image.shape[-2]} (Ultralytics export)", "fp16", rknn_file,
                          str(folder / f"{stem}.onnx"), config, None, None, [image]))
    return cases


def portable_build(case: Case, out_dir: str) -> str:
    """``case``'s ONNX converted by rknnlite's toolkit with the vendor file's settings."""
    rk = RKNN()
    cwd = os.getcwd()
    try:
        if case.dataset_root is not None:
            os.chdir(case.dataset_root)  # the fixtures' dataset paths are relative to it
        if rk.config(target_platform="rk3588", **case.config) != 0 or rk.load_onnx(case.onnx_model) != 0:
            raise SystemExit(f"{case.name}: config/load_onnx failed")
        quant = case.variant != "fp16"
        if rk.build(do_quantization=quant, dataset=case.dataset if quant else None) != 0:
            raise SystemExit(f"{case.name}_{case.variant}: build failed")
        out = os.path.join(out_dir, f"{case.name}_{case.variant}.rknn")
        if rk.export_rknn(out) != 0:
            raise SystemExit(f"{case.name}_{case.variant}: export failed")
        return out
    finally:
        os.chdir(cwd)
        rk.release()


def time_case(case: Case, tmp: str, runs: int, clock) -> Tuple[List[List[float]], float]:
    """Interleaved times (ms) of onnxruntime, the vendor file and the portable build, and the
    largest difference between the vendor file's and the portable build's outputs.  A
    dynamic-shape model runs the shape set of the input (``run`` switches to it)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(case.onnx_model, opts, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(session.get_inputs(), case.normalised())}
    x = case.inputs
    with rknnlite.Context(str(case.vendor), backend="software") as vendor, \
            rknnlite.Context(portable_build(case, tmp)) as portable:
        # each gets the data in the layout its attributes give (a vendor file's 3-channel input is NHWC)
        xv = [np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if attr.fmt == rknnlite.TensorFormat.NHWC else a
              for a, attr in zip(x, vendor.inputs)]
        diff = max(float(np.abs(a - b).max()) for a, b in zip(vendor.run(xv), portable.run(x)))
        times = interleaved_ms([lambda: session.run(None, feeds), lambda: vendor.run(xv), lambda: portable.run(x)],
                               runs, warmup=2, clocks=[clock] * 3)
    return times, diff


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(FIXTURE_MODELS + ("bench",)),
                    help="fixture models (convnet, add_mul, dyn_conv) and/or corpus models (bench)")
    ap.add_argument("--variants", default="fp16,i8")
    ap.add_argument("--architectures", metavar="DIR",
                    help="also time the real-architecture files layer_evidence.py built into DIR")
    ap.add_argument("--onnx-dir", metavar="DIR",
                    help="also time the builds build_corpus.py --onnx-dir DIR made (e.g. torchvision's ResNet50)")
    ap.add_argument("--ultralytics", metavar="DIR",
                    help="also time the Ultralytics exports ultralytics_export.py --out DIR wrote")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="clock of every column (cpu: this thread's CPU time)")
    args = ap.parse_args(argv)

    import onnxruntime as ort
    from threadpoolctl import threadpool_info, threadpool_limits

    load_before = f"{os.getloadavg()[0]:.2f}"
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    rows: Dict[str, Tuple[List[List[float]], float]] = {}
    with tempfile.TemporaryDirectory() as tmp, threadpool_limits(limits=1):
        cases = [(name, variant) for name in args.models.split(",") if name for variant in args.variants.split(",")]
        for name, variant in cases:
            case = fixture_case(name, variant) if name in FIXTURE_MODELS else corpus_case(name, variant, tmp)
            rows[f"{name}_{variant}"] = time_case(case, tmp, args.runs, clock)
            print(f"  {name}_{variant}: done", file=sys.stderr)
        for folder in sorted(Path(args.architectures).iterdir()) if args.architectures else ():
            if (folder / "model.rknn").exists() and folder.name.rsplit("_", 1)[-1] in args.variants.split(","):
                rows[folder.name] = time_case(architecture_case(folder), tmp, args.runs, clock)
                print(f"  {folder.name}: done", file=sys.stderr)
        for case in onnx_dir_cases(Path(args.onnx_dir), args.variants.split(","), tmp) if args.onnx_dir else ():
            rows[f"{case.name}_{case.variant}"] = time_case(case, tmp, args.runs, clock)
            print(f"  {case.name}_{case.variant}: done", file=sys.stderr)
        for case in ultralytics_cases(Path(args.ultralytics)) if args.ultralytics else ():
            rows[case.name] = time_case(case, tmp, args.runs, clock)
            print(f"  {case.name}: done", file=sys.stderr)
        blas = ", ".join(f"{i['internal_api']} {i.get('version', '')}".strip() for i in threadpool_info())

    print(machine())
    print(f"rknnlite {rknnlite.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__} ({blas}); "
          f"{os.cpu_count()} CPUs; {args.clock} time, single thread; median and min of {args.runs} interleaved "
          f"rounds; load average before/after {load_before} / {os.getloadavg()[0]:.2f}")
    print()
    print("| file | onnxruntime (ms) | vendor file off-board (ms) | portable build (ms) | vendor / portable | "
          "vendor / onnxruntime | max abs vendor - portable |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, (t, diff) in rows.items():
        ort_ms, vendor_ms, portable_ms = ((statistics.median(v), min(v)) for v in t)
        print(f"| {label} | {ort_ms[0]:.3f} (min {ort_ms[1]:.3f}) | {vendor_ms[0]:.3f} (min {vendor_ms[1]:.3f}) | "
              f"{portable_ms[0]:.3f} (min {portable_ms[1]:.3f}) | {median_ratio(t[1], t[2]):.2f} | "
              f"{median_ratio(t[1], t[0]):.2f} | {diff:.3g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
