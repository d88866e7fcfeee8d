"""``rknnlite doctor``: what this machine can run, and why not.

:func:`collect` gathers a JSON-ready report; :func:`format_report` renders it as text.
Every file is read under ``root`` (``"/"`` normally; a fake tree in tests), nothing needs
privileges, and nothing unreadable is an error: it is reported with the reason.

Sources: the board's SoC, NPU driver version, NPU load and device nodes as
:mod:`rknnlite.platform` reads them (the names are re-exported here); librknnrt as the npu
backend searches it (argument, ``LIBRKNNRT_PATH``, ``/usr/lib``, ``/usr/lib64``, the loader
path): its version is the string embedded in the file, and, when a Rockchip model is given,
what ``rknn_query(SDK_VERSION)`` answers for it (API and driver versions; the query needs a
context, hence a model).
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ._version import __version__
from .backends.npu.library import SEARCH_DIRS, embedded_version, find_library
from .errors import RKNNError
from .platform import npu_device_nodes, read_driver_version, read_npu_load, read_soc, under_root

__all__ = ["collect", "format_report", "read_soc", "npu_device_nodes", "read_npu_load", "read_driver_version"]

_PACKAGES = ("numpy", "cryptography", "psutil", "onnx")


def _package_versions() -> Dict[str, Optional[str]]:
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return {}
    versions: Dict[str, Optional[str]] = {"rknnlite": __version__}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _librknnrt(library: Optional[str], environ: Mapping[str, str], dirs: Sequence[str]) -> Dict[str, Any]:
    from .backends.npu.runtime import load_runtime

    choice = find_library(library, environ, dirs)
    info: Dict[str, Any] = {"found_by": choice.source, "looked": list(choice.looked), "path": None,
                            "version": None, "loaded": False}
    if choice.problem is not None:
        info["error"] = choice.problem
        return info
    files = [c for c in choice.candidates if os.path.isabs(c)]
    if files:
        info["path"] = files[0]
        info["version"] = embedded_version(files[0])
    try:
        lib = load_runtime(library, environ, dirs)
    except RKNNError as e:
        info["error"] = e.message
        return info
    info.update(path=lib.path, loaded=True, missing_symbols=list(lib.missing))
    if info["version"] is None and os.path.isabs(lib.path):
        info["version"] = embedded_version(lib.path)
    return info


def _model_check(model: str) -> Dict[str, Any]:
    """Open ``model`` on the backend it needs; for the npu, the runtime's SDK versions."""
    from .runtime.context import Context

    result: Dict[str, Any] = {"file": model}
    try:
        with Context(model) as ctx:
            result["backend"] = ctx.backend
            result["sdk_version"] = ctx.sdk_version()
    except RKNNError as e:
        result["error"] = str(e)
    return result


def _software_backend() -> Dict[str, Any]:
    native = []
    missing = []
    for name in ("conv_kernels", "elementwise_kernels", "executor_kernels", "layout_kernels", "pool_kernels"):
        try:
            __import__(f"rknnlite._native.{name}")
            native.append(name)
        except ImportError:
            missing.append(name)
    result: Dict[str, Any] = {"available": True, "runs": "portable rknnlite models (rknnlite.toolkit output)"}
    try:  # loading the backend applies its variables (RKNNLITE_ISA, ...): a bad one stops every Context
        __import__("rknnlite.backends.software")
    except RKNNError as e:
        result["available"], result["why_not"] = False, [str(e)]
    result["cpu"] = _host_cpu()
    if result["available"]:
        result["calibration"] = _calibration()
    if missing:
        result["note"] = f"compiled kernels missing ({', '.join(missing)}): slower pure-numpy paths are used"
    return result


def _host_cpu() -> str:
    """The CPU and the caches the software backend's kernels block for (RKNNLITE_CPU_CACHES
    applied), or why they cannot be read."""
    try:  # importing the backend applies its variables (RKNNLITE_ISA): a bad one is reported
        from .backends.software.host_cpu import cpu_model, detect_caches
    except RKNNError as e:
        return f"unknown: {e}"
    try:
        return f"{cpu_model()}; caches {detect_caches().describe()}"
    except RKNNError as e:
        return f"{cpu_model()}; caches unreadable: {e}"


def _calibration() -> str:
    """Whether the Winograd/direct crossover is measured for this CPU and where it is kept
    (never measures), or why it cannot be known."""
    try:
        from ._native import conv_kernels
        from .backends.software import calibration
        from .backends.software.ops import conv_costs  # the ops load the conv kernels: RKNNLITE_ISA applied

        how = calibration.mode()
        level = conv_kernels.gemm_isa()
        path = calibration.stored_path(conv_costs.CHOICE, conv_costs.calibration_key(level))
    except RKNNError as e:
        return f"unavailable: {e}"
    if how == "off":
        return "off (RKNNLITE_CALIBRATION): built-in kernel choices"
    if level == 0:
        return f"{how}: nothing to measure on the generic path"
    if how == "auto" and path.is_file():
        return f"auto: Winograd/direct crossover measured, kept in {path}"
    return f"{how}: Winograd/direct crossover measured on first use, kept in {path}"


