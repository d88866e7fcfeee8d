"""Running Rockchip's own ``.rknn`` files off-board: decode their graph and lower it.

* :mod:`.graph`: the FlatBuffer's subgraphs, tensors, nodes and buffers, decoded and
  checked (every enum value this package does not know is an error naming it);
* :mod:`.weights`: NPU weight tiles and bias blocks back to model layout;
* :mod:`.regcmd`: the task table and register command stream (int8 requantization);
* :mod:`.f2act`: fused int8 Clip / LeakyRelu parameters of rk3576/rv1126b files (their
  own DPU register map);
* :mod:`.lower`: vendor op types -> the software executor's graph IR
  (:func:`lower_rockchip` gives what :class:`~rknnlite.backends.software.SoftwareBackend`
  runs).

The facts used here are in ``shared/reference/rknn-graph-execution.md``; they were
observed on RKNN-Toolkit2 2.5.0 files, not specified by Rockchip.
"""

from __future__ import annotations

from .lower import SUPPORTED_OPS, VendorModel, lower_rockchip, op_support, vendor_op_counts

__all__ = ["SUPPORTED_OPS", "VendorModel", "lower_rockchip", "op_support", "vendor_op_counts"]
