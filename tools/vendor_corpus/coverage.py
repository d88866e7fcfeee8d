"""The off-board coverage matrix: which real architectures run, per platform, precision and toolkit.

Builds every architecture of ``models.ARCHITECTURES`` (and, with ``--onnx-dir``, the ONNX files
of a ``torchvision_export.py`` folder) for several target platforms, in fp16 and per-channel
int8 (the settings and calibration of ``build_corpus.py``), with the simulator's outputs on the
case's fixed input; then loads each file as a user does, **with validation on**, and tells
whether it runs (and how close it comes to the simulator) or is refused (and why).  Two steps,
in two Pythons, like ``layer_evidence.py``::

    # 1. in the venv of one RKNN-Toolkit2 release (see build_corpus.py), once per release
    /var/tmp/rkt/bin/python tools/vendor_corpus/coverage.py build OUT_DIR [--platforms ...] [--only NAME ...]
    # 2. with the project's Python: the Markdown table of everything in OUT_DIR
    python tools/vendor_corpus/coverage.py table OUT_DIR

``OUT_DIR`` gets ``<case>_<variant>_<platform>_tk<tag>.rknn`` and ``.npz`` (``build_corpus``'s
layout: ``in*`` raw NCHW inputs, ``out*`` the simulator's outputs) and ``coverage.json``, one
entry per (case, variant, platform, toolkit) with the build's outcome, so that a platform or
precision the toolkit itself refuses shows in the table too.  The files stay out of the
repository.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

#: the platforms tried; the toolkit refuses some precisions on some (rv1106/rv1103 fp16)
PLATFORMS = ("rk3588", "rk3576", "rk3566", "rk3562", "rv1126b", "rv1106", "rv1103")
VARIANTS = ("fp16", "i8")
PRECISION = {"fp16": "fp16", "i8": "int8"}
MANIFEST = "coverage.json"


def toolkit_tag(version: str) -> str:
    """``"2.5.0"`` -> ``"250"`` (the file-name tag of a toolkit release)."""
    return re.sub(r"[^0-9]", "", version.split("+")[0])[:3]


def stem(case: str, variant: str, platform: str, tag: str) -> str:
    return f"{case}_{variant}_{platform}_tk{tag}"


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def build_error(exc: BaseException, console: str = "") -> str:
    """One line for a build that failed: the step (``build_one``'s message) and the toolkit's
    first error line (``E ...`` in its message or its ``console`` output, colours removed)."""
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    step = "" if first.startswith("Traceback") else first.split(": ", 1)[-1]  # the toolkit's own exception
    lines = ANSI.sub("", console).splitlines() + ANSI.sub("", text).splitlines()[1:]
    errors = [ln.strip() for ln in lines if ln.lstrip().startswith("E ")]
    if errors:
        err = re.sub(r"^E (RKNN: )?(\[[^\]]*\] )?", "", errors[0]).strip()
        return (f"{step}: {err}" if step else err)[:300]
    return step[:300]


def build(out_dir: str, platforms: Iterable[str], only: Optional[List[str]] = None,
          onnx_dir: Optional[str] = None, tag: Optional[str] = None) -> int:
    """Build (in the toolkit's venv) every case x platform x variant into ``out_dir``."""
    import onnx
    from build_corpus import _versions, build_one, onnx_cases
    from fp16_overflow_probe import vendor_log
    from models import ARCHITECTURES

    version = _versions().get("rknn-toolkit2", "unknown")
    tag = tag or toolkit_tag(version)
    cases = list(ARCHITECTURES) + (onnx_cases(onnx_dir) if onnx_dir else [])
    if only:
        cases = [c for c in cases if c.name in only]
    os.makedirs(out_dir, exist_ok=True)
    manifest_path = os.path.join(out_dir, MANIFEST)
    manifest: Dict[str, dict] = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            onnx_path = os.path.join(tmp, case.name + ".onnx")
            onnx.save(case.build(), onnx_path)
            for platform in platforms:
                for variant in VARIANTS:
                    name = stem(case.name, variant, platform, tag)
                    entry = {"case": case.name, "variant": variant, "platform": platform, "toolkit": version}
                    t0 = time.perf_counter()
                    console = os.path.join(tmp, f"console_{name}.txt")
                    try:
                        with vendor_log(console):  # the toolkit's logger writes to the process's stderr
                            build_one(dataclasses.replace(case, platform=platform), variant, onnx_path, tmp,
                                      out_dir=out_dir, suffix=f"_{platform}_tk{tag}")
                        entry["built"] = True
                        print(f"ok   {name:44s} {time.perf_counter() - t0:.1f}s", flush=True)
                    except Exception as e:  # the toolkit refusing a platform/precision is a result too
                        failures += 1
                        with open(console, errors="replace") as f:
                            entry.update(built=False, error=build_error(e, f.read()))
                        print(f"FAIL {name:44s} {entry['error']}", flush=True)
                    manifest[name] = entry
                    with open(manifest_path, "w") as f:
                        json.dump(manifest, f, indent=1, sort_keys=True)
    print(f"{failures} build(s) failed", file=sys.stderr)
    return 0


# --- step 2: what a user gets ------------------------------------------------------------------

def refusal_reason(message: str, label: Optional[str] = None) -> str:
    """The first clause of a ``ModelInvalidError`` message: without the file's label, the
    lists of what is validated or supported, and the advice that follows the first ``;``."""
    if label and message.startswith(label + ": "):
        message = message[len(label) + 2:]
    else:
        head, sep, rest = message.partition(": ")
        if sep and head.endswith(".rknn"):
            message = rest
    clause = message.split("; ", 1)[0]
    clause = re.sub(r" \((validated|supported)[^()]*(\([^()]*\)[^()]*)*\)", "", clause)
    return clause.strip()


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What loading one built file with validation on gives: ``status`` ``"runs"`` (``detail``:
    the fidelity figures, ``ok``: within the corpus bounds), ``"refused"`` (``detail``: the
    reason), ``"fails"`` (loading raised something else than an ``RKNNError``: a bug) or
    ``"not built"`` (``detail``: the toolkit's error)."""

    case: str
    variant: str
    platform: str
    toolkit: str
    status: str
    detail: str
    ok: bool = False
    #: with ``--unvalidated``, for a file refused only by the validated table: what it gives
    #: with validation off (``evidence.file_evidence``)
    unvalidated: str = ""


def user_outcome(path: Path, variant: str) -> Tuple[str, str, bool]:
    """``(status, detail, within bounds)`` of ``rknnlite.Context(path, backend="software")``
    with validation on (``RKNNLITE_VENDOR_UNVALIDATED`` unset), run on the stored input and
    compared with the stored simulator outputs by :func:`evidence.output_fidelity`."""
    import rknnlite
    from evidence import output_fidelity, stored_io
    from rknnlite.model.rknn_graph.validated import ALLOW_ENV

    saved = os.environ.pop(ALLOW_ENV, None)
    try:
        try:
            ctx = rknnlite.Context(str(path), backend="software")
        except rknnlite.RKNNError as e:
            return "refused", refusal_reason(getattr(e, "message", str(e)), str(path)), False
        except Exception as e:  # not a refusal: a bug of the lowering, shown as such
            return "fails", f"{type(e).__name__} {e}".strip(), False
        inputs, sims = stored_io(path)
        with ctx:
            outs = ctx.run(inputs, data_format="nchw")
            scales = [a.scale if a.type.name == "INT8" else None for a in ctx.outputs]
    finally:
        if saved is not None:
            os.environ[ALLOW_ENV] = saved
    results = [output_fidelity(o, s, sc, variant != "fp16") for o, s, sc in zip(outs, sims, scales)]
    ok = len(outs) == len(sims) and all(r for r, _ in results)
    return "runs", "; ".join(d for _, d in results), ok


def outcomes(out_dir: str, unvalidated: bool = False) -> List[Outcome]:
    """:class:`Outcome` of every entry of ``out_dir``'s ``coverage.json``; ``unvalidated``: also
    run the files the validated table refuses with validation off."""
    with open(os.path.join(out_dir, MANIFEST)) as f:
        manifest = json.load(f)
    found = []
    for name, e in sorted(manifest.items()):
        common = dict(case=e["case"], variant=e["variant"], platform=e["platform"], toolkit=e["toolkit"])
        if not e.get("built"):
            found.append(Outcome(**common, status="not built", detail=e.get("error", "")))
            continue
        path = Path(out_dir) / (name + ".rknn")
        status, detail, ok = user_outcome(path, e["variant"])
        off = ""
        if unvalidated and status == "refused" and re.search(r" not validated\b", detail):
            from evidence import file_evidence

            ev = file_evidence(path)
            off = ("meets the bounds, " if ev.passed else "outside the bounds, ") + ev.detail
        found.append(Outcome(**common, status=status, detail=detail, ok=ok, unvalidated=off))
    return found


def _short(detail: str) -> str:
    """Compact fidelity figures for a table cell."""
    detail = re.sub(r"max \|diff\| (\S+) \(bound (\S+)\)", r"max|d| \1, bound \2", detail)
    return detail.replace(" within 1 step", " in 1 step")


#: (pattern of a reason, its short form in a cell): refusals grouped by cause
SHORT_REASONS = [
    (r"vendor op types? (?P<ops>.+) in \S+ \S+ files from RKNN-Toolkit2 \S+ (were|was) not validated",
     lambda m: "ops not validated: " + _ops(m["ops"])),
    (r"target platform '(?P<p>\S+)' was not validated", lambda m: "platform not validated"),
    (r"RKNN-Toolkit2 \S+ was not validated for \S+", lambda m: "toolkit release not validated for the platform"),
    (r"\S+ \S+ files from RKNN-Toolkit2 \S+ were not validated", lambda m: "precision not validated"),
    (r"format \S+ files \(rv1106 container\) keep their graph in a section that could not be read",
     lambda m: "rv1106 container, graph section not located"),
    (r"vendor op types? (?P<ops>.+) in an rv1106/rv1103 container cannot run off-board",
     lambda m: "rv1106 container, registers not decoded: " + _ops(m["ops"])),
    (r"DPU register OUT_CVT_SHIFT \(0x4088\) = 0x80000000 sets bits outside", lambda m: "OUT_CVT_SHIFT bit 31"),
    (r"\((?P<op>\w+) [^)]*\): the DPU registers of \w+ \(.*\) are not a layout whose activation",
     lambda m: f"{m['op']} activation registers not decoded"),
    (r"weight tiles \[.*?\] hold \d+ bytes but the tensor's NPU size is \d+", lambda m: "weight tiles of another size"),
    (r"an rk3576/rv1126b int8 conv on a graph input has int8 weight tiles",
     lambda m: "weight tiles of an int8 first conv"),
    (r"\((?P<op>\w+) [^)]*\): the LUT task loads tables \[0\], not both",
     lambda m: f"{m['op']}: one lookup table loaded, not two"),
    (r"\((?P<op>\w+) [^)]*\): no task of node \d+ runs the lookup table", lambda m: f"{m['op']}: no lookup-table task"),
    (r"exSDPAttention on \['int8'", lambda m: "int8 exSDPAttention"),
    (r"\((?P<op>\w+) [^)]*\): \w+ in an int8 rk3562 file: the registers of its fused (?P<act>\w+) were not decoded",
     lambda m: f"{m['op']}: rk3562 int8 fused {m['act']} not decoded"),
    (r"a grouped or dilated ConvTranspose \(group (?P<g>\d+), dilations \[1, 1\]\) was never observed",
     lambda m: f"ConvTranspose of group {m['g']} never observed"),
    (r"\((?P<op>\w+) [^)]*\): parameter table .* \(type (?P<t>\d+)\)$",
     lambda m: f"{m['op']}: parameter table type {m['t']}"),
    (r"\((?P<op>\w+) [^)]*\): CNA_CVT_CON1 \S+ = \S+ \(scale 1, offset 0\) with shift 0",
     lambda m: f"{m['op']} CNA_CVT_CON1 layout"),
]


def _ops(ops: str, most: int = 4) -> str:
    names = ops.split(", ")
    return ", ".join(names) if len(names) <= most else ", ".join(names[:most - 1]) + f" +{len(names) - most + 1}"


def short_reason(reason: str) -> str:
    """The group a refusal (or build error) falls in, for a table cell (:data:`SHORT_REASONS`;
    else the reason without its leading ``node N``)."""
    for pattern, short in SHORT_REASONS:
        m = re.search(pattern, reason)
        if m:
            return short(m)
    if "not support do_quantization = False" in reason:
        return "the toolkit builds no fp16 file"
    if "Invalid target_platform" in reason:
        return "the toolkit does not know the platform"
    return re.sub(r"^node \d+ \((\w+) '[^']*'\)( weight '[^']*')?: ", r"\1: ", reason)[:80]


def markdown(found: List[Outcome], platforms: Iterable[str] = PLATFORMS) -> str:
    """One Markdown table per toolkit (the newest first): a row per (architecture, precision), a
    column per platform; a cell is ``runs (figures)`` (``runs, outside the bounds (...)`` when
    it does not meet them), ``refused: <group>``, ``fails: <exception>`` or ``not built:
    <group>`` (:func:`short_reason`).  Under the tables, each group: how many files per toolkit,
    and one full reason."""
    lines: List[str] = []
    toolkits = sorted({o.toolkit for o in found}, key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v)),
                      reverse=True)
    groups: Dict[str, Tuple[str, Dict[str, int]]] = {}
    for toolkit in toolkits:
        rows = [o for o in found if o.toolkit == toolkit]
        cols = [p for p in platforms if any(o.platform == p for o in rows)]
        cols += sorted({o.platform for o in rows} - set(cols))
        cells: Dict[Tuple[str, str, str], str] = {}
        for o in rows:
            precision = PRECISION.get(o.variant, o.variant)
            if o.status == "runs":
                cell = f"runs ({_short(o.detail)})" if o.ok else f"runs, outside the bounds ({_short(o.detail)})"
            else:
                short = short_reason(o.detail)
                group = f"{o.status}: " + (short.split(":")[0] if short.startswith("ops not validated") else short)
                example = f"{o.case} {precision} {o.platform} ({toolkit}): {o.detail}"
                counts = groups.setdefault(group, (example, {}))[1]
                counts[toolkit] = counts.get(toolkit, 0) + 1
                cell = f"{o.status}: {short}"
            if o.unvalidated:
                cell += f"; unvalidated: {_short(o.unvalidated)}"
            cells[(o.case, precision, o.platform)] = cell
        lines.append(f"RKNN-Toolkit2 {toolkit}:\n")
        lines.append("| architecture | precision | " + " | ".join(cols) + " |")
        lines.append("|---|---|" + "---|" * len(cols))
        for case, precision in sorted({(o.case, PRECISION.get(o.variant, o.variant)) for o in rows}):
            lines.append(f"| {case} | {precision} | "
                         + " | ".join(cells.get((case, precision, p), "") for p in cols).replace("|d|", "\\|d\\|")
                         + " |")
        lines.append("")
    if groups:
        lines.append("Why (files per toolkit release; one full reason):\n")
    for group, (example, counts) in sorted(groups.items(), key=lambda g: -sum(g[1][1].values())):
        per = ", ".join(f"{counts[t]} with {t}" for t in toolkits if t in counts)
        lines.append(f"- {group}: {per}; e.g. {example}")
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="in the toolkit's venv: build and simulate into OUT_DIR")
    b.add_argument("out_dir")
    b.add_argument("--platforms", nargs="*", default=list(PLATFORMS))
    b.add_argument("--only", nargs="*", help="case names")
    b.add_argument("--onnx-dir", help="also the ONNX files of this folder (torchvision_export.py's)")
    b.add_argument("--toolkit-tag", help="file-name tag of the toolkit release (default: from its version)")
    t = sub.add_parser("table", help="with the project's Python: the Markdown coverage table of OUT_DIR")
    t.add_argument("out_dir", nargs="+")
    t.add_argument("--unvalidated", action="store_true",
                   help="also run the files refused only by the validated table, validation off")
    args = ap.parse_args(argv)
    if args.cmd == "build":
        return build(args.out_dir, args.platforms, args.only, args.onnx_dir, args.toolkit_tag)
    found = [o for d in args.out_dir for o in outcomes(d, args.unvalidated)]
    print(markdown(found), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
