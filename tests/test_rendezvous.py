"""The creation barrier of ``backend._c10d._rendezvous``, without Gloo.

First the waiting policy (:func:`next_deadline`), a pure function, by a table of cases.
Then the wiring: ranks as threads on one in-process store (torch's ``HashStore``), each
with its own :class:`Rendezvous`, with the timing of each step set by the test.  What must
hold (the module's invariants): members agree on each round, a retry never passes alone,
waiting is bounded, the success path costs a constant number of store calls per member,
and the round's keys are gone once it is over.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest

pytest.importorskip("torch")
from counting_store import CountingStore
from torch.distributed import HashStore
from virtual_store import Killed, Trigger, World

from backend import MembersMissingError
from backend._c10d._diagnosis import Peer, PeerState, next_deadline
from backend._c10d._records import LivenessRecord
from backend._c10d._rendezvous import REASK_S, Rendezvous
from backend._c10d._rounds import GO, QUIT, SLACK_S, TICKET, Attempt, torch_name
from backend._c10d._store import Interrupts, job_namespace, key

pytestmark = pytest.mark.timeout(60)
TIMEOUT_S = 0.5


# ---- the waiting policy: a table ------------------------------------------------------------
@pytest.mark.parametrize(("case", "peers", "expected"), [
    ("nobody to wait for: close at the deadline", [Peer(PeerState.ABSENT)], None),
    ("an idle peer is not waited for", [Peer(PeerState.IDLE)], None),
    ("a peer that gave up an earlier round long ago is not waited for",
     [Peer(PeerState.GAVE_UP, 2.0)],
     None),
    ("a peer that gave up an earlier round just now: it may ask again",
     [Peer(PeerState.GAVE_UP, 9.5)], 9.5 + SLACK_S),
    ("a peer that already created the group will not come", [Peer(PeerState.CREATED)], None),
    ("a peer whose beat stopped is not waited for", [Peer(PeerState.GONE, 5.0)], None),
    ("an interrupted peer is not waited for", [Peer(PeerState.INTERRUPTED, 9.0)], None),
    ("a peer that claimed the round and stopped is not waited for", [Peer(PeerState.CLAIMED, 9.0)],
     None),
    ("a busy peer: until its deadline plus the slack", [Peer(PeerState.BUSY, 12.0)],
     12.0 + SLACK_S),
    ("a busy peer that waits for this rank: a cycle, no wait",
     [Peer(PeerState.BUSY, 12.0, waits_for_me=True)], None),
    ("the latest of several busy peers", [Peer(PeerState.BUSY, 11.0), Peer(PeerState.BUSY, 12.5)],
     12.5 + SLACK_S),
    ("a busy peer past its own deadline and slack is not waited for", [Peer(PeerState.BUSY, 8.0)],
     None),
    ("a peer still inside torch's creation of an earlier round: until that fails",
     [Peer(PeerState.CREATING, 12.0)], 12.0 + SLACK_S),
    ("a peer that left a failed group just now", [Peer(PeerState.LEFT, 9.5)], 9.5 + SLACK_S),
    ("a peer that left a failed group long ago", [Peer(PeerState.LEFT, 2.0)], None),
    ("a peer that created another group a moment ago", [Peer(PeerState.FINISHED, 9.5)],
     9.5 + SLACK_S),
    ("a peer that created another group long ago", [Peer(PeerState.FINISHED, 2.0)], None),
    ("a ticket holder without a record, seen now", [Peer(PeerState.ARRIVING, 10.0)],
     10.0 + SLACK_S),
    ("a ticket holder without a record, seen more than the slack ago: it stopped",
     [Peer(PeerState.ARRIVING, 8.5)], None),
    ("never past the cap", [Peer(PeerState.BUSY, 30.0)], 15.0),
])
def test_waiting_policy(case: str, peers: list[Peer], expected: float | None) -> None:
    """Closing member at now = deadline = 10 s, cap 15 s."""
    assert next_deadline(10.0, 10.0, 15.0, peers) == expected, case


def test_at_the_cap_the_round_closes_whatever_the_peers() -> None:
    assert next_deadline(15.0, 10.0, 15.0, [Peer(PeerState.ARRIVING, 14.9)]) is None


# ---- the wiring: ranks as threads ------------------------------------------------------------
def _key(*parts: object) -> str:
    return key(job_namespace(), *parts)


def _planted(rank: int, group: str, ranks: list[int], *, seq: int = 1, **spans: Any) -> bytes:
    """Rank ``rank``'s record as its writer writes it: in round 0 of ``group`` (members
    ``ranks``), with ``until_s``, ``left_s``, ``period`` ... as given."""
    return LivenessRecord(rank, 7, seq, group=group, round=0, size=len(ranks),
                          desc=f"the 'dp' group {tuple(ranks)}", ranks=tuple(ranks),
                          **spans).to_bytes()


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
    """A member makes 2 store calls (ticket, the ``multi_get`` of the wake-up, which carries
    the decision, and of the ticket counter, which must say the round is full) and the
    committer 3 (ticket, commit, wake-up); one that waits past the grace period adds its
    record (written by another thread): never more than 3, whatever the group's size, and
    no call touches more than two keys."""
    shared = HashStore()
    stores = {m: CountingStore(shared) for m in range(n)}
    outs: dict[int, dict[str, Any]] = {m: {} for m in range(n)}
    threads = [threading.Thread(target=_meet, args=(Rendezvous(stores[m], m, world_size=n,
                                                               heartbeat=None), range(n), outs[m]),
                                kwargs={"timeout": 60.0})  # all come, however loaded the machine
               for m in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert all(o.get("ok") for o in outs.values()), outs
    calls = sorted(s.total() for s in stores.values())
    assert calls[-1] <= 3 and calls[0] == 2, calls
    assert sum(s.calls["compare_set"] for s in stores.values()) == 1  # one commit, no reads
    assert sum(s.calls["multi_get"] for s in stores.values()) == n - 1  # one wait each
    assert sum(s.calls["add"] for s in stores.values()) == n  # one ticket each, no more
    assert max(s.widest for s in stores.values()) <= 2  # no call lists members
    assert int(shared.get(_key("t", "g"))) == n * TICKET  # n tickets
    assert int(shared.get(_key("d", "g", 0))) == GO


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


def test_a_partner_inside_torchs_creation_of_another_group_is_named_busy_there() -> None:
    """Ranks 1 and 2 met at g and are inside its creation (torch's, 3 s here) while rank 0
    asks h with rank 1: rank 1's record says it is creating g, so rank 0 fails at its cap
    naming it as creating g (it was called "finished" with g, as if it had created it)."""
    store = HashStore()
    outs: dict[int, dict[str, Any]] = {1: {}, 2: {}}
    threads = [threading.Thread(target=_meet, args=(
        Rendezvous(store, m, world_size=3, heartbeat=0.1), [1, 2], outs[m]),
        kwargs={"name": "g", "timeout": 5.0, "body": lambda: time.sleep(3.0)}) for m in (1, 2)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    out: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=3, heartbeat=0.1), [0, 1], out, name="h")
    for t in threads:
        t.join(10)
    assert outs[1].get("ok") and outs[2].get("ok")
    err = out["error"]
    assert err.missing == (1,)
    assert "rank 1 is creating the 'tp' group (1, 2)" in str(err), str(err)
    assert 2 * TIMEOUT_S - 0.05 < out["waited"] < 2 * TIMEOUT_S + 0.5  # its cap


def test_members_waiting_in_a_closed_round_fail_with_the_closers_reasons() -> None:
    """Members 0 and 1 wait for 2; rank 0's deadline comes first and it closes the round;
    rank 1 (a much longer timeout: 30 s, so a loaded machine cannot make its own deadline
    come first) is woken by the close and fails then, with the same reasons, listed once."""
    store = HashStore()
    outs: dict[int, dict[str, Any]] = {0: {}, 1: {}}
    t0 = threading.Thread(target=_meet, args=(Rendezvous(store, 0, world_size=3, heartbeat=None),
                                              [0, 1, 2], outs[0]))
    t1 = threading.Thread(target=_meet, args=(Rendezvous(store, 1, world_size=3, heartbeat=None),
                                              [0, 1, 2], outs[1]), kwargs={"timeout": 30.0})
    t0.start(), t1.start()
    t0.join(40), t1.join(40)
    assert outs[0]["error"].missing == outs[1]["error"].missing == (2,)
    assert TIMEOUT_S - 0.05 < outs[1]["waited"] < 15.0  # woken by the close: not its own 30 s
    assert "rank 0 closed the round" in str(outs[1]["error"])
    assert store.get(_key("c", "g", 0)) == b"0"  # one claim, by rank 0: one listing


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
    assert int(store.get(_key("d", "g", 0))) == QUIT + 0  # closed by rank 0
    assert int(store.get(_key("d", "g", 1))) == GO


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


def _rank1_in(store: Any, group: str, ranks: list[int], **spans: Any) -> None:
    """Rank 1's record: in round 0 of ``group`` (members ``ranks``), as given."""
    store.set(_key("r", 1), _planted(1, group, ranks, **spans))


def test_a_partner_busy_with_another_group_extends_the_wait_by_at_most_one_timeout() -> None:
    """Rank 1 waits in another group's open round until far in the future and never comes:
    rank 0 waits past its timeout for it, but never longer than twice its timeout."""
    store = HashStore()
    _rank1_in(store, "other", [1, 3], until_s=60.0)
    out: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=4, heartbeat=None), [0, 1], out)
    err = out["error"]
    assert err.missing == (1,)
    assert 2 * TIMEOUT_S - 0.05 < out["waited"] < 2 * TIMEOUT_S + 0.5
    assert "rank 1 is creating the 'dp' group (1, 3)" in str(err)
    # rank 1's group does not wait for rank 0: rank 0 is stuck behind it, and is told so
    assert "this rank is waiting behind ranks that asked for groups in different orders" in \
        str(err)


