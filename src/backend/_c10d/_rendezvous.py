"""The creation barrier: members of a group meet in the default store before torch creates it.

Torch 2.13 names a locally synchronized group ``sha1(ranks + number of groups this process
has)``, a per-process counter: one late or failed creation leaves the counters out of step,
and every later group among the same processes waits for a rendezvous that never comes.
meshlayout names each group from its family and members (:class:`~backend._c10d._spec.GroupSpec`)
and, before torch's creation, has the members meet at this barrier.

**Rounds and tickets.**  A barrier named ``G`` with ``N`` members runs in rounds.  Every
attempt of a member takes one *ticket*: ``add(t/G, TICKET)`` reads ``t x TICKET``
(:data:`~._rounds.TICKET`: counted in steps, so that no value planted at the counter can
shift the tickets, see the threat model); tickets ``kN+1 .. kN+N`` make round ``k``.  The
member holding the round's last ticket *commits* it: ``compare_set(d/G/k, "", GO)``, then
wakes the others: ``set(o/G/k, GO)``.  The others block
in the store on ``get(o/G/k)`` until their deadline (on a connection of their own, so
nothing else of the process waits behind them; one wait, never a short one: c10d logs every
store wait that times out); one still waiting after a grace period (:data:`GRACE_S`) has its
record written by a timer thread, and a barrier whose members all come writes none.  The
wait is a ``multi_get`` of the wake-up and the ticket counter: a waiter believes a GO only
if the counter says the round is full.
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

**Store keys** (under ``meshlayout/<job>/``, the job's and attempt's namespace,
:func:`~._store.job_namespace`): ``t/G`` the ticket counter; ``o/G/k`` the wake-up and
``d/G/k`` the decision of each round; ``c/G/k`` the close claim (the claimer's rank) and
``w/G/k/<rank>`` the reasons of a failed one; ``r/<rank>`` this rank's record (the groups
and rounds its threads wait in, for how long and how long until its deadline, its write
count; whether it is inside torch's creation, left a failed round, or was interrupted;
deleted at :meth:`Rendezvous.close`); ``l/<rank>`` a peer's note that that record stopped
changing; ``n/G`` the notes of a rebind's barrier (:meth:`Rendezvous.agree`); ``p/<rank>``
the claim of the process that runs as this rank (written when its backend is made, kept
for the store's life: :meth:`~._liveness.Liveness.claim`).  Each value
has one writer and one strict reader (:mod:`._records`).  A group created at the first try
leaves three keys (``t``, ``o``, ``d``: about 150 bytes, as torch leaves its own per-group
keys) for the store's life; a failed round adds three or four more.  Round numbers never
repeat, so nothing is deleted while a member may still read it.

**Threat model.**  The store is shared and has no access control.  A peer on it can write,
overwrite or delete any key at any time, and may be an earlier job or attempt (its keys
left on a store that outlived it), a rank of this job that crashed, froze, was interrupted
or runs with its wall clock stepped, or a writer of junk.  What the barrier guarantees
whatever such a peer did: keys of another job or attempt are never read (namespaces; a job
without a launcher, whose namespace is every such job's, is refused on a store that holds
an earlier job's claim of its ranks, and a plant there can refuse it too); every
value read is checked by its reader (bytes, types, bounds, a decision's closer and a claim's
claimer are members, a counter never goes back below a ticket taken, a GO wake-up comes with
a full counter), and one that fails raises :class:`~backend.StoreRecordError` naming the key
and the writer the key or value names, on the member that reads it at once, and on every
member of the round once one closes it with that reason (at the latest at the first
deadline); no member waits past twice its timeout plus the slack; no decision compares two
hosts' clocks (see :mod:`._liveness`).  The ticket counter is the one value the store itself
parses (``add``): a value there that only starts with digits ("1junk", "1.5", " 1", which
``add`` reads as 1 and rewrites as a clean count) or any count the barrier did not write
leaves a count that is no multiple of ``TICKET``, which every member that takes a ticket
refuses at once, so none passes; a value that is no number at all ("junk", "", 20 digits)
makes ``add`` fail (TCPStore's server then closes that connection): the member names the
key and its thread goes on with a new connection (the barrier never uses the default
store's own connection, which torch's calls share).  What it cannot guarantee: against a
writer *inside this job's namespace* that writes well-formed protocol values (a multiple of
``TICKET`` at the counter, a forged decision with a full counter), members can disagree or
pass without a member, as no value in TCPStore can be authenticated; detecting that would
cost every member a listing.

**Interrupted and retried attempts.** The ticket is taken by one C call whose result is
stored before any Python code runs, so an interrupt (``KeyboardInterrupt``, or any exception
raised into the thread) that lands right after it still finds the ticket. From its ticket
on, an attempt that ends without a decision (interrupted, or its store call failed) closes
its round, with reasons naming itself ("was interrupted") and the members that had not come,
so the others fail at once, saying so, and its retry takes a ticket in a later round. Where
the ticket call itself raised (its value is unknown), the round the counter points into is
closed unless it is full. A committer interrupted between its commit and its wake-up is
named by its peers as one that stopped there (below). A Ctrl-C acts at once: while the main
thread blocks in the store, the signal's wake-up fd wakes a thread that closes its round,
which wakes the main thread (:class:`~._store.Interrupts`; where SIGINT is handled otherwise,
the main thread waits on a lock, which a signal interrupts, while a helper thread blocks in
the store for it). An attempt that failed after go (in torch) retries in a later round,
where it meets its peers' retries (a peer still inside torch's creation of the earlier round
is waited for, until that creation's timeout) or fails naming who did not come.

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
- *Cost*: on the success path a member makes 2 store calls (its ticket, the ``multi_get``
  of the wake-up, which carries the decision, and the counter) and the committer 3 (its
  ticket, the commit, the wake-up), whatever N; nobody lists the members; a member that
  waits past the grace period adds its record (a ``set``, from the timer thread). Liveness
  costs nothing while nothing is being
  created: a rank beats its record only while it is inside a creation that lasts (or
  explains a failure), every :func:`beat_period` seconds (1 s, longer for worlds over 2,000
  ranks: at most :data:`LIVENESS_WRITES_PER_S` beats per second whatever the world).

**Modules.**  This one holds the protocol and its steps (:class:`Rendezvous`); a round's
values (``GO``, ``QUIT``, ``SLACK_S``, ``GRACE_S``, ``torch_name``, the ``Attempt``) are in
``_rounds``; the store's keys and pooled connections in ``_store``; each rank's record,
its beat, ``beat_period`` and the check of who is silent in ``_liveness``; the closer's
look at a failed round, its waiting policy (``next_deadline``) and its reasons in
``_diagnosis``.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import attrs

from .._core import StoreRecordError
from ._diagnosis import Peer, PeerState, Snapshot, failure, look, next_deadline, reasons
from ._liveness import Doing, Liveness, waiting_of
from ._records import MAX_COUNT, Reasons, read_claim, read_outcome, read_tickets
from ._rounds import GO, GRACE_S, QUIT, SHOWN, SLACK_S, STOPPED, TICKET, Attempt, decision
from ._store import Helper, Interrupts, timed_out

__all__ = ["Rendezvous"]

_LISTED_ON_INTERRUPT = 1024  # an interrupted member lists the missing of groups this small
REASK_S = 0.02
"""The least time between two asks of one wait whose ask ended early at the store's timeout
(:meth:`Rendezvous._get_here`): at most ``1 / REASK_S`` asks a second, whatever the store."""
_GO = str(GO).encode()  # a wake-up's GO as the store gives it (read without parsing)
_INTERRUPTS = Interrupts()  # one per process: the signal wake-up fd is the process's


class Rendezvous(Liveness):
    """One process's side of the barrier (see the module): a :class:`~._liveness.Liveness`
    (its record and beat) that meets its peers in rounds."""

    def __init__(self, store: Any, rank: int, *, world_size: int,
                 heartbeat: float | None = 1.0,
                 clock: Callable[[], float] = time.monotonic,
                 namespace: str | None = None, publish_after: float = GRACE_S) -> None:
        super().__init__(store, rank, world_size=world_size, heartbeat=heartbeat, clock=clock,
                         namespace=namespace, publish_after=publish_after)
        self._passed: dict[str, int] = {}  # barrier -> the last round this rank passed
        self._helper = Helper()
        self._interrupts = _INTERRUPTS

    def _look(self, a: Attempt, seen: dict[int, float]
              ) -> tuple[set[int], dict[int, Peer], Snapshot]:
        """The closer's look at its round (:func:`~._diagnosis.look`)."""
        return look(self, a, seen, passed=a.name in self._passed)

    def close(self) -> None:
        """Stop the helper thread, then as :meth:`Liveness.close <._liveness.Liveness.close>`."""
        self._helper.stop()
        super().close()

    # ---- the barrier --------------------------------------------------------------------------
    def meet(self, name: str, members: Sequence[int], timeout: float, *, dim: str,
             desc: str, shown: tuple[int, ...]) -> _Meeting:
        """Meet the other ``members`` at barrier ``name``, then run the body (the creation)
        while beating; ``with`` gives the round that passed (:func:`torch_name` names its
        group).  Raises :class:`~backend.MembersMissingError` when the round this rank is in
        closes (see the module).  While the body runs, this rank's record says it is inside
        the creation, until the body's own timeout (``timeout``) and a liveness check are
        over; a body that raises marks the record as having left the round."""
        start = self.clock()
        return _Meeting(self, Attempt(name, len(members), members, desc, dim, shown, start,
                                      start + timeout, start + 2 * timeout,
                                      counter=self.key("t", name)), timeout)

    def agree(self, name: str, members: Sequence[int], timeout: float, note: str) -> list[str]:
        """Meet ``members`` at barrier ``name`` and return every member's non-empty ``note``.

        A note is appended to one key before this rank arrives, so once all have arrived
        every note is there: one read, whatever the number of members (a rebind's
        survivors telling each other which groups failed under them).
        """
        if note:
            self._store().append(self.key("n", name), note + "\n")
        with self.meet(name, members, timeout, dim="rebind",
                       desc=f"the rebind of {len(members)} surviving ranks", shown=()):
            pass
        notes = self.peek(self.key("n", name)) or b""
        return [line for line in notes.decode().split("\n") if line]

    def _arrive(self, a: Attempt) -> int:
        """Take tickets until a round is decided with this rank in it; the round, if it went
        ahead (else the failure is raised).  The success path is kept flat (a barrier's cost
        in a crowded process is its Python, run with cold caches)."""
        while True:
            a.tickets.clear()
            a.round = -1
            try:
                ticket = self._take(a)
                a.round = k = (ticket - 1) // a.size
                self._activate(a)  # its record is built and written only if this takes a while
                if ticket == (k + 1) * a.size:
                    value = self._decide(a, GO)
                else:  # one wait to the deadline (no store call with a short timeout: c10d
                    got = self._get(a, a.deadline, waiting=True)  # logs each that expires)
                    value = self._past_deadline(a) if got is None else got
            except BaseException as e:
                self._abandon(a, e)
                raise
            if value == GO:
                self._passed[a.name] = k
                return k
            if value == STOPPED:
                self._left(a)
                raise failure(self, a, a.why or Reasons(self.rank))
            _, closer = decision(value)
            why = self._why(a, closer)
            if closer != self.rank and self.rank in why.missing and self.clock() < a.deadline:
                a.late = True  # its ticket came after the closer's look: on to the next round
                continue  # (not past its deadline: each round it then closes costs a look)
            self._left(a)
            raise failure(self, a, why)

    def _take(self, a: Attempt) -> int:
        """Take a ticket: add :data:`~._rounds.TICKET` to the counter.  ``add``'s result goes
        straight into ``a.tickets`` by C code (``list.extend`` over ``starmap``): an interrupt
        raised at the next bytecode still finds it there (:meth:`_abandon`).  A counter the
        barrier did not write (no multiple of TICKET, past :data:`~._records.MAX_COUNT`, or
        no number at all: :meth:`_not_counting`) is named."""
        counter = a.counter
        add = self._store().add
        try:
            a.tickets.extend(itertools.starmap(add, ((counter, TICKET),)))
        except Exception as e:
            raise self._not_counting(counter, e) from None
        raw = a.tickets[-1]
        if not raw % TICKET and 0 < raw <= MAX_COUNT:
            return raw // TICKET
        read_tickets(counter, b"%d" % raw)  # raises, saying what is wrong
        raise StoreRecordError(counter, "it read 0 after this rank's ticket (it was set back)")

    def _not_counting(self, counter: str, error: Exception) -> Exception:
        """The error for an ``add`` on the counter that failed: where the counter holds no
        number ("junk", "", 20 digits: TCPStore's server then drops the connection, HashStore
        raises), this thread's connection is replaced (:meth:`~._liveness.Liveness._renew`),
        so that no later call meets a broken one, and the value is named; a timeout, or a
        store that fails again, is the store's own error."""
        if timed_out(error):
            return error
        try:
            self._renew()
            read_tickets(counter, self.peek(counter))
        except StoreRecordError as bad:
            return bad
        except Exception:  # the store itself is gone
            return error
        return StoreRecordError(counter, f"the store's add on it failed "
                                f"({type(error).__name__}: {str(error)[:100]})")

    def _record_of(self, a: Attempt, **more: Any) -> Doing:
        """What this thread does in attempt ``a`` (its deadline, unless ``more`` says)."""
        return waiting_of(a)._replace(**more)

    def _decide(self, a: Attempt, outcome: int) -> int:
        """Commit (GO) or close (QUIT + this rank) this rank's round: one ``compare_set`` on its
        decision key, so exactly one wins; then the wake-up, which carries the value that won
        (whoever writes it writes that value).  The value that won."""
        store = self._store()
        dkey = self.key("d", a.name, a.round)
        won = read_outcome(dkey, store.compare_set(dkey, "", str(outcome)), a.members)
        store.set(self.key("o", a.name, a.round), str(won))
        return won

    def _decided(self, a: Attempt) -> int | None:
        dkey = self.key("d", a.name, a.round)
        value = self.peek(dkey)
        return None if value is None else read_outcome(dkey, value, a.members)

    def _get(self, a: Attempt, until: float, waiting: bool = False) -> int | None:
        """The round's decision from its wake-up key, blocking in the store until ``until``
        (None: not woken by then).  ``waiting``: write this rank's record if the wait lasts
        (see :meth:`~._liveness.Liveness._later`).  In the main thread a Ctrl-C acts at
        once: it closes the round (:class:`~._store.Interrupts`), or, where SIGINT is
        handled otherwise, a helper thread blocks for the main thread (:class:`Helper`)."""
        if waiting:
            self._later(a)
        if threading.get_ident() != Interrupts.main:
            return self._get_here(a, until)
        if self._interrupts.enter(lambda: self._abandon(a, KeyboardInterrupt())):
            try:
                return self._get_here(a, until)
            finally:
                self._interrupts.leave()
        got: int | None = self._helper.run(lambda: self._get_here(a, until))
        return got

    def _get_here(self, a: Attempt, until: float) -> int | None:
        """One blocking read of the wake-up and the ticket counter (``multi_get``: it waits
        for the wake-up, then reads both in one round trip) until ``until``.  A GO is
        believed only if the counter says the round is full (a wake-up planted before it
        filled names its key).  A wait that ends early with the store's timeout is asked
        again (a store whose clones share one timeout, such as torch's ``HashStore``, may
        end it at another thread's shorter timeout), but not sooner than :data:`REASK_S`
        after the previous ask began, so that such a store's short timeouts cannot make it
        spin (a wake-up is then seen up to that much later); any other failure is the
        store's own and is raised."""
        store, clock = self._store(), self.clock
        wake, counter = self.key("o", a.name, a.round), a.counter
        while (asked := clock()) < until:
            store.set_timeout(timedelta(seconds=max(until - asked, 0.001)))  # 0: forever
            try:
                raw, count = store.multi_get([wake, counter])
            except Exception as e:  # DistStoreError, at the timeout
                if not timed_out(e):
                    raise
                self._sleep(min(asked + REASK_S, until) - clock())
                continue
            if raw == _GO and len(count) <= 20 and count.isdigit() and \
                    a.last * TICKET <= (n := int(count)) <= MAX_COUNT and not n % TICKET:
                return GO  # (what the strict readers below say of these values, read at once)
            value = read_outcome(wake, raw, a.members)
            if value == GO and (got := read_tickets(counter, count)) < a.last:
                raise StoreRecordError(wake, f"it says GO, but the ticket counter reads {got}, "
                                       f"short of the round's {a.last} (the wake-up was "
                                       "planted, or the counter set back)")
            return value
        return None

    def _sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` on this rank's clock where it is the real one (a simulated
        clock's store ends no wait early: nothing to pace)."""
        if seconds > 0 and self.clock is time.monotonic:
            time.sleep(seconds)

    def _past_deadline(self, a: Attempt) -> int:
        """At the deadline: a decision made but not woken up yet is awaited for
        :data:`SLACK_S`; past that, a commit whose committer never woke anyone means it
        stopped in between (:data:`STOPPED`, the reasons in ``a.why``).  Otherwise claim
        the round and close it, or await the claimer's decision (closing it here if the
        claimer is gone by its cap)."""
        value = self._decided(a)
        if value is not None:
            got = self._get(a, self.clock() + SLACK_S)
            if got is not None or value != GO:
                return value
            _, peers, snap = self._look(a, {})
            a.why = reasons(self, a, peers, snap, stopped="committed this round and stopped "
                                  "before waking the others (it exited, hangs or was "
                                  "interrupted)")
            return STOPPED
        ckey = self.key("c", a.name, a.round)
        closer = read_claim(ckey, self._store().compare_set(ckey, "", str(self.rank)),
                            a.members)
        if closer == self.rank:
            return self._close(a)
        got = self._get(a, a.cap + SLACK_S)  # the closer decides by its cap
        if got is not None:
            return got
        _, peers, snap = self._look(a, {})  # the closer is gone: close the round here
        if closer not in peers:
            peers = {**peers, closer: Peer(PeerState.CLAIMED, a.cap)}
        return self._conclude(a, reasons(self, a, peers, snap))

    def _close(self, a: Attempt) -> int:
        """The claiming member: wait while the policy says so, then close the round."""
        deadline = a.deadline
        seen: dict[int, float] = {}  # ticket holders without a record: when first seen
        while True:
            try:
                _, peers, snap = self._look(a, seen)
            except StoreRecordError as e:  # every member fails with it, now
                return self._conclude(a, Reasons(self.rank, bad=(e.key, e.writer, e.reason)))
            until = next_deadline(self.clock(), deadline, a.cap, list(peers.values()))
            if until is None:
                break
            self._publish(self._record_of(a, until=until))
            got = self._get(a, until)
            if got is not None:
                return got
            deadline = until
        return self._conclude(a, reasons(self, a, peers, snap))

    def _conclude(self, a: Attempt, why: Reasons) -> int:
        """Close the round unless it was decided first: write the reasons, fill the round's
        tickets, then decide (and wake every member).  The value that won."""
        self._store().set(self.key("w", a.name, a.round, self.rank), why.to_bytes())
        self._fill(a)
        return self._decide(a, QUIT + self.rank)

    def _fill(self, a: Attempt) -> None:
        """Take the round's remaining tickets (nobody holds them), so that no later ticket
        lands in a round being closed."""
        store = self._store()
        counter = a.counter
        seen = read_tickets(counter, self.peek(counter))
        while seen < a.last:
            held = str(seen * TICKET) if seen else ""  # "": absent (a deleted counter)
            got = read_tickets(counter, store.compare_set(counter, held, str(a.last * TICKET)))
            if got == a.last:
                return
            seen = got

    def _why(self, a: Attempt, closer: int | None) -> Reasons:
        """The closer's reasons (written before it closed the round; read strictly)."""
        if closer is None:
            return Reasons(self.rank)
        wkey = self.key("w", a.name, a.round, closer)
        raw = self.peek(wkey)
        if raw is None:
            raise StoreRecordError(wkey, f"rank {closer} closed round {a.round} and left no "
                                   "reasons (they were deleted)", writer=closer)
        return Reasons.read(wkey, raw, by=closer, size=a.size, world=self.world)

    def _left(self, a: Attempt, error: BaseException | None = None) -> None:
        """Mark that this rank left a failed round (so a peer's policy sees it on its way),
        and whether an exception (an interrupt) ended it."""
        stopped = None if error is None or isinstance(error, Exception) else \
            type(error).__name__
        with contextlib.suppress(Exception):
            self._write(self._record_of(a, left=self.clock(), interrupted=stopped))

    def _abandon(self, a: Attempt, error: BaseException) -> None:
        """An exception (a Ctrl-C, a store failure, a store value not valid) ended this
        attempt after it may have taken a ticket: close its round unless it is decided,
        naming this rank and the members that had not come (or the bad value), so nobody
        passes without it and its retry takes a ticket in a later round (see the module).
        Best effort: the store may be what failed."""
        with contextlib.suppress(Exception):
            if not self._abandoned_round(a, error):
                return
            # decided (closed, or gone ahead: torch's creation names this rank), or junk
            # every member reads; an empty value decides nothing (the commit's compare_set
            # from "" overwrites it, so a late member would pass alone): close that round
            if self.peek(self.key("d", a.name, a.round)):
                return
            if isinstance(error, StoreRecordError):
                self._conclude(a, Reasons(self.rank, bad=(error.key, error.writer,
                                                          error.reason)))
                return
            _, peers, snap = self._look(a, {}) if a.size <= _LISTED_ON_INTERRUPT \
                else (set(), {}, Snapshot(self))
            why = reasons(self, a, peers, snap)
            mine = (self.rank, f"was interrupted ({type(error).__name__}) while it waited "
                    "for this group", "interrupted")
            self._conclude(a, attrs.evolve(
                why, missing=tuple(sorted({self.rank, *why.missing}))[:SHOWN],
                count=why.count + 1,
                doing=(mine, *(d for d in why.doing if d[0] != self.rank))[:SHOWN]))

    def _abandoned_round(self, a: Attempt, error: BaseException) -> bool:
        """Set ``a.round`` to the round an abandoned attempt may hold a ticket of and mark
        this rank as having left it; whether that round must still be closed."""
        if a.tickets and not a.tickets[-1] % TICKET and 0 < a.tickets[-1] <= MAX_COUNT:
            a.round = (a.ticket - 1) // a.size
        else:  # the ticket call raised (whether it counted is unknown), or read junk
            counter = a.counter
            taken = read_tickets(counter, self.peek(counter))
            if taken == 0:
                return False
            a.round = (taken - 1) // a.size
            if taken == a.last:  # full: a ticket of it was this rank's last, or none was
                self._left(a, error)
                return False
        self._left(a, error)
        return True


class _Meeting:
    """What :meth:`Rendezvous.meet` returns: a context (a class, not a generator: the
    barrier's success path is kept short) that meets the peers on entry and marks this
    thread's record as inside the creation until it exits."""

    __slots__ = ("_a", "_rz", "_timeout")

    def __init__(self, rz: Rendezvous, a: Attempt, timeout: float) -> None:
        self._rz, self._a, self._timeout = rz, a, timeout

    def __enter__(self) -> int:
        rz, a = self._rz, self._a
        try:
            k = rz._arrive(a)
            a.inside = rz.clock() + self._timeout + rz.explain_s
            rz._activate(a)  # (a closer's own record may have replaced it)
        except BaseException:
            rz._quiet()
            raise
        return k

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: object) -> None:
        try:
            if error is not None:
                self._rz._left(self._a, error)
        finally:
            self._rz._quiet()
