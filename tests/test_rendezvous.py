"""The creation barrier of ``backend._c10d._rendezvous``, without Gloo.

First the waiting policy (:func:`next_deadline`), a pure function, by a table of cases.
Then the wiring: ranks as threads on one in-process store (torch's ``HashStore``), each
with its own :class:`Rendezvous`, with the timing of each step set by the test.  What must
hold (the module's invariants): members agree on each round, a retry never passes alone,
waiting is bounded, the success path costs a constant number of store calls per member,
and the round's keys are gone once it is over.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

pytest.importorskip("torch")
from counting_store import CountingStore
from torch.distributed import HashStore

from backend import MembersMissingError
from backend._c10d._rendezvous import GO, PREFIX, QUIT, SLACK_S, Peer, Rendezvous, next_deadline

pytestmark = pytest.mark.timeout(60)
TIMEOUT_S = 0.5


# ---- the waiting policy: a table ------------------------------------------------------------
@pytest.mark.parametrize(("case", "peers", "everyone", "expected"), [
    ("nobody to wait for: close at the deadline", [Peer("absent")], False, None),
    ("an idle peer is not waited for", [Peer("idle")], False, None),
    ("a peer that gave up earlier is not waited for", [Peer("gave_up")], False, None),
    ("a peer that already created the group will not come", [Peer("created")], False, None),
    ("a peer whose beat stopped is not waited for", [Peer("gone", 5.0)], False, None),
    ("a busy peer: until its deadline plus the slack", [Peer("busy", 12.0)], False,
     12.0 + SLACK_S),
    ("a busy peer that waits for this rank: a cycle, no wait",
     [Peer("busy", 12.0, waits_for_me=True)], False, None),
    ("the latest of several busy peers", [Peer("busy", 11.0), Peer("busy", 12.5)], False,
     12.5 + SLACK_S),
    ("a busy peer past its own deadline and slack is not waited for", [Peer("busy", 8.0)],
     False, None),
    ("a peer that left a failed group just now", [Peer("left", 9.5)], False, 9.5 + SLACK_S),
    ("a peer that left a failed group long ago", [Peer("left", 2.0)], False, None),
    ("a peer that created another group a moment ago", [Peer("finished", 9.5)], False,
     9.5 + SLACK_S),
    ("a peer that created another group long ago", [Peer("finished", 2.0)], False, None),
    ("a peer holding a ticket of this round", [Peer("arriving")], False, 10.0 + SLACK_S),
    ("every ticket taken: the commit is in flight", [], True, 10.0 + SLACK_S),
    ("never past the cap", [Peer("busy", 30.0)], False, 15.0),
])
def test_waiting_policy(case: str, peers: list[Peer], everyone: bool,
                        expected: float | None) -> None:
    """Closing member at now = deadline = 10 s, cap 15 s."""
    assert next_deadline(10.0, 10.0, 15.0, peers, everyone) == expected, case


def test_at_the_cap_the_round_closes_whatever_the_peers() -> None:
    assert next_deadline(15.0, 10.0, 15.0, [Peer("arriving")], True) is None


# ---- the wiring: ranks as threads ------------------------------------------------------------
def _key(*parts: object) -> str:
    return "/".join([PREFIX, *map(str, parts)])


def _meet(rz: Rendezvous, members: Sequence[int], out: dict[str, Any], *, name: str = "g",
          timeout: float = TIMEOUT_S, body: Callable[[], None] | None = None) -> None:
    start = time.time()
    try:
        with rz.meet(name, members, timeout, dim="tp", desc=f"the 'tp' group {tuple(members)}",
                     shown=tuple(members)):
            out["passed"] = time.time()
            if body is not None:
                body()
        out["ok"] = True
    except MembersMissingError as e:
        out["error"] = e
    except RuntimeError as e:  # the body's own failure
        out["raised"] = e
    out["waited"] = time.time() - start


def _together(store: Any, members: Sequence[int], **kw: Any) -> dict[int, dict[str, Any]]:
    outs: dict[int, dict[str, Any]] = {m: {} for m in members}
    threads = [threading.Thread(target=_meet, args=(Rendezvous(store, m, world_size=len(members),
                                                               heartbeat=None), members, outs[m]),
                                kwargs=kw) for m in members]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return outs


@pytest.mark.parametrize("n", [2, 8, 64])
def test_members_that_all_come_pass_with_a_constant_number_of_store_calls(n: int) -> None:
    """A member makes 2 store calls (ticket, wait) and the committer 3 (ticket, commit,
    wake-up); one that waits past the grace period adds its record and a look: never more
    than 5, whatever the group's size, and no call touches more than one key."""
    shared = HashStore()
    stores = {m: CountingStore(shared) for m in range(n)}
    outs: dict[int, dict[str, Any]] = {m: {} for m in range(n)}
    threads = [threading.Thread(target=_meet, args=(Rendezvous(stores[m], m, world_size=n,
                                                               heartbeat=None), range(n), outs[m]))
               for m in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert all(o.get("ok") for o in outs.values()), outs
    calls = sorted(s.total() for s in stores.values())
    assert calls[-1] <= 5 and calls[0] == 2, calls
    assert sum(s.calls["compare_set"] for s in stores.values()) - \
        sum(s.calls["set"] for s in stores.values()) <= 0  # one commit (reads are peeks)
    assert sum(s.calls["add"] for s in stores.values()) == n  # one ticket each, no more
    assert max(s.widest for s in stores.values()) <= 1  # no call lists members
    assert int(shared.get(_key("t", "g"))) == n and int(shared.get(_key("d", "g", 0))) == GO


def test_a_missing_member_fails_the_others_within_their_timeout_naming_it() -> None:
    store = HashStore()
    outs = _together(store, [0, 1], name="g")  # both come: fine
    assert outs[0].get("ok") and outs[1].get("ok")
    out: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=3, heartbeat=None), [0, 2], out, name="h")
    err = out["error"]
    assert err.missing == (2,) and err.rank == 0 and err.ranks == (0, 2)
    assert TIMEOUT_S - 0.05 < out["waited"] < TIMEOUT_S + 0.5
    assert "rank 2 is not creating any group" in str(err)
    assert "skipped this group" in str(err)


