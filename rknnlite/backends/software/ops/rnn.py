"""Kernels: see the package docstring for the calling convention."""

from __future__ import annotations
