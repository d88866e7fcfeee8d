"""Distribution: one version everywhere, the sdist's contents, cibuildwheel and Debian configuration."""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import rknnlite
from rknnlite._version import __version__

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
DEBIAN = PACKAGING / "debian"

_ONNX_IMPORT = re.compile(r"^(import|from) (onnx|onnxruntime|onnx_builders|onnx_cases)\b", re.M)


def _toml(path: Path) -> dict:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    with open(path, "rb") as f:
        return tomllib.load(f)


def debian_to_pep440(version: str) -> str:
    """A Debian version ("1:0.2.0~rc1-3") as the upstream PEP 440 version it packages ("0.2.0rc1")."""
    upstream = version.split(":", 1)[-1]
    if "-" in upstream:
        upstream = upstream.rsplit("-", 1)[0]
    return upstream.replace("~", "")


def _debian_changelog_version() -> str:
    first = (DEBIAN / "changelog").read_text().splitlines()[0]
    match = re.match(r"^rknnlite \(([^)]+)\) \S+; urgency=\w+$", first)
    assert match, f"unexpected first line of debian/changelog: {first!r}"
    return match.group(1)


def _core_tests() -> list:
    lines = (PACKAGING / "core-tests.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


# --- one version ---------------------------------------------------------------------------

def test_package_version_is_read_from_version_module():
    assert rknnlite.__version__ == __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?", __version__)


def test_pyproject_takes_version_from_version_module_only():
    project = _toml(ROOT / "pyproject.toml")
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "rknnlite._version.__version__"}
    assert not re.search(r"\bversion\s*=", (ROOT / "setup.py").read_text())


@pytest.mark.parametrize("debian, pep440", [
    ("0.1.0-1", "0.1.0"), ("1:0.2.0-3", "0.2.0"), ("0.2.0~rc1-1", "0.2.0rc1"), ("0.3.0", "0.3.0"),
])
def test_debian_version_normalisation(debian, pep440):
    assert debian_to_pep440(debian) == pep440


def test_debian_changelog_matches_package_version():
    assert debian_to_pep440(_debian_changelog_version()) == __version__


def test_changelog_latest_release_is_package_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert releases, "CHANGELOG.md has no '## [version]' headings"
    released = [r for r in releases if r.lower() != "unreleased"]
    assert released[0] == __version__


# --- sdist -----------------------------------------------------------------------------------

def test_manifest_ships_cython_sources_and_headers():
    manifest = (ROOT / "MANIFEST.in").read_text()
    assert re.search(r"^recursive-include cython .*\*\.pyx.*\*\.pxd.*\*\.h", manifest, re.M)
    assert re.search(r"^recursive-include cython/src \*\.c$", manifest, re.M)
    assert re.search(r"^include .*\bLICENSE\b", manifest, re.M)
    assert re.search(r"^exclude cython/\*\.c$", manifest, re.M)


def _copy_source_tree(dest: Path) -> None:
    skip = shutil.ignore_patterns("build", "dist", ".git", "__pycache__", "*.egg-info", "*.so", "*.c",
                                  ".pytest_cache", ".venv")
    for name in ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE", "CHANGELOG.md"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("rknnlite", "cython", "tests", "examples", "packaging", "docs", "tools/vendor_corpus"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name, ignore=skip)
    # C sources of the tests and of cython/src/ (not generated) are needed; copy them back after the *.c filter
    for c_file in [*(ROOT / "tests").rglob("*.c"), *(ROOT / "cython" / "src").glob("*.c")]:
        target = dest / c_file.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(c_file, target)


@pytest.mark.slow
def test_sdist_contains_sources_and_metadata_version(tmp_path):
    pytest.importorskip("Cython")
    pytest.importorskip("setuptools")
    tree = tmp_path / "src"
    tree.mkdir()
    _copy_source_tree(tree)
    # setup.py cythonizes while it is imported; one small module keeps the sdist build quick
    # (MANIFEST.in, not the extension list, decides which sources ship).
    env = dict(os.environ, RKNNLITE_NATIVE_ONLY="__sdist_only__")
    out = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path / "dist")],
                         cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (sdist,) = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        prefix = tar.getnames()[0].split("/", 1)[0]
        pkg_info = tar.extractfile(f"{prefix}/PKG-INFO").read().decode()
    for pyx in (ROOT / "cython").rglob("*.pyx"):
        assert pyx.relative_to(ROOT).as_posix() in names
    for header in (ROOT / "cython" / "include").iterdir():
        if header.suffix in (".h", ".pxd"):
            assert f"cython/include/{header.name}" in names
    for c_file in (ROOT / "cython" / "src").glob("*.c"):
        assert f"cython/src/{c_file.name}" in names
    for required in ("LICENSE", "README.md", "CHANGELOG.md", "setup.py", "pyproject.toml", "tests/conftest.py",
                     "rknnlite/data/demo.rknn", "rknnlite/py.typed", "packaging/core-tests.txt",
                     "packaging/run_tests.sh", "packaging/debian/changelog", "packaging/systemd/rknnlite.service",
                     "tools/vendor_corpus/models.py"):
        assert required in names, required
    assert not [n for n in names if n.endswith((".so", ".pyc")) or (n.startswith("cython/") and n.endswith(".c")
                                                                         and not n.startswith("cython/src/"))]
    assert email.message_from_string(pkg_info)["Version"] == __version__


