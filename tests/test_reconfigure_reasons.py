"""Where a broken group cannot be reconfigured in place, and the reason given
(``backend._c10d._reconfigure.why_not``), one behaviour per case, in one process: the groups
are real torch groups of torch's fake backend, seen as Gloo groups of a torch that has
reconfigure (both patched), so every reason is reached on any supported torch.  The Gloo
processes of ``test_reconfigure_gloo.py`` show the ones that fit being re-formed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("torch")

from backend import GroupOptions, Onward, TorchFakeBackend
from backend._core import CreationRecord, members
from backend._core._cache import group_key
from mesh import MeshView, drop, substitute

WORLD = MeshView.from_shape((3, 2), ("dp", "tp"))  # dp groups (0, 2, 4), (1, 3, 5)
DEFAULT = GroupOptions()


@pytest.fixture
def gloo(monkeypatch: pytest.MonkeyPatch) -> Iterator[TorchFakeBackend]:
    """Rank 0 of 8 on torch's fake backend, its groups taken for reconfigurable Gloo ones."""
    import torch.distributed as dist

    from backend._c10d import _torch_private as private

    b = TorchFakeBackend(8, rank=0)
    monkeypatch.setattr(private, "RECONFIGURES", True)
    monkeypatch.setattr(private, "supports_reconfigure", lambda group: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    yield b
    b.shutdown()


def _record(b: TorchFakeBackend, view: MeshView, dim: str,
            options: GroupOptions = DEFAULT) -> tuple[CreationRecord, tuple[int, ...]]:
    k = view.index(dim)
    group = b.get_group(view, dim, options)
    key = group_key(view, k, options)
    return CreationRecord(key, dim, group), members(key.family, b.rank)


def _why(b: TorchFakeBackend, lost: set[int], onward: Onward | None, dim: str = "dp",
         options: GroupOptions = DEFAULT) -> str | None:
    from backend._c10d._reconfigure import why_not

    record, before = _record(b, WORLD, dim, options)
    return why_not(record, before, frozenset(lost), rank=b.rank, onward=onward)


def _onward(view: MeshView, options: GroupOptions = DEFAULT) -> Onward:
    return Onward(view, [options] * view.ndim)


def test_a_dim_shrunk_by_a_drop_fits(gloo: TorchFakeBackend) -> None:
    # rank 3 failed, its dp slice (2, 3) dropped: (0, 2, 4) goes on as (0, 4), in order
    assert _why(gloo, {2, 3}, _onward(drop(WORLD, [3], "dp"))) is None


def test_a_spare_joining_the_group_is_named(gloo: TorchFakeBackend) -> None:
    # rank 2 failed, spare 6 in its place: (0, 2, 4) becomes (0, 6, 4)
    why = _why(gloo, {2}, _onward(substitute(WORLD, [2], [6])))
    assert why is not None and "(0, 6, 4)" in why and "[6]" in why and "spare" in why


def test_survivors_regrouped_by_a_refactor_are_named(gloo: TorchFakeBackend) -> None:
    # the survivors re-factored onto one dim of 4: (0, 2, 4) -> (4, 0, 1, 5)
    why = _why(gloo, {2, 3}, _onward(MeshView.from_ranks([4, 0, 1, 5], ["dp"])))
    assert why is not None and "[1, 5]" in why and "re-factor" in why


def test_a_successor_without_the_survivors_is_named(gloo: TorchFakeBackend) -> None:
    # (0, 2, 4) loses 2; (0, 4) goes on along a dim with other options, dp holds 0 alone
    view = MeshView.from_ranks([[0, 4]], ["dp", "tp"])
    why = _why(gloo, {2, 3}, Onward(view, (DEFAULT, GroupOptions(tag="x"))))
    assert why is not None and "no group of the new mesh here is its survivors (0, 4)" in why


def test_the_same_survivors_in_another_order_are_named(gloo: TorchFakeBackend) -> None:
    why = _why(gloo, {2}, _onward(MeshView.from_ranks([[4, 1], [0, 5]], ["dp", "tp"])))
    assert why is not None and "orders its survivors differently" in why and "(4, 0)" in why


def test_other_options_are_another_group(gloo: TorchFakeBackend) -> None:
    tagged = GroupOptions(tag="x")
    why = _why(gloo, {2, 3}, _onward(drop(WORLD, [3], "dp"), tagged))
    assert why is not None and "options" in why


def test_a_single_survivor_is_created_locally(gloo: TorchFakeBackend) -> None:
    # tp (0, 1) loses 1: rank 0 alone, the new tp dim of size 1
    why = _why(gloo, {1}, _onward(MeshView.from_ranks([[0], [2], [4]], ["dp", "tp"])), "tp")
    assert why is not None and "single survivor" in why


def test_a_group_that_lost_no_member_is_not_reconfigured(gloo: TorchFakeBackend) -> None:
    why = _why(gloo, {1}, _onward(drop(WORLD, [1], "dp")))  # (0, 2, 4) lost nobody
    assert why is not None and "no member was lost" in why


def test_without_the_onward_mesh_nothing_is_reconfigured(gloo: TorchFakeBackend) -> None:
    why = _why(gloo, {2, 3}, None)
    assert why is not None and "rebind" in why


def test_a_rank_that_leaves_reconfigures_nothing(gloo: TorchFakeBackend) -> None:
    why = _why(gloo, {4, 5}, _onward(MeshView.from_ranks([[2, 3]], ["dp", "tp"])))
    assert why is not None and "leaves" in why


def test_a_torch_without_reconfigure_is_named(gloo: TorchFakeBackend,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from backend._c10d import _torch_private as private

    monkeypatch.setattr(private, "RECONFIGURES", False)
    why = _why(gloo, {2, 3}, _onward(drop(WORLD, [3], "dp")))
    assert why is not None and "has no reconfigure" in why and "2.14" in why


def test_an_nccl_group_is_not_reconfigured(gloo: TorchFakeBackend,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    why = _why(gloo, {2, 3}, _onward(drop(WORLD, [3], "dp")))
    assert why is not None and "nccl group" in why and "shrunk" in why


def test_the_default_group_stays(gloo: TorchFakeBackend) -> None:
    import torch.distributed as dist

    from backend._c10d._reconfigure import why_not

    world = MeshView.from_shape((8,), ("all",))
    key = group_key(world, 0, DEFAULT)
    record, before = CreationRecord(key, "all", dist.group.WORLD), members(key.family, 0)
    why = why_not(record, before, frozenset({3}), rank=0,
                  onward=_onward(MeshView.from_ranks([0, 1, 2, 4, 5, 6, 7], ["all"])))
    assert why is not None and "default group" in why


