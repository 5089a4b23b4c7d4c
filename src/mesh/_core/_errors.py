"""The error hierarchy of mesh views.

Every error is a :class:`MeshError` and also the matching built-in exception, so
callers catching ``KeyError``, ``ValueError`` or ``TypeError`` keep working.
Messages name the bad value and the valid choices.  Each class says what raises it.
"""

from __future__ import annotations

__all__ = [
    "MeshError",
    "MeshTypeError",
    "UnknownDimError",
    "UnknownViewError",
    "InvalidDimsError",
    "DuplicateNameError",
    "InvalidNameError",
    "InvalidSizeError",
    "InvalidRanksError",
    "OffsetOutOfRangeError",
    "RankNotInMeshError",
    "InvalidMeshDataError",
    "UniverseMismatchError",
    "OverlapError",
    "NotRepresentableError",
    "TooManyRanksError",
    "TopologyError",
    "RecoveryError",
    "SurvivalError",
    "ShardingError",
    "FlightRecordError",
    "NumpyMissingError",
]


class MeshError(Exception):
    """Base class of every error raised by :mod:`mesh`."""


class MeshTypeError(MeshError, TypeError):
    """An argument has the wrong type.

    Raised for a bool or float where an int is needed, a non-string dim, a key
    that is neither a dim nor a sequence of dims, and an *unordered* collection
    (a set, a dict, a str or bytes taken as a sequence) where the order of
    names, dims, sizes or ranks matters: two processes iterating a set can see
    different orders and build different meshes.
    """


class UnknownDimError(MeshError, KeyError, IndexError):
    """A dim name the view does not have, or a dim index out of range."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class UnknownViewError(UnknownDimError):
    """A view name a :class:`~mesh.Blast` (``blast[name]``, ``is_broken``) or a
    :class:`~mesh.Survival` (``is_intact``, ``intact_groups``, ``new_groups``,
    ``group_counts``) does not hold.  A ``KeyError``; also an :class:`UnknownDimError`,
    what these raised before, so code catching that keeps working."""


class InvalidDimsError(MeshError, ValueError, RuntimeError):
    """A list of dims that does not fit: none where at least one is needed (an empty
    selection, flatten or concatenation), a transpose that leaves dims out, or a number
    of names that differs from the number of dims.  Also a ``RuntimeError``, what torch's
    DeviceMesh raises for a names/shape length mismatch."""


class DuplicateNameError(MeshError, ValueError, RuntimeError):
    """A dim name (or dim) is used twice: in names, a selection, a flatten, a rename
    or a concatenation.  Also a ``RuntimeError``, what torch's DeviceMesh raises for
    repeated names and overlapping slices."""


class InvalidNameError(MeshError, ValueError):
    """A dim name is empty or not a string."""


class InvalidSizeError(MeshError, ValueError):
    """A size is not positive, or sizes do not multiply to what they must
    (``unflatten``), or a mesh has no dims."""


class InvalidRanksError(MeshError, ValueError):
    """An explicit rank tensor or rank map is ragged, empty, or has negative,
    non-int or duplicate ranks."""


class OffsetOutOfRangeError(MeshError, IndexError):
    """A :class:`~mesh.RankMap` accessor was given an offset outside ``[0, size)``."""


class RankNotInMeshError(MeshError, ValueError, LookupError):
    """A per-rank query names a rank outside the view's universe."""


class InvalidMeshDataError(MeshError, ValueError):
    """``MeshView.from_dict`` / ``RankMap.from_dict`` got data that is not a serialized
    value of this format version: unknown or missing keys, wrong types, inconsistent
    fields, an unknown version, or nesting past the limit."""


class UniverseMismatchError(MeshError, ValueError):
    """Views over different rank maps (universes) were combined."""


class OverlapError(MeshError, ValueError, RuntimeError):
    """A view's dims would reach a rank twice or could not tile the universe
    (constructing a view, ``concatenate``).  Also a ``RuntimeError``, what torch's
    ``DeviceMesh._concatenate`` raises for overlapping meshes."""


class NotRepresentableError(MeshError, ValueError):
    """The requested dims cannot be written as layouts over the universe.

    Happens when unflattening a non-contiguous (flattened) dim into sizes that
    cut across its pieces, e.g. a dim made of pieces 2 and 3 split as (3, 2).
    """


class TooManyRanksError(MeshError, ValueError):
    """A materialization (``groups``, ``instances``, ``instance``, ``group``,
    a facade's ``.mesh``) would list more ranks than its ``limit``
    argument allows (default :data:`mesh.MAX_LISTED_RANKS`), or more than a query that
    takes no ``limit`` lists.

    The message is :attr:`fact` (what would be listed, and the bound), then :attr:`hint`
    (what a Python caller can do, such as passing a larger ``limit=``; empty when nothing),
    so a command whose users cannot pass ``limit=`` words its own hint."""

    def __init__(self, fact: str = "", hint: str = "", *more: object) -> None:
        super().__init__(f"{fact}; {hint}" if hint else fact, *more)  # any args, as any error
        self.fact, self.hint = fact, hint

    def __reduce__(self) -> tuple[type[TooManyRanksError], tuple[str, str]]:
        return (type(self), (self.fact, self.hint))


class TopologyError(MeshError, ValueError):
    """A :class:`~mesh.Topology` that does not fit: a world that is not a whole number
    of hosts, an empty or too long host list, or a view reaching ranks the topology
    does not place on a host."""


class SurvivalError(MeshError, ValueError):
    """A way to continue after failed ranks is impossible, and the message says why:
    ``drop`` along a dim whose every slice holds a failed rank (the dims where it would
    work are named), ``drop`` of a view with several instances, ``substitute`` with too
    few, duplicate or already present spare ranks, or ``survive``'s plan failing on (or
    not fitting) the surviving world."""


class RecoveryError(MeshError, ValueError):
    """A recovery that cannot be planned (:func:`~mesh.recover`), and the message names the
    value: a cost that is negative, not finite or not a number (:class:`~mesh.Costs`), a
    state tensor whose sharding is over none of the plan's views, an element every holder
    of which failed with no checkpoint to read it from, a spare off the topology or on a
    host of another size than the failed ranks'."""


class ShardingError(MeshError, ValueError):
    """A tensor's placement over a view that does not fit, or a reshard that cannot be
    planned: placements that are not one per dim of the view, a placement naming a tensor
    dim the shape lacks, a negative or oversized tensor size, a ``Partial`` destination,
    two shardings of different shapes, or a plan over more tiles than its guard allows."""


class FlightRecordError(MeshError, ValueError):
    """Flight-recorder dumps that cannot be read as one job's: a file that is not a dump
    (truncated, foreign, too large, pickled objects other than builtin containers and
    scalars), a dump format this release does not know, two dumps of one rank, dumps of
    different torch versions or jobs, or a plan none of whose groups the dumps use."""


class NumpyMissingError(MeshError, ModuleNotFoundError):
    """An operation on array values (``Sharding.local``, ``Reshard.apply``,
    ``RankMap.array``, ``MeshView.instance_array``) without NumPy installed: the message
    names meshlayout's ``numpy`` extra.  A ``ModuleNotFoundError`` (``name == "numpy"``), so
    ``except ImportError`` catches it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.name = "numpy"