def _virtual_meet(world: World, rank: int, out: dict[str, Any],
                  heartbeat: float | None = None, timeout: float = TIMEOUT_S) -> None:
    """:func:`_meet` in virtual time: ``rank`` (of 4) meets rank 0 and 1 at ``g``."""
    rz = Rendezvous(world.store(rank), rank, world_size=4, heartbeat=heartbeat,
                    clock=world.clock_for(rank), publish_after=0)
    start = world.at()
    try:
        with rz.meet("g", [0, 1], timeout, dim="tp", desc="the 'tp' group (0, 1)",
                     shown=(0, 1)):
            pass
        out["ok"] = True
    except MembersMissingError as e:
        out["error"] = e
    out["waited"] = world.at() - start


def _virtual_rank1_in(world: World, **spans: Any) -> None:
    world.set(_key("r", 1), _planted(1, "other", [1, 3], **spans).decode())


def test_a_partner_between_a_failed_group_and_this_one_is_waited_for() -> None:
    """Rank 1 left a failed group just before rank 0's deadline and needs 0.55 s (less
    than the slack) to reach this one: rank 0 waits for it and both pass (virtual time: it
    failed on a busy machine when real threads ran late)."""
    world = World()
    _virtual_rank1_in(world, until_s=0.3)
    out0: dict[str, Any] = {}
    out1: dict[str, Any] = {}

    def rank1() -> None:
        world.sleep(0.35)
        _virtual_rank1_in(world, seq=2, until_s=-0.05, left_s=0.0)
        world.sleep(0.55)  # rank 0's own deadline passes during this gap
        _virtual_meet(world, 1, out1)

    world.spawn(_virtual_meet, world, 0, out0)
    world.spawn(rank1)
    world.join()
    assert out0.get("ok") and out1.get("ok"), (out0, out1)
    assert out0["waited"] == pytest.approx(0.9, abs=0.01) and 0.9 > TIMEOUT_S


