"""The error hierarchy of the layout algebra.

Every error raised by :mod:`layout` is a :class:`LayoutError`, which is a
``ValueError``; the subclasses say which precondition failed.  Each message
names the violated condition and the offending values.
"""

from __future__ import annotations

__all__ = [
    "LayoutError",
    "InvalidLayoutError",
    "LayoutTypeError",
    "LayoutIndexError",
    "CompositionError",
    "ComplementError",
    "InverseError",
    "UndecidableError",
]


class LayoutError(ValueError):
    """Base class of every error raised by the layout algebra."""


class InvalidLayoutError(LayoutError):
    """A shape/stride pair (or another argument) is not a valid value.

    Raised for incongruent shape and stride, sizes below 1, negative strides,
    nested empty tuples, or a by-mode tuple longer than the layout it applies to.
    """


class LayoutTypeError(LayoutError, TypeError):
    """An argument has the wrong type (a bool, a float, a list, a string ...)."""


class LayoutIndexError(LayoutError, IndexError):
    """An index or coordinate lies outside a layout's domain."""


class CompositionError(LayoutError):
    """``composition(A, B)`` is inadmissible: no layout equals ``A ∘ B``.

    Raised when B reaches past A's domain, when B's strides or sizes do not
    divide A's modes, or when B's modes would carry across A's modes.
    """


class ComplementError(LayoutError):
    """``complement(A, M)`` is inadmissible: A is not injective and tractable, or M < 1."""


class InverseError(LayoutError):
    """``left_inverse(L)`` is inadmissible: L is not injective and tractable."""


class UndecidableError(LayoutError):
    """A predicate cannot be decided within the library's resource bound.

    Only :func:`layout.is_injective` raises it, for a non-tractable layout whose
    codomain is too large to enumerate.
    """