def test_a_partner_that_created_its_last_group_is_named_idle() -> None:
    """Rank 1 waited for rank 0 at group g (so it wrote its record), created it, and never
    asks for h: rank 0's h names it as not creating any group, with its last group."""
    store = HashStore()
    first: dict[str, Any] = {}
    one = threading.Thread(target=_meet, args=(Rendezvous(store, 1, world_size=2,
                                                          heartbeat=None), [0, 1], first))
    one.start()
    time.sleep(0.2)
    _meet(Rendezvous(store, 0, world_size=2, heartbeat=None), [0, 1], {})
    one.join(10)
    assert first.get("ok")
    out: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=2, heartbeat=None), [0, 1], out, name="h")
    assert out["error"].missing == (1,)
    assert "rank 1 is not creating any group (its last was the 'tp' group (0, 1))" in \
        str(out["error"])


def test_members_waiting_in_a_closed_round_fail_with_the_closers_reasons() -> None:
    """Members 0 and 1 wait for 2; rank 0's deadline comes first and it closes the round;
    rank 1 (a longer timeout) fails at its own deadline with the same reasons, listed once."""
    store = HashStore()
    outs: dict[int, dict[str, Any]] = {0: {}, 1: {}}
    t0 = threading.Thread(target=_meet, args=(Rendezvous(store, 0, world_size=3, heartbeat=None),
                                              [0, 1, 2], outs[0]))
    t1 = threading.Thread(target=_meet, args=(Rendezvous(store, 1, world_size=3, heartbeat=None),
                                              [0, 1, 2], outs[1]), kwargs={"timeout": 1.0})
    t0.start(), t1.start()
    t0.join(10), t1.join(10)
    assert outs[0]["error"].missing == outs[1]["error"].missing == (2,)
    assert 0.95 < outs[1]["waited"] < 1.5  # its own timeout, not more
    assert "rank 0 closed the round" in str(outs[1]["error"])
    assert int(store.add(_key("c", "g", 0), 0)) == 1  # one claim: one listing


