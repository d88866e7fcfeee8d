"""Loaders that bring models of other frameworks into the toolkit's graph IR.

Each module turns one framework's model into an
:class:`~rknnlite.toolkit.onnx_import.ImportedModel`, so quantization, dynamic shapes,
batching, custom ops and export work on it unchanged.  The framework packages they need are
imported lazily; a missing one is reported by the ``RKNN.load_*`` method that called it.
"""
