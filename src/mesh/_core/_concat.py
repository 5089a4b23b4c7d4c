"""Concatenation of views of one universe."""

from __future__ import annotations

from layout import make_layout

from ._errors import InvalidDimsError, MeshTypeError, UniverseMismatchError
from ._input import ordered, show
from ._view import MeshView

__all__ = ["concatenate"]


def concatenate(views: object) -> MeshView:
    """Join the dims of several views of one universe into one view.

    ``views`` is an ordered sequence of views; the result's dims are theirs, in
    order.  It must still be injective and tile the universe (else
    :class:`~mesh.OverlapError`); names must stay unique.

    >>> from mesh import MeshView, concatenate
    >>> mesh = MeshView.from_shape((2, 2, 2), ("dp", "cp", "tp"))
    >>> concatenate([mesh["dp"], mesh["tp"]]).group(5, "tp")
    (4, 5)
    """
    vs = ordered(views, "concatenate's views")
    if not vs:
        raise InvalidDimsError("concatenate needs at least one view, got none")
    for v in vs:
        if not isinstance(v, MeshView):
            raise MeshTypeError(f"concatenate takes MeshViews, got {show(v)}")
    first = vs[0].ranks
    for v in vs[1:]:
        if v.ranks != first:
            raise UniverseMismatchError(
                f"cannot concatenate views of different universes: {v!r} is over {v.ranks!r} "
                f"but {vs[0]!r} is over {first!r}")
    return MeshView(make_layout(*(m for v in vs for m in v.layout)),
                    [n for v in vs for n in v.names], first)
