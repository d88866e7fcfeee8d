"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _shared_dir() -> Path:
    return Path(os.environ.get("RKNNLITE_SHARED", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def vendor_fixtures() -> Path:
    """``shared/fixtures/rknn-toolkit2``: real Rockchip files, their ONNX sources and outputs."""
    path = _shared_dir() / "fixtures" / "rknn-toolkit2"
    if not path.is_dir():
        pytest.skip(f"vendor fixtures not found at {path} (set RKNNLITE_SHARED)")
    return path


@pytest.fixture(scope="session")
def vendor_rknn_files(vendor_fixtures) -> list:
    """Every real Rockchip ``.rknn`` file among the fixtures."""
    return sorted((vendor_fixtures / "rknn").glob("*.rknn"))
