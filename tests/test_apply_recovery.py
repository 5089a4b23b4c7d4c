"""``backend.apply_recovery``'s refusals, in one process: everything that can refuse is
checked before the rank waits on any other (the rebind's barrier, the transfers), each a
typed error naming the value.  (The act itself runs on Gloo processes:
``tests/test_apply_recovery_gloo.py`` and ``tests/test_recover_train_gloo.py``.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp

from backend import BackendConfigError, FakeBackend, apply_recovery, bind
from mesh import MeshView, Refusal, Replicate, Shard, Sharding, recover

WORLD = MeshView.from_ranks([[0, 1], [2, 3], [4, 5]], ("dp", "tp"))
STATE = {"w": Sharding(WORLD, (Replicate(), Shard(0)), (6, 4)),
         "e": Sharding(WORLD, (Shard(0), Shard(1)), (6, 4))}


def _way(kind: str) -> Any:
    decided = recover(lambda w: {"world": w}, WORLD, [3], state=STATE, spares=[6, 7])
    assert all(isinstance(r, Refusal) and r.reason for r in decided.refused)
    return next(w for w in decided.ways if w.kind == kind)


def _mesh(rank: int) -> Any:
    return bind(WORLD, FakeBackend(8, rank))


def test_a_rank_that_receives_a_tensor_it_never_held_must_be_told_its_dtype() -> None:
    spare = _mesh(6)
    with pytest.raises(BackendConfigError, match=r"rank 6 receives \['e', 'w'\].*dtypes="):
        apply_recovery(_way("spare"), {}, device_mesh=spare, checkpoint="/nonexistent")
    assert spare.backend.lost == frozenset()  # refused before the rebind


def test_a_way_that_reads_lost_boxes_needs_a_checkpoint_on_every_rank() -> None:
    for rank in (0, 6):  # a survivor and the spare alike
        mesh = _mesh(rank)
        with pytest.raises(BackendConfigError, match=r"needs a checkpoint.*'e'"):
            apply_recovery(_way("spare"), {}, device_mesh=mesh,
                           dtypes=dict.fromkeys(STATE, torch.float32))
        assert mesh.backend.lost == frozenset()


def test_an_unreadable_or_incomplete_checkpoint_is_refused_before_anything_moves(
        tmp_path: Path) -> None:
    mesh = _mesh(0)
    dtypes = dict.fromkeys(STATE, torch.float32)
    with pytest.raises(BackendConfigError, match="cannot read the checkpoint"):
        apply_recovery(_way("spare"), {}, device_mesh=mesh, dtypes=dtypes,
                       checkpoint=tmp_path / "missing")
    dcp.save({"w": torch.zeros(6, 4), "e": torch.zeros(3, 4)},
             checkpoint_id=tmp_path / "ck", no_dist=True)
    with pytest.raises(BackendConfigError, match=r"must hold 'e' of shape \(6, 4\).*\(3, 4\)"):
        apply_recovery(_way("spare"), {}, device_mesh=mesh, dtypes=dtypes,
                       checkpoint=tmp_path / "ck")
    assert mesh.backend.lost == frozenset()


@pytest.mark.parametrize("kind", ["restart", "wait"])
def test_restart_and_wait_are_the_launchers_to_act_on(kind: str) -> None:
    with pytest.raises(BackendConfigError, match="the launcher's to act on"):
        apply_recovery(_way(kind), {}, device_mesh=_mesh(0))


@pytest.mark.parametrize(("way", "state", "mesh", "says"), [
    ("not a way", {}, None, "needs a mesh.Way"),
    (None, ["w"], None, "state must be a mapping"),
    (None, {"nope": None}, None, "moves no tensor named"),
    (None, {}, "not a mesh", "device_mesh must be"),
])
def test_bad_input_is_a_typed_error_naming_it(way: Any, state: Any, mesh: Any,
                                              says: str) -> None:
    with pytest.raises(BackendConfigError, match=says):
        apply_recovery(_way("spare") if way is None else way, state,
                       device_mesh=_mesh(0) if mesh is None else mesh)