def test_two_members_waiting_on_each_other_fail_at_their_own_deadlines() -> None:
    """Rank 0 waits at g for rank 1, which waits at h (open, with rank 0 in it) for rank 0:
    a cycle, so rank 0 does not extend its wait."""
    store = HashStore()
    _rank1_in(store, "h", [0, 1], until_s=60.0)
    out: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=2, heartbeat=None), [0, 1], out)
    assert out["error"].missing == (1,)
    assert out["waited"] < TIMEOUT_S + 0.5
    assert "ranks asked for groups in a different order" in str(out["error"])


def test_a_partner_whose_beat_stopped_inside_a_creation_is_named_gone() -> None:
    """Rank 1's record says it is busy in another group for a minute more, and it beats
    every 0.1 s, but no new write comes: rank 0 (timeout 10 s) looks at it at its deadline,
    again once it has seen no write for its liveness bound (3 periods + 2 s) plus the
    slack, and then names it, judged on rank 0's own clock (virtual time)."""
    world = World()
    _virtual_rank1_in(world, until_s=60.0, period=0.1)
    out: dict[str, Any] = {}
    world.spawn(_virtual_meet, world, 0, out, 0.1, 10.0)
    world.join()
    err = out["error"]
    bound = 3 * 0.1 + 2.0 + SLACK_S
    assert err.missing == (1,) and out["waited"] == pytest.approx(10.0 + bound, abs=0.01)
    assert f"rank 1 has not answered for {bound:.1f} s" in str(err) and "exited" in str(err)


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
        def multi_get(self, keys: list[str]) -> list[bytes]:
            raise KeyboardInterrupt

    store = HashStore()
    with pytest.raises(KeyboardInterrupt):
        with Rendezvous(Interrupting(store), 0, world_size=2, heartbeat=None).meet(
                "g", [0, 1], TIMEOUT_S, dim="tp", desc="g", shown=(0, 1)):
            pass
    assert int(store.get(_key("d", "g", 0))) == QUIT + 0
    out: dict[str, Any] = {}
    _meet(Rendezvous(store, 1, world_size=2, heartbeat=None), [0, 1], out)
    assert "error" in out and out["error"].missing == (0,)
    assert "rank 0 was interrupted (KeyboardInterrupt)" in str(out["error"])


