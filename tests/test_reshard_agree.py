"""Every rank of a reshard runs the same plans (``backend._tensor._agree``): ranks compare
their plans' digests over a store before anything moves, here four ranks as threads over
one ``HashStore``."""

from __future__ import annotations

import threading
import time
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
    counts = []
    for _ in range(5):
        assert _run(store, ranks) == dict.fromkeys(range(4), "ok")
        counts.append(store.num_keys())
    # the last call's (n, in, verdict, d/<digest>, who/<digest>), where each rank is (at/<rank>),
    # the ranks of the key space (members, members_n): none grows with the calls
    assert counts[1:] == [5 + 4 + 2] * 4, counts


def test_a_rank_alone_in_its_plans_checks_nothing() -> None:
    alone = MeshView.from_ranks([5], ("a",))
    plan = reshard(Sharding(alone, (Shard(0),), (4,)), Sharding(alone, (Shard(0),), (4,)))
    store = dist.HashStore()
    _agree.same_plans([("w", plan)], 5, store)
    assert store.num_keys() == 0


def _over(ranks: list[int]) -> list[tuple[str, object]]:
    """A plan from ranks ``ranks[:2]`` to ``ranks[2:]`` (the ranks it names)."""
    src, dst = MeshView.from_ranks(ranks[:2], ("a",)), MeshView.from_ranks(ranks[2:], ("b",))
    return [("w", reshard(Sharding(src, (Shard(0),), (4, 4)), Sharding(dst, (Shard(0),), (4, 4))))]


def test_ranks_given_plans_over_different_ranks_raise_at_once_naming_both(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks 0-2 run a plan over ranks 0-3; rank 3 one over ranks 0-1, 3 and 4 (rank 4 never
    calls).  Each side counts in its own key space and waited for the other until the
    store's timeout (20 s here); now rank 3 finds rank 2 waiting in a call that names it, and
    ranks 0-2 find rank 3 in one that names them: all four raise within a few polls, naming
    both sets of ranks."""
    monkeypatch.setattr(_agree, "POLL", timedelta(milliseconds=100))
    store = dist.HashStore()
    start = time.monotonic()
    got = _run(store, {0: _over([0, 1, 2, 3]), 1: _over([0, 1, 2, 3]), 2: _over([0, 1, 2, 3]),
                       3: _over([0, 1, 3, 4])})
    assert time.monotonic() - start < 10
    assert sorted(got) == [0, 1, 2, 3]
    for r, text in got.items():  # (whichever side sees the other first; then, that it raised)
        mine, theirs = ("0-3", "0-1,3-4") if r != 3 else ("0-1,3-4", "0-3")
        assert str(text).startswith(
            f"reshard_state: ranks were given plans over different ranks (nothing moved): rank "
            f"{r}'s plans name ranks {mine} (its call 0 over them); rank "), text
        assert str(text).endswith((f"waits in a reshard whose plans name ranks {theirs}, rank {r} "
                                   "among them", f"raised in a reshard whose plans name ranks "
                                   f"{theirs}")), text


def test_a_rank_waiting_for_one_that_raised_elsewhere_raises_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks 1 and 5 were given plans over different ranks (1, 5 against 1, 5, 6): both
    raise, and mark themselves failed.  Ranks 0, 2 and 3, waiting for rank 1 in a plan over
    ranks 0-3 (which rank 1's plans do not name), raise at their next poll, naming it."""
    monkeypatch.setattr(_agree, "POLL", timedelta(milliseconds=100))
    store = dist.HashStore()
    crossed = _run(store, {1: _over([1, 5, 1, 5]), 5: _over([1, 5, 5, 6])})
    assert all("plans over different ranks" in str(t) for t in crossed.values()), crossed
    got = _run(store, {0: _over([0, 1, 2, 3]), 2: _over([0, 1, 2, 3]), 3: _over([0, 1, 2, 3])})
    for r in (0, 2, 3):
        assert str(got[r]).endswith("; rank 1 raised in a reshard whose plans name ranks 1,5"), \
            got[r]


def test_a_rank_late_after_a_plan_mismatch_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 2 was given another plan: every rank raised (a mismatch, not plans over other
    ranks).  At the next call it comes 1 s after the others, who poll every 0.1 s: they wait
    for it (a mismatch leaves no failed mark), and all go on."""
    monkeypatch.setattr(_agree, "POLL", timedelta(milliseconds=100))
    store = dist.HashStore()
    first = _run(store, {r: _plans(Replicate() if r == 2 else Shard(0)) for r in range(4)})
    assert all("run different plans" in str(t) for t in first.values()), first
    late = threading.Timer(1.0, lambda: _agree.same_plans(_plans(), 2, store))  # type: ignore[arg-type]
    late.start()
    assert _run(store, {r: _plans() for r in (0, 1, 3)}) == dict.fromkeys((0, 1, 3), "ok")
    late.join(30)


def test_a_rank_whose_earlier_call_over_other_ranks_is_done_is_waited_for() -> None:
    """Rank 3 made a call over ranks 3 and 4 (with rank 4), then is late to a call over ranks
    0-3: its place in the store still names the earlier call, which the others never made,
    but it does not name them, so they wait and then go on together."""
    store = dist.HashStore()
    assert _run(store, {3: _over([3, 4, 3, 4]), 4: _over([3, 4, 3, 4])}) == {3: "ok", 4: "ok"}
    assert _run(store, {r: _over([0, 1, 2, 3]) for r in range(4)}) == dict.fromkeys(range(4), "ok")
