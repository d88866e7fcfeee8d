"""The suite's data is all in the repository, and complete.

``tests/data/rknn-toolkit2`` (the RKNN-Toolkit2 fixtures, see its README.md) must hold every
file its ``manifest.json`` and dataset lists imply: the ONNX models, the ``.rknn`` builds (at
their recorded sizes), the calibration samples and, per case, the inputs, onnxruntime outputs
and simulator outputs.  A missing file fails here instead of turning tests into skips.
(``tests/data/vendor`` is checked against its manifest by ``tests/test_vendor_corpus.py``.)
"""

from __future__ import annotations

import json

from conftest import VENDOR_FIXTURES

MANIFEST = json.loads((VENDOR_FIXTURES / "manifest.json").read_text())
#: The models the tests load (conftest.FIXTURE_CONFIG and the vendor tests).
MODELS = ("convnet", "add_mul", "dyn_conv")


def _dataset_lines(model: str) -> list:
    return [line.split() for line in (VENDOR_FIXTURES / f"dataset_{model}.txt").read_text().splitlines()
            if line.strip()]


def expected_files() -> dict:
    """Every fixture file the manifest implies -> its size in bytes when recorded, else None."""
    files = {"README.md": None, "manifest.json": None}
    for model in MODELS:
        files[MANIFEST["models"][model]["onnx"]] = MANIFEST["models"][model]["size"]
        files[f"dataset_{model}.txt"] = None
        for sample in _dataset_lines(model):
            files.update({path: None for path in sample})
    for run in MANIFEST["runs"]:
        files[run["rknn_file"]] = run["rknn_size"]
        n_in = len(_dataset_lines(run["model"])[0])
        for case, outputs in run["cases"].items():
            prefix = f"io/{run['model']}_{case}"
            files.update({f"{prefix}_in{k}.npy": None for k in range(n_in)})
            for k in range(len(outputs)):
                files[f"{prefix}_onnx_out{k}.npy"] = None
                files[f"io/{run['model']}_{run['variant']}_{case}_sim_out{k}.npy"] = None
    return files


def test_manifest_covers_every_model_in_both_variants():
    assert sorted((r["model"], r["variant"]) for r in MANIFEST["runs"]) == \
        sorted((m, v) for m in MODELS for v in ("fp16", "i8"))
    assert all(r["cases"] and not r["errors"] for r in MANIFEST["runs"])


def test_every_expected_fixture_file_is_present():
    missing, wrong_size = [], []
    for name, size in expected_files().items():
        path = VENDOR_FIXTURES / name
        if not path.is_file():
            missing.append(name)
        elif size is not None and path.stat().st_size != size:
            wrong_size.append(f"{name}: {path.stat().st_size} bytes, manifest {size}")
    assert not missing, f"fixture files missing from {VENDOR_FIXTURES}: {missing}"
    assert not wrong_size, wrong_size


def test_no_fixture_file_is_unaccounted_for():
    present = {p.relative_to(VENDOR_FIXTURES).as_posix() for p in VENDOR_FIXTURES.rglob("*") if p.is_file()}
    assert present == set(expected_files())

