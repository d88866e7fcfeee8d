"""Turning a model argument (path, bytes, buffer) into one read-only memoryview.

A path is memory-mapped, never read into the heap; ``bytes``, ``bytearray`` and
``memoryview`` are used as they are, without a copy.
"""

from __future__ import annotations

import mmap
import os
from typing import Union

from ..errors import ModelInvalidError

__all__ = ["ModelSource", "open_source"]

ModelArg = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


class ModelSource:
    """A model's bytes as a read-only ``memoryview`` plus where they came from.

    Attributes:
        view: the whole file or buffer (1-D, ``uint8``), never copied.
        path: the file path, or ``None`` for an in-memory buffer.
    """

    __slots__ = ("view", "path", "_mmap")

    def __init__(self, view: memoryview, path: str | None = None, mapping: mmap.mmap | None = None):
        self.view = view
        self.path = path
        # The mapping stays open as long as any view of it (numpy weights included) lives.
        self._mmap = mapping

    def __len__(self) -> int:
        return len(self.view)

    def release_pages(self) -> None:
        """Let the kernel drop the file's pages from this process's resident memory.

        Called once the file is verified: pages that are used later (weights read in
        place) fault back in from the page cache, so resident memory reflects what the
        model really uses.  No effect for in-memory buffers or where madvise is missing.
        """
        if self._mmap is not None and hasattr(mmap, "MADV_DONTNEED"):
            try:
                self._mmap.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):
                pass

    def release_array(self, arr) -> None:
        """Drop the file pages under ``arr`` (a view of this mapped file) from resident
        memory, as :meth:`release_pages` does for the whole file; whole pages only.
        No effect for arrays that are not views of the mapping."""
        if self._mmap is None or not hasattr(mmap, "MADV_DONTNEED") or arr.nbytes == 0:
            return
        import numpy as np

        # .ctypes.data, not __array_interface__: numpy 2.x keeps ~1 MB for good after some
        # 10,000 __array_interface__ lookups, which load/release cycles would reach
        base = np.frombuffer(self.view, np.uint8).ctypes.data
        start = arr.ctypes.data - base
        end = start + arr.nbytes
        if start < 0 or end > len(self.view):
            return
        page = mmap.PAGESIZE
        first, last = -(-start // page) * page, end // page * page
        if last > first:
            try:
                self._mmap.madvise(mmap.MADV_DONTNEED, first, last - first)
            except (OSError, ValueError):
                pass

    @property
    def label(self) -> str:
        """How to name this model in a message: its path, or ``<buffer of N bytes>``."""
        return self.path if self.path is not None else f"<buffer of {len(self.view)} bytes>"


def open_source(model: ModelArg) -> ModelSource:
    """Open ``model`` without copying it.

    Raises:
        ModelInvalidError: the path does not exist, is not a regular file, or is empty.
        TypeError: ``model`` is neither a path nor a bytes-like object.
    """
    if isinstance(model, ModelSource):
        return model
    if isinstance(model, (str, os.PathLike)):
        return _map_file(os.fspath(model))
    if isinstance(model, (bytes, bytearray, memoryview)):
        view = memoryview(model)
        if view.ndim != 1 or view.itemsize != 1 or not view.c_contiguous:
            view = view.cast("B") if view.c_contiguous else memoryview(view.tobytes())
        return ModelSource(view.toreadonly())
    raise TypeError(
        f"model must be a path (str or os.PathLike) or bytes-like object, not {type(model).__name__}"
    )


def _map_file(path: str) -> ModelSource:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise ModelInvalidError(f"{path}: the file is empty", op="load")
            mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise ModelInvalidError(f"model file not found: {path}", op="load") from None
    except IsADirectoryError:
        raise ModelInvalidError(f"{path} is a directory, not a model file", op="load") from None
    except (PermissionError, ValueError, OSError) as e:
        if isinstance(e, ModelInvalidError):
            raise
        raise ModelInvalidError(f"cannot map {path}: {e}", op="load") from None
    return ModelSource(memoryview(mapping).toreadonly(), path, mapping)
