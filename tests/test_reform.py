"""What a loss does to the groups it broke, as values: :class:`backend.Onward` (the mesh that
goes on, asked per rank which groups it wants) and :class:`backend.Reformed`; a value
backend re-forms nothing and says so (no torch here)."""

from __future__ import annotations

import pytest

from backend import BackendConfigError, FakeBackend, GroupOptions, How, Onward, Reformed, bind
from mesh import MeshView, drop


def test_onward_gives_a_rank_its_groups_along_the_dims_with_those_options() -> None:
    view = MeshView.from_shape((2, 3), ("dp", "tp"))
    tagged = GroupOptions(tag="x")
    on = Onward(view, (GroupOptions(), tagged))
    assert on.groups(4, GroupOptions()) == ((1, 4),)
    assert on.groups(4, tagged) == ((3, 4, 5),)
    assert on.groups(4, GroupOptions(tag="other")) == ()


def test_onward_has_no_group_for_a_rank_outside_its_view() -> None:
    view = drop(MeshView.from_shape((3, 2), ("dp", "tp")), [3], "dp")
    assert Onward(view, [GroupOptions()] * 2).groups(2, GroupOptions()) == ()


@pytest.mark.parametrize("bad", [(GroupOptions(),), "dp", None])
def test_onward_refuses_options_that_are_not_one_per_dim(bad: object) -> None:
    with pytest.raises(BackendConfigError):
        Onward(MeshView.from_shape((2, 2), ("dp", "tp")), bad)  # type: ignore[arg-type]


def test_onward_refuses_a_view_that_is_not_one() -> None:
    with pytest.raises(BackendConfigError, match="MeshView"):
        Onward("dp", ())  # type: ignore[arg-type]


def test_reformed_is_plain_data() -> None:
    r = Reformed("dp", (1, 3, 5), (1, 5), How.ENDED, "its successor brings a spare")
    assert r.to_dict() == {"dim": "dp", "before": [1, 3, 5], "after": [1, 5],
                           "how": "ended", "why": "its successor brings a spare"}


def test_a_value_backend_reforms_nothing_on_a_rebind() -> None:
    b = FakeBackend(6, rank=0)
    world = MeshView.from_shape((3, 2), ("dp", "tp"))
    old = bind(world, b)
    old.materialize()
    new = old.rebind(drop(world, [3], "dp"))
    assert b.reformed == () and new.get_group("dp").ranks == (0, 4)


def test_retire_refuses_an_onward_that_is_not_one() -> None:
    with pytest.raises(BackendConfigError, match="onward"):
        FakeBackend(4, rank=0).retire([1], onward="dp")  # type: ignore[arg-type]
