"""``RKNN.export_encrypted_rknn_model``: the toolkit's door to the encryption envelope."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

import rknnlite  # noqa: E402
from rknnlite.api import RKNNLite  # noqa: E402
from rknnlite.errors import KeyInvalidError  # noqa: E402
from rknnlite.model import envelope  # noqa: E402
from rknnlite.toolkit import RKNN  # noqa: E402

X = np.random.default_rng(1).random((1, 3, 6, 6)).astype(np.float32)


@pytest.fixture
def model_path(tmp_path, monkeypatch):
    monkeypatch.delenv(envelope.KEY_ENV_VAR, raising=False)
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 6, 6])],
                          [numpy_helper.from_array(w, "w")])
    onnx_path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(onnx_path))
    rk = RKNN()
    rk.config(target_platform="rk3588")
    assert rk.load_onnx(str(onnx_path)) == 0 and rk.build() == 0
    path = tmp_path / "m.rknn"
    assert rk.export_rknn(str(path)) == 0
    rk.release()
    return path


def run(model, **kw):
    with rknnlite.Context(str(model), **kw) as ctx:
        return ctx.run([X], data_format="nchw")[0]


def test_default_output_and_generated_key_file(model_path, caplog):
    rk = RKNN()
    with caplog.at_level(logging.INFO, logger="rknnlite.toolkit"):
        assert rk.export_encrypted_rknn_model(str(model_path)) == 0
    out = model_path.parent / "m.crypt.rknn"
    key_file = model_path.parent / "m.crypt_key.bin"
    assert out.is_file() and key_file.is_file()
    assert (os.stat(key_file).st_mode & 0o777) == 0o600
    assert envelope.is_encrypted(out.read_bytes())
    assert str(key_file) in caplog.text
    expected = run(model_path)
    np.testing.assert_array_equal(run(out, key=str(key_file)), expected)

    lite = RKNNLite()
    assert lite.load_rknn(str(out), key_path=str(key_file)) == 0
    assert lite.init_runtime() == 0
    np.testing.assert_array_equal(lite.inference([X], data_format="nchw")[0], expected)
    lite.release()

    # a second export reuses the key file instead of replacing it
    before = key_file.read_bytes()
    assert rk.export_encrypted_rknn_model(str(model_path)) == 0
    assert key_file.read_bytes() == before
    np.testing.assert_array_equal(run(out, key=str(key_file)), expected)


def test_given_key_bytes_path_and_wrong_key(model_path, tmp_path, caplog):
    key = envelope.generate_key()
    out = tmp_path / "enc.rknn"
    rk = RKNN()
    assert rk.export_encrypted_rknn_model(str(model_path), str(out), crypt_level=3, key=key) == 0
    assert not (tmp_path / "enc_key.bin").exists()  # a given key writes no key file
    np.testing.assert_array_equal(run(out, key=key), run(model_path))

    with pytest.raises(KeyInvalidError):
        run(out, key=envelope.generate_key())
    lite = RKNNLite()
    wrong = tmp_path / "wrong.key"
    envelope.write_key_file(wrong, envelope.generate_key())
    with caplog.at_level(logging.ERROR, logger="rknnlite"):
        assert lite.load_rknn(str(out), key_path=str(wrong)) == -1
    assert caplog.text

    key_file = tmp_path / "k.hex"
    envelope.write_key_file(key_file, key)
    out2 = tmp_path / "enc2.rknn"
    assert rk.export_encrypted_rknn_model(str(model_path), str(out2), key=str(key_file)) == 0
    np.testing.assert_array_equal(run(out2, key=key), run(model_path))


def test_key_from_the_environment(model_path, tmp_path, monkeypatch):
    key = envelope.generate_key()
    monkeypatch.setenv(envelope.KEY_ENV_VAR, key.hex())
    out = tmp_path / "env.rknn"
    assert RKNN().export_encrypted_rknn_model(str(model_path), str(out)) == 0
    assert not (tmp_path / "env_key.bin").exists()
    np.testing.assert_array_equal(run(out, key=key), run(model_path))


@pytest.mark.parametrize("level", [0, 4, "2", True, None])
def test_crypt_level_out_of_range_warns_and_uses_1(model_path, tmp_path, caplog, level):
    with caplog.at_level(logging.WARNING, logger="rknnlite.toolkit"):
        assert RKNN().export_encrypted_rknn_model(str(model_path), str(tmp_path / "l.rknn"), crypt_level=level,
                                                  key=envelope.generate_key()) == 0
    assert "crypt_level must be 1, 2 or 3" in caplog.text and "using 1" in caplog.text


def test_bad_inputs_return_minus_one(model_path, tmp_path, caplog):
    rk = RKNN()
    key = envelope.generate_key()
    cases = [
        ((str(tmp_path / "missing.rknn"),), {"key": key}, "not found"),
        ((str(model_path), str(tmp_path / "short.rknn")), {"key": b"short"}, "32 bytes"),
        ((str(model_path), str(tmp_path / "nokey.rknn")), {"key": str(tmp_path / "nofile.key")}, "key file not found"),
        ((str(model_path), str(tmp_path / "nodir" / "x.rknn")), {"key": key}, "cannot write"),
    ]
    for args, kwargs, words in cases:
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
            assert rk.export_encrypted_rknn_model(*args, **kwargs) == -1
        assert words in caplog.text, (args, caplog.text)
    not_a_model = tmp_path / "junk.rknn"
    not_a_model.write_bytes(b"hello world, not a model")
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert rk.export_encrypted_rknn_model(str(not_a_model), key=key) == -1
    assert "unknown model format" in caplog.text
    enc = tmp_path / "once.rknn"
    assert rk.export_encrypted_rknn_model(str(model_path), str(enc), key=key) == 0
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="rknnlite.toolkit"):
        assert rk.export_encrypted_rknn_model(str(enc), str(tmp_path / "twice.rknn"), key=key) == -1
    assert "already encrypted" in caplog.text
