"""Concatenation of views of one universe."""

from __future__ import annotations

from collections.abc import Iterable

from layout import make_layout

from ._errors import MeshTypeError, UniverseMismatchError
from ._view import MeshView

__all__ = ["concatenate"]


def concatenate(views: Iterable[MeshView]) -> MeshView:
    """Join the dims of several views of one universe into one view.

    The result must still be injective and tile the universe (else
    :class:`~mesh.OverlapError`); names must stay unique.

    >>> from mesh import MeshView, concatenate
    >>> mesh = MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp"))
    >>> concatenate([mesh["dp"], mesh["tp"]]).group(5, "tp")
    (4, 5)
    """
    vs = list(views)
    if not vs:
        raise MeshTypeError("concatenate needs at least one view, got none")
    for v in vs:
        if not isinstance(v, MeshView):
            raise MeshTypeError(f"concatenate takes MeshViews, got {v!r}")
    first = vs[0].ranks
    for v in vs[1:]:
        if v.ranks != first:
            raise UniverseMismatchError(
                f"cannot concatenate views of different universes: {v!r} is over {v.ranks!r} "
                f"but {vs[0]!r} is over {first!r}"
            )
    modes = [m for v in vs for m in v.layout]
    names = [n for v in vs for n in v.names]
    return MeshView(make_layout(*modes), tuple(names), first)
