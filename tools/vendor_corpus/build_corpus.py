"""Build the vendor ``.rknn`` corpus in ``tests/data/vendor/``.

Runs ONLY inside the venv that holds Rockchip's converter (it is never a
project dependency)::

    python3.11 -m venv /var/tmp/rkt
    /var/tmp/rkt/bin/pip install rknn-toolkit2==2.5.0 --no-deps
    /var/tmp/rkt/bin/pip install <its Requires-Dist, see docs/vendor-format-notes.md>
    /var/tmp/rkt/bin/python tools/vendor_corpus/build_corpus.py [--only NAME ...]

For every case of :mod:`models` and each of its variants it converts the ONNX
model with the vendor toolkit, runs the toolkit's simulator on fixed inputs and
writes

* ``<name>_<variant>.rknn``: the exported file;
* ``<name>_<variant>.npz``: ``out0..`` the simulator outputs, the one thing
  that needs the vendor toolkit.  The raw NCHW inputs (before mean/std) are
  ``Case.make_inputs(input_seed)`` and onnxruntime's outputs on the normalised
  inputs follow from the case's ONNX, so the corpus does not store them
  (``models.stored_arrays`` regenerates the inputs); builds of other ONNX files
  store both, as ``in0..`` and ``ref0..``;
* ``onnx/<name>.onnx`` (small models only) and ``manifest.json``, which
  describes every file (graph, settings, I/O, accuracy, tool versions).

Variants: ``fp16`` = ``build(do_quantization=False)``; ``i8`` = asymmetric int8,
``normal`` algorithm, ``channel`` method; ``i8_layer`` = the same with
``quantized_method='layer'``.  Calibration uses 4 samples from a fixed seed.
The manifest is merged, so ``--only`` rebuilds a few entries in place; its top-level ``versions``
and ``toolkits`` keep the environments first recorded, and each entry built records its own
(``environment``).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import io
import json
import os
import platform
import sys
import tempfile
import time
from typing import Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from models import CASES, Case  # noqa: E402

OUT = os.path.join(ROOT, "tests", "data", "vendor")
INPUT_SEED = 1234
CALIB_SEED = 4321
CALIB_SAMPLES = 4
MAX_ONNX_BYTES = 64 * 1024

VARIANTS = {
    "fp16": dict(config={}, build=dict(do_quantization=False)),
    "i8": dict(config=dict(quantized_dtype="w8a8", quantized_algorithm="normal", quantized_method="channel"),
               build=dict(do_quantization=True)),
    "i8_layer": dict(config=dict(quantized_dtype="w8a8", quantized_algorithm="normal", quantized_method="layer"),
                     build=dict(do_quantization=True)),
}


def _versions() -> Dict[str, str]:
    import onnx
    import onnxruntime

    out = {"python": platform.python_version(), "numpy": np.__version__, "onnx": onnx.__version__,
           "onnxruntime": onnxruntime.__version__}
    try:
        from importlib.metadata import version

        for dist in ("rknn-toolkit2", "torch", "protobuf", "scipy", "opencv-python"):
            out[dist] = version(dist)
    except Exception:  # pragma: no cover - informational only
        pass
    return out


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def _stats(a: np.ndarray, b: np.ndarray) -> Dict[str, float]:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return {"max_abs": float(np.max(np.abs(a - b))) if a.size else 0.0,
            "cos": float(a @ b / denom) if denom else 1.0}


def _call(log: io.StringIO, fn, *args, **kwargs):
    """Run a vendor call with its console chatter captured into ``log``."""
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        return fn(*args, **kwargs)


def build_one(case: Case, variant: str, onnx_path: str, tmp: str, out_dir: str = OUT, suffix: str = "",
              self_contained: bool = True) -> dict:
    """Convert, export and simulate one (case, variant) into ``out_dir`` as
    ``<case>_<variant><suffix>.rknn``; returns its manifest entry.  ``self_contained=False``
    leaves the inputs and onnxruntime's outputs out of the ``.npz`` (a case of
    :data:`models.CASES` regenerates both); the manifest records their agreement either way."""
    import onnxruntime as ort
    from rknn.api import RKNN

    spec = VARIANTS[variant]
    stem = f"{case.name}_{variant}{suffix}"
    rknn_path = os.path.join(out_dir, stem + ".rknn")
    npz_path = os.path.join(out_dir, stem + ".npz")
    mean, std = case.mean_std()
    config = {"target_platform": case.platform, **spec["config"], **case.extra_config}  # the case overrides
    if mean is not None:
        config.update(mean_values=mean, std_values=std)
    build = dict(spec["build"])
    if build["do_quantization"]:
        build["dataset"] = _dataset(case, tmp)

    log = io.StringIO()
    steps = {}
    rknn = RKNN(verbose=False)
    try:
        for step, call in (
            ("config", lambda: rknn.config(**config)),
            *((f"reg_custom_op {op.op_type}", lambda op=op: rknn.reg_custom_op(op())) for op in case.custom_ops),
            ("load_onnx", lambda: rknn.load_onnx(model=onnx_path)),
            ("build", lambda: rknn.build(**build)),
            ("export_rknn", lambda: rknn.export_rknn(rknn_path)),
            ("init_runtime", lambda: rknn.init_runtime()),
        ):
            t0 = time.perf_counter()
            ret = _call(log, call)
            steps[step] = {"ret": ret, "s": round(time.perf_counter() - t0, 3)}
            if ret not in (0, None):
                raise RuntimeError(f"{stem}: {step} returned {ret}\n{log.getvalue()[-3000:]}")
        raw = case.make_inputs(INPUT_SEED)
        sim = _call(log, rknn.inference, inputs=raw, data_format=["nchw"] * len(raw))
        if sim is None:
            raise RuntimeError(f"{stem}: inference returned None\n{log.getvalue()[-3000:]}")
    finally:
        _call(log, rknn.release)

    ref_path = onnx_path
    if case.reference is not None:  # onnxruntime runs no custom op: the standard-op twin
        import onnx

        ref_path = os.path.join(tmp, f"{case.name}_reference.onnx")
        onnx.save(case.reference(), ref_path)
    sess = ort.InferenceSession(ref_path, providers=["CPUExecutionProvider"])
    feeds = {name: x for (name, _, _), x in zip(case.inputs, case.normalise(raw))}
    ref = sess.run(None, feeds)
    out_names = [o.name for o in sess.get_outputs()]

    arrays = {f"out{k}": np.asarray(y) for k, y in enumerate(sim)}
    if self_contained:
        arrays.update((f"in{k}", x) for k, x in enumerate(raw))
        arrays.update((f"ref{k}", np.asarray(y, np.float32)) for k, y in enumerate(ref))
    np.savez_compressed(npz_path, **arrays)

    return {
        "file": stem + ".rknn",
        "npz": stem + ".npz",
        "model": case.name,
        "variant": variant,
        "graph": case.graph,
        "purpose": case.purpose,
        "onnx": f"onnx/{case.name}.onnx" if os.path.getsize(onnx_path) <= MAX_ONNX_BYTES else None,
        "config": config,
        "build": {k: (os.path.basename(v) if k == "dataset" else v) for k, v in build.items()},
        "calibration": ({"samples": CALIB_SAMPLES, "seed": CALIB_SEED, "generator": "Case.make_inputs"}
                        if build["do_quantization"] else None),
        "input_seed": INPUT_SEED,
        "inputs": [{"name": n, "shape": list(s), "kind": kind,
                    "mean": (mean[i] if mean is not None else None),
                    "std": (std[i] if std is not None else None)}
                   for i, (n, s, kind) in enumerate(case.inputs)],
        "outputs": [{"name": n, "shape": list(np.shape(y)), "sim_shape": list(np.shape(s)),
                     "sim_dtype": str(np.asarray(s).dtype), **_stats(s, y)}
                    for n, y, s in zip(out_names, ref, sim)],
        "steps": steps,
        "toolkit_version": _versions().get("rknn-toolkit2"),
        "suffix": suffix,
        "rknn_size": os.path.getsize(rknn_path),
        "rknn_sha256": _sha256(rknn_path),
    }


def onnx_cases(folder: str) -> List[Case]:
    """A :class:`Case` per ``folder/*.onnx``: its one input an image (the corpus's mean/std), fp16 and
    per-channel int8."""
    import onnx

    cases = []
    for path in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
        graph_input = onnx.load(path, load_external_data=False).graph.input[0]
        dims = tuple(d.dim_value for d in graph_input.type.tensor_type.shape.dim)
        name = os.path.splitext(os.path.basename(path))[0]
        cases.append(Case(name, f"{name} (an exported ONNX model)", lambda path=path: onnx.load(path),
                          [(graph_input.name, dims, "image")], purpose="a real architecture"))
    return cases


def _dataset(case: Case, tmp: str) -> str:
    """Write the calibration samples (NCHW float32 .npy) and their dataset.txt; return its path."""
    lines = []
    for s in range(CALIB_SAMPLES):
        paths = []
        for k, x in enumerate(case.make_inputs(CALIB_SEED + s)):
            p = os.path.join(tmp, f"{case.name}_c{s}_in{k}.npy")
            np.save(p, x)
            paths.append(p)
        lines.append(" ".join(paths))
    path = os.path.join(tmp, f"dataset_{case.name}.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="case names (or name_variant) to (re)build")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--onnx-dir", metavar="DIR",
                    help="build the ONNX files in DIR (e.g. torchvision_export.py's) as image models, into DIR, "
                         "instead of the corpus")
    ap.add_argument("--suffix", default="",
                    help="appended to every file stem, for builds with another toolkit version (e.g. _tk232)")
    args = ap.parse_args(argv)
    if args.list:
        for c in CASES:
            print(f"{c.name:18s} {c.platform} {','.join(c.variants):16s} {c.graph}")
        return 0

    import onnx

    out_dir = args.onnx_dir or OUT
    cases = onnx_cases(args.onnx_dir) if args.onnx_dir else CASES
    os.makedirs(os.path.join(out_dir, "onnx"), exist_ok=True)
    manifest_path = os.path.join(out_dir, "manifest.json")
    manifest = {"files": {}}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    manifest["generator"] = "tools/vendor_corpus/build_corpus.py"
    versions = _versions()
    # "versions": the environment of the main corpus's (2.5.0) build, "toolkits": each release's first
    # build's; both stay as recorded, and an entry built since records its own under "environment"
    manifest.setdefault("toolkits", {}).setdefault(versions.get("rknn-toolkit2", "unknown"), versions)
    if not args.suffix:
        manifest.setdefault("versions", versions)
    manifest["notes"] = ("Vendor .rknn files built from this project's own random ONNX models; inputs are raw "
                         "NCHW float32 before mean/std, the model's Case.make_inputs(input_seed); the .npz files "
                         "hold out = RKNN-Toolkit2 simulator outputs only (inputs and onnxruntime's outputs on "
                         "the normalised inputs are regenerated; cos/max_abs record sim against onnxruntime). "
                         ".rknn bytes are not reproducible (uninitialised padding).")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            m = case.build()
            onnx_path = os.path.join(tmp, case.name + ".onnx")
            onnx.save(m, onnx_path)
            if os.path.getsize(onnx_path) <= MAX_ONNX_BYTES:
                onnx.save(m, os.path.join(out_dir, "onnx", case.name + ".onnx"))
            for variant in case.variants:
                stem = f"{case.name}_{variant}{args.suffix}"
                if args.only and case.name not in args.only and f"{case.name}_{variant}" not in args.only:
                    continue
                t0 = time.perf_counter()
                try:
                    entry = build_one(case, variant, onnx_path, tmp, out_dir=out_dir, suffix=args.suffix,
                                      self_contained=bool(args.onnx_dir))
                except Exception as e:  # keep going: one failing op must not stop the corpus
                    failures += 1
                    print(f"FAIL {stem}: {e}", file=sys.stderr)
                    continue
                manifest["files"][stem] = {**entry, "environment": versions}
                worst = max((o["max_abs"] for o in entry["outputs"]), default=0.0)
                cos = min((o["cos"] for o in entry["outputs"]), default=1.0)
                print(f"ok   {stem:28s} {entry['rknn_size']:8d} B  max_abs {worst:.3g}  cos {cos:.6f}  "
                      f"{time.perf_counter() - t0:.1f}s", flush=True)
                with open(manifest_path, "w") as f:
                    json.dump(manifest, f, indent=1, sort_keys=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