def test_a_beating_member_is_seen_alive_and_a_silent_one_is_not() -> None:
    """``silent`` watches records for two beats: rank 1 beats (inside a meeting that waits),
    rank 2 never does."""
    store = HashStore()
    one = Rendezvous(store, 1, world_size=10, heartbeat=0.1)
    out: dict[str, Any] = {}
    t = threading.Thread(target=_meet, args=(one, [1, 9], out), kwargs={"timeout": 2.0})
    t.start()
    time.sleep(0.1)
    zero = Rendezvous(store, 0, world_size=10, heartbeat=0.1)
    assert list(zero.silent([1, 2])) == [2]
    t.join(10)
    zero.close(), one.close()
    assert not store.check([_key("r", 0)]) and not store.check([_key("r", 1)])


def test_outcome_values_are_counters() -> None:
    """GO and QUIT are numbers the store can add to (a non-number breaks TCPStore's add)."""
    assert GO < QUIT and QUIT - GO > 2**31


# ---- faults at every step, in virtual time: exact bounds ------------------------------------
T_S = 10.0  # every member's timeout in the table (virtual seconds)
VICTIM = 2


def _ticket(when: str) -> Trigger:
    return lambda op, key, value, phase: op == "add" and "/t/" in key and phase == when


def _wakeup(when: str) -> Trigger:
    return lambda op, key, value, phase: op == "set" and "/o/" in key and phase == when


def _commit(when: str) -> Trigger:
    return lambda op, key, value, phase: \
        op == "compare_set" and "/d/" in key and str(value) == str(GO) and phase == when


@attrs.frozen
class Case:
    """One row: who arrives when (None: never), which fault hits rank 2, and what each rank
    must see: ``("go", t)``, ``("fail", t, missing, words)`` (a MembersMissingError at
    virtual time t, naming exactly ``missing``, its message containing ``words``),
    ``("interrupted", t)`` or ``("killed",)``."""

    name: str
    arrive: dict[int, float | None]
    expect: dict[int, tuple[Any, ...]]
    trigger: tuple[str, Trigger] | None = None  # ("kill" | "interrupt", when)
    signal: tuple[float, str] | None = None  # (at, "kill" | "interrupt")
    retry: bool = False  # the victim asks again at once after an interrupt
    timeouts: dict[int, float] = attrs.Factory(dict)
    busy: dict[int, float] = attrs.Factory(dict)  # rank -> busy in another group until


