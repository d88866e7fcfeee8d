"""RKNNLite: Lite2's calls, return values and messages over a Context."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rknnlite
from rknnlite.api import RKNNLite
from rknnlite.demo import DEMO_MODEL_PATH, build_demo_model, demo_image
from rknnlite.model import envelope


@pytest.fixture()
def rk():
    r = RKNNLite()
    assert r.load_rknn(str(DEMO_MODEL_PATH)) == 0
    assert r.init_runtime() == 0
    yield r
    r.release()


@pytest.fixture(scope="module")
def expected():
    with rknnlite.Context(str(DEMO_MODEL_PATH)) as ctx:
        return ctx.run([demo_image()], data_format="nchw")[0]


def nhwc(img):
    return np.ascontiguousarray(img.transpose(0, 2, 3, 1))


def test_core_constants():
    assert (RKNNLite.NPU_CORE_AUTO, RKNNLite.NPU_CORE_0, RKNNLite.NPU_CORE_1, RKNNLite.NPU_CORE_2) == (0, 1, 2, 4)
    assert (RKNNLite.NPU_CORE_0_1, RKNNLite.NPU_CORE_0_1_2, RKNNLite.NPU_CORE_ALL) == (3, 7, 0xFFFF)


@pytest.mark.parametrize("name", ["AUTO", "0", "1", "2", "0_1", "0_1_2", "ALL"])
def test_core_constants_are_core_mask_members(name):
    from rknnlite.constants import CoreMask
    from rknnlite.toolkit import RKNN

    member = CoreMask[name if name in ("AUTO", "ALL") else f"CORE_{name}"]
    assert getattr(RKNNLite, f"NPU_CORE_{name}") is member
    assert getattr(RKNN, f"NPU_CORE_{name}") is member


def test_default_data_format_is_nhwc(rk, expected):
    (out,) = rk.inference(inputs=[nhwc(demo_image())])
    np.testing.assert_array_equal(out, expected)


def test_nchw_data_is_accepted_with_the_vendor_warning(rk, expected, caplog):
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        (out,) = rk.inference(inputs=[demo_image()], data_format=["nchw"])
    np.testing.assert_array_equal(out, expected)
    assert ("The input[0] need NHWC data format, but NCHW set, the data format and data buffer will be "
            "changed to NHWC.") in caplog.text


def test_load_from_bytes(expected):
    r = RKNNLite()
    assert r.load_rknn(DEMO_MODEL_PATH.read_bytes()) == 0 and r.init_runtime() == 0
    np.testing.assert_array_equal(r.inference([nhwc(demo_image())])[0], expected)
    r.release()


def test_encrypted_model_with_key_path(tmp_path, expected, caplog):
    key_path = tmp_path / "model_key.bin"
    envelope.write_key_file(key_path, envelope.generate_key())
    enc = tmp_path / "model.enc.rknn"
    enc.write_bytes(envelope.encrypt(DEMO_MODEL_PATH.read_bytes(), envelope.ModelKey.from_file(key_path)))
    r = RKNNLite()
    assert r.load_rknn(str(enc), key_path=str(key_path)) == 0 and r.init_runtime() == 0
    np.testing.assert_array_equal(r.inference([nhwc(demo_image())])[0], expected)
    other = tmp_path / "other.bin"
    envelope.write_key_file(other, envelope.generate_key())
    with caplog.at_level(logging.ERROR, logger="rknnlite"):
        assert r.load_rknn(str(enc), key_path=str(other)) == -1
        assert r.load_rknn(str(enc), key_path=str(tmp_path / "missing.bin")) == -1
        assert r.load_rknn(str(enc)) == -1
    assert "wrong key" in caplog.text and "Invalid key path" in caplog.text
    r.release()


def test_call_order_errors(caplog):
    r = RKNNLite()
    with caplog.at_level(logging.ERROR, logger="rknnlite"):
        assert r.init_runtime() == -1
        assert r.inference([demo_image()]) is None
        assert r.get_sdk_version() is None
        assert r.load_rknn("/no/such/file.rknn") == -1
    assert "Model is not loaded yet, this interface should be called after load_rknn!" in caplog.text
    assert "Runtime environment is not inited, please call init_runtime to init it first!" in caplog.text
    assert "Invalid RKNN model path: /no/such/file.rknn" in caplog.text
    r.release()
    r.release()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(inputs=(nhwc(demo_image()),)), "Catch exception when setting inputs."),
        (dict(inputs=[[1, 2, 3]]), "Type of inputs[0] is not np.ndarray!"),
        (dict(inputs=[nhwc(demo_image())], data_type="float32"), "inputs[0].dtype: uint8 is not same as data_type[0]"),
        (dict(inputs=[demo_image()[None]]), "The input[0] need 4dims input, but 5dims input buffer feed."),
        (dict(inputs=[np.zeros((1, 16, 16, 3), np.uint8)]), "expected NHWC [1, 32, 32, 3]"),
        (dict(inputs=[nhwc(demo_image()), nhwc(demo_image())]), "Catch exception when setting inputs."),
        (dict(inputs=[nhwc(demo_image())], data_format="hwcn"), "Unsupport data format: hwcn"),
        (dict(inputs=[nhwc(demo_image())], inputs_pass_through=[0, 1]),
         "The lengths of inputs_pass_through and inputs are not equal."),
        # values numpy cannot compare or test for truth raised ValueError ("truth value of an array ...")
        (dict(inputs=[nhwc(demo_image())], data_format=[np.zeros(3)]), "Unsupport data format: [0. 0. 0.]"),
        (dict(inputs=[nhwc(demo_image())], data_type=[np.zeros(3)]), "Unsupport data type: [0. 0. 0.]"),
        (dict(inputs=[nhwc(demo_image())], reuse_outputs=np.zeros(3)),
         "get_frame_id and reuse_outputs take True or False, not False and array([0., 0., 0.])"),
        (dict(inputs=[nhwc(demo_image())], get_frame_id="no"),
         "get_frame_id and reuse_outputs take True or False, not 'no' and False"),
        (dict(inputs=[nhwc(demo_image())], inputs_pass_through=[np.zeros(2)]),
         "inputs_pass_through takes 0 or 1 per input, not [array([0., 0.])]"),
        (dict(inputs=[nhwc(demo_image())], inputs_pass_through=[2]), "inputs_pass_through takes 0 or 1 per input"),
    ],
)
def test_bad_inference_returns_none_and_stays_usable(rk, expected, caplog, kwargs, message):
    with caplog.at_level(logging.ERROR, logger="rknnlite"):
        assert rk.inference(**kwargs) is None
    assert message in caplog.text
    np.testing.assert_array_equal(rk.inference([nhwc(demo_image())])[0], expected)


def test_async_mode_returns_the_previous_frame():
    r = RKNNLite()
    r.load_rknn(str(DEMO_MODEL_PATH))
    assert r.init_runtime(async_mode=True) == 0
    a = nhwc(demo_image())
    b = np.ascontiguousarray(a[:, ::-1])
    first = r.inference([a])[0]
    second = r.inference([b])[0]
    third = r.inference([a])[0]
    np.testing.assert_array_equal(first, second)
    with rknnlite.Context(str(DEMO_MODEL_PATH)) as ctx:
        np.testing.assert_array_equal(third, ctx.run([b], data_format="nhwc")[0])
    r.release()


def test_reuse_outputs_are_views_overwritten_by_the_next_call(rk):
    a = nhwc(demo_image())
    b = np.ascontiguousarray(a[:, ::-1])
    (out_a,) = rk.inference([a], reuse_outputs=True)
    kept = out_a.copy()
    (out_b,) = rk.inference([b], reuse_outputs=True)
    assert np.shares_memory(out_a, out_b)
    assert not np.array_equal(out_b, kept)
    np.testing.assert_array_equal(out_a, out_b)


def test_get_frame_id_appends_a_counter(rk):
    first = rk.inference([nhwc(demo_image())], get_frame_id=True)
    second = rk.inference([nhwc(demo_image())], get_frame_id=True)
    assert len(first) == 2 and second[-1] == first[-1] + 1


def test_sdk_version_and_platforms(rk, caplog):
    text = rk.get_sdk_version()
    assert "RKNN VERSION:" in text and "API: rknnlite" in text and "DRV:" in text
    with caplog.at_level(logging.INFO, logger="rknnlite"):
        platforms = rk.list_support_target_platform()
    assert platforms["filled_target_platform"][0] == "rk3588"
    assert "Target platforms filled in RKNN model" in caplog.text
    assert rk.list_support_target_platform(str(DEMO_MODEL_PATH)) == platforms



#: every public method of rknn-toolkit-lite2 2.5.0's ``RKNNLite`` (its rknnlite/api/rknn_lite.py)
LITE2_METHODS = ("get_sdk_version", "inference", "init_runtime", "list_devices", "list_support_target_platform",
                 "load_rknn", "release")


def test_every_lite2_method_exists_and_no_device_is_listed(caplog):
    assert [m for m in LITE2_METHODS if not callable(getattr(RKNNLite, m, None))] == []
    with caplog.at_level(logging.INFO, logger="rknnlite"):
        assert RKNNLite().list_devices() == ([], [])
    assert "None devices connected." in caplog.text

def test_core_mask_rules(caplog):
    from rknnlite.model.portable import read_portable, write_portable
    import dataclasses

    r = RKNNLite()
    r.load_rknn(str(DEMO_MODEL_PATH))  # built for rk3588 first
    assert r.init_runtime(core_mask=RKNNLite.NPU_CORE_0_1_2) == 0
    assert r.init_runtime(core_mask=12345) == -1
    model = read_portable(memoryview(build_demo_model()))
    for target, mask, ret in (("rk3566", RKNNLite.NPU_CORE_0, -1), ("rk3576", RKNNLite.NPU_CORE_0_1_2, 0)):
        meta = dataclasses.replace(model.metadata, target_platforms=(target,))
        assert r.load_rknn(write_portable(meta, model.graph)) == 0
        with caplog.at_level(logging.WARNING, logger="rknnlite"):
            assert r.init_runtime(core_mask=mask) == ret
    assert "The core_mask is only supported by RK3576/RK3588" in caplog.text
    assert "RK3576 has 2 NPU cores: core_mask CORE_0_1_2 is changed to CORE_0_1" in caplog.text
    r.release()


def test_odd_argument_values_are_refused_by_name(tmp_path, expected, caplog):
    """Values of the wrong type give -1 / None and Lite2-style messages, never an exception (the
    truth of an array, os.stat of a list or of an int file descriptor: TypeError, ValueError,
    OverflowError before), and the object stays usable."""
    r = RKNNLite()
    with caplog.at_level(logging.ERROR, logger="rknnlite"):
        for key_path in (3, [1], 10**12, np.zeros(2)):
            assert r.load_rknn(str(DEMO_MODEL_PATH), key_path=key_path) == -1
        assert r.list_support_target_platform(5) is None
        assert r.list_support_target_platform([1]) is None
        assert r.load_rknn(str(DEMO_MODEL_PATH)) == 0
        assert r.init_runtime(async_mode=np.zeros(3)) == -1
        assert r.init_runtime(async_mode="yes") == -1
        assert r.init_runtime(core_mask="NPU_CORE_0") == -1
        assert r.init_runtime(core_mask=np.zeros(3)) == -1
    text = caplog.text
    assert text.count("Invalid key path") == 4
    assert "model must be a path (str or os.PathLike) or bytes-like object, not int" in text
    assert "async_mode must be True or False, not 'yes'" in text
    assert "Invalid core_mask: 'NPU_CORE_0' (an int: RKNNLite.NPU_CORE_AUTO, NPU_CORE_0, ...)" in text
    assert r.init_runtime() == 0
    np.testing.assert_array_equal(r.inference([nhwc(demo_image())])[0], expected)
    r.release()


def test_pc_attached_targets_are_refused(caplog):
    r = RKNNLite()
    r.load_rknn(str(DEMO_MODEL_PATH))
    with caplog.at_level(logging.ERROR, logger="rknnlite"):
        assert r.init_runtime(target="rk3588") == -1
    assert "attached to a PC" in caplog.text


def test_rockchip_model_off_board_runs_or_fails_init_with_reason(vendor_rknn_files, caplog, monkeypatch, tmp_path):
    from rknnlite.backends.npu import library as npu_library

    monkeypatch.delenv("LIBRKNNRT_PATH", raising=False)  # no librknnrt: the vendor graph runs on the software backend
    monkeypatch.setattr(npu_library, "SEARCH_DIRS", (str(tmp_path),))
    monkeypatch.setattr(npu_library, "LOADER_NAME", "librknnrt-absent-for-tests.so")
    r = RKNNLite()
    assert r.load_rknn(str(vendor_rknn_files[0])) == 0
    assert r.init_runtime() == 0
    r.release()
    path = next(p for p in vendor_rknn_files if p.name == "add_mul_fp16.rknn")
    data = bytearray(path.read_bytes())  # its "Add" op type renamed: an op the lowering does not know
    at = data.index(b"\x03\x00\x00\x00Add\x00") + 4
    data[at:at + 3] = b"Axx"
    r = RKNNLite()
    assert r.load_rknn(bytes(data)) == 0
    with caplog.at_level(logging.ERROR, logger="rknnlite"):
        assert r.init_runtime() == -1
    assert "Catch exception when init runtime!" in caplog.text
    assert "RKNN_ERR_DEVICE_UNAVAILABLE" in caplog.text and "'Axx'" in caplog.text


def test_init_runtime_warns_about_static_models_as_lite2(context_models, caplog):
    r = RKNNLite()
    r.load_rknn(str(DEMO_MODEL_PATH))
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        assert r.init_runtime() == 0
    assert ("Query dynamic range failed. Ret code: RKNN_ERR_MODEL_INVALID. (If it is a static shape RKNN model, "
            "please ignore the above warning message.)") in caplog.text
    caplog.clear()
    r.load_rknn(context_models["dyn_conv"])
    with caplog.at_level(logging.WARNING, logger="rknnlite"):
        assert r.init_runtime() == 0
    assert "Query dynamic range failed" not in caplog.text
    r.release()


def test_int8_model_takes_uint8_images_and_returns_float32(context_models):
    r = RKNNLite()
    assert r.load_rknn(context_models["conv_i8"]) == 0 and r.init_runtime() == 0
    img = np.random.default_rng(0).integers(0, 256, (1, 8, 8, 3)).astype(np.uint8)
    (out,) = r.inference([img])
    assert out.dtype == np.float32 and out.shape == (1, 4, 8, 8)
    with rknnlite.Context(context_models["conv_i8"]) as ctx:
        np.testing.assert_array_equal(out, ctx.run([img], data_format="nhwc")[0])
    r.release()


# -- the Lite2 examples, run as scripts against models converted from the vendor fixtures -----------

TOP_LINE = re.compile(r'^\[\s*(\d+)\] score:(\d+\.\d{6}) class:"(.*)"$')


def run_example(script, *args):
    repo = Path(__file__).resolve().parent.parent
    # the rknnlite this test imported (the source tree, or an installed wheel), not necessarily the tree's
    package_root = Path(rknnlite.__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(package_root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(repo / "examples" / script), *map(str, args)], capture_output=True,
                          text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def top5_blocks(text):
    """[(title, [(index, score), ...5]), ...] from an example's output."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line == "-----TOP 5-----":
            rows = [TOP_LINE.match(s) for s in lines[i + 1:i + 6]]
            assert all(rows), lines[i + 1:i + 6]
            blocks.append((lines[i - 1], [(int(m.group(1)), float(m.group(2))) for m in rows]))
    return blocks


