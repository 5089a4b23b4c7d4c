"""GroupSpec: one group request described once; its cross-process identity is the family and
the options the program asked for, never a per-process setting."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend import (
    BackendConfigError,
    BackendError,
    GroupOptions,
    GroupSpec,
    NotAMemberError,
    Plan,
)
from backend._core._cache import group_key
from mesh import MeshError, MeshView

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


# ---- bad input: typed errors --------------------------------------------------------------
GOOD: dict[str, object] = {"view": MESH, "dim": "dp", "options": GroupOptions(), "rank": 5,
                           "world_size": 8, "can_split": False}


def _of(**changed: object) -> GroupSpec:
    kw = {**GOOD, **changed}
    view, dim, options = kw.pop("view"), kw.pop("dim"), kw.pop("options")
    return GroupSpec.of(view, dim, options, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("changed", "error", "words"), [
    ({"view": object()}, BackendConfigError, "needs a mesh.MeshView"),
    ({"view": "dp,tp"}, BackendConfigError, "got 'dp,tp'"),
    ({"options": object()}, BackendConfigError, "must be a backend.GroupOptions"),
    ({"options": None}, BackendConfigError, "GroupOptions() for the defaults"),
    ({"options": {"timeout": 5}}, BackendConfigError, "must be a backend.GroupOptions"),
    ({"world_size": "x"}, BackendConfigError, "world_size must be an int >= 1, got 'x'"),
    ({"world_size": 8.0}, BackendConfigError, "got 8.0"),
    ({"world_size": True}, BackendConfigError, "got True"),
    ({"world_size": 0}, BackendConfigError, "got 0"),
    ({"world_size": 4}, BackendConfigError, "rank must be an int in [0, 4), got 5"),
    ({"world_size": 6, "rank": 3}, BackendConfigError, "does not fit a world of 6"),
    ({"rank": "1"}, BackendConfigError, "got '1'"),
    ({"rank": -1}, BackendConfigError, "got -1"),
    ({"rank": True}, BackendConfigError, "got True"),
    ({"view": MeshView.from_ranks([[0, 2], [4, 6]], ("dp", "tp")), "rank": 5}, NotAMemberError,
     "rank 5 is not in the universe"),
    ({"can_split": "yes"}, BackendConfigError, "can_split must be a bool, got 'yes'"),
    ({"default_backend": 3}, BackendConfigError, "default_backend must be a c10d backend name"),
    ({"default_backend": ""}, BackendConfigError, "got ''"),
    ({"default_timeout": 5}, BackendConfigError, "positive datetime.timedelta or None, got 5"),
    ({"default_timeout": timedelta(0)}, BackendConfigError, "datetime.timedelta(0)"),
    ({"dim": "zz"}, MeshError, "unknown dim 'zz'"),
    ({"dim": 5}, MeshError, "out of range"),
    ({"dim": None}, MeshError, "a dim must be a name"),
])
def test_bad_input_is_refused_with_a_typed_error_naming_it(changed: dict[str, object],
                                                           error: type[Exception],
                                                           words: str) -> None:
    with pytest.raises(error) as info:
        _of(**changed)
    assert words in str(info.value), str(info.value)


_JUNK = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.floats(allow_nan=True),
                  st.text(max_size=4), st.binary(max_size=2), st.just(object()),
                  st.lists(st.integers(0, 8), max_size=3), st.timedeltas(),
                  st.sampled_from([MESH, GroupOptions(), "dp", "tp", 0, 1, 5, 8]))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*sorted(GOOD), "default_backend", "default_timeout"]),
                       _JUNK, min_size=1))
def test_junk_returns_a_spec_or_raises_a_typed_error(changed: dict[str, object]) -> None:
    """THE LAW: ``GroupSpec.of`` with any argument replaced by junk returns a spec whose
    members contain the rank, or raises an error of the package hierarchies (BackendError,
    MeshError), never another exception."""
    try:
        spec = _of(**changed)
    except (BackendError, MeshError):
        return
    assert spec.rank in spec.members
