"""Rebinding after lost ranks, on the FakeBackend: which groups are kept, ended and made.

The views that go on are written out by hand here (NumPy rank tensors with the lost slices
removed or spares put in); the Gloo tests (test_recover_gloo.py) run the same on processes.
"""

from __future__ import annotations

import numpy as np
import pytest

from backend import BackendConfigError, FakeBackend, init_device_mesh
from mesh import MeshView

DP, TP = 4, 8


def _dropped(lost: int) -> MeshView:
    tensor = np.arange(DP * TP).reshape(DP, TP)
    keep = [i for i in range(DP) if lost not in tensor[i]]
    return MeshView.from_ranks(tensor[keep].tolist(), ("dp", "tp"))


def test_a_dropped_dp_slice_keeps_the_tp_groups_and_makes_new_dp_groups() -> None:
    fb = FakeBackend(DP * TP, rank=17)
    mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"), backend=fb)
    tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
    after = mesh.rebind(_dropped(13))
    assert after.shape == (3, 8) and after.get_group("tp") is tp
    assert after.get_group("dp").ranks == (1, 17, 25) and after.get_group("dp") is not dp
    assert [r.dim for r in fb.created] == ["tp", "dp"]  # the old dp record went with it
    assert fb.lost == frozenset(range(8, 16))


def test_a_rank_left_out_has_no_coordinate_and_ends_its_groups() -> None:
    fb = FakeBackend(DP * TP, rank=12)  # healthy, but in the dropped slice of rank 13
    mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"), backend=fb)
    mesh.get_all_groups()
    after = mesh.rebind(_dropped(13))
    assert after.get_coordinate() is None
    assert [r.dim for r in fb.created] == ["dp"]  # tp (8..15) held rank 13: ended


def test_a_spare_in_place_of_the_failed_rank_keeps_the_untouched_groups() -> None:
    fb = FakeBackend(8, rank=0)
    mesh = init_device_mesh("cpu", (3, 2), mesh_dim_names=("dp", "tp"), backend=fb)
    dp, tp = mesh.get_all_groups()
    after = mesh.rebind(MeshView.from_ranks([[0, 1], [2, 6], [4, 5]], ("dp", "tp")))
    assert after.get_group("tp") is tp and after.get_group("dp") is dp
    assert len(fb.created) == 2


def test_options_follow_the_dim_names() -> None:
    from backend import GroupOptions

    fb = FakeBackend(DP * TP, rank=0)
    tagged = GroupOptions(tag="tp")
    mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"), backend=fb,
                            backend_override={"tp": tagged})
    after = mesh.rebind(_dropped(13))
    assert after.options == {"dp": GroupOptions(), "tp": tagged}


@pytest.mark.parametrize("lost, match", [
    ([3.0], r"ints in \[0, 8\)"), ([8], r"ints in \[0, 8\), got 8"), (5, "iterable"),
    ([1], "cannot retire itself")])
def test_bad_lost_ranks_are_refused_naming_them(lost: object, match: str) -> None:
    with pytest.raises(BackendConfigError, match=match):
        FakeBackend(8, rank=1).retire(lost)  # type: ignore[arg-type]


def test_rebind_takes_a_view() -> None:
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"), backend=FakeBackend(8, 0))
    with pytest.raises(BackendConfigError, match=r"rebind takes a mesh\.MeshView"):
        mesh.rebind([[0, 1]])  # type: ignore[arg-type]
