"""How a loss re-forms the groups it broke, on one rank: :class:`Onward` (the mesh the
survivors go on with, what ``retire`` needs to know which broken groups to re-form in place)
and :class:`Reformed` (what became of one broken group, and why, in words).

A broken group is re-formed in place only when its survivors, in its own order, are this
rank's group along a dim of the onward mesh with the same options (a dim shrunk by dropping
a member keeps the others' order, so a group's rank stays its mesh coordinate); every other
broken group is ended and a later request creates its successor anew.
"""

from __future__ import annotations

import enum

import attrs

from layout import show
from mesh import MeshView

from ._errors import BackendConfigError
from ._options import GroupOptions, as_options

__all__ = ["How", "Onward", "Reformed"]


class How(enum.Enum):
    """What became of a group a loss broke."""

    RECONFIGURED = "reconfigured"
    """Re-formed in place among its survivors, in its order (Gloo's ``_reconfigure``)."""
    SHRUNK = "shrunk"
    """Replaced by a group shrunk to its survivors, in its order (NCCL's ``shrink_group``)."""
    ENDED = "ended"
    """Ended; the onward mesh's group, if it asks for one, is created anew."""


@attrs.frozen
class Reformed:
    """One group this rank held that a loss broke: the dim that first asked for it, its
    members ``before`` (in group order), its survivors ``after`` (in the same order), ``how``
    it goes on, and ``why`` it was not reconfigured in place (empty when it was).

    >>> r = Reformed("dp", (0, 2, 4), (0, 4), How.RECONFIGURED, "")
    >>> r.how.value, r.after
    ('reconfigured', (0, 4))
    """

    dim: str
    before: tuple[int, ...]
    after: tuple[int, ...]
    how: How
    why: str

    def to_dict(self) -> dict[str, object]:
        """Plain, JSON-able data."""
        return {"dim": self.dim, "before": list(self.before), "after": list(self.after),
                "how": self.how.value, "why": self.why}


def _options(value: object) -> tuple[GroupOptions, ...]:
    if not isinstance(value, (tuple, list)):
        raise BackendConfigError(f"Onward.options must be a sequence of group options, one "
                                 f"per dim, got {show(value)}")
    return tuple(as_options(o) for o in value)


@attrs.frozen
class Onward:
    """The mesh a loss's survivors go on with: its ``view`` and each dim's ``options`` (in
    dim order), as :meth:`backend.DeviceMesh.rebind` binds it.

    >>> from mesh import MeshView
    >>> on = Onward(MeshView.from_shape((2, 2), ("dp", "tp")), (GroupOptions(),) * 2)
    >>> on.groups(3, GroupOptions())
    ((1, 3), (2, 3))
    >>> on.groups(7, GroupOptions())
    ()
    """

    view: MeshView
    options: tuple[GroupOptions, ...] = attrs.field(converter=_options)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.view, MeshView):
            raise BackendConfigError(f"Onward.view must be a mesh.MeshView, got "
                                     f"{show(self.view)}")
        if len(self.options) != self.view.ndim:
            raise BackendConfigError(f"Onward: {len(self.options)} options for the "
                                     f"{self.view.ndim} dims of {self.view!r}")

    def groups(self, rank: int, options: GroupOptions) -> tuple[tuple[int, ...], ...]:
        """``rank``'s groups (members in group order) along the dims whose options are
        ``options``; none when ``rank`` is not in the view.  O(ndim + group sizes)."""
        if self.view.ranks.offset_of(rank) is None:
            return ()
        return tuple(self.view.group(rank, k) for k, o in enumerate(self.options)
                     if o == options)