def hwc_image(vendor_fixtures, tmp_path, case):
    nchw = np.load(vendor_fixtures / "io" / f"{case}_in0.npy")
    path = tmp_path / f"{case}.npy"
    np.save(path, nchw[0].transpose(1, 2, 0).astype(np.uint8))
    return path


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_resnet18_example_prints_the_vendors_top5(converted_fixture, vendor_fixtures, tmp_path, variant):
    out = run_example("lite2_resnet18.py", converted_fixture("convnet", variant),
                      "--image", hwc_image(vendor_fixtures, tmp_path, "convnet_x0"))
    for line in ("--> Load RKNN model", "--> Init runtime environment", "--> Running model", "resnet18"):
        assert line in out.splitlines()
    assert "W rknn-toolkit-lite2 version: 2.5.0" in out
    assert ("W Query dynamic range failed. Ret code: RKNN_ERR_MODEL_INVALID. (If it is a static shape RKNN model, "
            "please ignore the above warning message.)") in out
    ((title, rows),) = top5_blocks(out)
    vendor = np.load(vendor_fixtures / "io" / f"convnet_{variant}_x0_sim_out0.npy").reshape(-1)
    assert [i for i, _ in rows] == list(np.argsort(vendor)[::-1][:5])
    np.testing.assert_allclose([s for _, s in rows], np.sort(vendor)[::-1][:5], atol=0.02)


