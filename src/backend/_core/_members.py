"""This rank's group in a family: its members, and whether it holds any of some ranks (lost).

A family (:class:`mesh.Family`) is a one-dim view's groups; this rank's group in it is the
one at its group offset.  A lost rank is in that group exactly when it is in the family's
universe at the same group offset: O(ndim) per lost rank, never listing the group; or,
when the group is the smaller of the two, each member is looked up among the lost ranks:
O(min(group size, lost ranks)) either way.
"""

from __future__ import annotations

from collections.abc import Collection

from layout import make_layout
from mesh import Family, MeshView

__all__ = ["family_view", "holds_any", "members"]


def family_view(family: Family) -> MeshView:
    """The one-dim view whose groups are ``family``'s."""
    return MeshView(make_layout(family.layout), ("group",), family.ranks)


def holds_any(family: Family, rank: int, lost: Collection[int]) -> bool:
    """Whether ``rank``'s group in ``family`` holds any rank of ``lost``: O(min(group
    size, len(lost))) look-ups (a set or frozenset ``lost`` is looked up as it is)."""
    if not lost:
        return False
    view = family_view(family)
    if family.group_size <= len(lost):  # the group is the shorter list: look its members up
        gone = lost if isinstance(lost, (set, frozenset)) else frozenset(lost)
        return any(r in gone for r in view.group(rank, 0, limit=family.group_size))
    mine = view.group_offset(rank, 0)
    return any(family.ranks.offset_of(r) is not None and view.group_offset(r, 0) == mine
               for r in lost)


def members(family: Family, rank: int) -> tuple[int, ...]:
    """``rank``'s group in ``family``, in group order."""
    return family_view(family).group(rank, 0, limit=family.ranks.size)
