"""What the vendor corpus proves: per file, its platform, toolkit, precision, op types and fidelity.

``rknnlite.model.rknn_graph.validated.VALIDATED`` must equal the table this module derives from
the corpus (``tests/test_vendor_validated.py`` checks it); run it to print that table::

    python tools/vendor_corpus/evidence.py [--markdown] [FOLDER ...]

A file counts as evidence when it runs off-board and meets the fidelity bounds against the
simulator outputs stored beside it (``<stem>.npz``: ``out*`` the simulator's outputs; the raw
NCHW inputs ``in*`` stored too, or regenerated for the corpus's files, see ``models.stored_arrays``):

* float outputs of fp16 files: ``max |ours - sim| <= 1e-3 * max(1, max |sim|)``;
* int8 outputs: cosine >= 0.9999 and >= 99 % of elements within one quantization step;
* float outputs of int8 files (after ``exDataConvert``): cosine >= 0.9999;
* integer outputs (ArgMax indices): >= 99 % equal.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "vendor"
#: vendor files exported by real clients' own tools (:mod:`ultralytics_export`), one folder per model
FIELD = ROOT / "tests" / "data" / "ultralytics"
FP16_TOLERANCE = 1e-3
MIN_COSINE = 0.9999
MIN_WITHIN_ONE_STEP = 0.99


@dataclass(frozen=True)
class FileEvidence:
    """One corpus file: what it is (``key``: platform and toolkit release; ``precision``;
    ``ops``) and whether it meets the bounds (``passed``, ``detail`` the worst output's
    figures, or the refusal when it does not run)."""

    name: str
    key: Tuple[Optional[str], Optional[str]]
    precision: str
    ops: FrozenSet[str]
    passed: bool
    detail: str


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / denom) if denom else float(np.array_equal(a, b))


def output_fidelity(ours: np.ndarray, sim: np.ndarray, scale: Optional[float], int8_file: bool) -> Tuple[bool, str]:
    """``(meets the bounds, figures)`` for one output (see the module doc); ``scale``: the
    output's quantization step when it is int8, else ``None``."""
    a = np.asarray(ours, np.float64).ravel()
    b = np.asarray(sim, np.float64).ravel()
    if a.shape != b.shape:
        return False, f"shape {np.shape(ours)} vs the simulator's {np.shape(sim)}"
    if np.asarray(sim).dtype.kind in "iu":  # indices (ArgMax): equal, but for ties an int8 grid may create
        equal = float(np.mean(a == b))
        return equal >= MIN_WITHIN_ONE_STEP, f"{100 * equal:.2f} % equal"
    diff = np.abs(a - b)
    cos = _cosine(a, b)
    if scale:
        within = float(np.mean(diff <= scale * 1.0001))
        return cos >= MIN_COSINE and within >= MIN_WITHIN_ONE_STEP, f"cos {cos:.7f}, {100 * within:.2f} % within 1 step"
    if int8_file:
        return cos >= MIN_COSINE, f"cos {cos:.7f}"
    bound = FP16_TOLERANCE * max(1.0, float(np.abs(b).max(initial=0.0)))
    worst = float(diff.max(initial=0.0))
    return worst <= bound, f"max |diff| {worst:.3g} (bound {bound:.3g})"


