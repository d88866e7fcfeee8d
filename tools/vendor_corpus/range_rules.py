"""Measure RKNN-Toolkit2's ranges around activations and pools (``tests/range_rule_vendor_cases.py``).

Runs ONLY in the vendor's venv (see ``docs/vendor-format-notes.md``)::

    /var/tmp/rkt/bin/python tools/vendor_corpus/range_rules.py [-a] [kind or data ...]

For each case of ``range_rule_vendor_cases.CASES`` (optionally only those of the given model kinds or data) it
saves the model and its 4 calibration samples, runs ``hybrid_quantization_step1`` (rk3588,
``quantized_method='layer'``, mean 0, std 1, the case's algorithm) and prints the
``min``/``max`` the ``.quantization.cfg`` writes for the case's ``pinned`` tensors, as
Python literals for ``VENDOR``, with the data's own min/max in a comment (and, with ``-a``,
every int8 activation tensor's range).
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

import range_rule_vendor_cases as cases  # noqa: E402


def measure(kind, data, algorithm):
    from rknn.api import RKNN
    from ruamel.yaml import YAML

    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            onnx.save(cases.onnx_model(kind), "m.onnx")
            for i, s in enumerate(cases.samples(data)):
                np.save(f"s{i}.npy", s)
            with open("ds.txt", "w") as f:
                f.write("".join(f"s{i}.npy\n" for i in range(4)))
            rknn = RKNN(verbose=False)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                rknn.config(target_platform="rk3588", quantized_algorithm=algorithm,
                            quantized_method="layer", mean_values=[[0]], std_values=[[1]])
                assert rknn.load_onnx("m.onnx") == 0
                assert rknn.hybrid_quantization_step1(dataset="ds.txt") == 0
            rknn.release()
            cfg = YAML(typ="safe").load(open("m.quantization.cfg"))["quantize_parameters"]
            return {t: (v["min"][0], v["max"][0]) for t, v in cfg.items()
                    if v.get("dtype") != "float32" and t.split("_dup")[0] not in ("w", "b")}  # not the weights
        finally:
            os.chdir(cwd)


if __name__ == "__main__":
    every = "-a" in sys.argv[1:]
    only = set(sys.argv[1:]) - {"-a"}
    for kind, data, algorithm in cases.CASES:
        if only and kind not in only and data not in only:
            continue
        x = np.concatenate([s.ravel() for s in cases.samples(data)])
        got = measure(kind, data, algorithm)
        pinned = {name: got.get(name, got.get(name + "_int8")) for name in cases.pinned(kind)}
        print(f"    {(kind, data, algorithm)!r}: {pinned!r},  # data [{x.min():.4f}, {x.max():.4f}]", flush=True)
        if every:
            print(f"    # {got!r}")
