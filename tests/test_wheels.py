"""The release wheels (packaging/build_wheels.sh): the manifest packaging/wheels.json, the
metadata of the wheels in dist/, pyproject's classifiers and the README agree with one another
and with rknnlite/_version.py."""

from __future__ import annotations

import email
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

import pytest

from rknnlite._version import __version__

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
MANIFEST = PACKAGING / "wheels.json"
DIST = ROOT / "dist"

sys.path.insert(0, str(PACKAGING / "wheels"))
import manifest as manifest_io  # noqa: E402
import targets  # noqa: E402


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads(MANIFEST.read_text())


def _minor_range(first: str, last: str) -> list[str]:
    major, lo = map(int, first.split("."))
    hi = int(last.split(".")[1])
    return [f"{major}.{m}" for m in range(lo, hi + 1)]


def readme_pythons() -> list[str]:
    """The supported-Python range the README states ("CPython 3.9–3.13")."""
    found = re.findall(r"CPython (3\.\d+)[–-](3\.\d+)", (ROOT / "README.md").read_text())
    assert found, "README.md states no 'CPython 3.X–3.Y' range"
    assert len(set(found)) == 1, f"README.md states several ranges: {sorted(set(found))}"
    return _minor_range(*found[0])


def classifier_pythons() -> list[str]:
    found = [c.rsplit(":: ", 1)[1] for c in _pyproject()["project"]["classifiers"]
             if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    return sorted(found, key=lambda v: int(v.split(".")[1]))


def test_manifest_version_is_the_package_version(manifest):
    assert manifest["version"] == __version__
    assert manifest["project"] == _pyproject()["project"]["name"]


def test_one_list_of_pythons_everywhere(manifest):
    pythons = list(targets.PYTHONS)
    assert manifest["pythons"] == pythons
    assert classifier_pythons() == pythons
    assert readme_pythons() == pythons
    assert _pyproject()["project"]["requires-python"] == f">={pythons[0]}"
    selectors = _pyproject()["tool"]["cibuildwheel"]["build"].split()
    assert selectors == [f"cp{v.replace('.', '')}-*" for v in pythons]


def test_classifiers_name_the_platforms():
    classifiers = set(_pyproject()["project"]["classifiers"])
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert "Programming Language :: Python :: Implementation :: CPython" in classifiers


def test_cibuildwheel_builds_the_same_platform_tags():
    config = _pyproject()["tool"]["cibuildwheel"]
    assert config["manylinux-x86_64-image"] == config["manylinux-aarch64-image"] == "manylinux2014"
    assert config["musllinux-x86_64-image"] == config["musllinux-aarch64-image"] == "musllinux_1_2"
    assert sorted(config["linux"]["archs"]) == sorted(targets.ARCHS)
    assert set(targets.PLATFORM_TAG.values()) == {"manylinux_2_17", "musllinux_1_2"}


def test_each_wheel_entry_is_consistent(manifest):
    assert manifest["wheels"], "the manifest lists no wheel"
    names = {t.name for t in targets.parse_selection("all")}
    for name, wheel in manifest["wheels"].items():
        assert name in names, name
        cp = "cp" + wheel["python"].replace(".", "")
        assert name.startswith(cp + "-")
        assert wheel["python"] in manifest["pythons"]
        assert wheel["file"].startswith(f"rknnlite_runtime-{manifest['version']}-{cp}-{cp}-"), wheel["file"]
        assert all(tag.startswith(f"{cp}-{cp}-") for tag in wheel["tags"]), wheel["tags"]
        assert f"{cp}-{cp}-{wheel['platform_tag']}" in wheel["tags"]
        assert re.fullmatch(r"[0-9a-f]{64}", wheel["sha256"])
        # auditwheel found the wheel consistent with the tag it carries (or an older one)
        libc, version, arch = re.fullmatch(r"(manylinux|musllinux)_(\d+_\d+)_(\w+)",
                                           wheel["auditwheel"]).groups()
        want = re.fullmatch(r"(manylinux|musllinux)_(\d+_\d+)_(\w+)", wheel["platform_tag"]).groups()
        assert (libc, arch) == (want[0], want[2]), (name, wheel["auditwheel"])
        assert tuple(map(int, version.split("_"))) <= tuple(map(int, want[1].split("_")))
        assert wheel["published"] == (wheel["test"]["result"] == "passed"), name
        if wheel["test"]["result"] == "passed":
            assert re.search(r"\d+ passed|imported and ran the demo", wheel["test"]["summary"]), name


def test_readme_table_is_generated_from_the_manifest(manifest):
    text = (PACKAGING / "README.md").read_text()
    start = text.index(manifest_io.TABLE_START) + len(manifest_io.TABLE_START)
    assert text[start:text.index(manifest_io.TABLE_END)].strip() == manifest_io.table(manifest).strip(), \
        "packaging/README.md's wheel table is stale: run packaging/build_wheels.sh --table-only"


def _dist_wheels() -> list[Path]:
    return sorted(DIST.glob(f"rknnlite_runtime-{__version__}-*.whl")) if DIST.is_dir() else []


@pytest.mark.parametrize("wheel", _dist_wheels() or [None], ids=lambda p: p.name if p else "none")
def test_built_wheel_metadata_agrees(wheel, manifest):
    if wheel is None:
        pytest.skip("no wheel of this version in dist/ (packaging/build_wheels.sh builds them)")
    with zipfile.ZipFile(wheel) as z:
        info = f"rknnlite_runtime-{__version__}.dist-info"
        meta = email.message_from_bytes(z.read(f"{info}/METADATA"))
        wheel_file = email.message_from_bytes(z.read(f"{info}/WHEEL"))
    assert meta["Name"] == "rknnlite-runtime"
    assert meta["Version"] == __version__
    assert meta["Requires-Python"] == _pyproject()["project"]["requires-python"]
    assert meta.get_all("Classifier") == _pyproject()["project"]["classifiers"]
    assert wheel_file["Root-Is-Purelib"] == "false"
    tags = wheel_file.get_all("Tag")
    cp = re.match(rf"rknnlite_runtime-{re.escape(__version__)}-(cp\d+)-", wheel.name).group(1)
    assert f"{cp[2]}.{cp[3:]}" in manifest["pythons"]
    assert all(t.startswith(f"{cp}-{cp}-") and re.search(r"(manylinux|musllinux)_\d+_\d+_", t)
               or t.startswith(f"{cp}-{cp}-manylinux2014_") for t in tags), tags
    entries = [w for w in manifest["wheels"].values() if w["file"] == wheel.name]
    assert entries, f"{wheel.name} is in dist/ but not in packaging/wheels.json"
    assert entries[0]["published"] and entries[0]["tags"] == tags
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == entries[0]["sha256"]


@pytest.mark.parametrize("python, libc, suffix", [
    ("3.9", "musllinux", ".cpython-39-aarch64-linux-gnu.so"),
    ("3.10", "musllinux", ".cpython-310-aarch64-linux-gnu.so"),
    ("3.11", "musllinux", ".cpython-311-aarch64-linux-musl.so"),
    ("3.13", "manylinux", ".cpython-313-aarch64-linux-gnu.so"),
])
def test_extension_suffix_is_the_target_interpreters(python, libc, suffix):
    # CPython < 3.11 on musl reports linux-gnu in its triplet (NumPy's musllinux cp39/cp310
    # wheels name their extensions so); a wrong suffix would leave the extensions unimported
    assert targets.Target(python, libc, "aarch64").ext_suffix == suffix


def test_selection_names_targets_and_rejects_unknown_patterns():
    assert [t.name for t in targets.parse_selection("cp311-manylinux_*")] == [
        "cp311-manylinux_x86_64", "cp311-manylinux_aarch64"]
    assert len(targets.parse_selection("all")) == len(targets.PYTHONS) * 4
    with pytest.raises(ValueError, match="selects no target"):
        targets.parse_selection("cp27-*")


@pytest.mark.parametrize("wanted, found, allowed", [
    ("manylinux_2_17_x86_64", "manylinux_2_17_x86_64", True),
    ("manylinux_2_17_x86_64", "manylinux_2_5_x86_64", True),
    ("manylinux_2_17_x86_64", "manylinux_2_28_x86_64", False),
    ("manylinux_2_17_aarch64", "manylinux_2_17_x86_64", False),
    ("musllinux_1_2_aarch64", "musllinux_1_1_aarch64", True),
    ("musllinux_1_2_aarch64", "manylinux_2_17_aarch64", False),
])
def test_a_wheel_is_tagged_only_as_auditwheel_allows(wanted, found, allowed):
    import matrix as wheel_build

    assert wheel_build.target_allows(wanted, found) is allowed


# auditwheel 6.8's ``-v show`` on an x86_64 wheel whose symbols (GLIBC_2.14) constrain the tag:
# without -v it stops after "This constrains ..." and never says whether libraries are external
CONSTRAINED_SHOW = """
rknnlite_runtime-0.1.0-cp39-cp39-linux_x86_64.whl is consistent with
the following platform tag: "manylinux_2_17_x86_64".

The wheel references external versioned symbols in these
system-provided shared libraries: libc.so.6 with versions
{'GLIBC_2.2.5', 'GLIBC_2.3.2', 'GLIBC_2.14', 'GLIBC_2.17'}

This constrains the platform tag to "manylinux_2_17_x86_64". In order
to achieve a more compatible tag, you would need to recompile a new
wheel from source on a system with earlier versions of these
libraries, such as a recent manylinux image.

The wheel requires no external shared libraries! :)
"""


def test_auditwheel_verdict_needs_the_tag_and_no_external_library():
    import matrix as wheel_build

    assert wheel_build.show_verdict(CONSTRAINED_SHOW, "w.whl") == "manylinux_2_17_x86_64"
    without = CONSTRAINED_SHOW.replace("The wheel requires no external shared libraries! :)", "")
    with pytest.raises(RuntimeError, match="external shared libraries"):
        wheel_build.show_verdict(without, "w.whl")
    external = without + "The following external shared libraries are required by the wheel:\n"
    with pytest.raises(RuntimeError, match="external shared libraries"):
        wheel_build.show_verdict(external, "w.whl")
    with pytest.raises(RuntimeError, match="no platform tag"):
        wheel_build.show_verdict("nothing", "w.whl")


def test_pyconfig_loses_only_crypt_h():
    import toolchain

    text = "#define HAVE_CRYPT_H 1\n#define HAVE_CRYPT_R 1\n#define SIZEOF_LONG 8\n"
    out = toolchain.without_crypt_h(text)
    assert "#define HAVE_CRYPT_H" not in out
    assert "#define HAVE_CRYPT_R 1\n#define SIZEOF_LONG 8\n" in out


def test_aarch64_wheelhouse_adds_what_pip_download_leaves_out_for_older_pythons():
    import testing

    # pytest's exceptiongroup and tomli are marked python_version < "3.11"; pip download
    # evaluates that for its own interpreter, not the target's
    assert {"exceptiongroup>=1", "tomli>=1"} <= set(testing.backports("3.9"))
    assert testing.backports("3.10") == testing.backports("3.9")
    assert testing.backports("3.11") == testing.backports("3.13") == []


def test_every_python_has_a_pinned_source_for_the_interpreters_built_here():
    import cpython

    assert sorted(cpython.SOURCES) == sorted(targets.PYTHONS)
    for version, source in {**cpython.SOURCES, **cpython.DEPENDENCIES}.items():
        assert re.fullmatch(r"[0-9a-f]{64}", source.sha256), version
        assert source.url.startswith(("http://deb.debian.org/", "http://archive.ubuntu.com/")), source.url
        if version in cpython.SOURCES:
            assert f"python{version}_{version}." in source.filename, source.filename


def test_interpreters_are_built_for_musl_and_for_the_aarch64_versions_debian_lacks():
    import cpython

    built = {t.name for t in targets.parse_selection("all") if cpython.needed(t)}
    assert built == ({f"cp{v.replace('.', '')}-musllinux_{a}" for v in targets.PYTHONS
                      for a in targets.ARCHS}
                     | {"cp310-manylinux_aarch64", "cp312-manylinux_aarch64"})
    assert cpython.triple(targets.Target("3.12", "manylinux", "aarch64")) == (
        "aarch64-linux-gnu", "aarch64-linux-gnu.2.17")
    assert cpython.triple(targets.Target("3.9", "musllinux", "x86_64")) == (
        "x86_64-linux-musl", "x86_64-linux-musl")


def test_the_cross_compiler_wrapper_drops_the_build_hosts_system_dirs(tmp_path):
    import subprocess

    import cpython

    # /bin/echo stands in for zig: the wrapper's output is the command it would run
    tools = cpython.compiler_dir(targets.Target("3.11", "musllinux", "aarch64"), tmp_path,
                                 zig=Path("/bin/echo"))
    out = subprocess.run([str(tools / "aarch64-linux-musl-cc"), "-I/usr/include",
                          "-I/usr/include/x86_64-linux-gnu", "-I/usr/local/include", "-Iown/include",
                          "-L/usr/lib/x86_64-linux-gnu", "-L/lib64", "-Lown/lib", "-O2", "a b.c"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["cc", "-target", "aarch64-linux-musl", "-Iown/include", "-Lown/lib", "-O2",
                   "a", "b.c"]
    assert subprocess.run([str(tools / "dpkg-architecture"), "-qDEB_HOST_MULTIARCH"]).returncode != 0


def test_the_wheelhouse_takes_the_wheels_each_libc_accepts():
    import testing

    assert testing.wheelhouse_platforms(targets.Target("3.9", "musllinux", "aarch64")) == [
        "musllinux_1_2_aarch64", "musllinux_1_1_aarch64"]
    assert testing.wheelhouse_platforms(targets.Target("3.14", "manylinux", "aarch64")) == [
        "manylinux2014_aarch64", "manylinux_2_28_aarch64"]


def test_a_cross_build_runs_under_a_build_interpreter_of_the_sources_exact_version(monkeypatch, tmp_path):
    import cpython
    import toolchain

    assert {v: s.version for v, s in cpython.SOURCES.items()}["3.13"] == "3.13.5"
    monkeypatch.setattr(toolchain, "host_python", lambda version, cache=None: sys.executable)
    built = []
    monkeypatch.setattr(cpython, "build_host", lambda version, cache, log: built.append(version) or "built")
    mine = ".".join(map(str, sys.version_info[:3]))
    monkeypatch.setitem(cpython.SOURCES, "3.99", cpython.Source("http://x/python3.99_" + mine + ".orig.tar.xz",
                                                                  "0" * 64, "this interpreter's version"))
    assert cpython.build_interpreter("3.99", tmp_path, tmp_path / "log") == sys.executable
    monkeypatch.setitem(cpython.SOURCES, "3.99", cpython.Source("http://x/python3.99_3.99.0.orig.tar.xz",
                                                                  "0" * 64, "another patch release"))
    assert cpython.build_interpreter("3.99", tmp_path, tmp_path / "log") == "built" and built == ["3.99"]


def test_musl_is_detected_from_a_header_zigs_clang_does_not_replace(tmp_path):
    import cpython

    (tmp_path / "Misc").mkdir()
    probe = tmp_path / "Misc" / "platform_triplet.c"
    probe.write_text("# else\n// Heuristic to detect musl libc\n"
                     "#  include <stdarg.h>\n#  ifdef __DEFINED_va_list\n#   define LIBC musl\n")
    cpython.detect_musl_by_its_own_header(tmp_path)
    assert "#  include <stdio.h>\n#  ifdef __DEFINED_va_list" in probe.read_text()
    probe.write_text("#  ifdef __MUSL__\n")  # a heuristic this build does not know
    with pytest.raises(RuntimeError, match="musl heuristic"):
        cpython.detect_musl_by_its_own_header(tmp_path)
    cpython.detect_musl_by_its_own_header(tmp_path / "3.12-tree")  # no probe file: nothing to do


@pytest.mark.parametrize("found, ok", [(".cpython-313-x86_64-linux-musl.so", True),
                                       (".cpython-313.so", False),
                                       (".cpython-313-x86_64-linux-gnu.so", False)])
def test_a_built_interpreter_must_have_the_targets_extension_suffix(tmp_path, found, ok):
    import cpython

    target = targets.Target("3.13", "musllinux", "x86_64")
    library = tmp_path / "opt" / "python3.13" / "lib" / "python3.13"
    library.mkdir(parents=True)
    (library / "_sysconfigdata__linux_x.py").write_text(
        f"build_time_vars = {{'EXT_SUFFIX': {found!r}, 'SOABI': 'cpython-313'}}\n")
    if ok:
        cpython.check_ext_suffix(target, tmp_path)
    else:
        with pytest.raises(RuntimeError, match="extension suffix"):
            cpython.check_ext_suffix(target, tmp_path)


def test_arm64_test_roots_hold_libstdcxx_which_manylinux_wheels_may_link():
    import toolchain

    assert "libstdc++6" in toolchain.root_packages("forky", "3.14", "arm64")
    assert toolchain.root_packages("forky", "3.14", "arm64")[:2] == ["libpython3.14-dev", "python3.14-venv"]
    assert "libstdc++6" not in toolchain.root_packages("bookworm", "3.11", "amd64")  # headers only: tests run on the host


def test_aarch64_wheels_are_tested_on_the_oldest_board_core():
    import testing

    runner, env = testing.emulation(True)
    assert runner == [testing.QEMU, "-cpu", "cortex-a53"] and env == {"QEMU_CPU": "cortex-a53"}
    assert testing.emulation(False) == ([], {})
