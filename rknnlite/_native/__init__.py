"""Compiled extension modules (built from ``cython/``)."""
