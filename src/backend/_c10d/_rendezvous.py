"""The creation barrier: members of a group meet in the default store before torch creates it.

Torch 2.13 names a locally synchronized group ``sha1(ranks + number of groups this process
has)``, a per-process counter: one late or failed creation leaves the counters out of step,
and every later group among the same processes waits for a rendezvous that never comes.
meshlayout names each group from its family and members (:class:`~backend._c10d._spec.GroupSpec`)
and, before torch's creation, has the members meet at this barrier.

**Rounds and tickets.**  A barrier named ``G`` with ``N`` members runs in rounds.  Every
attempt of a member takes one *ticket* ``t = add(t/G, 1)``; tickets ``kN+1 .. kN+N`` make
round ``k``.  The member holding the round's last ticket *commits* it:
``compare_set(d/G/k, "", GO)``, then wakes the others: ``set(o/G/k, GO)``.  The others block
in the store on ``get(o/G/k)`` (on a connection of their own, so nothing else of the
process waits behind them), first for a grace period (:data:`GRACE_S`; a barrier whose
members all come passes here), then, having written their record, until their deadline.
A member whose deadline passes *claims* the round (``compare_set(c/G/k, "", rank)`` wins),
lists who is missing (the only listing: once per failed round), applies the waiting policy
(:func:`next_deadline`) and, when the policy says so, *closes* it: it writes its reasons
(``w/G/k/<closer>``), fills the round's remaining tickets (``compare_set`` on ``t/G`` up to
``(k+1)N``, so that no later ticket lands in it), then ``compare_set(d/G/k, "", QUIT +
closer)`` and the wake-up, and every member fails with the closer's reasons.  Commit and
close are the same ``compare_set`` on one key, so exactly one wins, and whoever writes the
wake-up writes the value that won: every member agrees on the round's outcome.  (Waiters
block on ``o``, written by ``set``, rather than on ``d``: TCPStore's ``compare_set`` wakes no
waiter on its legacy server, and on its libuv server one that reads an absent key wakes
them all.)  A member that passes learns its round ``k``: torch names the group ``name`` in
round 0 and ``name.k`` after (:func:`torch_name`), so a re-creation (after ``shutdown()``, a
rebind or a failure inside torch) never meets the store keys an earlier attempt left under
the same name.

**States of a round** (of its decision key ``d/G/k``): *open* (absent, fewer than N tickets
taken), *full* (N tickets: being committed, or filled by a closer), *go* (``GO``), *quit*
(``QUIT + closer``; reasons in ``w/G/k/<closer>``).  Transitions: open → full → go; open or
full → quit.  A round never reopens.

**Store keys** (under ``meshlayout/``): ``t/G`` the ticket counter; ``o/G/k`` the wake-up and
``d/G/k`` the decision of each round; ``c/G/k`` the close claim (the claimer's rank) and
``w/G/k/<rank>`` the reasons of a failed one; ``r/<rank>`` this rank's record (the groups
and rounds its threads wait in, since and until when, its last beat; whether it is inside
torch's creation, left a failed round, or was interrupted; deleted at
:meth:`Rendezvous.close`); ``n/G`` the notes of a rebind's barrier
(:meth:`Rendezvous.agree`).  A group created at the first try leaves three keys (``t``,
``o``, ``d``: about 150 bytes, as torch leaves its own per-group keys) for the store's life; a
failed round adds three or four more.  Round numbers never repeat, so nothing is deleted
while a member may still read it.

**Interrupted and retried attempts.** The ticket is taken by one C call whose result is
stored before any Python code runs, so an interrupt (``KeyboardInterrupt``, or any exception
raised into the thread) that lands right after it still finds the ticket. From its ticket
on, an attempt that ends without a decision (interrupted, or its store call failed) closes
its round, with reasons naming itself ("was interrupted") and the members that had not come,
so the others fail at once, saying so, and its retry takes a ticket in a later round. Where
the ticket call itself raised (its value is unknown), the round the counter points into is
closed unless it is full. A committer interrupted between its commit and its wake-up is
named by its peers as one that stopped there (below). A Ctrl-C acts at once: the main thread
waits on a lock, which a signal interrupts, while a helper thread blocks in the store for
it. An attempt that failed after go (in torch) retries in a later round, where it meets its
peers' retries (a peer still inside torch's creation of the earlier round is waited for,
until that creation's timeout) or fails naming who did not come.

**Invariants.**
- *Agreement*: a round is go for all its members or quit for all of them (a go round whose
  committer stopped before waking anyone fails on every member it did not wake).
- *No lone pass*: go needs N tickets of one round, and a rank holds at most one ticket per
  round: it takes a ticket only at the start of an attempt, and its previous attempt ended
  with its round full (go, or an interrupted committer), closed and filled (quit), or
  full.  So the N tickets of a round that goes are N distinct members that were present
  when they took them; a member interrupted or killed after its ticket, in the moment its
  round filled, leaves its peers inside torch's creation, which fails at its timeout
  naming it.
- *Bounded waiting, and it says who*: a member waits until its deadline (its timeout) or
  until its round is decided.  Past the deadline it waits only while the policy sees a
  missing member on its way: one holding a ticket of this round without a record (for
  :data:`SLACK_S` after it was first seen; then it is named as stopped), one busy with
  another group (until that one's deadline plus :data:`SLACK_S`), one still inside torch's
  creation of an earlier round of this group, or that left a round less than
  :data:`SLACK_S` ago; never past twice its timeout plus :data:`SLACK_S`.  A member that dies
  or is interrupted is named in every failure it causes: before its ticket, as absent, at
  the deadline; after its ticket, while the round is not full or holding its last ticket
  (full, not committed), as a ticket holder that stopped, at the deadline plus
  :data:`SLACK_S`; between its commit and its wake-up, as a committer that stopped, at the
  deadline plus :data:`SLACK_S` (its peers fail rather than enter torch's creation without
  it); after the wake-up, or after its ticket when the others then fill the round (its
  ticket counts: the round goes), inside torch's creation, at the timeout and the liveness
  check that follows (two beats and half a second; the creation is watched, see
  ``_torch_groups._watched``, as Gloo may retry a dead member for several timeouts).  One
  interrupted while it waits closes its round at once.
- *Cost*: on the success path a member makes 2 store calls (its ticket, the ``get`` of the
  wake-up, which carries the decision) and the committer 3 (its ticket, the commit, the
  wake-up), whatever N; nobody lists the members; a member that waits past the grace period
  adds its record and a second ``get``. Liveness costs nothing while nothing is being
  created: a rank beats its record only while it is inside a creation that lasts (or
  explains a failure), every :func:`beat_period` seconds (1 s, longer for worlds over 2,000
  ranks: at most :data:`LIVENESS_WRITES_PER_S` beats per second whatever the world).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs

from .._core import MembersMissingError

__all__ = ["Lease", "Peer", "Rendezvous", "beat_period", "lease", "next_deadline", "torch_name"]

PREFIX = "meshlayout"
GO = 1 << 40  # d/G/k after a commit
QUIT = 2 << 40  # ... or QUIT + the closer's rank after a close
SLACK_S = 1.0  # how long past a busy peer's deadline it may take to arrive here
GRACE_S = 0.05  # a member that waits longer than this writes its record
LIVENESS_WRITES_PER_S = 2000  # the most beats per second a whole world sends
_ABSENT = "\x00meshlayout-absent"
_SHOWN = 64  # ranks written into a record or a reason, at most
_LISTED_ON_INTERRUPT = 1024  # an interrupted member lists the missing of groups this small
_STOPPED = -1  # a round committed by a member that stopped before waking the others


def beat_period(world_size: int, heartbeat: float) -> float:
    """Seconds between two beats of a rank inside a creation: ``heartbeat``, or longer
    in worlds so large that all ranks beating at once would pass
    :data:`LIVENESS_WRITES_PER_S` writes per second.

    >>> beat_period(8, 1.0), beat_period(131072, 1.0)
    (1.0, 65.536)
    """
    return max(heartbeat, world_size / LIVENESS_WRITES_PER_S)


def torch_name(name: str, round_: int) -> str:
    """Torch's name for the group a barrier's round ``round_`` passed: ``name`` for the first
    round, then a fresh one per round (so no creation meets an earlier attempt's keys).

    >>> torch_name("ml-ab", 0), torch_name("ml-ab", 3)
    ('ml-ab', 'ml-ab.3')
    """
    return name if round_ == 0 else f"{name}.{round_}"


# ---- the waiting policy: pure -------------------------------------------------------------
@attrs.frozen
class Peer:
    """What the member closing a round knows of one missing member.

    ``state``: ``"absent"`` (no record), ``"arriving"`` (it holds a ticket of this round but
    has written no record: first seen at ``until``), ``"busy"`` (waiting in another group's
    round until ``until``), ``"creating"`` (inside torch's creation of an earlier round of
    this group, which fails by ``until``), ``"left"`` (it left a failed round of another
    group at ``until``), ``"gave_up"`` (it left a failed earlier round of this group at
    ``until``: it may ask again), ``"finished"`` (it created another group a moment ago: its
    last beat, one period before ``until``), ``"idle"`` (its last group was created),
    ``"created"`` (an earlier round of this group went ahead with it), ``"interrupted"`` (an
    exception, e.g. a Ctrl-C, ended its attempt), ``"gone"`` (its beat stopped),
    ``"claimed"`` (it claimed this round to close it, and never did).
    ``waits_for_me``: its group waits, directly or through others, for the closing rank.
    """

    state: str
    until: float = 0.0
    waits_for_me: bool = False


_ON_ITS_WAY = ("arriving", "busy", "creating", "left", "finished", "gave_up")


def next_deadline(now: float, deadline: float, cap: float, peers: Sequence[Peer]) -> float | None:
    """When the closing member looks again, or None: close the round now.

    A member waits past its deadline only for peers on their way here, each until its
    ``until`` plus :data:`SLACK_S`: one that holds a ticket of this round (first seen at
    ``until``: the commit, or its record, is in flight), one busy with another group until
    that one's deadline (it then fails there and comes), one inside torch's creation of an
    earlier round of this group until that creation fails, one that left a failed round (of
    another group, or an earlier one of this group: it may ask again) or finished creating
    another group at ``until``.  A peer that waits for this member (a
    cycle: groups asked in different orders) is not waited for.  Never past ``cap``.

    >>> next_deadline(10.0, 10.0, 20.0, [Peer("busy", until=12.0)])
    13.0
    >>> next_deadline(10.0, 10.0, 20.0, [Peer("busy", until=12.0, waits_for_me=True)]) is None
    True
    """
    if now >= cap:
        return None
    ahead = [p.until + SLACK_S for p in peers if p.state in _ON_ITS_WAY and not p.waits_for_me]
    until = min(max([deadline, *ahead]), cap)
    return until if until > now else None


_KINDS = {"absent": "skipped", "idle": "skipped", "left": "skipped", "finished": "skipped",
          "busy": "order", "creating": "retry",
          "arriving": "late", "gave_up": "late", "created": "created", "gone": "gone",
          "claimed": "gone", "interrupted": "interrupted"}
_CAUSES = (  # the first kind present among the missing names the likely cause
    ("interrupted", "a member was interrupted (a Ctrl-C, or another exception raised into it) "
                    "while it waited: it closed the round, so nobody passes without it"),
    ("gone", "a member exited or stopped answering"),
    ("order", "ranks asked for groups in a different order (each waits for a group another "
              "is not creating yet)"),
    ("behind", "this rank is waiting behind ranks that asked for groups in different orders "
               "(its missing members are creating other groups, which wait on yet others)"),
    ("retry", "an earlier attempt failed inside torch's creation, and a member is still "
              "in it (it fails there at its timeout, then may ask again)"),
    ("created", "an earlier attempt of this rank failed after its members had met: they "
                "created the group and will not ask again (shut the backend down on every "
                "rank and start a new one to create it again)"),
    ("late", "this rank is late: the other members gave up waiting for it"),
    ("skipped", "a member skipped this group (or is late)"),
)


# ---- the store ------------------------------------------------------------------------------
def _key(*parts: object) -> str:
    return "/".join([PREFIX, *map(str, parts)])


_POOLS: weakref.WeakKeyDictionary[Any, dict[str, list[Any]]] = weakref.WeakKeyDictionary()
_POOL_LOCK = threading.Lock()


class Lease:
    """One connection to a store, a clone of it, held by one user at a time and given back
    to the store's pool when released (or when the holder, e.g. a thread-local, is gone).

    A TCPStore connection serves one blocking call at a time, so each thread that blocks in
    the store needs one of its own; making one now and then takes 5 s on loopback, with the
    GIL held (torch 2.13's ``clone``, about 1 in 30), which stalls every thread of the
    process: connections are therefore reused, process-wide, per store, rather than made per
    thread or per backend."""

    def __init__(self, root: Any, kind: str) -> None:
        self._root = weakref.ref(root)
        self._kind = kind
        with _POOL_LOCK:
            free = _POOLS.setdefault(root, {}).setdefault(kind, [])
            conn = free.pop() if free else None
        self.conn: Any = conn if conn is not None else root.clone()

    def release(self) -> None:
        """Give the connection back (idempotent)."""
        conn, self.conn = self.conn, None
        root = self._root()
        if conn is None or root is None:
            return
        with _POOL_LOCK:
            pools = _POOLS.get(root)
            if pools is not None:
                pools.setdefault(self._kind, []).append(conn)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()


def lease(root: Any, kind: str = "barrier") -> Lease | None:
    """A :class:`Lease` on ``root``'s pool of ``kind``, or None where ``root`` cannot be
    cloned (then its users share it)."""
    try:
        return Lease(root, kind) if hasattr(root, "clone") else None
    except TypeError:  # a store that cannot be weakly referenced: no pool
        return None


class _Closed:
    """The store of a closed rendezvous: every use says so."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("this backend was shut down; its store is released")


@attrs.define
class _Attempt:
    """One member's attempt at one barrier (what the steps below share)."""

    name: str
    size: int
    members: Sequence[int]
    desc: str
    dim: str
    shown: tuple[int, ...]  # the group's ranks for messages (this rank's group)
    start: float
    deadline: float
    cap: float
    round: int = -1
    late: bool = False  # the others closed a round before this rank came
    tickets: list[int] = attrs.Factory(list)  # filled by the ticket call itself (see _take)
    why: dict[str, Any] = attrs.Factory(dict)  # the reasons of a failure seen, not decided

    @property
    def last(self) -> int:
        """The last ticket of this attempt's round."""
        return (self.round + 1) * self.size


def _decision(value: int) -> tuple[bool, int | None]:
    """(whether a decision value is go, the closer's rank if it is quit)."""
    return (True, None) if value == GO else (False, value - QUIT if value >= QUIT else None)


class _Helper:
    """Runs the main thread's blocking store calls on a thread of its own, so that a Ctrl-C
    acts at once: the main thread waits on a lock, which a signal interrupts (a wait inside
    the store is not interrupted).  A helper keeps its connection (its thread's clone of the
    store); one still blocked in a call the main thread gave up on finishes it (the
    interrupted attempt's close wakes it), then serves again.  Idle helpers end after a
    minute."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Any]] = []

    def run(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
        if jobs is None:
            jobs = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(jobs,), daemon=True,
                             name="meshlayout-wait").start()
        done = threading.Event()
        box: list[Any] = []
        jobs.put((fn, box, done))
        done.wait()  # interrupted by a signal: the helper finishes in the background
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def _serve(self, jobs: queue.SimpleQueue[Any]) -> None:
        while True:
            try:
                job = jobs.get(timeout=60.0)
            except queue.Empty:
                with self._lock:
                    if jobs in self._idle:
                        self._idle.remove(jobs)
                        return
                continue
            if job is None:
                return
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as e:  # handed to the caller
                box.append((False, e))
            done.set()
            with self._lock:
                self._idle.append(jobs)

    def stop(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for jobs in idle:
            jobs.put(None)


class Rendezvous:
    """One process's side of the barrier (see the module).

    ``clock`` (wall time by default) stamps records and measures every deadline; the
    store's blocking calls are given the time left by it (a test gives a simulated clock
    and a store that keeps the same time)."""

    def __init__(self, store: Any, rank: int, *, world_size: int,
                 heartbeat: float | None = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._root = store
        self._rank = rank
        self._clock = clock
        self._period = beat_period(world_size, heartbeat) if heartbeat else None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._active: dict[int, dict[str, Any]] = {}  # thread -> the record it beats
        self._passed: dict[str, int] = {}  # barrier -> the last round this rank passed
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._helper = _Helper()

    # ---- connections and records ------------------------------------------------------------
    def warm(self, connections: int) -> None:
        """Open ``connections`` barrier connections now (into the store's pool), so that the
        first creations do not (see :class:`Lease`: opening one may stall for seconds)."""
        held = [lease(self._root) for _ in range(connections)]
        for h in held:
            if h is not None:
                h.release()

    def _store(self) -> Any:
        """This thread's connection: a clone of the default store's (a :class:`Lease`, kept
        while the thread lives), so that a blocking wait holds up nothing else of the
        process (torch's own store calls included)."""
        mine = getattr(self._local, "store", None)
        if mine is None:
            held = lease(self._root)
            self._local.lease = held
            mine = self._local.store = held.conn if held is not None else self._root
        return mine

    def _peek(self, key: str) -> bytes | None:
        """The value at ``key`` or None, in one call that never blocks (a compare_set that
        cannot match)."""
        got = bytes(self._store().compare_set(key, _ABSENT, _ABSENT))
        return None if got == _ABSENT.encode() else got

    def _record(self, rank: int) -> dict[str, Any] | None:
        raw = self._peek(_key("r", rank))
        return json.loads(raw) if raw else None

    def _merged(self, mine: dict[str, Any]) -> dict[str, Any]:
        """This rank's record: this thread's, listing every group and round the rank's
        threads wait in (``in``)."""
        with self._lock:
            rounds = [[r["group"], r["round"]] for r in self._active.values()
                      if r.get("group") and "round" in r]
        return {**mine, "in": rounds, "beat": self._clock()}

    def _publish(self, record: dict[str, Any]) -> None:
        """Write this rank's record, and beat it while this thread is inside the barrier or
        the creation that follows (until :meth:`_quiet`)."""
        self._activate(record)
        self._store().set(_key("r", self._rank), json.dumps(self._merged(record)))

    def _activate(self, record: dict[str, Any]) -> None:
        """Beat ``record`` from the next period on while this thread is inside the barrier or
        the creation (a creation that is over before then writes nothing)."""
        with self._lock:
            self._active[threading.get_ident()] = record
            if self._period is not None and self._thread is None and not self._stop:
                self._thread = threading.Thread(target=self._beat, daemon=True,
                                                name=f"meshlayout-beat-{self._rank}")
                self._thread.start()

    def _quiet(self) -> None:
        with self._lock:
            self._active.pop(threading.get_ident(), None)

    def _beat(self) -> None:
        while True:
            self._wake.wait(self._period)
            with self._lock:
                if self._stop:
                    return
                record = next(reversed(self._active.values()), None)
            if record is not None:
                try:
                    self._store().set(_key("r", self._rank), json.dumps(self._merged(record)))
                except Exception:  # the store is gone (rank 0 exited): nothing left to tell
                    return

    @property
    def beating(self) -> bool:
        """Whether this rank beats inside creations (so peers' silence means something)."""
        return self._period is not None and not self._stop

    @property
    def lost_after(self) -> float:
        """How long a rank inside a creation may go without a beat before it counts as lost
        (3 periods + 2 s)."""
        return 3 * (self._period or 0.0) + 2.0

    @property
    def explain_s(self) -> float:
        """How long :meth:`silent` watches (two periods and half a second)."""
        return 2 * (self._period or 0.0) + 0.5

    def close(self) -> None:
        """Stop beating, delete this rank's record and let go of the store (idempotent), so
        that destroying the default group frees it."""
        with self._lock:
            self._stop = True
            self._active.clear()
        self._wake.set()
        self._helper.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if not isinstance(self._root, _Closed):
            with contextlib.suppress(Exception):
                self._store().delete_key(_key("r", self._rank))
        self._root = _Closed()
        self._local = threading.local()

    # ---- the barrier --------------------------------------------------------------------------
    @contextlib.contextmanager
    def meet(self, name: str, members: Sequence[int], timeout: float, *, dim: str,
             desc: str, shown: tuple[int, ...]) -> Iterator[int]:
        """Meet the other ``members`` at barrier ``name``, then run the body (the creation)
        while beating; yields the round that passed (:func:`torch_name` names its group).
        Raises :class:`~backend.MembersMissingError` when the round this rank is in closes
        (see the module).  While the body runs, this rank's record says it is inside the
        creation, until the body's own timeout (``timeout``) and a liveness check are
        over; a body that raises marks the record as having left the round."""
        start = self._clock()
        a = _Attempt(name, len(members), members, desc, dim, shown, start,
                     start + timeout, start + 2 * timeout)
        try:
            k = self._arrive(a)
            now = self._clock()
            self._activate(self._record_of(a, creating=now,
                                           until=now + timeout + self.explain_s))
            try:
                yield k
            except BaseException as e:
                self._left(a, e)
                raise
        finally:
            self._quiet()

    def agree(self, name: str, members: Sequence[int], timeout: float, note: str) -> list[str]:
        """Meet ``members`` at barrier ``name`` and return every member's non-empty ``note``.

        A note is appended to one key before this rank arrives, so once all have arrived
        every note is there: one read, whatever the number of members (a rebind's
        survivors telling each other which groups failed under them).
        """
        if note:
            self._store().append(_key("n", name), note + "\n")
        with self.meet(name, members, timeout, dim="rebind",
                       desc=f"the rebind of {len(members)} surviving ranks", shown=()):
            pass
        notes = self._peek(_key("n", name)) or b""
        return [line for line in notes.decode().split("\n") if line]

    def _arrive(self, a: _Attempt) -> int:
        """Take tickets until a round is decided with this rank in it; the round, if it went
        ahead (else the failure is raised)."""
        while True:
            a.tickets.clear()
            a.round = -1
            try:
                ticket = self._take(a)
                a.round = k = (ticket - 1) // a.size
                self._activate(self._record_of(a))  # written only if this takes a while
                value = self._decide(a, GO) if ticket == a.last else self._await(a)
            except BaseException as e:
                self._abandon(a, e)
                raise
            if value == _STOPPED:
                self._left(a)
                raise self._failure(a, a.why)
            go, closer = _decision(value)
            if go:
                self._passed[a.name] = k
                return k
            why = self._why(a, closer)
            if closer != self._rank and self._rank in why.get("missing", ()):
                a.late = True  # its ticket came after the closer's look: on to the next round
                continue
            self._left(a)
            raise self._failure(a, why)

    def _take(self, a: _Attempt) -> int:
        """Take a ticket.  ``add``'s result goes straight into ``a.tickets`` by C code
        (``list.extend`` over ``starmap``): an interrupt raised at the next bytecode still
        finds it there (:meth:`_abandon`)."""
        add = self._store().add
        a.tickets.extend(itertools.starmap(add, ((_key("t", a.name), 1),)))
        return int(a.tickets[-1])

    def _record_of(self, a: _Attempt, **more: Any) -> dict[str, Any]:
        return {"group": a.name, "round": a.round, "size": a.size, "desc": a.desc,
                "ranks": list(a.members[:_SHOWN]), "since": a.start, "until": a.deadline,
                **more}

    def _decide(self, a: _Attempt, outcome: int) -> int:
        """Commit (GO) or close (QUIT + this rank) this rank's round: one ``compare_set`` on its
        decision key, so exactly one wins; then the wake-up, which carries the value that won
        (whoever writes it writes that value).  The value that won."""
        store = self._store()
        won = int(store.compare_set(_key("d", a.name, a.round), "", str(outcome)))
        store.set(_key("o", a.name, a.round), str(won))
        return won

    def _decided(self, a: _Attempt) -> int | None:
        value = self._peek(_key("d", a.name, a.round))
        return None if value is None else int(value)

    def _get(self, a: _Attempt, until: float) -> int | None:
        """The round's decision from its wake-up key, blocking in the store until ``until``
        (None: not woken by then).  In the main thread a helper blocks for it (see
        :class:`_Helper`) unless the wait is short (the grace period: a Ctrl-C then acts
        within it)."""
        if threading.current_thread() is threading.main_thread() and \
                until - self._clock() > 2 * GRACE_S:
            got: int | None = self._helper.run(lambda: self._get_here(a, until))
            return got
        return self._get_here(a, until)

    def _get_here(self, a: _Attempt, until: float) -> int | None:
        store = self._store()
        store.set_timeout(timedelta(seconds=max(until - self._clock(), 0.001)))
        try:
            return int(store.get(_key("o", a.name, a.round)))
        except Exception:  # the store's wait timeout (DistStoreError)
            if self._clock() < until - 0.05:  # not a timeout: the store itself failed
                raise
            return None

    def _await(self, a: _Attempt) -> int:
        """Block until this round is decided: a short wait first (a barrier whose members all
        come passes there, with no other store call), then the record and the wait to the
        deadline, where the round is claimed and closed, or its closer awaited."""
        got = self._get(a, min(self._clock() + GRACE_S, a.deadline))
        if got is not None:
            return got
        self._publish(self._record_of(a))
        got = self._get(a, a.deadline)
        return got if got is not None else self._past_deadline(a)

    def _past_deadline(self, a: _Attempt) -> int:
        """At the deadline: a decision made but not woken up yet is awaited for
        :data:`SLACK_S`; past that, a commit whose committer never woke anyone means it
        stopped in between (:data:`_STOPPED`, the reasons in ``a.why``).  Otherwise claim
        the round and close it, or await the claimer's decision (closing it here if the
        claimer is gone by its cap)."""
        value = self._decided(a)
        if value is not None:
            got = self._get(a, self._clock() + SLACK_S)
            if got is not None or value != GO:
                return value
            _, peers, snap = self._look(a, {})
            a.why = self._reasons(a, peers, snap, stopped="committed this round and stopped "
                                  "before waking the others (it exited, hangs or was "
                                  "interrupted)")
            return _STOPPED
        claim = self._store().compare_set(_key("c", a.name, a.round), "", str(self._rank))
        closer = int(claim)
        if closer == self._rank:
            return self._close(a)
        got = self._get(a, a.cap + SLACK_S)  # the closer decides by its cap
        if got is not None:
            return got
        _, peers, snap = self._look(a, {})  # the closer is gone: close the round here
        if closer not in peers:
            peers = {**peers, closer: Peer("claimed", a.cap)}
        return self._conclude(a, self._reasons(a, peers, snap))

    def _close(self, a: _Attempt) -> int:
        """The claiming member: wait while the policy says so, then close the round."""
        deadline = a.deadline
        seen: dict[int, float] = {}  # ticket holders without a record: when first seen
        while True:
            _, peers, snap = self._look(a, seen)
            until = next_deadline(self._clock(), deadline, a.cap, list(peers.values()))
            if until is None:
                break
            self._publish(self._record_of(a, until=until))
            got = self._get(a, until)
            if got is not None:
                return got
            deadline = until
        return self._conclude(a, self._reasons(a, peers, snap))

    def _conclude(self, a: _Attempt, why: dict[str, Any]) -> int:
        """Close the round unless it was decided first: write the reasons, fill the round's
        tickets, then decide (and wake every member).  The value that won."""
        self._store().set(_key("w", a.name, a.round, self._rank), json.dumps(why))
        self._fill(a)
        return self._decide(a, QUIT + self._rank)

    def _fill(self, a: _Attempt) -> None:
        """Take the round's remaining tickets (nobody holds them), so that no later ticket
        lands in a round being closed."""
        store = self._store()
        key = _key("t", a.name)
        seen = int(self._peek(key) or 0)
        while seen < a.last:
            got = int(store.compare_set(key, str(seen), str(a.last)))
            if got == a.last:
                return
            seen = got

    def _why(self, a: _Attempt, closer: int | None) -> dict[str, Any]:
        """The closer's reasons (written before it closed the round)."""
        found: dict[str, Any] = json.loads(self._peek(_key("w", a.name, a.round, closer)) or
                                           b"{}")
        return found

    def _left(self, a: _Attempt, error: BaseException | None = None) -> None:
        """Mark that this rank left a failed round (so a peer's policy sees it on its way),
        and whether an exception (an interrupt) ended it."""
        more: dict[str, Any] = {"left": self._clock()}
        if error is not None and not isinstance(error, Exception):
            more["interrupted"] = type(error).__name__
        with contextlib.suppress(Exception):
            self._store().set(_key("r", self._rank), json.dumps(
                self._merged(self._record_of(a, **more))))

    def _abandon(self, a: _Attempt, error: BaseException) -> None:
        """An exception (a Ctrl-C, a store failure) ended this attempt after it may have taken
        a ticket: close its round unless it is decided, naming this rank and the members that
        had not come, so nobody passes without it and its retry takes a ticket in a later
        round (see the module).  Best effort: the store may be what failed."""
        interrupted = type(error).__name__
        with contextlib.suppress(Exception):
            if a.tickets:
                a.round = (a.tickets[-1] - 1) // a.size
            else:  # the ticket call raised: whether it counted is unknown
                taken = int(self._peek(_key("t", a.name)) or 0)
                if taken == 0:
                    return
                a.round = (taken - 1) // a.size
                if taken == a.last:  # full: a ticket of it was this rank's last, or none was
                    self._left(a, error)
                    return
            self._left(a, error)
            if self._peek(_key("d", a.name, a.round)) is not None:
                return  # decided: closed, or gone ahead (torch's creation names this rank)
            _, peers, snap = self._look(a, {}) if a.size <= _LISTED_ON_INTERRUPT \
                else (set(), {}, _Snapshot(self))
            why = self._reasons(a, peers, snap)
            why["missing"] = sorted({self._rank, *why["missing"]})[:_SHOWN]
            why["count"] = int(why["count"]) + 1
            why["doing"] = {str(self._rank): [f"was interrupted ({interrupted}) while it waited "
                                              "for this group", "interrupted"],
                            **why["doing"]}
            why["interrupted"] = {str(self._rank): interrupted}
            self._conclude(a, why)

    # ---- listing a failed round (once, by its closer) ----------------------------------------
    def _look(self, a: _Attempt, seen: dict[int, float]
              ) -> tuple[set[int], dict[int, Peer], _Snapshot]:
        """Who holds a ticket of this round (by their records), and what each missing member
        is doing.  Members without a record of this round that may hold one of its tickets
        (the counter says more were taken than records show: they came less than a grace
        period ago, or stopped right after their ticket) are *arriving*, from when this
        closer first saw them (``seen``, kept across its looks)."""
        now = self._clock()
        snap = _Snapshot(self)
        taken = min(int(self._peek(_key("t", a.name)) or 0) - a.round * a.size, a.size)
        arrived = {self._rank}
        for m in a.members:
            if m != self._rank and snap.waits_in(m, a.name, a.round):
                arrived.add(m)
        lost_after = self.lost_after if self._period else None
        peers = {m: snap.peer(a, m, now, lost_after) for m in a.members if m not in arrived}
        if taken > len(arrived):  # some hold a ticket without a record (yet)
            holders = [m for m, p in peers.items()  # not those whose record says more
                       if p.state not in ("busy", "creating", "interrupted", "gone")]
            for m in holders:
                peers[m] = Peer("arriving", seen.setdefault(m, now))
            snap.ticketless = max(0, len(holders) - (taken - len(arrived)))
        elif a.name in self._passed:  # this rank met them here before, then failed in torch
            peers = {m: attrs.evolve(p, state="created") if p.state in ("absent", "idle")
                     else p for m, p in peers.items()}
        return arrived, peers, snap

    def _reasons(self, a: _Attempt, peers: Mapping[int, Peer], snap: _Snapshot,
                 stopped: str = "") -> dict[str, Any]:
        """The closer's reasons, from its look: who is missing and what each is doing (the
        first few; their records as the look read them).  ``stopped``: what the ticket
        holders without a record did instead (default: took a ticket and came no
        further)."""
        now = self._clock()
        missing = sorted(peers)
        doing: dict[str, list[str]] = {}
        for m in missing[:_SHOWN]:
            peer = peers[m]
            kind = "behind" if peer.state == "busy" and not peer.waits_for_me else \
                _KINDS[peer.state]
            text = _doing(peer, snap.record(m) or {}, now)
            if peer.state == "arriving" and (stopped or now >= peer.until + SLACK_S):
                kind = "gone"  # it took a ticket and came no further
                text = stopped or ("took a ticket of this round and came no further in "
                                   f"{now - peer.until:.1f} s (it exited, hangs or was "
                                   "interrupted)")
                if snap.ticketless:
                    text = (f"either never came or {text} ({snap.ticketless} of the ranks "
                            "listed so never came)")
            doing[str(m)] = [text, kind]
        return {"by": self._rank, "at": now, "missing": missing[:_SHOWN],
                "count": len(missing), "doing": doing}

    def _failure(self, a: _Attempt, why: Mapping[str, Any]) -> MembersMissingError:
        missing = tuple(int(m) for m in why.get("missing", ()))
        doing = {int(m): tuple(v) for m, v in why.get("doing", {}).items()}
        kinds = {k for _, k in doing.values()} | ({"late"} if a.late else set())
        cause = next((text for kind, text in _CAUSES if kind in kinds), _CAUSES[-1][1])
        count = int(why.get("count", len(missing)))
        who = "; ".join(f"rank {m} {text}" for m, (text, _) in list(doing.items())[:8])
        if count > min(8, len(doing)):
            who += f"; and {count - min(8, len(doing))} more"
        closer = why.get("by")
        by = "" if closer in (None, self._rank) else f" (rank {closer} closed the round)"
        what = "are missing" if "interrupted" in kinds else "did not arrive"
        message = (
            f"rank {self._rank} could not create {a.desc} within "
            f"{self._clock() - a.start:.1f} s{by}: {count} of its {a.size} members {what} "
            f"({who}). Likely cause: {cause}. Remedies: ask for groups in the same order on "
            "every rank (mesh.materialize() creates a mesh's groups in dim order on every "
            "rank), make every member ask, and check the program offline with "
            "backend.check_spmd(world_size, program).")
        return MembersMissingError(message, rank=self._rank, dim=a.dim, ranks=a.shown,
                                   missing=missing,
                                   doing={m: text for m, (text, _) in doing.items()})

    # ---- liveness after a failure -------------------------------------------------------------
    def silent(self, ranks: Sequence[int], *, passed: tuple[str, int] | None = None
               ) -> dict[int, float | None]:
        """The ranks that do not beat within about two periods while this rank waits (it
        beats meanwhile, so peers handling the same failure see it too), with how long since
        their last beat (None: never).  A rank beats only inside a creation or this call,
        so one that is alive but doing neither counts as silent, except, with ``passed`` (a
        barrier and round), one whose record says it left that round uninterrupted: its
        own creation of the group failed, and it is alive.  Inside a creation, this rank's
        record keeps saying which one (a peer's retry waits for it)."""
        with self._lock:
            base = self._active.get(threading.get_ident())
        self._publish({**(base or {"group": None, "since": self._clock()}), "explaining": True})
        try:
            first = {r: (self._record(r) or {}).get("beat") for r in ranks}
            quiet = set(ranks)
            end = time.monotonic() + self.explain_s
            while quiet and time.monotonic() < end:
                time.sleep(0.1)
                quiet = {r for r in quiet if (self._record(r) or {}).get("beat") == first[r]}
            if passed is not None:
                quiet = {r for r in quiet if not _left_alive(self._record(r) or {}, *passed)}
        finally:
            if base is None:
                self._quiet()
            else:
                self._activate(base)
        now = self._clock()
        for r in quiet:  # say so in its record, for the next creation that waits for it
            with contextlib.suppress(Exception):
                self._store().set(_key("r", r), json.dumps(
                    {**(self._record(r) or {}), "lost": now, "seen_by": self._rank}))
        return {r: None if (beat := first[r]) is None else max(0.0, now - float(beat))
                for r in sorted(quiet)}

    def interrupted(self, ranks: Sequence[int]) -> dict[int, str]:
        """The ranks among ``ranks`` whose record says an exception (a Ctrl-C) ended their
        last attempt, with its type."""
        out = {}
        for r in ranks:
            rec = self._record(r) or {}
            if "interrupted" in rec:
                out[r] = str(rec["interrupted"])
        return out


def _left_alive(rec: Mapping[str, Any], name: str, k: int) -> bool:
    """Whether record ``rec`` says its rank left round ``k`` of ``name`` uninterrupted."""
    return rec.get("group") == name and int(rec.get("round", -1)) == k and "left" in rec \
        and "interrupted" not in rec and "lost" not in rec


def _doing(peer: Peer, rec: Mapping[str, Any], now: float) -> str:
    """What a missing member is doing, in words, from its state and record."""
    desc = rec.get("desc") or ("no group (it is diagnosing a failed collective)"
                               if rec.get("explaining") else "a group")
    return {
        "absent": "is not creating any group (it has no record of waiting in one: it "
                  "skipped this group, is late, or has not started)",
        "arriving": "was arriving as this rank gave up",
        "gave_up": "gave up waiting for this group before this rank arrived",
        "created": "already created this group with the other members (in an earlier "
                   "round); it will not ask for it again",
        "busy": f"is creating {desc} (for {now - float(rec.get('since', now)):.1f} s)",
        "creating": "is still inside torch's creation of an earlier attempt at this group, "
                    f"which fails by its timeout (in {max(0.0, peer.until - now):.1f} s)",
        "left": f"is not creating any group (it left {desc} {now - peer.until:.1f} s ago, "
                "when that failed)",
        "idle": f"is not creating any group (its last was {desc})",
        "finished": f"is not creating any group (it created {desc} a moment ago)",
        "claimed": "claimed this round to close it and stopped before it did (it exited or "
                   "hangs)",
        "interrupted": f"was interrupted ({rec.get('interrupted', 'an exception')}) while "
                       f"creating {desc}, {now - peer.until:.1f} s ago",
        "gone": f"has not answered for {now - peer.until:.1f} s while creating {desc} "
                "(it may have exited)",
    }[peer.state]


class _Snapshot:
    """The store as the closing member reads it once: records and round outcomes, each
    read at most once (memoized), so a listing costs O(members + records followed)."""

    def __init__(self, rz: Rendezvous) -> None:
        self._rz = rz
        self._records: dict[int, dict[str, Any] | None] = {}
        self._decided: dict[tuple[Any, int], int | None] = {}
        self.ticketless = 0  # listed as arriving, but more than the tickets taken

    def record(self, rank: int) -> dict[str, Any] | None:
        if rank not in self._records:
            self._records[rank] = self._rz._record(rank)
        return self._records[rank]

    def waits_in(self, rank: int, name: str, k: int) -> bool:
        """Whether ``rank``'s record says one of its threads waits (or waited, and left when
        the round failed) in round ``k`` of ``name``; not if an interrupt ended it."""
        rec = self.record(rank)
        if not rec or "interrupted" in rec:
            return False
        return [name, k] in rec.get("in", ()) or (rec.get("group") == name and
                                                   int(rec.get("round", -1)) == k)

    def decided(self, rec: Mapping[str, Any]) -> int | None:
        """GO or QUIT if the round in ``rec`` is decided (a full round is being committed),
        None while it is open."""
        name, k = rec.get("group"), int(rec.get("round", 0))
        if (name, k) not in self._decided:
            value = self._rz._peek(_key("d", name, k))
            if value is not None:
                found: int | None = GO if _decision(int(value))[0] else QUIT
            else:
                taken = int(self._rz._peek(_key("t", name)) or 0)
                found = GO if taken >= (k + 1) * int(rec.get("size", 1)) else None
            self._decided[(name, k)] = found
        return self._decided[(name, k)]

    def peer(self, a: _Attempt, m: int, now: float, lost_after: float | None) -> Peer:
        """What missing member ``m`` is doing, from its record."""
        rec = self.record(m)
        if not rec:
            return Peer("absent")
        if "lost" in rec:  # a peer found it silent after a failure, and it has not come back
            return Peer("gone", float(rec.get("beat", rec["lost"])))
        if "interrupted" in rec:
            return Peer("interrupted", float(rec.get("left", now)))
        if not rec.get("group"):
            return Peer("idle")  # explaining a failure, not creating
        beat = float(rec.get("beat", now))
        silent = lost_after is not None and now - beat > lost_after
        if rec["group"] == a.name:
            if int(rec.get("round", -1)) >= a.round:
                return Peer("gone", beat) if silent else Peer("arriving", now)
            if "left" in rec:  # it gave up an earlier round: on its way if that was just now
                return Peer("gave_up", float(rec["left"]))
            if silent:
                return Peer("gone", beat)
            if "creating" in rec:  # inside torch's creation of an earlier round
                return Peer("creating", float(rec.get("until", now)))
            if self.decided(rec) is None:  # still waiting in an earlier round
                return Peer("busy", float(rec.get("until", now)))
            return Peer("created")
        if "left" in rec:
            return Peer("left", float(rec["left"]))
        decided = self.decided(rec)
        if decided == GO:  # it created that group: moments ago (it still beat), or long ago
            period = self._rz._period
            if period is not None and now - beat < period + SLACK_S:
                return Peer("finished", beat + period)
            return Peer("idle")
        if decided == QUIT:  # closed: it is failing there now
            return Peer("busy", float(rec.get("until", now)), self.waits_for(rec))
        if silent:
            return Peer("gone", beat)
        return Peer("busy", float(rec.get("until", now)), self.waits_for(rec))

    def waits_for(self, rec: Mapping[str, Any], most: int = 256) -> bool:
        """Whether the member with record ``rec`` waits, directly or through the open groups
        of the members it waits for, for the closing rank (a cycle).  Follows at most
        ``most`` records; a group too large to be written out in a record is assumed to."""
        rank = self._rz._rank
        todo: list[Mapping[str, Any]] = [rec]
        seen: set[int] = set()
        while todo and len(seen) < most:
            r = todo.pop()
            ranks = r.get("ranks", ())
            if rank in ranks or int(r.get("size", 0)) > len(ranks):
                return True
            for m in ranks:
                if m in seen:
                    continue
                seen.add(m)
                other = self.record(m)
                if other and other.get("group") and "left" not in other and \
                        other.get("group") != r.get("group") and self.decided(other) != GO:
                    todo.append(other)  # still in a round (open, or closed unnoticed)
        return False