def test_a_retry_after_a_failure_past_go_never_passes_alone() -> None:
    """Ranks 0 and 1 meet; torch's creation then fails on rank 0 only (rank 1 has its
    group).  Rank 0's retry waits in a new round and fails within its timeout naming
    rank 1, which already created the group (before: it passed the barrier at once)."""
    store = HashStore()

    def fails() -> None:
        raise RuntimeError("torch's creation failed on this rank")

    outs: dict[int, dict[str, Any]] = {0: {}, 1: {}}
    zero = Rendezvous(store, 0, world_size=2, heartbeat=None)  # its backend's, kept
    threads = [threading.Thread(target=_meet, args=(zero, [0, 1], outs[0]),
                                kwargs={"body": fails}),
               threading.Thread(target=_meet, args=(Rendezvous(store, 1, world_size=2,
                                                               heartbeat=None), [0, 1], outs[1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert "raised" in outs[0] and outs[1].get("ok")
    retry: dict[str, Any] = {}
    _meet(zero, [0, 1], retry)
    err = retry["error"]
    assert err.missing == (1,) and retry["waited"] > TIMEOUT_S - 0.05
    assert "rank 1 already created this group" in str(err)


def test_a_late_member_moves_to_the_next_round_and_meets_a_retry() -> None:
    """Rank 0 gives up on rank 1 (round 0 closes); rank 1 comes later, finds round 0
    closed and waits in round 1, where rank 0's retry meets it."""
    store = HashStore()
    first: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=2, heartbeat=None), [0, 1], first)
    assert first["error"].missing == (1,)
    late: dict[str, Any] = {}
    one = threading.Thread(target=_meet, args=(Rendezvous(store, 1, world_size=2,
                                                          heartbeat=None), [0, 1], late),
                           kwargs={"timeout": 5.0})
    one.start()
    time.sleep(0.2)
    retry: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=2, heartbeat=None), [0, 1], retry, timeout=5.0)
    one.join(10)
    assert late.get("ok") and retry.get("ok"), (late, retry)
    assert int(store.get(_key("d", "g", 0))) == QUIT and int(store.get(_key("d", "g", 1))) == GO


def test_a_late_member_whose_peers_never_retry_is_told_it_is_late() -> None:
    store = HashStore()
    first: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=2, heartbeat=None), [0, 1], first)
    late: dict[str, Any] = {}
    _meet(Rendezvous(store, 1, world_size=2, heartbeat=None), [0, 1], late)
    err = late["error"]
    assert err.missing == (0,)
    assert "rank 0 gave up waiting for this group before this rank arrived" in str(err)
    assert "this rank is late" in str(err)


def _record(store: Any, rank: int, value: dict[str, Any]) -> None:
    store.set(_key("r", rank), json.dumps(value))


def _rank1_in(store: Any, group: str, ranks: list[int], *, since: float,
              **more: float) -> None:
    """Rank 1's record: in round 0 of ``group`` (members ``ranks``) since ``since``, with
    ``until``, ``beat`` or ``left`` as given."""
    _record(store, 1, {"group": group, "round": 0, "size": len(ranks),
                       "desc": f"the 'dp' group {tuple(ranks)}", "ranks": ranks,
                       "since": since, **more})


def test_a_partner_busy_with_another_group_extends_the_wait_by_at_most_one_timeout() -> None:
    """Rank 1 waits in another group's open round until far in the future and never comes:
    rank 0 waits past its timeout for it, but never longer than twice its timeout."""
    store = HashStore()
    now = time.time()
    _rank1_in(store, "other", [1, 3], since=now, until=now + 60, beat=now)
    out: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=4, heartbeat=None), [0, 1], out)
    err = out["error"]
    assert err.missing == (1,)
    assert 2 * TIMEOUT_S - 0.05 < out["waited"] < 2 * TIMEOUT_S + 0.5
    assert "rank 1 is creating the 'dp' group (1, 3)" in str(err)
    # rank 1's group does not wait for rank 0: rank 0 is stuck behind it, and is told so
    assert "this rank is waiting behind ranks that asked for groups in different orders" in \
        str(err)


def test_a_partner_between_a_failed_group_and_this_one_is_waited_for() -> None:
    """Rank 1 left a failed group just before rank 0's deadline and needs 0.55 s (less
    than the slack) to reach this one: rank 0 waits for it and both pass."""
    store = HashStore()
    t0 = time.time()
    _rank1_in(store, "other", [1, 3], since=t0, until=t0 + 0.3, beat=t0)
    out0: dict[str, Any] = {}
    waiter = threading.Thread(target=_meet, args=(Rendezvous(store, 0, world_size=4,
                                                             heartbeat=None), [0, 1], out0))
    waiter.start()
    time.sleep(0.35)
    _rank1_in(store, "other", [1, 3], since=t0, left=time.time())
    time.sleep(0.55)  # rank 0's own deadline passes during this gap
    out1: dict[str, Any] = {}
    _meet(Rendezvous(store, 1, world_size=4, heartbeat=None), [0, 1], out1)
    waiter.join(10)
    assert out0.get("ok") and out1.get("ok"), (out0, out1)
    assert out0["waited"] > TIMEOUT_S


