"""Measure RKNN-Toolkit2's calibration ranges for ``tests/kl_vendor_cases.py``.

Runs ONLY in the vendor's venv (see ``docs/vendor-format-notes.md``)::

    /var/tmp/rkt/bin/python tools/vendor_corpus/kl_ranges.py
    /var/tmp/rkt/bin/python tools/vendor_corpus/kl_ranges.py --build mmse OUT_DIR [case ...]

Each case's model is ``kl_vendor_cases.onnx_model`` (``[1, 1, 64, 64]`` -> identity 1x1 Conv
(-> Relu) -> output), calibrated on the case's samples (rk3588, ``quantized_method='layer'``,
mean 0, std 1).

* Without ``--build``: ``quantized_algorithm='kl_divergence'`` through
  ``hybrid_quantization_step1``; prints the output tensor's ``min``/``max`` from the
  ``.quantization.cfg`` it writes (and the input's, in a comment), as Python literals for the test.
* ``--build ALGORITHM OUT_DIR``: a full ``build`` with that algorithm, exported as
  ``OUT_DIR/<case>.rknn``.  The cfg of step1 does not show what ``mmse`` does (it holds the
  ``kl_divergence`` ranges; the mean-squared-error search runs in ``build`` and step2), so its
  ranges are read from the built files, outside this venv::

      python -c "import rknnlite, sys; [print(f, c.outputs[0].scale, c.outputs[0].zp)
                 for f in sys.argv[1:] for c in [rknnlite.Context(f)]]" OUT_DIR/*.rknn
"""

import contextlib
import io
import os
import sys
import tempfile

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from kl_vendor_cases import CASES, onnx_model  # noqa: E402


def _calibrated(samples, kind, algorithm):
    """An RKNN with the case's model loaded, configured, and its dataset written in the
    current directory."""
    from rknn.api import RKNN

    onnx.save(onnx_model(kind), "m.onnx")
    for i, s in enumerate(samples):
        np.save(f"s{i}.npy", s[None, None])
    with open("ds.txt", "w") as f:
        f.write("".join(f"s{i}.npy\n" for i in range(len(samples))))
    rknn = RKNN(verbose=False)
    with contextlib.redirect_stdout(io.StringIO()):
        rknn.config(target_platform="rk3588", quantized_algorithm=algorithm,
                    quantized_method="layer", mean_values=[[0]], std_values=[[1]])
        assert rknn.load_onnx("m.onnx") == 0
    return rknn


@contextlib.contextmanager
def _scratch():
    """A temporary directory as the current one (the toolkit writes its files there)."""
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            yield
        finally:
            os.chdir(cwd)


def measure(samples, kind):
    from ruamel.yaml import YAML

    with _scratch():
        rknn = _calibrated(samples, kind, "kl_divergence")
        with contextlib.redirect_stdout(io.StringIO()):
            assert rknn.hybrid_quantization_step1(dataset="ds.txt") == 0
        rknn.release()
        cfg = YAML(typ="safe").load(open("m.quantization.cfg"))["quantize_parameters"]
        return tuple((cfg[t]["min"][0], cfg[t]["max"][0]) for t in ("x_int8", "y_int8"))


def build(samples, kind, algorithm, out):
    with _scratch():
        rknn = _calibrated(samples, kind, algorithm)
        with contextlib.redirect_stdout(io.StringIO()):
            assert rknn.build(do_quantization=True, dataset="ds.txt") == 0
            assert rknn.export_rknn(out) == 0
        rknn.release()


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--build"]:
        algorithm, out_dir, only = args[1], os.path.abspath(args[2]), set(args[3:])
        os.makedirs(out_dir, exist_ok=True)
        for name, (make, kind) in CASES.items():
            if not only or name in only:
                build(make(), kind, algorithm, os.path.join(out_dir, f"{name}.rknn"))
                print(os.path.join(out_dir, f"{name}.rknn"), flush=True)
    else:
        for name, (make, kind) in CASES.items():
            (xlo, xhi), (lo, hi) = measure(make(), kind)
            print(f"    {name!r}: ({lo!r}, {hi!r}),  # input x: ({xlo!r}, {xhi!r})", flush=True)