def _models():
    """``models.py`` of this folder (the corpus's cases), imported by name as the tools do."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import models

    return models


def stored_io(path: Path) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """``(inputs, simulator outputs)`` kept beside a built file (``models.stored_arrays``)."""
    data = _models().stored_arrays(Path(path).with_suffix(".npz"))
    inputs = [data[k] for k in sorted((k for k in data if k.startswith("in")), key=lambda k: int(k[2:]))]
    sims = [data[k] for k in sorted((k for k in data if k.startswith("out")), key=lambda k: int(k[3:]))]
    return inputs, sims


def file_evidence(path: Path) -> FileEvidence:
    """Lower and run one corpus file (validation off) and compare it with its simulator outputs."""
    import rknnlite
    from rknnlite.model.loader import load_model
    from rknnlite.model.rknn_graph import lower_rockchip
    from rknnlite.model.rknn_graph.validated import ALLOW_ENV, toolkit_release

    loaded = load_model(str(path))
    rk = loaded.model
    key = ((rk.target_platforms or [rk.target_platform])[0], toolkit_release(rk.toolkit_version or rk.compiler_version))
    name = path.stem
    custom_ops = _custom_ops(name)
    custom_types = {op.op_type for op in custom_ops}
    try:
        model = lower_rockchip(loaded.payload, rk, validate=False, custom=custom_types.__contains__)
    except rknnlite.RKNNError as e:
        return FileEvidence(name, key, "?", frozenset(), False, f"refused: {e}")
    key, precision = (model.platform, model.toolkit), model.precision
    inputs, sims = stored_io(path)
    saved = os.environ.get(ALLOW_ENV)
    os.environ[ALLOW_ENV] = "1"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with rknnlite.Context(str(path), backend="software", custom_ops=custom_ops) as ctx:
                outs = ctx.run(inputs, data_format="nchw")
                scales = [a.scale if a.type.name == "INT8" else None for a in ctx.outputs]
    finally:
        if saved is None:
            del os.environ[ALLOW_ENV]
        else:
            os.environ[ALLOW_ENV] = saved
    results = [output_fidelity(o, s, sc, precision != "fp16") for o, s, sc in zip(outs, sims, scales)]
    passed = len(outs) == len(sims) and all(ok for ok, _ in results)
    return FileEvidence(name, key, precision, frozenset(model.vendor_ops) - custom_types, passed,
                        "; ".join(d for _, d in results))


def _custom_ops(stem: str) -> list:
    """The custom operators corpus file ``stem`` was built with (``models.Case.custom_ops``),
    instantiated: its op types are the user's code, not vendor ops to validate."""
    case = max((c for c in _models().CASES if stem.startswith(c.name + "_")), key=lambda c: len(c.name), default=None)
    return [op() for op in case.custom_ops] if case is not None else []


def corpus_evidence(*folders: Path) -> List[FileEvidence]:
    """:func:`file_evidence` of every ``.rknn`` file with simulator outputs in ``folders`` and
    their subfolders (the corpus and the field exports by default)."""
    files = sorted({p for folder in folders or (CORPUS, FIELD) for p in folder.rglob("*.rknn")})
    return [file_evidence(p) for p in files if p.with_suffix(".npz").exists()]


def derived_table(evidence: List[FileEvidence]) -> Dict[Tuple[str, str], Dict[str, FrozenSet[str]]]:
    """``{(platform, toolkit): {precision: op types}}``: the union of the op types of the files
    that pass, per platform, toolkit release and precision."""
    table: Dict[Tuple[str, str], Dict[str, set]] = {}
    for e in evidence:
        if e.passed:
            table.setdefault(e.key, {}).setdefault(e.precision, set()).update(e.ops)
    return {k: {p: frozenset(ops) for p, ops in v.items()} for k, v in table.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", type=Path, help="default: the corpus and the field exports")
    ap.add_argument("--markdown", action="store_true", help="print the per-file table for docs/vendor-offboard.md")
    args = ap.parse_args(argv)
    evidence = corpus_evidence(*args.folders)
    if args.markdown:
        print("| file | platform | toolkit | precision | result |\n|---|---|---|---|---|")
        for e in evidence:
            print(f"| {e.name} | {e.key[0]} | {e.key[1]} | {e.precision} | "
                  f"{'validated' if e.passed else 'not validated'}: {e.detail} |")
        return 0
    for key, by_precision in sorted(derived_table(evidence).items()):
        for precision, ops in sorted(by_precision.items()):
            print(f"{key[0]:8s} {key[1]:6s} {precision:10s} {' '.join(sorted(ops))}")
    for e in evidence:
        if not e.passed:
            print(f"not validated: {e.name}: {e.detail}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