def test_two_members_waiting_on_each_other_fail_at_their_own_deadlines() -> None:
    """Rank 0 waits at g for rank 1, which waits at h (open, with rank 0 in it) for rank 0:
    a cycle, so rank 0 does not extend its wait."""
    store = HashStore()
    now = time.time()
    _rank1_in(store, "h", [0, 1], since=now, until=now + 60, beat=now)
    out: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=2, heartbeat=None), [0, 1], out)
    assert out["error"].missing == (1,)
    assert out["waited"] < TIMEOUT_S + 0.5
    assert "ranks asked for groups in a different order" in str(out["error"])


def test_a_partner_whose_beat_stopped_inside_a_creation_is_named_gone() -> None:
    store = HashStore()
    long_ago = time.time() - 60
    _rank1_in(store, "other", [1, 3], since=long_ago, until=time.time() + 60, beat=long_ago)
    out: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=4, heartbeat=0.1), [0, 1], out)
    err = out["error"]
    assert err.missing == (1,) and out["waited"] < TIMEOUT_S + 0.5
    assert "rank 1 has not answered for" in str(err) and "exited" in str(err)


class _ArrivesWhenListed:
    """A store on which rank 1 takes its ticket exactly when rank 0, at its deadline, reads
    the ticket counter to list who is missing."""

    def __init__(self) -> None:
        self._store = HashStore()
        self.arrived: dict[str, Any] = {}

    def clone(self) -> _ArrivesWhenListed:
        return self

    def compare_set(self, key: str, expected: str, desired: str) -> Any:
        if key == _key("t", "g") and not self.arrived:
            self.arrived["started"] = True
            threading.Thread(target=_meet, args=(Rendezvous(self, 1, world_size=2,
                                                            heartbeat=None), [0, 1],
                                                 self.arrived)).start()
            time.sleep(0.2)
        return self._store.compare_set(key, expected, desired)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_member_arriving_as_the_deadline_is_checked_is_not_refused() -> None:
    """Rank 1 arrives as rank 0 lists the missing at its deadline: every ticket is taken,
    so rank 0 waits for the commit instead of closing, and both pass."""
    store = _ArrivesWhenListed()
    out: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=2, heartbeat=None), [0, 1], out)
    time.sleep(0.5)
    assert out.get("ok") and store.arrived.get("ok"), (out, store.arrived)


def test_an_interrupted_waiter_closes_its_round_so_nobody_passes_without_it() -> None:
    """Rank 0's wait is interrupted (the store call raises); the round is closed, so
    rank 1, arriving after, does not pass with rank 0's ticket."""

    class Interrupting(CountingStore):
        def wait(self, keys: list[str], timeout: Any) -> None:
            raise KeyboardInterrupt

    store = HashStore()
    with pytest.raises(KeyboardInterrupt):
        with Rendezvous(Interrupting(store), 0, world_size=2, heartbeat=None).meet(
                "g", [0, 1], TIMEOUT_S, dim="tp", desc="g", shown=(0, 1)):
            pass
    assert int(store.get(_key("d", "g", 0))) == QUIT
    out: dict[str, Any] = {}
    _meet(Rendezvous(store, 1, world_size=2, heartbeat=None), [0, 1], out)
    assert "error" in out and out["error"].missing == (0,)


def test_a_beating_member_is_seen_alive_and_a_silent_one_is_not() -> None:
    """``silent`` watches records for two beats: rank 1 beats (inside a meeting that waits),
    rank 2 never does."""
    store = HashStore()
    one = Rendezvous(store, 1, world_size=3, heartbeat=0.1)
    out: dict[str, Any] = {}
    t = threading.Thread(target=_meet, args=(one, [1, 9], out), kwargs={"timeout": 2.0})
    t.start()
    time.sleep(0.1)
    zero = Rendezvous(store, 0, world_size=3, heartbeat=0.1)
    assert list(zero.silent([1, 2])) == [2]
    t.join(10)
    zero.close(), one.close()
    assert not store.check([_key("r", 0)]) and not store.check([_key("r", 1)])


def test_outcome_values_are_counters() -> None:
    """GO and QUIT are numbers the store can add to (a non-number breaks TCPStore's add)."""
    assert GO < QUIT and QUIT - GO > 2**31
