"""Which vendor ``.rknn`` files run off-board: only what was checked against the vendor simulator.

A vendor file's graph is decoded from undocumented structures (tensor layouts, parameter
tables, DPU registers, bias blocks, weight tiles).  A decoder that meets a variant it was never
checked on may still produce numbers, and wrong numbers are the worst outcome a runtime can
have.  So the lowering runs a file only when every vendor op type in it was checked, for the
file's target platform, RKNN-Toolkit2 version and precision, against RKNN-Toolkit2's simulator
on the corpus of ``tests/data/vendor`` (``tools/vendor_corpus``), and refuses anything else with
a :class:`~rknnlite.errors.ModelInvalidError` naming what is not validated.

:data:`VALIDATED` is that evidence, written out: ``{(platform, toolkit version): {precision: op
types}}``, precisions ``"fp16"``, ``"int8"`` (per-channel quantization, the toolkit's default) and
``"int8-layer"`` (``quantized_method='layer'``).  ``tests/test_vendor_validated.py`` checks both
ways that every entry is backed by a corpus file that meets the fidelity bounds and that every
corpus file the table admits meets them.  ``docs/vendor-offboard.md`` shows the same table.

``RKNNLITE_VENDOR_UNVALIDATED=1`` runs a file outside the table anyway, with a
:class:`UnvalidatedVendorFileWarning` naming what was not validated (for bring-up work: compare
its outputs with the vendor simulator before trusting them).
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Dict, FrozenSet, Iterable, Optional, Tuple

from ...errors import ModelInvalidError

__all__ = ["ALLOW_ENV", "PRECISIONS", "VALIDATED", "UnvalidatedVendorFileWarning", "check_validated",
           "toolkit_release", "unvalidated"]

#: environment variable that turns the refusal of an unvalidated file into a warning
ALLOW_ENV = "RKNNLITE_VENDOR_UNVALIDATED"
#: the precisions a vendor file is built with (``int8-layer``: ``quantized_method='layer'``)
PRECISIONS = ("fp16", "int8", "int8-layer")

#: One line per (platform, toolkit release, precision): the vendor op types checked there.  Printed
#: by ``python tools/vendor_corpus/evidence.py`` from the corpus; the test requires equality.
_TABLE = """
rk3562   2.2.0  fp16       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exNorm exSDPAttention exSoftmax13 exSwish
rk3562   2.2.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exNorm exSDPAttention exSoftmax13 exSwish
rk3562   2.3.0  fp16       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exNorm exSDPAttention exSoftmax13 exSwish
rk3562   2.3.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exNorm exSDPAttention exSoftmax13 exSwish
rk3562   2.3.2  fp16       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Reshape Resize Sigmoid Slice Softplus Split Sub Tanh Transpose exNorm exSDPAttention exSoftmax13 exSwish
rk3562   2.3.2  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exNorm exSDPAttention exSoftmax13 exSwish
rk3562   2.5.0  fp16       Add AddRelu ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand HardSigmoid HardSwish InputOperator LSTM LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exLSTM exNorm exSDPAttention exSoftmax13 exSwish
rk3562   2.5.0  int8       Add AddRelu ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeRelu Erf Exp Expand HardSigmoid HardSwish InputOperator LSTM LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exLSTM exNorm exSDPAttention exSoftmax13 exSwish
rk3566   2.2.0  fp16       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Reshape Resize Sigmoid Slice Softplus Split Sub Tanh Transpose exMatMul exNorm exSoftmax13 exSwish
rk3566   2.2.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Reshape Resize Sigmoid Slice Softplus Split Sub Tanh Transpose exDataConvert exMatMul exNorm exSoftmax13 exSwish
rk3566   2.3.0  fp16       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Reshape Resize Sigmoid Slice Softplus Split Sub Tanh Transpose exMatMul exNorm exSoftmax13 exSwish
rk3566   2.3.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Reshape Resize Sigmoid Slice Softplus Split Sub Tanh Transpose exDataConvert exMatMul exNorm exSoftmax13 exSwish
rk3566   2.3.2  fp16       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exMatMul exNorm exSoftmax13 exSwish
rk3566   2.3.2  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exMatMul exNorm exSoftmax13 exSwish
rk3566   2.5.0  fp16       Add AddRelu ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand HardSigmoid HardSwish InputOperator LSTM LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exLSTM exMatMul exNorm exSoftmax13 exSwish
rk3566   2.5.0  int8       Add AddRelu ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeRelu Erf Exp Expand HardSigmoid HardSwish InputOperator LSTM LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exLSTM exMatMul exNorm exSoftmax13 exSwish
rk3568   2.5.0  fp16       Add AddRelu Concat Conv ConvAdd ConvClip ConvExSwish ConvRelu InputOperator MaxPool OutputOperator Reshape Split
rk3568   2.5.0  int8       AddRelu Conv ConvAdd ConvClip ConvRelu InputOperator MaxPool OutputOperator Reshape
rk3576   2.2.0  fp16       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exNorm exSDPAttention exSoftmax13 exSwish
rk3576   2.2.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exNorm exSDPAttention exSoftmax13 exSwish
rk3576   2.3.0  fp16       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exNorm exSDPAttention exSoftmax13 exSwish
rk3576   2.3.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exNorm exSDPAttention exSoftmax13 exSwish
rk3576   2.3.2  fp16       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exNorm exSDPAttention exSoftmax13 exSwish
rk3576   2.3.2  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeRelu Erf Exp Expand HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exNorm exSDPAttention exSoftmax13 exSwish
rk3576   2.5.0  fp16       Add AddRelu ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Elu Erf Exp Expand HardSigmoid HardSwish InputOperator LSTM LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exGelu exLSTM exNorm exSDPAttention exSoftmax13 exSwish
rk3576   2.5.0  int8       Add AddRelu ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand HardSigmoid HardSwish InputOperator LSTM LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exGelu exLSTM exNorm exSDPAttention exSoftmax13 exSwish
rk3576   2.5.0  int8-layer Conv ConvRelu InputOperator OutputOperator
rk3588   2.2.0  fp16       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvReluAdd ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exNorm exSDPAttention exSoftmax13 exSwish
rk3588   2.2.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exNorm exSDPAttention exSoftmax13 exSwish
rk3588   2.2.0  int8-layer AveragePool Conv ConvAdd ConvAddRelu ConvClip ConvRelu ConvSigmoid InputOperator OutputOperator
rk3588   2.3.0  fp16       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvReluAdd ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exNorm exSDPAttention exSoftmax13 exSwish
rk3588   2.3.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exNorm exSDPAttention exSoftmax13 exSwish
rk3588   2.3.0  int8-layer AveragePool Conv ConvAdd ConvAddRelu ConvClip ConvRelu ConvSigmoid InputOperator OutputOperator
rk3588   2.3.2  fp16       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvReluAdd ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Erf Exp Expand HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exNorm exSDPAttention exSoftmax13 exSwish
rk3588   2.3.2  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exGelu exNorm exSDPAttention exSoftmax13 exSwish
rk3588   2.3.2  int8-layer AveragePool Conv ConvAdd ConvAddRelu ConvClip ConvExSwish ConvLeakyRelu ConvRelu ConvSigmoid InputOperator OutputOperator exSwish
rk3588   2.5.0  fp16       Add AddRelu ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvReluAdd ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeHardSigmoid ConvTransposeHardSwish ConvTransposeLeakyRelu ConvTransposePRelu ConvTransposeRelu ConvTransposeSigmoid ConvTransposeTanh ConvTransposeexSwish Elu Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LSTM LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exGelu exLSTM exMatMul exNorm exSDPAttention exSoftmax13 exSwish
rk3588   2.5.0  int8       Add AddRelu ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose ConvTransposeClip ConvTransposeRelu Erf Exp Expand HardSigmoid HardSwish InputOperator LSTM LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exGelu exLSTM exMatMul exNorm exSDPAttention exSoftmax13 exSwish
rk3588   2.5.0  int8-layer Add AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExSwish ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh Erf Exp Expand HardSigmoid InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Reshape Resize Sigmoid Slice Softplus Split Sub Tanh exSoftmax13 exSwish
rv1103   2.2.0  fp16       InputOperator OutputOperator Resize exSoftmax13
rv1103   2.2.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exSoftmax13 exSwish
rv1103   2.3.0  fp16       InputOperator OutputOperator Resize exSoftmax13
rv1103   2.3.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exSoftmax13 exSwish
rv1103   2.3.2  fp16       InputOperator OutputOperator Resize exSoftmax13
rv1103   2.3.2  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exSoftmax13 exSwish
rv1103   2.5.0  fp16       InputOperator OutputOperator Resize exSoftmax13
rv1103   2.5.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exGelu exSDPAttention exSoftmax13 exSwish
rv1106   2.2.0  fp16       InputOperator OutputOperator Resize exSoftmax13
rv1106   2.2.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exSoftmax13 exSwish
rv1106   2.3.0  fp16       InputOperator OutputOperator Resize exSoftmax13
rv1106   2.3.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand Gather HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exSoftmax13 exSwish
rv1106   2.3.2  fp16       InputOperator OutputOperator Resize exSoftmax13
rv1106   2.3.2  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exSoftmax13 exSwish
rv1106   2.5.0  fp16       InputOperator OutputOperator Resize exSoftmax13
rv1106   2.5.0  int8       Add ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp HardSigmoid HardSwish InputOperator LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exGelu exSDPAttention exSoftmax13 exSwish
rv1126b  2.3.2  fp16       Add ArgMax BatchNormalization BatchNormalizationRelu Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvRelu ConvTranspose Expand InputOperator MaxPool Mul OutputOperator Reshape Resize Sigmoid Split Transpose exNorm exSDPAttention exSoftmax13
rv1126b  2.3.2  int8       ArgMax Concat Conv ConvAdd ConvClip ConvRelu ConvTranspose InputOperator MaxPool OutputOperator Reshape Resize Split
rv1126b  2.5.0  fp16       Add AddRelu ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand HardSigmoid HardSwish InputOperator LSTM LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exLSTM exNorm exSDPAttention exSoftmax13 exSwish
rv1126b  2.5.0  int8       Add AddRelu ArgMax AveragePool BatchNormalization BatchNormalizationRelu Clip Concat Conv ConvAdd ConvAddRelu ConvClip ConvExGelu ConvExSwish ConvHardSigmoid ConvHardSwish ConvLeakyRelu ConvPRelu ConvRelu ConvSigmoid ConvTanh ConvTranspose Erf Exp Expand HardSigmoid HardSwish InputOperator LSTM LeakyRelu Max MaxPool Min Mul OutputOperator PRelu Pad Pow ReduceMax ReduceMin Relu Reshape Resize Sigmoid Slice Softplus Split Sqrt Sub Tanh Transpose exDataConvert exLSTM exNorm exSDPAttention exSoftmax13 exSwish
rv1126b  2.5.0  int8-layer Conv ConvRelu InputOperator OutputOperator
"""


def _parse(text: str) -> Dict[Tuple[str, str], Dict[str, FrozenSet[str]]]:
    table: Dict[Tuple[str, str], Dict[str, FrozenSet[str]]] = {}
    for line in text.strip().splitlines():
        platform, toolkit, precision, *ops = line.split()
        table.setdefault((platform, toolkit), {})[precision] = frozenset(ops)
    return table


#: ``{(platform, toolkit release): {precision: vendor op types}}`` checked against the simulator.
VALIDATED: Dict[Tuple[str, str], Dict[str, FrozenSet[str]]] = _parse(_TABLE)


class UnvalidatedVendorFileWarning(RuntimeWarning):
    """A vendor file outside :data:`VALIDATED` runs because ``RKNNLITE_VENDOR_UNVALIDATED=1``."""


def toolkit_release(version: Optional[str]) -> Optional[str]:
    """The ``major.minor.patch`` a file's toolkit version string starts with (``"1.6.0+81f21f4d"``
    -> ``"1.6.0"``), or ``None`` when it has none."""
    match = re.match(r"\s*(\d+)\.(\d+)\.(\d+)", version or "")
    return ".".join(match.groups()) if match else None


def unvalidated(platform: Optional[str], toolkit: Optional[str], precision: str,
                ops: Iterable[str]) -> Optional[str]:
    """Why a file of ``platform``, toolkit release ``toolkit`` and ``precision`` holding the
    vendor op types ``ops`` is outside :data:`VALIDATED`, or ``None`` when it is inside."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}")
    known = sorted({p for p, _ in VALIDATED})
    if platform not in known:
        return f"target platform {platform!r} was not validated (validated: {', '.join(known)})"
    releases = sorted({t for p, t in VALIDATED if p == platform})
    if toolkit not in releases:
        return (f"RKNN-Toolkit2 {toolkit or '(version not recorded)'} was not validated for {platform} "
                f"(validated: {', '.join(releases)})")
    allowed = VALIDATED[(platform, toolkit)].get(precision)
    if allowed is None:
        done = ", ".join(sorted(VALIDATED[(platform, toolkit)]))
        return f"{precision} {platform} files from RKNN-Toolkit2 {toolkit} were not validated (validated: {done})"
    missing = sorted(set(ops) - allowed)
    if missing:
        return (f"vendor op type{'s' if len(missing) > 1 else ''} {', '.join(missing)} in {precision} {platform} "
                f"files from RKNN-Toolkit2 {toolkit} {'were' if len(missing) > 1 else 'was'} not validated "
                f"(validated there: {', '.join(sorted(allowed))})")
    return None


def check_validated(label: str, platform: Optional[str], toolkit: Optional[str], precision: str,
                    ops: Iterable[str]) -> None:
    """Refuse a file outside :data:`VALIDATED` (see :func:`unvalidated`), or warn when
    ``RKNNLITE_VENDOR_UNVALIDATED=1``.

    Raises:
        ModelInvalidError: naming the field (platform, toolkit version, precision or op type),
            its value and what is validated.
    """
    reason = unvalidated(platform, toolkit, precision, ops)
    if reason is None:
        return
    message = (f"{label}: {reason}; its off-board results were never checked against the vendor simulator, so "
               f"it is refused rather than risk wrong outputs (docs/vendor-offboard.md lists what is validated)")
    if os.environ.get(ALLOW_ENV, "") == "1":
        warnings.warn(f"{message}; running it anyway because {ALLOW_ENV}=1", UnvalidatedVendorFileWarning,
                      stacklevel=2)
        return
    raise ModelInvalidError(f"{message}; set {ALLOW_ENV}=1 to run it anyway", op="load")
