"""``rknnlite doctor``: every fact read from an injectable filesystem root, text and JSON."""

from __future__ import annotations

import json
import os

import pytest

from rknnlite import cli, doctor
from rknnlite.backends.npu import library as npu_library


def _board(root, soc="rk3588", load="NPU load:  Core0: 12%, Core1:  0%, Core2: 100%,\n",
           version="RKNPU driver: v0.9.8\n", dev=True):
    """A fake board filesystem under ``root``."""
    (root / "proc" / "device-tree").mkdir(parents=True)
    (root / "proc" / "device-tree" / "compatible").write_bytes(
        f"rockchip,{soc}-evb1-lp4-v10\0rockchip,{soc}\0".encode())
    debug = root / "sys" / "kernel" / "debug" / "rknpu"
    debug.mkdir(parents=True)
    if load is not None:
        (debug / "load").write_text(load)
    if version is not None:
        (debug / "version").write_text(version)
    if dev:
        (root / "dev").mkdir()
        (root / "dev" / "rknpu").write_text("")
    return root


@pytest.fixture
def isolated(monkeypatch):
    monkeypatch.delenv("LIBRKNNRT_PATH", raising=False)
    monkeypatch.setattr(npu_library, "LOADER_NAME", "librknnrt-absent-for-tests.so")


def test_board_facts(tmp_path, isolated):
    root = _board(tmp_path)
    report = doctor.collect(root=str(root))
    assert report["soc"]["soc"] == "rk3588"
    assert report["driver"] == {"version": "0.9.8", "source": "/sys/kernel/debug/rknpu/version"}
    assert report["npu_load"]["cores"] == {"0": 12, "1": 0, "2": 100}
    assert report["device_nodes"] == ["/dev/rknpu"]
    assert report["packages"]["numpy"]
    assert report["python"]["version"]
    json.dumps(report)  # JSON-ready


def test_driver_version_from_sysfs_module_when_debugfs_is_missing(tmp_path, isolated):
    root = _board(tmp_path, version=None)
    (root / "sys" / "module" / "rknpu").mkdir(parents=True)
    (root / "sys" / "module" / "rknpu" / "version").write_text("0.9.6\n")
    assert doctor.collect(root=str(root))["driver"] == {"version": "0.9.6", "source": "/sys/module/rknpu/version"}


def test_not_a_board(tmp_path, isolated):
    report = doctor.collect(root=str(tmp_path))
    assert report["soc"]["soc"] is None and "does not exist" in report["soc"]["error"]
    assert report["driver"]["version"] is None and "does not exist" in report["driver"]["error"]
    assert report["npu_load"]["cores"] is None
    assert report["device_nodes"] == []
    npu = report["backends"]["npu"]
    assert npu["available"] is False
    assert any("librknnrt.so was not found" in r for r in npu["why_not"])
    assert any("device node" in r for r in npu["why_not"])
    assert report["backends"]["software"]["available"] is True
    text = doctor.format_report(report)
    assert "NOT available" in text and "SoC:            unknown" in text


def test_unreadable_debugfs_is_reported_not_raised(tmp_path, isolated, monkeypatch):
    root = _board(tmp_path)
    real_open = open

    def guarded_open(path, *args, **kwargs):
        if "kernel/debug" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", guarded_open)
    report = doctor.collect(root=str(root))
    assert "not readable without privileges" in report["npu_load"]["error"]
    assert report["driver"]["version"] is None


def test_drm_render_node_of_the_rknpu_driver(tmp_path, isolated):
    root = _board(tmp_path, dev=False)
    driver_dir = root / "sys" / "bus" / "platform" / "drivers" / "RKNPU"
    driver_dir.mkdir(parents=True)
    node = root / "sys" / "class" / "drm" / "renderD129" / "device"
    node.mkdir(parents=True)
    os.symlink(driver_dir, node / "driver")
    (root / "dev" / "dri").mkdir(parents=True)
    (root / "dev" / "dri" / "renderD129").write_text("")
    assert doctor.npu_device_nodes(str(root)) == ["/dev/dri/renderD129"]


def test_library_in_a_system_dir_with_embedded_version(tmp_path, isolated):
    root = _board(tmp_path)
    lib = root / "usr" / "lib" / "librknnrt.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF junk \0RKNN Runtime\0" + b"2.3.2 (429f97ae6b@2025-04-09T09:09:27)\0tail")
    report = doctor.collect(root=str(root))
    info = report["librknnrt"]
    assert info["path"] == str(lib)
    assert info["version"] == "2.3.2 (429f97ae6b@2025-04-09T09:09:27)"
    assert info["loaded"] is False and "cannot load" in info["error"]  # not a real shared object


