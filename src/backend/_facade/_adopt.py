"""``DeviceMesh.from_group``: the view of meshes over groups the caller already has."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from layout import show
from mesh import MeshView

from .._core import BackendConfigError

__all__ = ["check_groups", "from_group_view", "group_ranks"]


def group_ranks(group: Any) -> list[int]:
    """The global ranks of a group in its own rank order (a FakeGroup or a torch group)."""
    ranks = getattr(group, "ranks", None)
    if isinstance(ranks, tuple):
        return list(ranks)
    import torch.distributed as dist

    try:
        return list(dist.get_process_group_ranks(group))
    except Exception as e:
        raise BackendConfigError(f"from_group takes process groups, got {show(group)}: {e}"
                                 ) from None


def from_group_view(group: Any, mesh: Any, names: Sequence[str] | None
                    ) -> tuple[MeshView, list[Any]]:
    """The view ``from_group`` builds and the groups, one per dim, checked as torch does.

    One group: a 1-D view of its ranks (``mesh``, if given, must list them).  A list
    of groups: ``mesh`` and ``names`` are required and the mesh has one dim per group.
    """
    if isinstance(group, (list, tuple)):
        groups = list(group)
        if not groups:
            raise BackendConfigError("Expects at least one ProcessGroup to be passed")
        if mesh is None:
            raise BackendConfigError("Must pass mesh if passing multiple ProcessGroups")
        if names is None:
            raise BackendConfigError("Must pass mesh_dim_names if passing multiple ProcessGroups")
        ndim = MeshView.from_ranks(mesh).ndim  # checked before the names, as torch does
        if ndim != len(groups):
            raise BackendConfigError(
                f"Expects mesh with ndim equal to number of ProcessGroups but got mesh "
                f"{_listed(mesh)} and {len(groups)} ProcessGroups")
        return MeshView.from_ranks(mesh, names), groups
    ranks = group_ranks(group)
    if mesh is not None and _listed(mesh) != ranks:
        raise BackendConfigError(f"Invalid mesh {_listed(mesh)} for ProcessGroup with ranks "
                                 f"{ranks}")
    return MeshView.from_ranks(ranks, names), [group]


def check_groups(view: MeshView, rank: int, groups: list[Any]) -> None:
    """Each group must hold ``rank``'s group along its dim (in any order, as torch sorts)."""
    for k, g in enumerate(groups):
        mine = view.group(rank, k)
        if sorted(group_ranks(g)) != sorted(mine):
            raise BackendConfigError(
                f"group {k} of from_group holds ranks {group_ranks(g)}, but rank {rank}'s "
                f"group along dim {view.names[k]!r} of the mesh is {list(mine)}")


def _listed(mesh: Any) -> Any:
    return mesh.tolist() if hasattr(mesh, "tolist") else mesh
