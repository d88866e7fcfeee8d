"""Backend selection (``create_backend``): which backend runs which file, and the errors when
none can.  The npu path is exercised against the fake librknnrt in test_npu_backend.py; here
the runtime is absent (or not a librknnrt) and every refusal must be explicit."""

from __future__ import annotations

import os

import pytest

import rknnlite
from rknnlite.backends import create_backend
from rknnlite.backends.npu import library as npu_library
from rknnlite.errors import DeviceUnavailableError, InvalidParamError
from rknnlite.model.loader import load_model


@pytest.fixture
def no_runtime(monkeypatch, tmp_path):
    """No librknnrt anywhere: empty search dirs, no LIBRKNNRT_PATH, a loader name that resolves to nothing."""
    monkeypatch.delenv("LIBRKNNRT_PATH", raising=False)
    monkeypatch.setattr(npu_library, "SEARCH_DIRS", (str(tmp_path / "usr" / "lib"),))
    monkeypatch.setattr(npu_library, "LOADER_NAME", "librknnrt-absent-for-tests.so")
    return tmp_path


@pytest.fixture
def vendor_file(vendor_rknn_files):
    if not vendor_rknn_files:
        pytest.skip("no vendor .rknn fixture files")
    return str(vendor_rknn_files[0])


def test_portable_auto_goes_to_software(context_models):
    with rknnlite.Context(context_models["add"]) as ctx:
        assert ctx.backend == "software"


def test_portable_on_npu_is_a_clear_error(context_models):
    with pytest.raises(DeviceUnavailableError, match="portable rknnlite models run on the software backend"):
        rknnlite.Context(context_models["add"], backend="npu")


def test_unknown_backend_name(context_models):
    with pytest.raises(InvalidParamError, match="auto, software, npu"):
        rknnlite.Context(context_models["add"], backend="gpu")


def test_rockchip_on_software_runs_it_or_names_why(vendor_file, tmp_path):
    with rknnlite.Context(vendor_file, backend="software") as ctx:  # lowered off-board (test_vendor_offboard.py)
        assert ctx.backend == "software"
    encrypted = tmp_path / "vendor_encrypted.rknn"
    encrypted.write_bytes(b"CYPTRKNN" + bytes(56))
    with pytest.raises(DeviceUnavailableError, match="can only be decrypted by librknnrt"):
        rknnlite.Context(str(encrypted), backend="software")


def test_npu_without_runtime_names_where_it_looked_and_how_to_install(vendor_file, no_runtime):
    with pytest.raises(DeviceUnavailableError) as info:
        rknnlite.Context(vendor_file, backend="npu")
    message = str(info.value)
    assert os.path.join(str(no_runtime), "usr", "lib", "librknnrt.so") in message
    assert "the loader path" in message
    assert "LIBRKNNRT_PATH" in message and "install" in message
    assert "software" not in message.split("npu backend cannot run")[0]


def test_auto_without_runtime_names_both_reasons_and_never_falls_back(no_runtime, tmp_path):
    encrypted = tmp_path / "vendor_encrypted.rknn"
    encrypted.write_bytes(b"CYPTRKNN" + bytes(56))
    with pytest.raises(DeviceUnavailableError) as info:
        rknnlite.Context(str(encrypted))
    message = str(info.value)
    assert "librknnrt.so was not found" in message
    assert "can only be decrypted by librknnrt" in message  # why the software backend refused too


def test_explicit_library_path_that_is_missing(vendor_file, monkeypatch, tmp_path):
    missing = tmp_path / "nowhere" / "librknnrt.so"
    monkeypatch.setenv("LIBRKNNRT_PATH", str(missing))
    with pytest.raises(DeviceUnavailableError, match="LIBRKNNRT_PATH names .*nowhere/librknnrt.so"):
        rknnlite.Context(vendor_file, backend="npu")


def test_library_path_directory_form(monkeypatch, tmp_path):
    (tmp_path / "librknnrt.so").write_bytes(b"")
    monkeypatch.setenv("LIBRKNNRT_PATH", str(tmp_path))
    choice = npu_library.find_library()
    assert choice.source == "LIBRKNNRT_PATH"
    assert choice.candidates == (str(tmp_path / "librknnrt.so"),)


def test_explicit_choice_does_not_fall_back_to_system(monkeypatch, tmp_path):
    sysdir = tmp_path / "usr" / "lib"
    sysdir.mkdir(parents=True)
    (sysdir / "librknnrt.so").write_bytes(b"")
    monkeypatch.setattr(npu_library, "SEARCH_DIRS", (str(sysdir),))
    monkeypatch.setenv("LIBRKNNRT_PATH", str(tmp_path / "missing.so"))
    choice = npu_library.find_library()
    assert choice.candidates == () and choice.problem is not None


def test_system_search_order(monkeypatch, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for d in (first, second):
        d.mkdir()
        (d / "librknnrt.so").write_bytes(b"")
    monkeypatch.delenv("LIBRKNNRT_PATH", raising=False)
    choice = npu_library.find_library(dirs=(str(second), str(first)))
    assert choice.source == "system"
    assert choice.candidates[:2] == (str(second / "librknnrt.so"), str(first / "librknnrt.so"))
    assert choice.candidates[-1] == npu_library.LOADER_NAME


def test_a_library_that_is_not_librknnrt(vendor_file, monkeypatch):
    pytest.importorskip("rknnlite._native.rknnrt")
    libm = "libm.so.6"
    monkeypatch.setenv("LIBRKNNRT_PATH", "")
    monkeypatch.setattr(npu_library, "SEARCH_DIRS", ())
    monkeypatch.setattr(npu_library, "LOADER_NAME", libm)
    with pytest.raises(DeviceUnavailableError, match="does not export rknn_init"):
        rknnlite.Context(vendor_file, backend="npu")


def test_create_backend_takes_loaded_models(context_models):
    backend = create_backend(load_model(context_models["add"]), "auto")
    try:
        assert backend.name == "software"
    finally:
        backend.close()
