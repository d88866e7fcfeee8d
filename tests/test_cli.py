"""The rknnlite command: version, demo, inspect, encrypt; one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import rknnlite
from rknnlite import DecryptError, KeyInvalidError
from rknnlite._version import __version__
from rknnlite.cli import main
from rknnlite.demo import DEMO_MODEL_PATH, demo_image


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version_flag():
    out = subprocess.run([sys.executable, "-m", "rknnlite", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"rknnlite {__version__}"


def test_demo_command(capsys):
    code, out, err = run_cli(capsys, "demo", "--runs", "2")
    assert code == 0 and err == ""
    assert "input   0 image" in out and "prob" in out and "timing" in out
    # it printed "mean of 0 runs" (the first run's time) for --runs 0 and -1
    for runs in ("0", "-1"):
        code, out, err = run_cli(capsys, "demo", "--runs", runs)
        assert code == 1 and f"rknnlite: error: runs (--runs) must be an int >= 1 (timed runs after the first), " \
                             f"got {runs}" in err and "timing" not in out


def test_inspect_portable_json(capsys):
    code, out, _ = run_cli(capsys, "inspect", str(DEMO_MODEL_PATH), "--json")
    info = json.loads(out)
    assert code == 0
    assert info["format"] == "rknnlite-portable" and info["format_version"] == "1.0"
    assert info["inputs"] == [{"name": "image", "shape": [1, 3, 32, 32], "dtype": "float32", "layout": "NCHW"}]
    assert info["custom_string"] == "rknnlite demo classifier"
    assert info["size"] == DEMO_MODEL_PATH.stat().st_size


EXPECTED_VENDOR_IO = {
    "convnet": ([("input", [1, 3, 32, 32])], [("prob", [1, 10])]),
    "add_mul": ([("a", [1, 3, 8, 8]), ("b", [1, 3, 8, 8])], [("sum", [1, 3, 8, 8]), ("prod", [1, 3, 8, 8])]),
    "dyn_conv": ([("x", [1, 3, 32, 32])], [("y", [1, 2, 32, 32])]),
}


def manifest_size(manifest, path) -> int:
    return next(r["rknn_size"] for r in manifest["runs"] if r["rknn_file"].endswith(path.name))


def vendor_manifest_dynamic_input(manifest, path) -> list:
    return next(r["config"]["dynamic_input"] for r in manifest["runs"] if r["rknn_file"].endswith(path.name))


@pytest.fixture(scope="module")
def vendor_manifest(vendor_fixtures) -> dict:
    return json.loads((vendor_fixtures / "manifest.json").read_text())


def test_inspect_rockchip_fixtures(capsys, vendor_rknn_files, vendor_manifest):
    assert len(vendor_rknn_files) == 6
    for path in vendor_rknn_files:
        code, out, _ = run_cli(capsys, "inspect", str(path), "--json")
        info = json.loads(out)
        ins, outs = EXPECTED_VENDOR_IO[path.stem.rsplit("_", 1)[0]]
        assert code == 0 and info["format"] == "rockchip-rknn"
        assert [(t["name"], t["shape"]) for t in info["inputs"]] == ins
        assert [(t["name"], t["shape"]) for t in info["outputs"]] == outs
        assert info["target_platforms"] == ["rk3588"]
        assert info["toolkit_version"] == "2.5.0" and info["framework"] == "ONNX"
        assert info["size"] == path.stat().st_size == manifest_size(vendor_manifest, path)
        assert all(t["layout"] == ("NCHW" if len(t["shape"]) == 4 else "UNDEFINED")
                   for t in info["inputs"] + info["outputs"])
        model = path.stem.rsplit("_", 1)[0]
        if model == "dyn_conv":
            # the sets of config(dynamic_input=...), in the order the file stores them
            assert info["inference_type"] == "dynamic_shape"
            assert sorted(map(str, info["dynamic_shapes"])) == sorted(
                map(str, vendor_manifest_dynamic_input(vendor_manifest, path)))
        else:
            assert info["inference_type"] == "static_shape" and not info.get("dynamic_shapes")
        if path.stem.endswith("_fp16"):
            assert {t["dtype"] for t in info["inputs"]} == {"float16"}
            assert all("quant" not in t for t in info["inputs"] + info["outputs"])
        else:
            assert {t["dtype"] for t in info["inputs"]} == {"int8"}
            for t in info["inputs"] + info["outputs"]:  # a Softmax output stays float16 in int8 files
                if t["dtype"] != "int8":
                    assert t["dtype"] == "float16" and "quant" not in t
                    continue
                q = t["quant"]
                assert len(q["scale"]) == 1 and q["scale"][0] > 0 and -128 <= q["zero_point"][0] <= 127
            if model == "convnet":  # rknn-file-format.md: the input's min -2.0, max 5.96875 after mean/std
                assert info["inputs"][0]["quant"]["scale"] == [0.03125]
                assert info["inputs"][0]["quant"]["zero_point"] == [-64]
        code, text, _ = run_cli(capsys, "inspect", str(path))
        assert code == 0 and "rk3588" in text and ins[0][0] in text


def test_encrypt_inspect_load_round_trip(tmp_path, capsys):
    key_file, enc = tmp_path / "model.key", tmp_path / "demo.enc.rknn"
    code, out, err = run_cli(capsys, "encrypt", str(DEMO_MODEL_PATH), str(enc), "--key-file", str(key_file),
                             "--create-key")
    assert code == 0, err
    assert not enc.read_bytes().startswith(b"\x89RKL")

    code, out, _ = run_cli(capsys, "inspect", str(enc), "--json")
    info = json.loads(out)
    assert info["format"] == "rknnlite-encrypted" and "key is needed" in info["note"]
    assert info["encryption"]["device_bound"] is False

    code, out, _ = run_cli(capsys, "inspect", str(enc), "--json", "--key-file", str(key_file))
    info = json.loads(out)
    assert info["format"] == "rknnlite-portable" and info["inputs"][0]["name"] == "image"

    with rknnlite.Context(str(DEMO_MODEL_PATH)) as plain, rknnlite.Context(str(enc), key=str(key_file)) as dec:
        np.testing.assert_array_equal(dec.run([demo_image()], data_format="nchw")[0],
                                      plain.run([demo_image()], data_format="nchw")[0])


def test_wrong_key_tamper_truncation_each_have_their_class(tmp_path, capsys):
    key_file, other, enc = tmp_path / "k", tmp_path / "other", tmp_path / "m.enc"
    assert run_cli(capsys, "encrypt", str(DEMO_MODEL_PATH), str(enc), "--key-file", str(key_file), "--create-key")[0] == 0
    assert run_cli(capsys, "encrypt", str(DEMO_MODEL_PATH), str(tmp_path / "x"), "--key-file", str(other),
                   "--create-key")[0] == 0
    with pytest.raises(KeyInvalidError):
        rknnlite.Context(str(enc), key=str(other))
    data = bytearray(enc.read_bytes())
    data[len(data) // 2] ^= 1
    with pytest.raises(DecryptError):
        rknnlite.Context(bytes(data), key=str(key_file))
    with pytest.raises(DecryptError):
        rknnlite.Context(enc.read_bytes()[:-100], key=str(key_file))
    code, _, err = run_cli(capsys, "inspect", str(enc), "--key-file", str(other))
    assert code == 1 and err.count("\n") == 1 and err.startswith("rknnlite: error:") and "Traceback" not in err


def test_passphrase_device_binding_and_rekey(tmp_path, capsys, monkeypatch):
    from rknnlite.model import envelope

    ident = tmp_path / "machine-id"
    ident.write_text("board-A\n")
    monkeypatch.setattr(envelope, "DEVICE_ID_PATHS", (str(ident),))
    enc, rekeyed = tmp_path / "m.enc", tmp_path / "m2.enc"
    code, _, err = run_cli(capsys, "encrypt", str(DEMO_MODEL_PATH), str(enc), "--passphrase", "open sesame",
                           "--bind-device")
    assert code == 0, err
    code, out, _ = run_cli(capsys, "inspect", str(enc), "--json")
    assert json.loads(out)["encryption"]["device_bound"] is True
    assert json.loads(out)["encryption"]["key_kind"] == "passphrase"
    assert run_cli(capsys, "inspect", str(enc), "--passphrase", "open sesame")[0] == 0

    monkeypatch.setenv("NEW_KEY", "11" * 32)
    code, _, err = run_cli(capsys, "encrypt", str(enc), str(rekeyed), "--rekey", "--old-passphrase", "open sesame",
                           "--key-env", "NEW_KEY")
    assert code == 0, err
    assert run_cli(capsys, "inspect", str(rekeyed), "--key-env", "NEW_KEY")[0] == 0

    ident.write_text("board-B\n")
    code, _, err = run_cli(capsys, "inspect", str(rekeyed), "--key-env", "NEW_KEY")
    assert code == 1 and "another device" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["inspect", "/nonexistent/model.rknn"], "not found"),
        (["encrypt", "/nonexistent/in", "/tmp/out", "--key-env", "NO_SUCH_VARIABLE_X"], "is not set"),
    ],
)
def test_user_errors_are_one_line(capsys, argv, message):
    code, _, err = run_cli(capsys, *argv)
    assert code == 1 and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_encrypt_refuses_non_models_and_double_encryption(tmp_path, capsys):
    junk, key = tmp_path / "junk.bin", tmp_path / "k"
    junk.write_bytes(b"hello world, not a model")
    code, _, err = run_cli(capsys, "encrypt", str(junk), str(tmp_path / "o"), "--key-file", str(key), "--create-key")
    assert code == 1 and "unknown model format" in err
    enc = tmp_path / "m.enc"
    assert run_cli(capsys, "encrypt", str(DEMO_MODEL_PATH), str(enc), "--key-file", str(key))[0] == 0
    code, _, err = run_cli(capsys, "encrypt", str(enc), str(tmp_path / "o2"), "--key-file", str(key))
    assert code == 1 and "--rekey" in err


def test_usage_error_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["encrypt", "a", "b"])
    assert e.value.code == 2
