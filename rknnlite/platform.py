"""The board this runs on: SoC, NPU driver version, NPU load and device nodes.

The one reader of these facts for :class:`~rknnlite.api.RKNNLite` (the SoC whose core
rules apply), ``rknnlite doctor`` and the daemon's ``rknnlite_npu_load_percent``.  Every
file is read under ``root`` (``"/"`` normally; a fake tree in tests), nothing needs
privileges, and nothing unreadable raises: the ``read_*`` functions return the reason.

Sources:

* SoC: ``/proc/device-tree/compatible`` (NUL-separated entries, e.g. ``rockchip,rk3588``).
* NPU driver: ``/sys/kernel/debug/rknpu/version`` (debugfs, usually root-only), else
  ``/sys/module/rknpu/version``.
* NPU load: ``/sys/kernel/debug/rknpu/load`` (``Core0: 12%, Core1: 0%, ...``, or one
  percentage on single-core NPUs).
* NPU device node: ``/dev/rknpu``, or a DRM render node whose driver is RKNPU
  (``/sys/class/drm/renderD*/device/driver``).

Imports nothing above :mod:`rknnlite.errors` / :mod:`rknnlite.constants` (a low layer).
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any, Dict, Iterable, List, Optional

__all__ = [
    "NPU_SOCS",
    "soc_from_compatible",
    "board_soc",
    "read_soc",
    "read_driver_version",
    "read_npu_load",
    "npu_device_nodes",
    "under_root",
]

#: The Rockchip SoCs with an NPU that librknnrt serves, as RKNN files name them.
NPU_SOCS = ("rk3588", "rk3576", "rk3568", "rk3566", "rk3562", "rv1126b", "rv1106", "rv1103")

_COMPATIBLE = "/proc/device-tree/compatible"
_DRIVER_VERSION = ("/sys/kernel/debug/rknpu/version", "/sys/module/rknpu/version")
_NPU_LOAD = "/sys/kernel/debug/rknpu/load"
_SOC_RE = re.compile(r"^rockchip,((?:rk|rv)\d{4}[a-z]?)$")
_LOAD_RE = re.compile(r"Core\s*(\d+)\s*:\s*(\d+)%")


def under_root(root: str, path: str) -> str:
    """``path`` (absolute, as on the board) inside the filesystem tree at ``root``."""
    return os.path.join(root, path.lstrip("/"))


def _read(root: str, path: str) -> Dict[str, Any]:
    """``{"text": ...}`` or ``{"error": why}`` for one file under ``root``."""
    try:
        with open(under_root(root, path), "rb") as f:
            return {"text": f.read(1 << 16).decode("utf-8", "replace")}
    except FileNotFoundError:
        return {"error": f"{path} does not exist"}
    except PermissionError:
        return {"error": f"{path} is not readable without privileges (try sudo)"}
    except OSError as e:
        return {"error": f"{path}: {e.strerror or e}"}


def soc_from_compatible(entries: Iterable[str]) -> Optional[str]:
    """The Rockchip SoC of a device tree's ``compatible`` entries, lower case, or ``None``.

    The SoC entry is ``rockchip,<soc>`` (board entries such as ``rockchip,rk3588-evb1``
    are skipped).  A one-letter package variant of an NPU SoC (``rk3588s``) is that SoC
    (``rk3588``: same NPU); other names are returned as written (``rk3399``).
    """
    for entry in entries:
        match = _SOC_RE.match(entry.strip().lower())
        if match:
            soc = match.group(1)
            if soc not in NPU_SOCS and soc[:-1] in NPU_SOCS:
                return soc[:-1]
            return soc
    return None


def read_soc(root: str = "/") -> Dict[str, Any]:
    """``{"soc": "rk3588" | None, "compatible": [...], "error"?: why}`` from the device tree
    under ``root`` (see :func:`soc_from_compatible`)."""
    got = _read(root, _COMPATIBLE)
    if "error" in got:
        return {"soc": None, "compatible": [], "error": got["error"] + " (not a device-tree board?)"}
    compatible = [c for c in got["text"].split("\0") if c]
    soc = soc_from_compatible(compatible)
    result: Dict[str, Any] = {"soc": soc, "compatible": compatible}
    if soc is None:
        result["error"] = "no Rockchip SoC in the device tree's compatible list"
    return result


def board_soc(root: str = "/") -> str:
    """The NPU SoC (one of :data:`NPU_SOCS`) this machine is, e.g. ``"rk3588"``, or ``""``
    when it is none: an x86 host, a board whose device tree is unreadable, a Rockchip SoC
    without an NPU librknnrt serves (``rk3399``; :func:`read_soc` still names it)."""
    soc = read_soc(root)["soc"]
    return soc if soc in NPU_SOCS else ""


def read_driver_version(root: str = "/") -> Dict[str, Any]:
    """``{"version": "0.9.8" | None, "source": path, "error"?: why}`` of the RKNPU kernel
    driver: debugfs first, then the module's sysfs version."""
    errors = []
    for path in _DRIVER_VERSION:
        got = _read(root, path)
        if "error" in got:
            errors.append(got["error"])
            continue
        text = got["text"].strip()
        match = re.search(r"v?(\d+\.\d+\.\d+)", text)
        return {"version": match.group(1) if match else text, "source": path}
    return {"version": None, "error": "; ".join(errors)}


def read_npu_load(root: str = "/") -> Dict[str, Any]:
    """``{"cores": {"0": 12, "1": 0, ...}, "text": ...}`` (percent per core, keys in core
    order) or ``{"cores": None, "error": why}``; ``cores`` is ``{}`` when the file holds no
    percentage."""
    got = _read(root, _NPU_LOAD)
    if "error" in got:
        return {"cores": None, "error": got["error"]}
    text = got["text"].strip()
    cores = {int(c): int(p) for c, p in _LOAD_RE.findall(text)}
    if not cores:
        single = re.search(r"(\d+)%", text)
        if single:
            cores = {0: int(single.group(1))}
    return {"cores": {str(k): v for k, v in sorted(cores.items())}, "text": text}


def npu_device_nodes(root: str = "/") -> List[str]:
    """Device nodes of the RKNPU driver that exist under ``root`` (paths as on the board)."""
    nodes = []
    if os.path.exists(under_root(root, "/dev/rknpu")):
        nodes.append("/dev/rknpu")
    for driver in sorted(glob.glob(under_root(root, "/sys/class/drm/renderD*/device/driver"))):
        target = os.path.basename(os.path.realpath(driver)) if os.path.islink(driver) else ""
        if "rknpu" in target.lower():
            name = os.path.basename(os.path.dirname(os.path.dirname(driver)))
            if os.path.exists(under_root(root, f"/dev/dri/{name}")):
                nodes.append(f"/dev/dri/{name}")
    return nodes
