"""Which group of the plan each of torch's process groups in the dumps is.

Gloo's dumps hold no group's members (their ``pg_config`` is empty), so a group is found
from what the dumps do hold: its ``group_desc`` and the ranks that recorded calls on it.  The
facade names its groups ``mesh_<dim>`` (:func:`mesh._core.group_desc`): such a group is the
plan's group along that dim that holds the ranks seen on it, or none (a plan without that
dim, or whose group there lacks a rank seen, is not the job's plan).  Any other group (torch's
default group, a group made by hand) is the plan's group whose members are the ranks seen
(or, when some members never recorded a call, the smallest group holding them all).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from .._core import GROUP_DESC_PREFIX, MeshView, RankStyle, ranks_text

__all__ = ["WORLD", "PlanGroup", "place_group", "rank_words"]

WORLD = "world"  # the view name and dim of torch's default group


@attrs.frozen
class PlanGroup:
    """One group of the plan: the ``view`` and ``dim`` it lies along, its ``members`` in
    mesh order, its ``coordinate`` (the group's place on the view's other dims) and
    ``by`` (how it was found: ``"desc"``, ``"members"`` or ``"world"``)."""

    view: str
    dim: str
    members: tuple[int, ...]
    coordinate: tuple[tuple[str, int], ...]
    by: str

    def describe(self) -> str:
        """``the 'tp' group (0, 1, 2, 3)``: check_spmd's words for a group."""
        if self.view == WORLD:
            return f"the world group ({len(self.members)} ranks)"
        return f"the {self.dim!r} group {ranks_text(self.members, RankStyle.GROUP)}"

    def where(self) -> str:
        """``view dense, dp=0``: where the group lies in the plan."""
        coord = ", ".join(f"{n}={c}" for n, c in self.coordinate)
        return f"view {self.view}" + (f", {coord}" if coord else "")


def place_group(desc: str, name: str, seen: Iterable[int], views: Mapping[str, MeshView],
                world: int, listed: Sequence[int] | None = None) -> PlanGroup | None:
    """The plan's group that torch's group ``name`` (``desc`` its group_desc) is, from the
    ranks ``seen`` on it and the members its dumps ``listed`` (NCCL's do, Gloo's do not);
    None when the plan has no such group."""
    ranks = set(seen) | set(listed or ())
    if name == "0" or desc == "default_pg":
        return PlanGroup(WORLD, WORLD, tuple(range(world)), (), WORLD)
    first = min(ranks)
    if desc.startswith(GROUP_DESC_PREFIX):
        dim = desc[len(GROUP_DESC_PREFIX):]
        for vname, view in views.items():
            if dim in view.names and _holds(view, first):
                members = view.group(first, dim)
                if ranks <= set(members) and (listed is None or set(listed) == set(members)):
                    return _made(vname, view, dim, members, "desc")
        return None  # the facade named its dim: no other group of the plan can be it
    found = _by_members(ranks, first, views)
    if found is not None and listed is not None and set(found.members) != set(listed):
        return None  # the dumps list members no group of the plan has
    return found


def _by_members(ranks: set[int], first: int, views: Mapping[str, MeshView]) -> PlanGroup | None:
    """The group whose members are ``ranks``, else the smallest holding them."""
    best: tuple[int, PlanGroup] | None = None
    for vname, view in views.items():
        if not _holds(view, first):
            continue
        for dim in view.names:
            members = view.group(first, dim)
            if ranks <= set(members) and (best is None or len(members) < best[0]):
                best = (len(members), _made(vname, view, dim, members, "members"))
    return None if best is None else best[1]


def _holds(view: MeshView, rank: int) -> bool:
    return view.ranks.offset_of(rank) is not None


def _made(vname: str, view: MeshView, dim: str, members: Sequence[int], by: str) -> PlanGroup:
    coordinate = view.coordinate(members[0])
    others = tuple((n, c) for n, c in zip(view.names, coordinate or ()) if n != dim)
    return PlanGroup(vname, dim, tuple(members), others, by)


def rank_words(rank: int, views: Mapping[str, MeshView], group: PlanGroup,
               host: str | None) -> str:
    """``rank 1 (dp=0, tp=1; host node001)``: a rank by its coordinate in its group's view
    and its host."""
    view = views.get(group.view)
    coordinate = view.coordinate(rank) if view is not None and _holds(view, rank) else None
    parts = ", ".join(f"{n}={c}" for n, c in zip(view.names, coordinate)) \
        if view is not None and coordinate is not None else ""
    where = "; ".join(p for p in (parts, f"host {host}" if host is not None else "") if p)
    return f"rank {rank}" + (f" ({where})" if where else "")
