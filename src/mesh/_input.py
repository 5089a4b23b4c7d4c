"""Validation at the door: ordered sequences, ints, sizes and names.

Every public entry point of :mod:`mesh` converts its arguments here, so the rest
of the package sees plain ``int``, ``str`` and ``tuple`` values only.
"""

from __future__ import annotations

from typing import Any

import layout
from layout import show

from ._errors import InvalidNameError, InvalidSizeError, MeshTypeError

__all__ = ["as_int", "as_names", "as_size", "ordered", "show"]

_UNORDERED = (set, frozenset, dict, str, bytes, bytearray)


def as_int(value: object, what: str, expected: str = "an int", *,
           error: type[Exception] = MeshTypeError) -> int:
    """``value`` as a plain int (anything with ``__index__`` but a bool), else ``error``
    (:class:`~mesh.MeshTypeError` by default): :func:`layout.as_int` with mesh's error."""
    return layout.as_int(value, what, expected, error=error)


def as_size(value: object, what: str) -> int:
    """``value`` as a positive int, or a typed error naming it."""
    n = as_int(value, what)
    if n < 1:
        raise InvalidSizeError(f"{what} must be a positive int, got {show(n)}")
    return n


def ordered(value: object, what: str) -> tuple[Any, ...]:
    """``value`` as a tuple if it is an ordered sequence: a list, a tuple, a range, or a
    1-D array (anything with ``tolist`` and ``ndim == 1``, such as NumPy arrays and torch
    tensors).  Sets, dicts, strings, bytes and other iterables are refused with
    :class:`~mesh.MeshTypeError`: their order is not part of the value (a set's differs
    between processes), so two ranks running the same code could build different meshes.
    """
    if isinstance(value, (list, tuple, range)):
        return tuple(value)
    if not isinstance(value, _UNORDERED) and hasattr(value, "tolist") and \
            getattr(value, "ndim", None) == 1:
        items = value.tolist()
        if isinstance(items, list):
            return tuple(items)
    kind = type(value).__name__
    why = " (unordered: its order can differ between processes)" \
        if isinstance(value, (set, frozenset, dict)) else ""
    raise MeshTypeError(f"{what} must be an ordered sequence (a list or a tuple), got "
                        f"{show(value)} of type {kind}{why}")


def as_name(value: object, what: str = "a dim name") -> str:
    """A non-empty ``str``, else :class:`~mesh.InvalidNameError` naming the value."""
    if not isinstance(value, str) or not value:
        raise InvalidNameError(f"{what} must be a non-empty string, got {show(value)}")
    return value


def as_names(value: object, what: str = "names") -> tuple[str, ...]:
    """An ordered sequence of non-empty strings (uniqueness is the view's to check)."""
    return tuple([as_name(n, f"every one of {what}") for n in ordered(value, what)])
