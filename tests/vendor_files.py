"""Doctored copies of vendor ``.rknn`` files, for the tests that check a lowering refuses by name
what it does not know."""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def doctored_copy(source: Path, tmp_path: Path, patch: Callable[[bytearray], None]) -> str:
    """The path of a copy of ``source`` in ``tmp_path`` whose bytes ``patch`` changed in place."""
    data = bytearray(Path(source).read_bytes())
    patch(data)
    path = Path(tmp_path) / f"doctored_{Path(source).stem}.rknn"
    path.write_bytes(bytes(data))
    return str(path)
