"""Export an Ultralytics YOLO, built from its yaml, to a vendor ``.rknn`` the way Ultralytics does.

Writes ``tests/data/ultralytics/`` (the field case of issue 20: ``YOLO("<name>_rknn_model")``
driving ``rknnlite.api.RKNNLite`` on a file no one here compiled):

* ``yolov8n_rknn_model/yolov8n-rk3588.rknn`` and ``metadata.yaml``: what
  ``YOLO("yolov8n.yaml").export(format="rknn", imgsz=64, name="rk3588")`` writes;
* ``yolov8n_rknn_model/yolov8n-rk3588.npz``: ``in0`` a raw NCHW uint8 RGB image, ``out0`` the vendor
  simulator's output for it (the evidence format of :mod:`evidence`).

Two processes, because RKNN-Toolkit2 and Ultralytics do not share an environment here
(Ultralytics 8.4 pins ``rknn-toolkit2>=2.3.2,<2.5``; the toolkit pins its own torch):

1. this script, with ultralytics and torch: builds the model from its yaml with a seeded
   initialisation (He-normal conv weights, varied batch-norm statistics, zero class biases,
   head convolutions scaled up and box-distance biases falling with the distance, so that scores
   spread over (0, 1) and boxes vary in size: PyTorch's
   default initialisation fades to the biases through 60 layers), and runs Ultralytics' own
   exporter with ``format="rknn"``; only its last step,
   ``ultralytics.utils.export.rknn.onnx2rknn``, is replaced by a call of
2. ``--vendor`` mode of this script in the toolkit's venv, which repeats that function's
   RKNN-Toolkit2 calls with its settings (mean 0, std 255, ``build(do_quantization=False,
   rknn_batch_size=1)``), exports the file, then runs the simulator on a seeded image.

Ultralytics' RKNN export requires ``onnx>=1.16.1,<1.19`` and ``onnxslim`` (it simplifies the ONNX
with it); without them it exports an unsimplified graph that users never have. A venv that sees
the main environment's ultralytics and torch but has its own onnx gives them::

    python -m venv --system-site-packages /var/tmp/ulx
    /var/tmp/ulx/bin/pip install "onnx>=1.16.1,<1.19.0" "onnxslim>=0.1.82"
    /var/tmp/ulx/bin/python tools/vendor_corpus/ultralytics_export.py --toolkit-python /var/tmp/rkt232/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "ultralytics"
SEED = 0
IMGSZ = 64
PLATFORM = "rk3588"
HEAD_GAIN = 20.0


def vendor_build(onnx_file: str, rknn_file: str, npz_file: str, dataset: str = "") -> None:
    """In the toolkit's venv: Ultralytics' ``onnx2rknn`` calls (fp16, or int8 calibrated on the image
    list ``dataset``; a detector, so no auto hybrid), then the simulator."""
    import numpy as np
    from rknn.api import RKNN

    rknn = RKNN(verbose=False)
    quantize = {"do_quantization": True, "dataset": dataset, "auto_hybrid": False} if dataset else \
        {"do_quantization": False}
    steps = (
        ("config", lambda: rknn.config(mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]],
                                       target_platform=PLATFORM)),
        ("load_onnx", lambda: rknn.load_onnx(model=onnx_file)),
        ("build", lambda: rknn.build(**quantize, rknn_batch_size=1)),
        ("export_rknn", lambda: rknn.export_rknn(rknn_file)),
        ("init_runtime", lambda: rknn.init_runtime()),
    )
    for name, step in steps:
        ret = step()
        if ret not in (0, None):
            raise SystemExit(f"RKNN {name} failed with return code {ret}")
    import onnx

    dims = [d.dim_value for d in onnx.load(onnx_file).graph.input[0].type.tensor_type.shape.dim]
    image = np.random.default_rng(SEED).integers(0, 256, dims, dtype=np.uint8)
    outputs = rknn.inference(inputs=[image], data_format="nchw")
    rknn.release()
    np.savez(npz_file, in0=image, **{f"out{i}": out for i, out in enumerate(outputs)})


def seeded_yolo(yaml: str):
    """``YOLO(yaml)`` with the seeded initialisation described in the module doc."""
    import torch
    from ultralytics import YOLO

    torch.manual_seed(SEED)
    yolo = YOLO(yaml)
    for m in yolo.model.modules():
        if isinstance(m, torch.nn.Conv2d) and m.out_channels > 1:  # not the DFL's fixed 0..15 weights
            torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
        elif isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.8, 1.25)
    head = yolo.model.model[-1]
    for branch in head.cv3:  # class logits around 0 (not the trained prior's -11) and spread: scores
        branch[-1].bias.data.zero_()  # over (0, 1), so that thresholds and NMS have work
        branch[-1].weight.data *= HEAD_GAIN
    for branch in head.cv2:  # peaked box distributions, favouring short distances: boxes of many
        branch[-1].weight.data *= HEAD_GAIN  # sizes (13 to 100 pixels), many inside the 64-pixel image
        bins = branch[-1].bias.numel() // 4
        branch[-1].bias.data = -torch.arange(bins, dtype=torch.float32).repeat(4)
    return yolo


def export(toolkit_python: str, yaml: str = "yolov8n.yaml", imgsz: int = IMGSZ, out: Path = OUT,
           data: str = "") -> dict:
    """Run Ultralytics' exporter on ``yaml`` at ``imgsz`` with the vendor step in
    ``toolkit_python``'s venv, into ``out``: the ``<stem>_rknn_model`` folder, ``<stem>-<platform>.json``
    and, outside the repository's data (for ``tools/bench/bench_vendor.py --ultralytics``), the ONNX.
    ``data``: a dataset yaml, for Ultralytics' int8 export (``quantize=8``) calibrated on its images."""
    import onnx
    import onnxslim  # see the module doc: without it the exporter skips simplification
    import ultralytics
    import ultralytics.utils.export.rknn as rknn_export
    from ultralytics.utils import YAML

    stem = Path(yaml).stem
    out = Path(out).resolve()
    model_dir = out / f"{stem}_rknn_model"
    record = {}

    def onnx2rknn(onnx_file, output_dir, name="rk3588", quantize=None, dataset=None, metadata=None, prefix="",
                  batch=1):
        if name != PLATFORM or quantize not in (None, 8, 16) or batch != 1:  # 16: Ultralytics 8.4's fp16 default
            raise ValueError(f"this tool mirrors rk3588 batch-1 exports only, not {name}/{quantize}/{batch}")
        model_dir.mkdir(parents=True, exist_ok=True)
        rknn_file = model_dir / f"{Path(onnx_file).stem}-{name}.rknn"
        npz_file = rknn_file.with_suffix(".npz")  # beside it, as evidence.py reads it
        dataset_list = [str(dataset)] if quantize == 8 else []
        subprocess.run([toolkit_python, __file__, "--vendor", str(onnx_file), str(rknn_file), str(npz_file)]
                       + dataset_list, check=True)
        YAML.save(model_dir / "metadata.yaml", metadata)
        if out != OUT:
            shutil.copy(onnx_file, out / Path(onnx_file).name)
        record.update(rknn=str(rknn_file.relative_to(out)), npz=str(npz_file.relative_to(out)))
        return str(model_dir)

    rknn_export.onnx2rknn = onnx2rknn
    yolo = seeded_yolo(yaml)
    with tempfile.TemporaryDirectory() as workdir:  # the exporter writes the ONNX beside the yaml's name
        cwd = os.getcwd()
        os.chdir(workdir)
        try:
            yolo.export(format="rknn", imgsz=imgsz, name=PLATFORM, **({"quantize": 8, "data": data} if data else {}))
        finally:
            os.chdir(cwd)
    toolkit = subprocess.run([toolkit_python, "-c", "from importlib.metadata import version; "
                              "print(version('rknn-toolkit2'))"], check=True, capture_output=True, text=True)
    record.update(yaml=yaml, seed=SEED, imgsz=imgsz, platform=PLATFORM, quantize=8 if data else 16,
                  ultralytics=ultralytics.__version__,
                  onnx=onnx.__version__, onnxslim=onnxslim.__version__, rknn_toolkit2=toolkit.stdout.strip())
    (out / f"{stem}-{PLATFORM}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toolkit-python", help="the python of the venv holding rknn-toolkit2")
    parser.add_argument("--yaml", default="yolov8n.yaml", help="the Ultralytics model yaml (default: %(default)s)")
    parser.add_argument("--imgsz", type=int, default=IMGSZ, help="the export size (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=OUT,
                        help="the folder to write (default: the repository's tests/data/ultralytics); elsewhere "
                             "the ONNX is kept too")
    parser.add_argument("--data", default="", help="a dataset yaml: Ultralytics' int8 export, calibrated on its images")
    parser.add_argument("--vendor", nargs="+", metavar="ONNX RKNN NPZ [DATASET]", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.vendor:
        vendor_build(*args.vendor)
    elif args.toolkit_python:
        print(json.dumps(export(args.toolkit_python, args.yaml, args.imgsz, args.out, args.data), indent=1))
    else:
        parser.error("--toolkit-python is required")
    return 0


if __name__ == "__main__":
    sys.exit(main())
