"""rknnlite.platform: the board's SoC, NPU driver and load, read under a fake root, and its
three users (RKNNLite, ``rknnlite doctor``, the daemon's metrics) reading through it."""

from __future__ import annotations

import logging

import pytest

from rknnlite import doctor, platform
from rknnlite.api import RKNNLite, rknn_lite


def _tree(root, compatible=None, load=None, version=None, module_version=None):
    """A fake board filesystem under ``root``; ``None`` leaves a file out."""
    files = {"proc/device-tree/compatible": compatible, "sys/kernel/debug/rknpu/load": load,
             "sys/kernel/debug/rknpu/version": version, "sys/module/rknpu/version": module_version}
    for rel, text in files.items():
        if text is not None:
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(root)


@pytest.mark.parametrize("compatible, soc", [
    ("radxa,rock-5b\0rockchip,rk3588\0", "rk3588"),
    ("xunlong,orangepi-5\0rockchip,rk3588s\0", "rk3588"),       # a package variant: the same NPU
    ("rockchip,rk3576-evb1-v10\0rockchip,rk3576\0", "rk3576"),  # board entries are skipped
    ("rockchip,rv1126b-evb\0rockchip,rv1126b\0", "rv1126b"),
    ("ROCKCHIP,RK3566\0", "rk3566"),
])
def test_soc_from_the_device_tree(tmp_path, compatible, soc):
    root = _tree(tmp_path, compatible=compatible)
    assert platform.read_soc(root)["soc"] == soc
    assert platform.board_soc(root) == soc


def test_a_rockchip_soc_without_an_npu_is_named_but_is_no_npu_board(tmp_path):
    root = _tree(tmp_path, compatible="rockchip,rk3399\0")
    assert platform.read_soc(root) == {"soc": "rk3399", "compatible": ["rockchip,rk3399"]}
    assert platform.board_soc(root) == ""


@pytest.mark.parametrize("compatible", [None, "raspberrypi,4-model-b\0brcm,bcm2711\0", "rockchip,rk3588-evb1\0"])
def test_no_rockchip_soc(tmp_path, compatible):
    root = _tree(tmp_path, compatible=compatible)
    got = platform.read_soc(root)
    assert got["soc"] is None and got["error"]
    assert platform.board_soc(root) == ""


@pytest.mark.parametrize("text, cores", [
    ("NPU load:  Core0: 12%, Core1:  0%, Core2: 100%,\n", {"0": 12, "1": 0, "2": 100}),
    ("NPU load:  37%\n", {"0": 37}),
    ("no numbers here\n", {}),
])
def test_npu_load(tmp_path, text, cores):
    got = platform.read_npu_load(_tree(tmp_path, load=text))
    assert got["cores"] == cores and got["text"] == text.strip()


def test_missing_npu_load_names_the_file(tmp_path):
    got = platform.read_npu_load(str(tmp_path))
    assert got["cores"] is None and "/sys/kernel/debug/rknpu/load does not exist" in got["error"]


def test_driver_version_debugfs_then_sysfs(tmp_path):
    assert platform.read_driver_version(_tree(tmp_path / "a", version="RKNPU driver: v0.9.8\n")) == {
        "version": "0.9.8", "source": "/sys/kernel/debug/rknpu/version"}
    assert platform.read_driver_version(_tree(tmp_path / "b", module_version="0.9.6\n")) == {
        "version": "0.9.6", "source": "/sys/module/rknpu/version"}
    missing = platform.read_driver_version(str(tmp_path / "c"))
    assert missing["version"] is None and "/sys/module/rknpu/version does not exist" in missing["error"]


def test_doctor_and_daemon_read_through_platform():
    assert doctor.read_soc is platform.read_soc and doctor.read_npu_load is platform.read_npu_load
    assert doctor.read_driver_version is platform.read_driver_version
    assert doctor.npu_device_nodes is platform.npu_device_nodes
    assert rknn_lite.board_soc is platform.board_soc


def test_daemon_metrics_report_the_npu_load_of_its_root(tmp_path):
    pytest.importorskip("prometheus_client")
    pytest.importorskip("psutil")
    from rknnlite.daemon.metrics import DaemonMetrics

    root = _tree(tmp_path, load="NPU load:  Core0: 12%, Core1:  0%, Core2: 100%,\n")
    body = DaemonMetrics(sysroot=root).render()[0].decode()
    assert 'rknnlite_npu_load_percent{core="0"} 12.0' in body
    assert 'rknnlite_npu_load_percent{core="2"} 100.0' in body
    assert "rknnlite_npu_load_percent" not in DaemonMetrics(sysroot=str(tmp_path / "none")).render()[0].decode()


@pytest.mark.parametrize("board, model, core_platform", [
    ("rk3576", "rk3588", "rk3576"),   # on a board: the board's SoC goes to the Context
    ("", "rk3566", "rk3566"),         # off-board: the model's first target
])
def test_rknnlite_hands_the_board_soc_to_the_context(conv_relu_model, monkeypatch, board, model, core_platform):
    seen = {}
    real = rknn_lite.Context

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(rknn_lite, "board_soc", lambda: board)
    monkeypatch.setattr(rknn_lite, "Context", spy)
    rk = RKNNLite()
    try:
        assert rk.load_rknn(conv_relu_model(model)) == 0
        assert rk.init_runtime() == 0
        assert seen["target_platform"] == (board or None)
        assert rk._ctx.core_platform == core_platform
    finally:
        rk.release()


def test_core_mask_follows_the_board_not_the_model(conv_relu_model, monkeypatch, caplog):
    """An rk3588 model on an RK3576 board: CORE_0_1_2 is remapped (Lite2's RK3576 rule)."""
    monkeypatch.setattr(rknn_lite, "board_soc", lambda: "rk3576")
    rk = RKNNLite()
    try:
        assert rk.load_rknn(conv_relu_model("rk3588")) == 0
        with caplog.at_level(logging.WARNING, logger="rknnlite"):
            assert rk.init_runtime(core_mask=RKNNLite.NPU_CORE_0_1_2) == 0
        assert "RK3576 has 2 NPU cores" in caplog.text
        assert "model was built for rk3588, not rk3576" in caplog.text
    finally:
        rk.release()
