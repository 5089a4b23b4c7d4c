"""GroupSpec: one group request described once; its cross-process identity is the family and
the options the program asked for, never a per-process setting."""

from __future__ import annotations

from datetime import timedelta

from backend import GroupOptions, GroupSpec, Plan
from backend._core._cache import group_key
from mesh import MeshView

MESH = MeshView.from_shape((2, 4), ("dp", "tp"))


def spec(view: MeshView, dim: str, rank: int, options: GroupOptions | None = None,
         **kw: object) -> GroupSpec:
    return GroupSpec.of(view, dim, options or GroupOptions(), rank=rank, world_size=8,
                        can_split=bool(kw.pop("can_split", False)), **kw)  # type: ignore[arg-type]


def test_the_cache_key_is_the_specs_key() -> None:
    for dim in ("dp", "tp"):
        k = MESH.index(dim)
        assert spec(MESH, dim, 3).key == group_key(MESH, k, GroupOptions())


def test_a_default_timeout_or_backend_of_this_process_never_enters_the_identity() -> None:
    a = spec(MESH, "tp", 5, default_timeout=timedelta(seconds=60), default_backend="gloo")
    b = spec(MESH, "tp", 5, default_timeout=timedelta(seconds=61))
    assert (a.name, a.barrier, a.key) == (b.name, b.barrier, b.key)
    assert a.timeout == timedelta(seconds=60) and b.timeout == timedelta(seconds=61)


def test_options_the_program_asks_for_are_part_of_the_identity() -> None:
    tagged = spec(MESH, "tp", 5, GroupOptions(tag="x"))
    assert tagged.name != spec(MESH, "tp", 5).name


def test_members_are_in_mesh_order_and_equal_paths_share_a_name() -> None:
    listed = MeshView.from_ranks([[3, 2, 1, 0], [7, 6, 5, 4]], ("dp", "tp"))
    s = spec(listed, "tp", 5)
    assert s.members == (7, 6, 5, 4) and s.plan is Plan.NEW_GROUP
    same = MeshView.from_ranks([[7, 6, 5, 4], [3, 2, 1, 0]], ("dp", "tp"))
    assert spec(same, "tp", 5).name == s.name  # the same groups, reached another way
    assert spec(MESH, "tp", 5).name != s.name  # (4, 5, 6, 7) is another group


def test_a_split_meets_the_world_under_the_familys_name() -> None:
    a, b = (spec(MESH, "dp", r, can_split=True) for r in (0, 5))
    assert a.plan is b.plan is Plan.SPLIT
    assert a.barrier == b.barrier and a.name != b.name  # one barrier, two groups
    assert a.barrier_size == 8 and a.barrier_members() == range(8)
    assert a.describe() == "the split of dim 'dp' over the world (8 ranks)"
    assert a.groups() == [[0, 4], [1, 5], [2, 6], [3, 7]]
