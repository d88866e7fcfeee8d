"""Where each field sits in the FlatBuffer of a Rockchip ``.rknn`` file: the slot numbers of its
Model, Subgraph, Tensor and Node tables, for the two schemas observed.

* :data:`V6`: the model section of format versions 1-6 (every platform but rv1106/rv1103);
* :data:`T3`: the graph embedded in the rv1106/rv1103 container (format 0x1004, npu target
  ``"RKNPU t3"``; :mod:`rknnlite.model.packed`).  Fewer slots: a tensor is located by a byte
  offset into the container's weight section instead of a buffer table, and nodes carry no BSON
  of their ONNX attributes; a conv has no parameter table either (its attributes are in its
  registers), other ops one of their own (:mod:`rknnlite.model.rknn_graph.t3nodes`).

Both were read from files built by RKNN-Toolkit2 (``docs/vendor-format-notes.md``).  A slot of
``None`` is a field the schema does not have; readers fall back to the field's default (an empty
string or list), never to another slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["Schema", "V6", "T3", "DTYPES"]

#: Tensor dtype code (both schemas) -> name (0 only on the empty tensor 0; 16, bfloat16, only on
#: the ``*_rm_bf16_weight`` helper constant of an ``exNorm``, a vector of ones).
DTYPES = {0: "none", 1: "float32", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 10: "float16", 13: "raw",
          16: "bfloat16"}


@dataclass(frozen=True)
class Schema:
    """Slot numbers of one FlatBuffer schema (``m_``: Model, ``sg_``: Subgraph, ``t_``: Tensor,
    ``n_``: Node)."""

    name: str
    m_target: int
    m_subgraphs: int
    m_description: int
    m_compiler_version: int
    m_toolkit_version: int
    m_target_platform: int
    m_framework: int
    m_custom_string: Optional[int]
    m_input_info: Optional[int]
    m_output_info: Optional[int]
    m_batch_size: Optional[int]
    m_inference_type: Optional[int]
    m_dynamic_shapes: Optional[int]
    m_buffers: Optional[int]
    sg_preproc: Optional[int]
    t_scale: int
    t_zero_point: int
    t_size: int
    #: index into the Model's buffer table (V6)
    t_buffer: Optional[int]
    #: byte offset into the container's weight section (T3)
    t_offset: Optional[int]
    n_param_type: Optional[int]
    n_param: Optional[int]
    n_bson: Optional[int]
    # the slots both schemas share
    sg_tensors: int = 0
    sg_nodes: int = 1
    sg_inputs: int = 2
    sg_outputs: int = 3
    t_dtype: int = 0
    t_layout: int = 1
    t_kind: int = 2
    t_npu_shape: int = 3
    t_shape: int = 4
    t_name: int = 5
    n_type: int = 1
    n_name: int = 2
    n_inputs: int = 4
    n_outputs: int = 5


#: Format versions 1-6.
V6 = Schema("v6", m_target=1, m_subgraphs=2, m_description=3, m_compiler_version=6, m_toolkit_version=7,
            m_target_platform=8, m_framework=9, m_custom_string=11, m_input_info=12, m_output_info=13,
            m_batch_size=14, m_inference_type=16, m_dynamic_shapes=17, m_buffers=20, sg_preproc=4,
            t_scale=10, t_zero_point=11, t_size=12, t_buffer=18, t_offset=None,
            n_param_type=7, n_param=8, n_bson=9)

#: The graph inside the rv1106/rv1103 container (format 0x1004).
T3 = Schema("t3", m_target=1, m_subgraphs=2, m_description=3, m_compiler_version=4, m_toolkit_version=5,
            m_target_platform=6, m_framework=7, m_custom_string=None, m_input_info=None, m_output_info=None,
            m_batch_size=None, m_inference_type=None, m_dynamic_shapes=None, m_buffers=None, sg_preproc=None,
            t_scale=6, t_zero_point=7, t_size=8, t_buffer=None, t_offset=9,
            n_param_type=6, n_param=7, n_bson=None)