TOOK = "took a ticket of this round and came no further"
STOPPED = "committed this round and stopped before waking the others"
ABSENT = "is not creating any group"
INTERRUPTED = "was interrupted (KeyboardInterrupt)"
CASES = [
    Case("killed before its ticket",
         {0: 0, 1: 0, 2: 0}, {0: ("fail", T_S, (2,), ABSENT), 1: ("fail", T_S, (2,), ABSENT),
                              2: ("killed",)},
         trigger=("kill", _ticket("before"))),
    Case("killed right after its ticket, the round's last, before its commit",
         {0: 0, 1: 0, 2: 1}, {0: ("fail", T_S + SLACK_S, (2,), TOOK),
                              1: ("fail", T_S + SLACK_S, (2,), TOOK), 2: ("killed",)},
         trigger=("kill", _ticket("after"))),
    Case("interrupted right after its ticket, the round's last",
         {0: 0, 1: 0, 2: 1}, {0: ("fail", 1, (2,), INTERRUPTED),
                              1: ("fail", 1, (2,), INTERRUPTED), 2: ("interrupted", 1)},
         trigger=("interrupt", _ticket("next"))),
    Case("interrupted right after its ticket, first to come; it asks again at once",
         {0: 1, 1: 1, 2: 0}, {0: ("go", 1), 1: ("go", 1), 2: ("go", 1)},
         trigger=("interrupt", _ticket("next")), retry=True),
    Case("interrupted inside its ticket call (the value lost); it asks again at once",
         {0: 1, 1: 1, 2: 0}, {0: ("go", 1), 1: ("go", 1), 2: ("go", 1)},
         trigger=("interrupt", _ticket("after")), retry=True),
    Case("interrupted while it waits: the absent member is named too",
         {0: 0, 1: None, 2: 0}, {0: ("fail", 3, (1, 2), ABSENT), 2: ("interrupted", 3)},
         signal=(3, "interrupt")),
    Case("killed while it waits; the others then all come: its ticket counts (go; torch's "
         "creation names it)",
         {0: 5, 1: 5, 2: 0}, {0: ("go", 5), 1: ("go", 5), 2: ("killed",)},
         signal=(3, "kill")),
    Case("the committer killed between its commit and its wake-up",
         {0: 0, 1: 0, 2: 1}, {0: ("fail", T_S + SLACK_S, (2,), STOPPED),
                              1: ("fail", T_S + SLACK_S, (2,), STOPPED), 2: ("killed",)},
         trigger=("kill", _commit("after"))),
    Case("the committer interrupted between its commit and its wake-up",
         {0: 0, 1: 0, 2: 1}, {0: ("fail", T_S + SLACK_S, (2,), INTERRUPTED),
                              1: ("fail", T_S + SLACK_S, (2,), INTERRUPTED),
                              2: ("interrupted", 1)},
         trigger=("interrupt", _commit("next"))),
    Case("the committer killed right after its wake-up (go; torch's creation names it)",
         {0: 0, 1: 0, 2: 1}, {0: ("go", 1), 1: ("go", 1), 2: ("killed",)},
         trigger=("kill", _wakeup("after"))),
    Case("the committer interrupted right after its wake-up",
         {0: 0, 1: 0, 2: 1}, {0: ("go", 1), 1: ("go", 1), 2: ("interrupted", 1)},
         trigger=("interrupt", _wakeup("next"))),
    Case("the closer killed while it waits for a busy member",
         {0: 0.5, 1: None, 2: 0},
         {0: ("fail", 0.5 + 2 * T_S + SLACK_S, (1, 2), "claimed this round"),
          2: ("killed",)},
         signal=(12, "kill"), busy={1: 14}),
    Case("the closer interrupted while it waits for a busy member",
         {0: 0.5, 1: None, 2: 0}, {0: ("fail", 12, (1, 2), INTERRUPTED),
                                   2: ("interrupted", 12)},
         signal=(12, "interrupt"), busy={1: 14}),
]


