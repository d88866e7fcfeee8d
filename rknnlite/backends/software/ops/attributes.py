"""Attribute checks shared by the spatial kernels (conv, pooling)."""

from __future__ import annotations

from ....errors import ModelInvalidError

__all__ = ["int_list"]


def int_list(attrs, name, op, length, default, minimum):
    """Attribute ``name`` as a list of ``length`` ints >= ``minimum`` (no bound when None),
    or ``[default] * length`` when absent; ``ModelInvalidError`` naming ``op`` otherwise."""
    value = attrs.get(name)
    if value is None:
        return [default] * length
    try:
        value = [int(v) for v in value]
    except (TypeError, ValueError):
        raise ModelInvalidError(f"attribute {name} must be a list of ints, got {value!r}", op=op) from None
    if len(value) != length:
        raise ModelInvalidError(f"attribute {name} must have {length} values (one per spatial axis"
                                f"{', begin then end' if name == 'pads' else ''}), got {value}", op=op)
    if minimum is not None and any(v < minimum for v in value):
        raise ModelInvalidError(f"attribute {name} values must be >= {minimum}, got {value}", op=op)
    return value
