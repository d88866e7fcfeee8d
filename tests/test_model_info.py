"""ModelInfo: every model class answers the same typed questions (target platforms, custom
string, host-side preprocessing, summary), so the runtime and the facades ask no getattr."""

from __future__ import annotations

import logging
from dataclasses import replace

import rknnlite
from rknnlite.api import RKNNLite
from rknnlite.model.info import ModelInfo
from rknnlite.model.loader import load_model
from rknnlite.model.metadata import Preprocess, build_metadata
from rknnlite.model.portable import PortableModel
from rknnlite.model.rknn_graph import VendorModel, lower_rockchip
from rknnlite.model.rockchip import CYPT_MAGIC, RockchipEncryptedInfo, RockchipModel

_MEMBERS = ("target_platforms", "custom_string", "input_preprocess", "summary")


def _check(model) -> None:
    assert isinstance(model, ModelInfo)
    for name in _MEMBERS:
        assert hasattr(model, name), f"{type(model).__name__} lacks {name}"
    assert all(isinstance(t, str) for t in model.target_platforms)
    assert isinstance(model.summary(), dict)


def test_portable_model(conv_relu_model):
    loaded = load_model(conv_relu_model("rk3576"))
    assert isinstance(loaded.model, PortableModel)
    _check(loaded.model)
    assert tuple(loaded.model.target_platforms) == ("rk3576",)
    assert loaded.model.custom_string == "" and loaded.model.input_preprocess == ()


def test_portable_preprocess_is_the_host_side_normalisation(conv_relu_model):
    pre = (Preprocess(mean=(1.0,) * 8, std=(2.0,) * 8),)
    model = load_model(conv_relu_model()).model
    meta = build_metadata(model.metadata.inputs, model.metadata.outputs, preprocess=pre, custom_string="hello")
    changed = replace(model, metadata=meta)
    assert changed.input_preprocess == pre and changed.custom_string == "hello"


def test_rockchip_and_lowered_vendor_models(vendor_fixtures):
    loaded = load_model(str(vendor_fixtures / "rknn" / "convnet_fp16.rknn"))
    rk = loaded.model
    assert isinstance(rk, RockchipModel)
    _check(rk)
    assert rk.target_platforms == ["rk3588"] and rk.input_preprocess == ()
    lowered = lower_rockchip(loaded.payload, rk)
    assert isinstance(lowered, VendorModel)
    _check(lowered)
    assert tuple(lowered.target_platforms) == ("rk3588",)
    assert lowered.custom_string == (rk.custom_string or "")
    assert lowered.input_preprocess == ()  # the file's mean/std are applied by graph_inputs
    summary = lowered.summary()
    assert summary["format"] == "rockchip-rknn" and summary["lowered"]["platform"] == "rk3588"
    assert summary["lowered"]["vendor_ops"] == list(lowered.vendor_ops)


def test_vendor_encrypted_file_names_nothing():
    loaded = load_model(CYPT_MAGIC + bytes(120))
    info = loaded.model
    assert isinstance(info, RockchipEncryptedInfo)
    _check(info)
    assert info.target_platforms == () and info.custom_string is None and info.input_preprocess == ()


def test_facade_and_context_read_the_protocol(vendor_fixtures, caplog):
    """A Rockchip file's target platforms reach Lite2's list and Context's platform check."""
    path = str(vendor_fixtures / "rknn" / "convnet_fp16.rknn")
    rk = RKNNLite()
    try:
        assert rk.list_support_target_platform(path) == {"filled_target_platform": ["rk3588"],
                                                         "support_target_platform": ["rk3588"]}
    finally:
        rk.release()
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        with rknnlite.Context(path, backend="software", target_platform="rk3566") as ctx:
            assert ctx.core_platform == "rk3566" and ctx.custom_string == ""
    assert "model was built for rk3588, not rk3566" in caplog.text
