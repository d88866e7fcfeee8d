"""Debian package roots for the wheel builds: headers and test interpreters per CPython version.

Packages come from Debian's archive through apt-get with a private configuration (its own
sources list, an empty dpkg status, its own caches), so that nothing on the host changes: no
``dpkg --add-architecture``, no host package installed. The ``.deb`` files are unpacked with
``dpkg -x`` into one root per (suite, architecture); nothing is configured or run from them on
the host.

Which suite carries which CPython is in ``packaging/wheels/targets.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


class FetchError(RuntimeError):
    """apt-get or dpkg failed; the message holds the command and its output's tail."""


def _run(cmd: list[str], log: Path) -> None:
    with log.open("a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        tail = log.read_text().splitlines()[-15:]
        raise FetchError(f"{cmd[0]} failed ({done.returncode}): " + "\n".join(tail))


def _apt_options(state: Path, arch: str) -> list[str]:
    return [
        "-o", f"Dir::Etc::SourceList={state / 'sources.list'}",
        "-o", f"Dir::Etc::SourceParts={state / 'sources.list.d'}",
        "-o", f"Dir::Etc::Preferences={state / 'preferences'}",
        "-o", f"Dir::Etc::PreferencesParts={state / 'preferences.d'}",
        "-o", f"Dir::State={state / 'lib'}",
        "-o", f"Dir::State::status={state / 'status'}",
        "-o", f"Dir::Cache={state / 'cache'}",
        "-o", f"APT::Architecture={arch}",
        "-o", f"APT::Architectures={arch}",
        "-o", "APT::Install-Recommends=false",
        "-o", "Debug::NoLocking=true",
        "-o", "Acquire::Languages=none",
    ]


def fetch_root(suite: str, arch: str, packages: list[str], cache: Path, log: Path,
               name: str | None = None) -> Path:
    """Downloads ``packages`` and their dependencies for ``suite``/``arch`` and unpacks them.

    Returns the root (``cache/roots/<name>``, by default ``<suite>-<arch>``). A root already
    unpacked with the same package list is reused: the list is recorded in
    ``<root>/.rknnlite-packages``.
    """
    cache = cache.resolve()
    root = cache / "roots" / (name or f"{suite}-{arch}")
    stamp = root / ".rknnlite-packages"
    wanted = " ".join(sorted(packages)) + "\n"
    if stamp.is_file() and stamp.read_text() == wanted:
        return root
    state = cache / "apt" / root.name  # its own: every .deb in its archive cache is unpacked
    for sub in ("sources.list.d", "preferences.d", "lib/lists/partial", "cache/archives/partial"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    (state / "sources.list").write_text(
        f"deb [signed-by={KEYRING}] {MIRROR} {suite} main\n")
    (state / "status").touch()
    (state / "preferences").touch()
    options = _apt_options(state, arch)
    _run(["apt-get", *options, "-q", "update"], log)
    _run(["apt-get", *options, "-q", "-y", "--download-only", "install", *packages], log)
    root.mkdir(parents=True, exist_ok=True)
    for deb in sorted((state / "cache" / "archives").glob("*.deb")):
        _run(["dpkg", "-x", str(deb), str(root)], log)
    stamp.write_text(wanted)
    return root