@pytest.mark.parametrize("variant", ["fp16", "i8"])
def test_dynamic_shape_example_prints_top5_per_size_with_the_nchw_warning(converted_fixture, vendor_fixtures,
                                                                          tmp_path, variant):
    model = converted_fixture("dyn_conv", variant)
    for case, size in (("s0_32x32", "32x32"), ("s1_16x16", "16x16"), ("s2_24x40", "24x40")):
        out = run_example("lite2_dynamic_shape.py", model, "--image",
                          hwc_image(vendor_fixtures, tmp_path, f"dyn_conv_{case}"), "--sizes", size)
        assert ("W The input[0] need NHWC data format, but NCHW set, the data format and data buffer will be "
                "changed to NHWC.") in out
        assert "Query dynamic range failed" not in out
        ((title, rows),) = top5_blocks(out)
        assert title == f"dynamic shape {size}"
        vendor = np.load(vendor_fixtures / "io" / f"dyn_conv_{variant}_{case}_sim_out0.npy").reshape(-1)
        top = np.sort(vendor)[::-1][:5]
        step = 0.05 if variant == "i8" else 0.01
        np.testing.assert_allclose([s for _, s in rows], top, atol=step)
        assert all(abs(vendor[i] - s) <= step for i, s in rows)  # each printed index holds that score