def test_text_report_of_a_board(tmp_path, isolated):
    text = doctor.format_report(doctor.collect(root=str(_board(tmp_path))))
    assert "SoC:            rk3588" in text
    assert "NPU driver:     0.9.8" in text
    assert "core 0: 12%, core 1: 0%, core 2: 100%" in text
    assert "software  available" in text


def test_cli_doctor_json(capsys, isolated):
    assert cli.main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"soc", "librknnrt", "driver", "npu_load", "python", "packages", "backends"}


def test_cli_doctor_text(capsys, isolated):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rknnlite doctor") and "Backends:" in out


def test_with_the_fake_runtime_and_a_model(tmp_path, isolated, fake_rknnrt, monkeypatch):
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from fake_model import add_mul_model

    pytest.importorskip("rknnlite._native.rknnrt")
    monkeypatch.setenv("FAKE_RKNNRT_VERSION", "2.3.2")
    monkeypatch.setenv("LIBRKNNRT_PATH", str(fake_rknnrt))
    model = tmp_path / "m.rknn"
    model.write_bytes(add_mul_model())
    root = _board(tmp_path / "root")
    report = doctor.collect(root=str(root), model=str(model))
    lib = report["librknnrt"]
    assert lib["loaded"] is True and lib["path"] == str(fake_rknnrt) and lib["found_by"] == "LIBRKNNRT_PATH"
    assert report["backends"]["npu"]["available"] is True
    assert report["model"]["backend"] == "npu"
    assert report["model"]["sdk_version"] == {"api": "2.3.2 (fake rknnlite test runtime)", "drv": "0.9.8"}
    text = doctor.format_report(report)
    assert f"librknnrt:      {fake_rknnrt}" in text and "runs on the npu backend" in text


def test_cli_doctor_library_option(capsys, isolated, fake_rknnrt):
    pytest.importorskip("rknnlite._native.rknnrt")
    assert cli.main(["doctor", "--json", "--library", str(fake_rknnrt)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["librknnrt"]["loaded"] is True and report["librknnrt"]["found_by"] == "argument"


def test_software_backend_names_the_cpu_and_the_caches_it_blocks_for(tmp_path, isolated, monkeypatch):
    monkeypatch.setenv("RKNNLITE_CPU_CACHES", "l2=2M")
    report = doctor.collect(root=str(tmp_path))
    cpu = report["backends"]["software"]["cpu"]
    assert "L2 2048K" in cpu and "RKNNLITE_CPU_CACHES" in cpu
    assert f"CPU: {cpu}" in doctor.format_report(report)
    monkeypatch.setenv("RKNNLITE_CPU_CACHES", "l2=lots")  # reported, not raised
    assert "caches unreadable" in doctor.collect(root=str(tmp_path))["backends"]["software"]["cpu"]


def test_software_backend_says_whether_the_kernel_choices_are_measured(tmp_path, isolated, monkeypatch):
    from rknnlite.backends.software import calibration
    from rknnlite.backends.software.ops import conv, conv_costs

    if conv._ISA == 0:
        pytest.skip("the generic path measures nothing")
    monkeypatch.setenv("RKNNLITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RKNNLITE_CALIBRATION", "auto")
    path = calibration.stored_path(conv_costs.CHOICE, conv_costs.calibration_key(conv._ISA))
    before = doctor.collect(root=str(tmp_path))["backends"]["software"]["calibration"]
    assert before == f"auto: Winograd/direct crossover measured on first use, kept in {path}"
    assert not path.exists()  # the doctor never measures
    calibration.calibrated(conv_costs.CHOICE, conv_costs.calibration_key(conv._ISA), lambda: {"probes": []})
    after = doctor.collect(root=str(tmp_path))["backends"]["software"]["calibration"]
    assert after == f"auto: Winograd/direct crossover measured, kept in {path}"
    assert f"calibration: {after}" in doctor.format_report(doctor.collect(root=str(tmp_path)))
    monkeypatch.setenv("RKNNLITE_CALIBRATION", "off")
    assert doctor.collect(root=str(tmp_path))["backends"]["software"]["calibration"].startswith("off")
    monkeypatch.setenv("RKNNLITE_CALIBRATION", "often")  # reported, not raised
    assert "RKNNLITE_CALIBRATION='often'" in doctor.collect(root=str(tmp_path))["backends"]["software"]["calibration"]


def test_a_bad_kernel_path_makes_the_software_backend_unavailable_by_name(json_probe):
    code = ("import json\nfrom rknnlite import doctor\n"
            "r = doctor.collect(root='/nonexistent')\n"
            "print(json.dumps([r['backends']['software'], doctor.format_report(r)]))")
    software, text = json_probe(code, env=dict(os.environ, RKNNLITE_ISA="sse4"))
    assert software["available"] is False and "RKNNLITE_ISA='sse4'" in software["why_not"][0]
    assert "calibration" not in software  # nothing to say of kernels that do not load
    assert "software  NOT available" in text and "RKNNLITE_ISA='sse4'" in text
