"""Every rank of a reshard runs the same plans (``backend._tensor._agree``): ranks compare
their plans' digests over a store before anything moves, here four ranks as threads over
one ``HashStore``."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

from backend import BackendConfigError
from backend._tensor import _agree
from mesh import MeshView, Replicate, Shard, Sharding, reshard

SRC = MeshView.from_ranks([0, 1], ("a",))
DST = MeshView.from_ranks([2, 3], ("b",))


@pytest.fixture(autouse=True)
def fresh_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's ranks start counting their calls afresh (a process counts its own)."""
    monkeypatch.setattr(_agree, "_CALLS", {})


def _plans(dst: object = Shard(0)) -> list[tuple[str, object]]:
    return [("w", reshard(Sharding(SRC, (Shard(0),), (4, 4)), Sharding(DST, (dst,), (4, 4))))]


def _run(store: dist.Store, plans: dict[int, list[tuple[str, object]]]) -> dict[int, object]:
    out: dict[int, object] = {}

    def one(rank: int) -> None:
        try:
            _agree.same_plans(plans[rank], rank, store,  # type: ignore[arg-type]
                              timeout=timedelta(seconds=20))
            out[rank] = "ok"
        except BackendConfigError as e:
            out[rank] = str(e)

    threads = [threading.Thread(target=one, args=(r,)) for r in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_ranks_running_the_same_plans_go_on() -> None:
    store = dist.HashStore()
    assert _run(store, {r: _plans() for r in range(4)}) == dict.fromkeys(range(4), "ok")


def test_one_rank_given_another_plan_is_named_by_every_rank() -> None:
    store = dist.HashStore()
    got = _run(store, {r: _plans(Replicate() if r == 2 else Shard(0)) for r in range(4)})
    assert sorted(got) == [0, 1, 2, 3]
    for r, text in got.items():
        assert isinstance(text, str) and "run different plans" in text, (r, text)
        assert ("ranks [2] run others" if r != 2 else "are those of ranks [2]") in text, text


def test_another_tensor_name_is_another_plan() -> None:
    store = dist.HashStore()
    renamed = {r: [("v" if r == 0 else "w", _plans()[0][1])] for r in range(4)}
    assert all("ranks [0]" in str(t) for t in _run(store, renamed).values())


def test_a_rank_never_arriving_is_a_typed_error_naming_the_wait() -> None:
    with pytest.raises(BackendConfigError, match="some never came"):
        _agree.same_plans(_plans(), 0, dist.HashStore(),  # type: ignore[arg-type]
                          timeout=timedelta(milliseconds=200))


def test_the_keys_of_a_call_go_once_every_rank_is_past_it() -> None:
    store = dist.HashStore()
    ranks = {r: _plans() for r in range(4)}
    before = store.num_keys()
    for _ in range(5):
        assert _run(store, ranks) == dict.fromkeys(range(4), "ok")
    assert store.num_keys() - before <= 4  # the last call's: n, verdict, d/<digest>, who/<digest>


def test_a_rank_alone_in_its_plans_checks_nothing() -> None:
    alone = MeshView.from_ranks([5], ("a",))
    plan = reshard(Sharding(alone, (Shard(0),), (4,)), Sharding(alone, (Shard(0),), (4,)))
    store = dist.HashStore()
    _agree.same_plans([("w", plan)], 5, store)
    assert store.num_keys() == 0
