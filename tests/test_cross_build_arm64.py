"""packaging/cross_build_arm64.py: the pieces that need no cross compiler (sysconfig, ELF check, retagging)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cross():
    spec = importlib.util.spec_from_file_location("cross_build_arm64", REPO / "packaging" / "cross_build_arm64.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_root(tmp_path: Path, **overrides) -> Path:
    variables = {"CC": "aarch64-linux-gnu-gcc", "LDSHARED": "aarch64-linux-gnu-gcc -shared", "CFLAGS": "-O2",
                 "CCSHARED": "-fPIC", "EXT_SUFFIX": ".cpython-313-aarch64-linux-gnu.so",
                 "INCLUDEPY": "/usr/include/python3.13", "VERSION": "3.13", "MULTIARCH": "aarch64-linux-gnu"}
    variables.update(overrides)
    variables = {k: v for k, v in variables.items() if v is not None}
    lib = tmp_path / "usr/lib/python3.13"
    lib.mkdir(parents=True)
    (lib / "_sysconfigdata__aarch64-linux-gnu.py").write_text(f"build_time_vars = {variables!r}\n")
    return tmp_path


def test_target_sysconfig_reads_the_roots_build_variables(cross, tmp_path):
    conf = cross.target_sysconfig(_fake_root(tmp_path))
    assert conf["EXT_SUFFIX"] == ".cpython-313-aarch64-linux-gnu.so"
    assert conf["MULTIARCH"] == "aarch64-linux-gnu"


def test_target_sysconfig_names_a_missing_interpreter_or_variable(cross, tmp_path):
    with pytest.raises(cross.BuildError, match="is python3 installed"):
        cross.target_sysconfig(tmp_path)
    with pytest.raises(cross.BuildError, match="no EXT_SUFFIX"):
        cross.target_sysconfig(_fake_root(tmp_path / "r", EXT_SUFFIX=None))


def test_numpy_include_is_found_in_the_root_or_named_missing(cross, tmp_path):
    with pytest.raises(cross.BuildError, match="python3-numpy"):
        cross.target_numpy_include(tmp_path)
    include = tmp_path / "usr/lib/python3/dist-packages/numpy/_core/include"
    (include / "numpy").mkdir(parents=True)
    (include / "numpy" / "arrayobject.h").write_text("")
    assert cross.target_numpy_include(tmp_path) == include


def _elf(machine: int, e_type: int = 3) -> bytes:
    return b"\x7fELF\x02\x01\x01" + bytes(9) + e_type.to_bytes(2, "little") + machine.to_bytes(2, "little") + bytes(44)


def test_check_elf_accepts_aarch64_shared_objects_only(cross, tmp_path):
    good = tmp_path / "good.so"
    good.write_bytes(_elf(183))
    cross.check_elf(good, "aarch64")
    for name, data in (("x86.so", _elf(62)), ("exec.so", _elf(183, e_type=2)), ("text.so", b"not an elf" * 4)):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(cross.BuildError, match=name):
            cross.check_elf(path, "aarch64")


def test_platform_wheel_adds_extensions_retags_and_rewrites_record(cross, tmp_path):
    pure = tmp_path / "demo_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(pure, "w") as wheel:
        wheel.writestr("demo/__init__.py", "x = 1\n")
        wheel.writestr("demo_pkg-1.0.dist-info/METADATA", "Name: demo-pkg\nVersion: 1.0\n")
        wheel.writestr("demo_pkg-1.0.dist-info/WHEEL",
                       "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n\n")
        wheel.writestr("demo_pkg-1.0.dist-info/RECORD", "stale\n")
    so = tmp_path / "k.so"
    so.write_bytes(_elf(183))
    out = tmp_path / "out"
    out.mkdir()
    built = cross.platform_wheel(pure, {"demo/_native/k.cpython-313-aarch64-linux-gnu.so": so},
                                 "cp313-cp313-linux_aarch64", out)
    assert built.name == "demo_pkg-1.0-cp313-cp313-linux_aarch64.whl"
    with zipfile.ZipFile(built) as wheel:
        names = wheel.namelist()
        assert "demo/_native/k.cpython-313-aarch64-linux-gnu.so" in names
        header = wheel.read("demo_pkg-1.0.dist-info/WHEEL").decode()
        assert "\n\n" not in header  # an empty line would end the headers before the tag
        assert "Root-Is-Purelib: false\n" in header and "Tag: cp313-cp313-linux_aarch64\n" in header
        assert "py3-none-any" not in header and "Root-Is-Purelib: true" not in header
        record = dict(line.split(",", 1) for line in wheel.read("demo_pkg-1.0.dist-info/RECORD").decode().splitlines())
        assert set(record) == set(names)
        assert record["demo_pkg-1.0.dist-info/RECORD"] == ","
        for name in names:
            if name.endswith("RECORD"):
                continue
            data = wheel.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert record[name] == f"sha256={digest},{len(data)}"


def test_cross_build_reports_a_missing_cross_compiler(cross, tmp_path, monkeypatch, capsys):
    root = _fake_root(tmp_path / "root", CC="no-such-cross-gcc")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cross.main(["--root", str(root), "--src", str(tmp_path), "--out", str(tmp_path / "out")]) == 1
    assert "no-such-cross-gcc is not on PATH" in capsys.readouterr().err


def test_setup_py_extensions_are_captured_with_every_module(cross, tmp_path, monkeypatch):
    (tmp_path / "setup.py").write_text(
        "import os\n"
        "from setuptools import Extension, setup\n"
        "only = [n for n in os.environ.get('RKNNLITE_NATIVE_ONLY', '').split(',') if n]\n"
        "names = [n for n in ('a', 'b') if not only or n in only]\n"
        "setup(ext_modules=[Extension('pkg._native.' + n, ['build/' + n + '.c'], extra_compile_args=['-O3'])"
        " for n in names])\n")
    monkeypatch.setenv("RKNNLITE_NATIVE_ONLY", "a")
    cwd = Path.cwd()
    kwargs = cross.cythonize_with_setup_py(tmp_path)
    assert [ext.name for ext in kwargs["ext_modules"]] == ["pkg._native.a", "pkg._native.b"]
    assert kwargs["ext_modules"][0].extra_compile_args == ["-O3"]
    assert Path.cwd() == cwd and __import__("os").environ["RKNNLITE_NATIVE_ONLY"] == "a"
    import setuptools
    assert setuptools.setup.__module__.startswith("setuptools")  # the real setup is back


def test_setup_py_without_extensions_is_an_error(cross, tmp_path):
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(ext_modules=[])\n")
    with pytest.raises(cross.BuildError, match="declared no extensions"):
        cross.cythonize_with_setup_py(tmp_path)
