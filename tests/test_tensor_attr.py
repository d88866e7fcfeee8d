"""TensorAttr: every rknn_tensor_attr field, derived sizes, shape/dtype, to_dict, from_spec."""

from __future__ import annotations

import numpy as np
import pytest

from rknnlite import QntType, TensorAttr, TensorFormat, TensorType
from rknnlite.model.spec import QuantParams, TensorSpec

C_FIELDS = ("index", "n_dims", "dims", "name", "n_elems", "size", "fmt", "type", "qnt_type", "fl", "zp", "scale",
            "w_stride", "size_with_stride", "pass_through", "h_stride")


def test_every_c_field_is_there_and_in_to_dict():
    attr = TensorAttr(2, "x", (1, 8, 8, 3), TensorFormat.NHWC, TensorType.INT8, QntType.AFFINE_ASYMMETRIC, zp=-5,
                      scale=0.5, w_stride=16)
    d = attr.to_dict()
    assert tuple(d) == C_FIELDS
    assert all(hasattr(attr, f) for f in C_FIELDS)
    assert d == {"index": 2, "n_dims": 4, "dims": [1, 8, 8, 3], "name": "x", "n_elems": 192, "size": 192,
                 "fmt": "NHWC", "type": "INT8", "qnt_type": "AFFINE_ASYMMETRIC", "fl": 0, "zp": -5, "scale": 0.5,
                 "w_stride": 16, "size_with_stride": 1 * 8 * 16 * 3, "pass_through": False, "h_stride": 0}


def test_shape_and_dtype():
    attr = TensorAttr(0, "y", (1, 10), TensorFormat.UNDEFINED, TensorType.FLOAT16)
    assert attr.shape == (1, 10) and attr.dtype == np.float16
    assert (attr.n_elems, attr.size, attr.size_with_stride) == (10, 20, 20)


def test_nc1hwc2_sizes_count_padding_lanes():
    # the guide's example: (1, 13, 4, 4) int8 on RK3568 is (1, 2, 4, 4, 8); 3 lanes of the last block pad
    attr = TensorAttr(0, "f", (1, 2, 4, 4, 8), TensorFormat.NC1HWC2, TensorType.INT8)
    assert (attr.n_elems, attr.size, attr.size_with_stride) == (256, 256, 256)
    assert attr.replace(type=TensorType.FLOAT16).size_with_stride == 512


def test_padded_nhwc_and_h_stride():
    attr = TensorAttr(0, "img", (2, 5, 7, 3), TensorFormat.NHWC, TensorType.UINT8, w_stride=16)
    assert attr.size == 2 * 5 * 7 * 3
    assert attr.size_with_stride == 2 * 5 * 16 * 3
    assert attr.replace(h_stride=6).size_with_stride == 2 * 6 * 16 * 3
    assert attr.replace(w_stride=0).size_with_stride == attr.size


def test_dynamic_dims_have_no_size():
    attr = TensorAttr(0, "x", (1, 3, -1, -1), TensorFormat.NCHW, TensorType.FLOAT32)
    assert (attr.n_elems, attr.size, attr.size_with_stride) == (0, 0, 0)


def test_immutable_and_replace_recomputes():
    attr = TensorAttr(0, "x", (1, 3, 4, 4), TensorFormat.NCHW, TensorType.FLOAT32)
    with pytest.raises(AttributeError):
        attr.zp = 3
    changed = attr.replace(type=TensorType.UINT8, dims=(1, 4, 4, 3), fmt=TensorFormat.NHWC)
    assert (changed.size, attr.size) == (48, 192)


def test_from_spec_reports_int8_for_quantized_tensors():
    spec = TensorSpec("x", (1, 3, 8, 8), "float32", "NCHW", QuantParams("int8", (0.25,), (-7,)))
    attr = TensorAttr.from_spec(1, spec)
    assert (attr.index, attr.type, attr.qnt_type, attr.zp, attr.scale) == (1, TensorType.INT8,
                                                                           QntType.AFFINE_ASYMMETRIC, -7, 0.25)
    plain = TensorAttr.from_spec(0, TensorSpec("m", (4,), "bool"))
    assert (plain.type, plain.fmt, plain.qnt_type, plain.scale) == (TensorType.BOOL, TensorFormat.UNDEFINED,
                                                                    QntType.NONE, 1.0)
