"""Rebinding after lost ranks, on the FakeBackend: which groups are kept, ended and made, and
what it costs (O(changed ranks + kept groups) over identity universes, never O(universe)).

The views that go on are written out by hand here (NumPy rank tensors with the lost slices
removed or spares put in); the Gloo tests (test_recover_gloo.py) run the same on processes.
"""

from __future__ import annotations

import numpy as np
import pytest
from work_bound import bounded

from backend import BackendConfigError, FakeBackend, RankLostError, bind, init_device_mesh
from backend._core._base import Retired
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
    assert fb.retire([9]) == Retired(ended=1, kept=1)  # dp (1, 9, 17, 25) holds 9, tp not
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


def test_a_mesh_from_before_the_loss_hands_out_no_ended_group() -> None:
    fb = FakeBackend(DP * TP, rank=5)
    mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"), backend=fb)
    mesh.get_group("dp")  # (5, 13, 21, 29): memoized on the mesh
    tp = mesh.get_group("tp")
    mesh.rebind(_dropped(13))
    with pytest.raises(RankLostError, match="holds lost ranks"):
        mesh.get_group("dp")
    with pytest.raises(RankLostError):
        bind(mesh.view, fb).get_group("dp")  # a new mesh of the old view: refused too
    assert mesh.get_group("tp") is tp  # (0..7) lost no one: still served


def test_rebinding_to_a_view_that_holds_a_lost_rank_is_refused() -> None:
    fb = FakeBackend(DP * TP, rank=5)
    mesh = init_device_mesh("cpu", (DP, TP), mesh_dim_names=("dp", "tp"), backend=fb)
    after = mesh.rebind(_dropped(13))
    with pytest.raises(RankLostError, match=r"holds ranks already lost: \[8, 9"):
        after.rebind(mesh.view)


@pytest.mark.parametrize("backend", ["gloo", 3, None.__class__, FakeBackend])
def test_binding_to_something_that_is_not_a_backend_is_refused(backend: object) -> None:
    with pytest.raises(BackendConfigError, match="backend must be a backend instance"):
        bind(MeshView.from_shape(4, ("w",)), backend)  # type: ignore[call-overload]


def test_a_huge_lost_iterable_is_refused_after_reading_one_more_than_the_world() -> None:
    with pytest.raises(BackendConfigError, match="more lost ranks than the world's 8"):
        FakeBackend(8, rank=1).retire(range(10**12))


def test_a_binding_does_not_pickle_but_its_mesh_does() -> None:
    import pickle

    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"), backend=FakeBackend(8, 0))
    with pytest.raises(BackendConfigError, match="pickle the DeviceMesh"):
        pickle.dumps(mesh.binding)
    assert pickle.loads(pickle.dumps(mesh)) == mesh


def test_rebind_over_identity_universes_costs_the_changed_ranks_not_the_universe() -> None:
    """A 2**20-rank world loses its last dp slice (8 ranks): rebind reads the 8, not the
    2**20 (before: every rank of the universe was looked up, 5 s; and every lost rank
    against every group, O(groups x lost)).  A bound on Python steps and memory, not on
    seconds."""
    n = 1 << 20
    fb = FakeBackend(n, rank=5)
    mesh = init_device_mesh("cpu", (n // 8, 8), mesh_dim_names=("dp", "tp"), backend=fb)
    tp = mesh.get_group("tp")
    mesh.get_group("dp")
    with bounded(events=20_000, peak_bytes=1 << 20):
        after = mesh.rebind(MeshView.from_shape((n // 8 - 1, 8), ("dp", "tp")))
    assert fb.lost == frozenset(range(n - 8, n))
    assert after.get_group("tp") is tp  # (0..7) lost no one: kept
    assert after.get_group("dp").ranks == tuple(range(5, n - 8, 8))  # rebuilt without 2**20-3


def test_many_lost_ranks_cost_what_they_number_not_what_they_meet() -> None:
    """Half of 2**16 ranks lost, two cached groups: a few Python steps per lost rank (each
    is read and checked once), and each group is checked by listing the shorter of its
    members and the lost ranks (before: every lost rank was located in every group, some
    hundred steps each)."""
    n = 1 << 16
    fb = FakeBackend(n, rank=1)
    mesh = init_device_mesh("cpu", (2, n // 2), mesh_dim_names=("dp", "tp"), backend=fb)
    mesh.get_all_groups()
    with bounded(events=8 * (n // 2), peak_bytes=16 << 20):
        mesh.rebind(MeshView.from_shape((1, n // 2), ("dp", "tp")))
    assert fb.lost == frozenset(range(n // 2, n))
    assert [r.dim for r in fb.created] == ["tp"]  # dp (1, 1 + n/2) held a lost rank: ended


@pytest.mark.parametrize(("old", "new"), [
    ([[0, 1], [2, 3]], [[0, 1]]),                      # identity -> identity: [2, 4) lost
    ([[0, 1], [2, 3]], [[3, 1]]),                      # identity -> explicit: the gaps
    ([[3, 1], [0, 2]], [[3, 1]]),                      # explicit -> explicit
    ([[3, 1], [0, 2], [5, 4]], [[0, 1, 2, 3]]),         # explicit -> identity: 4, 5 lost
], ids=["id-id", "id-explicit", "explicit-explicit", "explicit-id"])
def test_the_lost_ranks_are_those_the_new_universe_lacks(old: list[list[int]],
                                                         new: list[list[int]]) -> None:
    fb = FakeBackend(8, rank=1)
    mesh = bind(MeshView.from_ranks(old, ("dp", "tp")), fb)
    after = mesh.rebind(MeshView.from_ranks(new, ("dp", "tp")))
    assert fb.lost == set(np.ravel(old).tolist()) - set(np.ravel(new).tolist())
    assert after.get_coordinate() == MeshView.from_ranks(new, ("dp", "tp")).coordinate(1)
