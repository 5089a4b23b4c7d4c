"""The error hierarchy of mesh views.

Every error is a :class:`MeshError` and also the matching built-in exception, so
callers catching ``KeyError`` or ``ValueError`` keep working.  Messages name the
bad value and the valid choices.
"""

from __future__ import annotations

__all__ = [
    "MeshError",
    "UnknownDimError",
    "DuplicateNameError",
    "InvalidNameError",
    "InvalidSizeError",
    "MeshTypeError",
    "InvalidMeshDataError",
    "InvalidRanksError",
    "RankNotInMeshError",
    "UniverseMismatchError",
    "OverlapError",
    "NotRepresentableError",
]


class MeshError(Exception):
    """Base class of every error raised by :mod:`mesh`."""


class UnknownDimError(MeshError, KeyError, IndexError):
    """A dim name that the view does not have, or a dim index out of range."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DuplicateNameError(MeshError, ValueError):
    """A dim name is used twice (in names, a selection, or a concatenation)."""


class InvalidNameError(MeshError, ValueError):
    """A dim name is empty or not a string."""


class InvalidSizeError(MeshError, ValueError):
    """A size is not positive, or sizes do not multiply to what they must."""


class MeshTypeError(MeshError, TypeError):
    """An argument has the wrong type (a bool or float size, a list as a key, ...)."""


class InvalidRanksError(MeshError, ValueError):
    """An explicit rank tensor is ragged, has negative, non-int or duplicate ranks."""


class InvalidMeshDataError(MeshError, ValueError):
    """``MeshView.from_dict`` got data that is not a serialized view."""


class RankNotInMeshError(MeshError, ValueError, LookupError):
    """A per-rank query names a rank outside the view's universe."""


class UniverseMismatchError(MeshError, ValueError):
    """Views over different rank maps were combined."""


class OverlapError(MeshError, ValueError):
    """Combined dims would reach a rank twice or not tile the universe."""


class NotRepresentableError(MeshError, ValueError):
    """The requested dims cannot be written as layouts over the universe.

    Happens when unflattening a non-contiguous (flattened) dim into sizes that
    cut across its pieces, e.g. a dim made of pieces 2 and 3 split as (3, 2).
    """