def _member(world: World, rz: Rendezvous, rank: int, case: Case,
            out: dict[int, tuple[Any, ...]]) -> None:
    start = case.arrive[rank]
    assert start is not None
    world.sleep(start)
    for _ in range(3):
        try:
            with rz.meet("g", [0, 1, 2], case.timeouts.get(rank, T_S), dim="tp",
                         desc="the 'tp' group (0, 1, 2)", shown=(0, 1, 2)):
                out[rank] = ("go", world.at())
            return
        except MembersMissingError as e:
            out[rank] = ("fail", world.at(), e.missing, str(e))
            return
        except KeyboardInterrupt:
            out[rank] = ("interrupted", world.at())
            if not case.retry:
                return
        except Killed:
            out[rank] = ("killed",)
            return


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_member_killed_or_interrupted_at_any_step_is_named_within_its_bound(
        case: Case) -> None:
    """Members 0, 1, 2 of one group (timeout 10 s, virtual time); rank 2 is killed or
    interrupted at the step the row names.  Every other member either passes with the rest
    (its round really had everyone's ticket) or fails at exactly the time the protocol
    bounds (its deadline; plus the slack for a ticket holder that came no further; at once
    when the victim was interrupted: the victim closes its round), naming the missing
    members.  No rank ever holds two tickets of one round."""
    world = World()
    if case.trigger is not None:
        kind, when = case.trigger
        (world.kill_at if kind == "kill" else world.interrupt_at)(VICTIM, when)
    for rank, until in case.busy.items():  # busy waiting in another group's open round
        world.set(_key("r", rank), _planted(rank, "other", [1, 3], until_s=until).decode())
    out: dict[int, tuple[Any, ...]] = {}
    for rank, at in case.arrive.items():
        if at is not None:
            rz = Rendezvous(world.store(rank), rank, world_size=4, heartbeat=None,
                            clock=world.clock_for(rank), publish_after=0)
            world.spawn(_member, world, rz, rank, case, out)
    if case.signal is not None:
        world.signal_at(VICTIM, *case.signal)
    world.join()
    for rank, want in case.expect.items():
        got = out[rank]
        assert got[0] == want[0], (rank, got)
        if len(want) > 1:
            assert got[1] == pytest.approx(want[1], abs=0.01), (rank, got)
        if want[0] == "fail":
            assert got[2] == want[2], (rank, got)
            assert want[3] in got[3], (rank, got[3])
            if VICTIM in want[2] and want[3] == INTERRUPTED:
                assert f"rank 2 {INTERRUPTED}" in got[3], got[3]
    held = [(rank, (value // TICKET - 1) // 3) for rank, name, value in world.tickets
            if name == "g"]
    assert len(held) == len(set(held)), f"a rank holds two tickets of one round: {held}"


def test_a_retry_after_a_failure_inside_torch_waits_for_a_peer_still_inside_it() -> None:
    """Ranks 0 and 1 meet; torch's creation then fails at once on rank 1 and only after its
    timeout (plus the liveness check) on rank 0.  Rank 1 asks again at once: it waits past
    its own deadline for rank 0, which its beats show inside that creation, and both pass
    in the next round, whose group has a torch name of its own."""
    store = HashStore()
    timeout = 1.0
    rounds: dict[int, list[Any]] = {0: [], 1: []}
    zero = Rendezvous(store, 0, world_size=2, heartbeat=0.1)
    one = Rendezvous(store, 1, world_size=2, heartbeat=0.1)

    def member(rz: Rendezvous, rank: int, inside_torch_s: float) -> None:
        for attempt in range(2):
            try:
                with rz.meet("g", [0, 1], timeout, dim="tp", desc="g", shown=(0, 1)) as k:
                    rounds[rank].append((k, time.time()))
                    if attempt == 0:
                        time.sleep(inside_torch_s)
                        raise RuntimeError("torch's creation failed")
                return
            except RuntimeError as e:
                rounds[rank].append(e)

    threads = [threading.Thread(target=member, args=(zero, 0, timeout + zero.explain_s)),
               threading.Thread(target=member, args=(one, 1, 0.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    zero.close()
    one.close()
    for rank in (0, 1):
        (k0, _), failed, (k1, _) = rounds[rank]
        assert isinstance(failed, RuntimeError) and "torch" in str(failed), rounds
        assert (k0, k1) == (0, 1), rounds
    assert torch_name("g", 1) != torch_name("g", 0)
    started = rounds[1][0][1]
    assert rounds[1][2][1] - started > timeout  # rank 1 waited past its own deadline


def test_a_ranks_threads_in_different_groups_are_each_counted_where_they_wait() -> None:
    """Rank 0 waits in g (members 0, 1) and h (members 0, 2) from two threads of one
    process; rank 2 never comes to h, rank 1 comes to g after both wrote their record.  g
    passes; h fails naming rank 2 only (rank 0's record lists both of its rounds)."""
    store = HashStore()
    zero = Rendezvous(store, 0, world_size=3, heartbeat=None)
    outs: dict[str, dict[str, Any]] = {"g": {}, "h": {}}
    threads = [threading.Thread(target=_meet, args=(zero, members, outs[name]),
                                kwargs={"name": name, "timeout": 1.0})
               for name, members in (("g", [0, 1]), ("h", [0, 2]))]
    for t in threads:
        t.start()
    time.sleep(0.4)
    one: dict[str, Any] = {}
    _meet(Rendezvous(store, 1, world_size=3, heartbeat=None), [0, 1], one, name="g")
    for t in threads:
        t.join(10)
    assert outs["g"].get("ok") and one.get("ok"), (outs, one)
    assert outs["h"]["error"].missing == (2,)


def test_ctrl_c_while_waiting_acts_at_once_and_leaves_a_true_message() -> None:
    """The main thread waits at a barrier (members 0, 1, 2; rank 2 never comes) with a 5 s
    timeout; a real SIGINT reaches it 0.3 s in.  KeyboardInterrupt is raised at once (not at
    the deadline), and rank 1, waiting with a 10 s timeout, fails at once naming rank 0
    (interrupted) and rank 2 (absent)."""
    store = HashStore()
    other: dict[str, Any] = {}
    t = threading.Thread(target=_meet, args=(Rendezvous(store, 1, world_size=3,
                                                        heartbeat=None), [0, 1, 2], other),
                         kwargs={"timeout": 10.0})
    t.start()
    main = threading.main_thread().ident
    assert main == threading.get_ident()
    timer = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        start = time.time()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            with Rendezvous(store, 0, world_size=3, heartbeat=None).meet(
                    "g", [0, 1, 2], 5.0, dim="tp", desc="g", shown=(0, 1, 2)):
                pass
        took = time.time() - start
    finally:
        timer.join()
        signal.signal(signal.SIGINT, before)
    assert took < 0.3 + 3.0  # at once, not its own 5 s (slack for a loaded machine)
    t.join(10)
    err = other["error"]
    assert err.missing == (0, 2) and other["waited"] < 0.3 + 5.0, other  # not its own 10 s
    assert "rank 0 was interrupted (KeyboardInterrupt)" in str(err)
    assert "rank 2 is not creating any group" in str(err)


class _EndsWaitsAtOnce(CountingStore):
    """A store whose waits end at once at a timeout, as a ``HashStore`` clone's does when
    another thread sharing its timeout set a shorter one."""

    def multi_get(self, keys: list[str]) -> list[bytes]:
        self._count("multi_get", len(keys))
        raise RuntimeError("Wait timeout")


def test_waits_that_a_shared_timeout_ends_early_are_asked_again_at_a_bounded_rate() -> None:
    """A wait ended early at the store's timeout is asked again no sooner than ``REASK_S``
    after the previous ask (the failure path at 1,024 members on ``HashStore`` made up to
    18,546 calls per member): a 0.3 s timeout, then the claim, the look and the close, asks
    at most 0.3 / REASK_S + 1 times before the deadline, and the member still fails
    naming the absent one."""
    store = _EndsWaitsAtOnce(HashStore())
    out: dict[str, Any] = {}
    _meet(Rendezvous(store, 0, world_size=2, heartbeat=None), [0, 1], out, timeout=0.3)
    assert out["error"].missing == (1,), out
    assert 0.25 < out["waited"] < 0.3 + 2.0  # the count below is the law; this, slack
    assert store.calls["multi_get"] <= 0.3 / REASK_S + 1, store.calls


def test_a_waiting_members_record_is_written_while_it_waits_and_says_creating_inside() -> None:
    """A barrier activates its attempt, and the record is built only when read.  What peers
    read must not change: rank 0 waits for rank 1 (0.6 s late); past the grace period its
    record says it waits in round 0 of ``g`` (its 2 members, not creating, its deadline about
    5 s on); once the round went ahead, a creation that lasts past a beat (0.25 s) says
    it is inside the creation until its timeout plus the liveness check."""
    store = HashStore()
    zero = Rendezvous(store, 0, world_size=2, heartbeat=0.25)
    reader = Rendezvous(store, 1, world_size=2, heartbeat=None)
    seen: dict[str, Any] = {}

    def inside() -> None:
        time.sleep(0.7)  # past two beats
        seen["inside"] = reader.record(0)

    out: dict[str, Any] = {}
    t = threading.Thread(target=_meet, args=(zero, [0, 1], out),
                         kwargs={"timeout": 5.0, "body": inside})
    t.start()
    time.sleep(0.3)  # past the grace period and a timer tick
    seen["waiting"] = reader.record(0)
    time.sleep(0.3)
    with reader.meet("g", [0, 1], 5.0, dim="tp", desc="g", shown=(0, 1)):
        pass
    t.join(10)
    assert out.get("ok"), out
    waiting = seen["waiting"].record
    assert (waiting.group, waiting.round, waiting.size, waiting.creating) == ("g", 0, 2, False)
    assert waiting.ranks == (0, 1) and ("g", 0) in waiting.in_
    assert 3.0 < waiting.until_s < 5.0, waiting
    inner = seen["inside"].record
    assert (inner.group, inner.round, inner.creating) == ("g", 0, True), inner
    assert inner.seq > waiting.seq
    assert 5.0 < inner.until_s < 5.0 + zero.explain_s, inner
    zero.close()
    reader.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_from_another_thread_knows_its_main_thread() -> None:
    """The barrier keeps the main thread's id as a value (a Ctrl-C acts at once only there);
    a child forked from a non-main thread has that thread as its main thread, and the value
    follows it (else the child's barrier would wait on a helper thread, or never watch)."""
    codes: list[int] = []

    def fork() -> None:
        pid = os.fork()
        if pid == 0:
            me = threading.get_ident()
            os._exit(0 if Interrupts.main == me == threading.main_thread().ident else 1)
        codes.append(os.waitpid(pid, 0)[1])

    t = threading.Thread(target=fork)
    t.start()
    t.join(30)
    assert codes == [0]
    assert Interrupts.main == threading.main_thread().ident


@pytest.mark.parametrize("moved_on", [False, True])
def test_the_grace_periods_write_is_of_the_round_waited_in(moved_on: bool) -> None:
    """The timer writes a waiting member's record after the grace period only while it still
    waits in the round it was asked for: a member that a closer sent on to the next round
    (``late``) within that time is between two tickets (its round not known yet), or
    commits the next round without waiting, and no record of that moment is written.  The
    control: a member still waiting in round 3 has its record written, naming round 3."""
    store = HashStore()
    rz = Rendezvous(store, 0, world_size=4, heartbeat=None)
    start = rz.clock()
    a = Attempt("g", 4, range(4), "g", "tp", (0, 1, 2, 3), start, start + 5.0, start + 10.0,
                round=3, counter=rz.key("t", "g"))
    rz._activate(a)
    rz._later(a)
    if moved_on:
        a.round = -1  # as _arrive's loop does before the next ticket
    time.sleep(0.3)  # past the grace period and a timer tick
    seen = Rendezvous(store, 1, world_size=4, heartbeat=None).record(0)
    if moved_on:
        assert seen is None
    else:
        assert seen is not None and (seen.record.group, seen.record.round) == ("g", 3)
    rz.close()