# --- wheels (cibuildwheel) -------------------------------------------------------------------

def test_cibuildwheel_builds_every_supported_cpython():
    config = _toml(ROOT / "pyproject.toml")
    cibw = config["tool"]["cibuildwheel"]
    builds = set(cibw["build"].split())
    classifiers = {c.rsplit(":: ", 1)[1] for c in config["project"]["classifiers"]
                   if c.startswith("Programming Language :: Python :: 3.")}
    assert builds == {f"cp{v.replace('.', '')}-*" for v in classifiers}
    assert config["project"]["requires-python"] == ">=%s" % min(classifiers, key=lambda v: int(v.split(".")[1]))
    assert set(cibw["linux"]["archs"]) >= {"x86_64", "aarch64"}
    assert "musllinux" not in cibw.get("skip", "")


def test_cibuildwheel_runs_the_core_subset_without_onnx():
    # onnxruntime has no wheel for manylinux2014 (glibc 2.17) or musllinux: every wheel runs the
    # core subset, as packaging/build_wheels.sh does
    cibw = _toml(ROOT / "pyproject.toml")["tool"]["cibuildwheel"]
    assert "packaging/run_tests.sh {project} core" in cibw["test-command"]
    assert not any(r.startswith(("onnx", "onnxruntime")) for r in cibw["test-requires"])
    assert "test-extras" not in cibw and "overrides" not in cibw


def test_core_subset_exists_and_needs_no_onnx():
    names = _core_tests()
    assert len(names) >= 8
    for name in names:
        path = ROOT / "tests" / name
        assert path.is_file(), name
        assert not _ONNX_IMPORT.search(path.read_text()), f"{name} imports onnx at module level"


def test_run_tests_script_rejects_unknown_mode(tmp_path):
    out = subprocess.run(["bash", str(PACKAGING / "run_tests.sh"), str(ROOT), "everything"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "mode must be 'full' or 'core'" in out.stderr


# --- Debian ----------------------------------------------------------------------------------

def _control_paragraphs() -> list:
    text = (DEBIAN / "control").read_text()
    return [dict(re.findall(r"^([\w-]+):\s*(.*(?:\n[ \t].*)*)", para, re.M)) for para in text.strip().split("\n\n")]


def test_debian_control_declares_both_packages():
    source, *binaries = _control_paragraphs()
    assert source["Source"] == "rknnlite"
    assert "cython3 (>= 3.0~)" in source["Build-Depends"]
    by_name = {b["Package"]: b for b in binaries}
    assert set(by_name) == {"python3-rknnlite", "rknnlite-daemon"}
    assert by_name["python3-rknnlite"]["Architecture"] == "any"
    for dep in ("python3-numpy", "python3-cryptography", "python3-psutil"):
        assert dep in by_name["python3-rknnlite"]["Depends"]
    for dep in ("python3-rknnlite", "python3-aiohttp", "python3-prometheus-client"):
        assert dep in by_name["rknnlite-daemon"]["Depends"]


def test_debian_install_files_exist():
    for line in (DEBIAN / "rknnlite-daemon.install").read_text().splitlines():
        source = line.split()[0]
        assert (ROOT / source).is_file(), source
    for line in (DEBIAN / "python3-rknnlite.manpages").read_text().split():
        assert (ROOT / line).is_file(), line


def test_debian_daemon_user_repository_and_unit():
    sysusers = (DEBIAN / "rknnlite-daemon.sysusers").read_text()
    assert re.search(r"^u rknnlite - ", sysusers, re.M)
    assert "var/lib/rknnlite/models" in (DEBIAN / "rknnlite-daemon.dirs").read_text().split()
    dropin = (DEBIAN / "rknnlite-daemon" / "debian.conf").read_text()
    assert "User=rknnlite" in dropin and "DynamicUser=no" in dropin
    assert "--model-repository /var/lib/rknnlite/models $RKNNLITE_SERVE_ARGS" in dropin
    assert "EnvironmentFile=-/etc/rknnlite/rknnlite.env" in dropin
    env = (DEBIAN / "rknnlite-daemon" / "rknnlite.env").read_text()
    assert re.search(r'^RKNNLITE_SERVE_ARGS="--host 127\.0\.0\.1 --port \d+"$', env, re.M)
    unit = (PACKAGING / "systemd" / "rknnlite.service").read_text()
    assert re.search(r"^ExecStart=/usr/bin/rknnlite serve ", unit, re.M)


def test_debian_rules_tests_the_core_subset():
    rules = (DEBIAN / "rules").read_text()
    assert "packaging/core-tests.txt" in rules
    # dh_python3 (dependencies, /usr/lib/python3), dh_numpy3 (numpy ABI) and the sysusers file
    # of rknnlite-daemon are not in debhelper 13's default sequence
    assert re.search(r"^\tdh \$@ --with python3,numpy3,installsysusers --buildsystem=pybuild$", rules, re.M)
    assert rules.startswith("#!/usr/bin/make -f")
    assert os.access(DEBIAN / "rules", os.X_OK)