def _npu_backend(lib: Dict[str, Any], nodes: List[str]) -> Dict[str, Any]:
    reasons = []
    import importlib

    try:
        importlib.import_module("rknnlite._native.rknnrt")
    except ImportError as e:
        reasons.append(f"the librknnrt binding is not compiled ({e})")
    if not lib.get("loaded"):
        reasons.append(lib.get("error") or "librknnrt.so was not found")
    if not nodes:
        reasons.append("no NPU device node (/dev/rknpu or an RKNPU DRM render node): is the rknpu driver loaded?")
    result: Dict[str, Any] = {"available": not reasons, "runs": "Rockchip .rknn files on the NPU"}
    if reasons:
        result["why_not"] = reasons
    return result


def collect(root: str = "/", environ: Mapping[str, str] = os.environ, library: Optional[str] = None,
            model: Optional[str] = None, dirs: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The whole report as a JSON-ready dict (keys: ``soc``, ``librknnrt``, ``driver``,
    ``npu_load``, ``device_nodes``, ``python``, ``packages``, ``backends``, and ``model``
    when ``model`` is given).  ``root`` prefixes every system path read; ``dirs`` overrides
    the librknnrt search directories (default: :data:`SEARCH_DIRS` under ``root``)."""
    if dirs is None:
        dirs = [under_root(root, d) for d in SEARCH_DIRS]
    lib = _librknnrt(library, environ, dirs)
    nodes = npu_device_nodes(root)
    report: Dict[str, Any] = {
        "soc": read_soc(root),
        "librknnrt": lib,
        "driver": read_driver_version(root),
        "npu_load": read_npu_load(root),
        "device_nodes": nodes,
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "machine": platform.machine(), "executable": sys.executable},
        "packages": _package_versions(),
        "backends": {"software": _software_backend(), "npu": _npu_backend(lib, nodes)},
    }
    if model is not None:
        report["model"] = _model_check(model)
    return report


def _or(value, fallback: str) -> str:
    return fallback if value in (None, "", []) else str(value)


def format_report(report: Dict[str, Any]) -> str:
    """The report as readable text, one fact per line."""
    soc, lib, drv, load = report["soc"], report["librknnrt"], report["driver"], report["npu_load"]
    lines = ["rknnlite doctor", ""]
    lines.append(f"SoC:            {_or(soc.get('soc'), 'unknown')}"
                 + (f"  ({soc['error']})" if soc.get("error") else ""))
    if lib.get("loaded"):
        lines.append(f"librknnrt:      {lib['path']} (version {_or(lib.get('version'), 'unknown')})")
        if lib.get("missing_symbols"):
            lines.append(f"                missing: {', '.join(lib['missing_symbols'])}")
    else:
        lines.append(f"librknnrt:      not available: {_or(lib.get('error'), 'not found')}")
    lines.append(f"NPU driver:     {_or(drv.get('version'), 'unknown')}"
                 + (f"  ({drv['error']})" if drv.get("error") else f"  (from {drv.get('source')})"))
    if load.get("cores"):
        lines.append("NPU load:       " + ", ".join(f"core {c}: {p}%" for c, p in load["cores"].items()))
    else:
        lines.append(f"NPU load:       unknown  ({_or(load.get('error'), 'unparsable')})")
    lines.append(f"Device nodes:   {_or(', '.join(report['device_nodes']), 'none')}")
    py = report["python"]
    lines.append(f"Python:         {py['version']} ({py['implementation']}, {py['machine']})")
    lines.append("Packages:       " + ", ".join(f"{k} {_or(v, 'not installed')}" for k, v in report["packages"].items()))
    lines.append("")
    lines.append("Backends:")
    for name, b in report["backends"].items():
        state = "available" if b["available"] else "NOT available"
        lines.append(f"  {name:<9} {state}: runs {b['runs']}")
        for reason in b.get("why_not", []):
            lines.append(f"            - {reason}")
        if b.get("cpu"):
            lines.append(f"            CPU: {b['cpu']}")
        if b.get("calibration"):
            lines.append(f"            calibration: {b['calibration']}")
        if b.get("note"):
            lines.append(f"            note: {b['note']}")
    if "model" in report:
        m = report["model"]
        lines.append("")
        if "error" in m:
            lines.append(f"Model {m['file']}: cannot run: {m['error']}")
        else:
            lines.append(f"Model {m['file']}: runs on the {m['backend']} backend")
            v = m.get("sdk_version") or {}
            lines.append(f"  API: {v.get('api')}  DRV: {v.get('drv')}")
    return "\n".join(lines) + "\n"
