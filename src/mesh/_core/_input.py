"""Validation at the door: ordered sequences, ints, sizes and names, and files read whole.

Every public entry point of :mod:`mesh` converts its arguments here, so the rest
of the package sees plain ``int``, ``str`` and ``tuple`` values only.
"""

from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Iterable, Mapping, Sized
from typing import Any, cast

import layout
from layout import show, show_error

from ._errors import InvalidNameError, InvalidSizeError, MeshTypeError, TooManyRanksError

__all__ = ["MAX_PLAN_DIMS", "MAX_UNIVERSE", "UNORDERED", "as_int", "as_name", "as_names",
           "as_size", "check_plan_dims", "items_of", "ordered", "read_bounded", "show"]

MAX_UNIVERSE = 1 << 63
"""The most ranks a universe may have, and the bound on every rank: ranks fit int64, as in
torch, so every listing is int64 arithmetic and every serialized value is plain JSON."""

MAX_PLAN_DIMS = 256
"""The most dims a plan (named views: :func:`~mesh.explain`, :func:`~mesh.compare`,
:func:`~mesh.blast`, :func:`~mesh.survive`) holds in all its views, so also the most views.
A mapping of views is read up to one entry more than this (a never-ending one is refused,
not followed), and a plan over the limit is refused before any work: an explanation lists,
for every dim, the dims that share its communicators, which grows with the square of the
plan's dims."""

UNORDERED = (set, frozenset, dict, str, bytes, bytearray)
"""Collections whose order is not part of the value (or that are no sequence of items):
refused where an order matters."""


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


def ordered(value: object, what: str, limit: int = 1 << 24) -> tuple[Any, ...]:
    """``value`` as a tuple if it is an ordered sequence: a list, a tuple, a range, or a
    1-D array (anything with ``tolist`` and ``ndim == 1``, such as NumPy arrays and torch
    tensors).  Sets, dicts, strings, bytes and other iterables are refused with
    :class:`~mesh.MeshTypeError`: their order is not part of the value (a set's differs
    between processes), so two ranks running the same code could build different meshes.
    A sequence longer than ``limit`` is refused before it is copied
    (:class:`~mesh.TooManyRanksError`).

    >>> ordered([2, 4], "mesh_shape")
    (2, 4)
    """
    if type(what) is not str:
        raise MeshTypeError(f"what must be a str naming the value, got {show(what)}")
    if type(limit) is not int or limit < 0:
        raise MeshTypeError(f"limit must be an int >= 0, got {show(limit)}")
    if isinstance(value, (list, tuple, range)) or (
            not isinstance(value, (UNORDERED, type)) and hasattr(value, "tolist")
            and getattr(value, "ndim", None) == 1):
        try:
            n = len(cast(Sized, value))  # a list, tuple, range or 1-D array
        except Exception:  # a hostile __len__, or a range past sys.maxsize
            raise MeshTypeError(f"{what} must be a sequence with a length, got "
                                f"{show(value)}") from None
        if n > limit:
            raise TooManyRanksError(f"{what} has {n:,} items, more than the {limit:,} that may "
                                    "be listed")
        try:
            items = value if isinstance(value, (list, tuple, range)) else value.tolist()
            return tuple(items)
        except Exception:  # a hostile __iter__
            raise MeshTypeError(f"{what} could not be read as a sequence: {show(value)}"
                                ) from None
    kind = type(value).__name__
    why = " (unordered: its order can differ between processes)" \
        if isinstance(value, (set, frozenset, dict)) else ""
    raise MeshTypeError(f"{what} must be an ordered sequence (a list or a tuple), got "
                        f"{show(value)} of type {kind}{why}")


def items_of(value: object, what: str, expected: str, *, limit: int | None = None
             ) -> list[tuple[Any, Any]]:
    """The (key, value) pairs of a mapping, read once; anything else, or a mapping that
    fails to be read (a hostile ``__iter__`` or ``__len__``, items that are no pairs), is
    refused with :class:`~mesh.MeshTypeError` saying what was ``expected``.  With ``limit``,
    at most ``limit + 1`` pairs are read, and a mapping with more is refused with
    :class:`~mesh.InvalidSizeError` (a never-ending mapping ends there)."""
    if not isinstance(value, Mapping):
        raise MeshTypeError(f"{what} must be {expected}, got {show(value)}")
    try:
        items = list(itertools.islice(value.items(), None if limit is None else limit + 1))
        pairs = [(k, v) for k, v in items]
    except Exception as e:
        raise MeshTypeError(f"{what} could not be read as a mapping ({show_error(e)}): "
                            f"{show(value)}") from None
    if limit is not None and len(pairs) > limit:
        plan = f": a plan holds at most mesh.MAX_PLAN_DIMS = {MAX_PLAN_DIMS:,} dims in all " \
            "its views" if limit == MAX_PLAN_DIMS else ""
        raise InvalidSizeError(f"{what} has more than {limit:,} entries (it was not read "
                               f"further){plan}")
    return pairs


def check_plan_dims(ndims: Iterable[int], what: str) -> None:
    """Refuse a plan whose views (``ndims``: each one's ``ndim``) hold more than
    :data:`MAX_PLAN_DIMS` dims in all (:class:`~mesh.InvalidSizeError`)."""
    total = sum(ndims)
    if total > MAX_PLAN_DIMS:
        raise InvalidSizeError(f"{what}: {total:,} dims in all views, more than the "
                               f"{MAX_PLAN_DIMS:,} a plan may hold (mesh.MAX_PLAN_DIMS)")


def as_name(value: object, what: str = "a dim name") -> str:
    """A non-empty ``str``, else :class:`~mesh.InvalidNameError` naming the value."""
    if not isinstance(value, str) or not str.__len__(value):
        raise InvalidNameError(f"{what} must be a non-empty string, got {show(value)}")
    return str.__str__(value)  # a plain str, also for str subclasses (whatever their __str__)


def as_names(value: object, what: str = "names") -> tuple[str, ...]:
    """An ordered sequence of non-empty strings (uniqueness is the view's to check)."""
    return tuple([as_name(n, f"every one of {what}") for n in ordered(value, what)])


_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
            (stat.S_ISDIR, "a directory"))


def read_bounded(path: str, what: str, most: int, error: type[Exception],
                 hint: str = "") -> bytes:
    """The bytes of the file at ``path`` (``what`` names it in messages): at most ``most``
    (a larger file is refused from its size, unread), else ``error`` (the caller's refusal:
    a plan file's, a dump's).  Only a regular file is opened: a FIFO, a socket or a device is
    refused before opening (opening a FIFO without a writer waits forever; a device may
    never end).

    >>> try:
    ...     read_bounded("/dev/null", "the dump", 10, ValueError)
    ... except ValueError as e:
    ...     print(e)
    the dump '/dev/null' is a character device, not a regular file: save what it gives to a
    file and pass that
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise error(f"cannot read {what} {path!r}: {e.strerror or e}") from None
    for test, kind in _SPECIAL:
        if test(mode):
            raise error(f"{what} {path!r} is {kind}, not a regular file: save what it gives "
                        "to a file and pass that")
    a = what.replace("the ", "a ", 1)
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            if stat.S_ISREG(info.st_mode) and info.st_size > most:
                raise error(f"{what} {path!r} has {info.st_size:,} bytes, more than the "
                            f"{most:,} {a} may have{hint}")
            source = f.read(most + 1)
    except OSError as e:
        raise error(f"cannot read {what} {path!r}: {e.strerror or e}") from None
    if len(source) > most:  # it grew while read
        raise error(f"{what} {path!r} goes on past {most:,} bytes, the most {a} may have")
    return source
