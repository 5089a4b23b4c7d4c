"""Liveness: each rank's record in the store (the groups and rounds its threads wait in,
whether it is inside torch's creation, left a failed round or was interrupted), beaten while
it creates or explains a failure, and the check after a failure of which peers are silent.

Liveness costs nothing while nothing is being created: a rank beats its record only while
it is inside a creation that lasts (or explains a failure), every :func:`beat_period`
seconds (1 s, longer for worlds over 2,000 ranks: at most :data:`LIVENESS_WRITES_PER_S`
beats per second whatever the world).

**Clocks.**  Every deadline is this process's own (``clock``, monotonic by default).  A
record carries spans measured on its writer's clock and a write counter (``seq``), never a
time to compare with another host's: a reader places a record's times on its own clock from
the moment it first saw that ``(life, seq)`` (:class:`Seen`), and judges a peer silent by how
long it has seen no new write.  A wall-clock step on any host changes nothing.
"""

from __future__ import annotations

import contextlib
import functools
import random
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import attrs

from .._core import StoreRecordError
from ._records import LivenessRecord, LostMark
from ._rounds import GRACE_S, SHOWN, Attempt
from ._store import ABSENT, Closed, job_namespace, key, lease, process_token

__all__ = ["LIVENESS_WRITES_PER_S", "Doing", "Liveness", "Seen", "beat_period", "doing_of",
           "waiting_of"]

LIVENESS_WRITES_PER_S = 2000  # the most beats per second a whole world sends


def beat_period(world_size: int, heartbeat: float) -> float:
    """Seconds between two beats of a rank inside a creation: ``heartbeat``, or longer
    in worlds so large that all ranks beating at once would pass
    :data:`LIVENESS_WRITES_PER_S` writes per second.

    >>> beat_period(8, 1.0), beat_period(131072, 1.0)
    (1.0, 65.536)
    """
    return max(heartbeat, world_size / LIVENESS_WRITES_PER_S)


class Doing(NamedTuple):
    """What one thread of this rank does, in this process's clock (written into its
    :class:`~._records.LivenessRecord` as spans).  A named tuple: a barrier builds two per
    member, and a tuple is built in a third of a frozen attrs class's time."""

    group: str | None = None
    round: int = -1
    size: int = 0
    desc: str = ""
    ranks: tuple[int, ...] = ()
    since: float = 0.0
    until: float = 0.0
    creating: bool = False
    left: float | None = None
    interrupted: str | None = None
    explaining: bool = False


def doing_of(entry: Doing | Attempt) -> Doing:
    """What a thread does: ``entry`` itself, or what its attempt at a barrier says (waiting
    in its round until its deadline; inside the creation once the round went ahead, until
    ``inside``).  A barrier activates its attempt, not a record: the record is built only
    when something reads it (a beat, a late write, a peer's failure), so a barrier whose
    members all come builds none.

    >>> a = Attempt("g", 4, range(4), "the 'tp' group", "tp", (0, 1, 2, 3), 10.0, 40.0, 70.0,
    ...             round=2)
    >>> doing_of(a).until, doing_of(a).creating
    (40.0, False)
    >>> a.inside = 55.0
    >>> doing_of(a).until, doing_of(a).creating, doing_of(a).ranks
    (55.0, True, (0, 1, 2, 3))
    """
    if isinstance(entry, Doing):
        return entry
    waiting = waiting_of(entry)
    return waiting if entry.inside is None else waiting._replace(until=entry.inside,
                                                                 creating=True)


def waiting_of(a: Attempt) -> Doing:
    """The record of attempt ``a`` waiting in its round until its deadline."""
    return Doing(a.name, a.round, a.size, a.desc, tuple(a.members[:SHOWN]), a.start, a.deadline)


@attrs.frozen
class Seen:
    """A peer's record as this rank read it, placed on this rank's clock: ``at`` is when
    this rank first saw this record's ``(life, seq)``, so ``now - at`` is how long it has
    seen no new write, and the record's spans count from ``at``."""

    record: LivenessRecord
    at: float

    @property
    def since(self) -> float:
        return self.at - self.record.since_s

    @property
    def until(self) -> float:
        return self.at + self.record.until_s

    @property
    def left(self) -> float | None:
        left = self.record.left_s
        return None if left is None else self.at - left

    def silent(self, now: float) -> bool:
        """Whether its writer beats and this rank has seen no new write for longer than
        three of its periods and two seconds (its beat stopped: it exited or hangs)."""
        period = self.record.period
        return period is not None and now - self.at > 3 * period + 2.0


class _Later:
    """One thread per process that runs what was asked for later (a waiting member's
    record, once it has waited :data:`~._rounds.GRACE_S`), so that a barrier whose members
    all come writes no record, and nobody blocks in the store with a short timeout.

    Jobs are keyed (one per rank and thread: a newer one replaces the older) and run on the
    thread's ticks, :data:`TICK_S` apart, so a job runs between its time and one tick after.
    Asking costs a dictionary write under a lock, never a thread switch, except to wake the
    thread when it is idle (no job for :data:`LINGER_S`): a process that creates groups in a
    loop wakes the thread once a tick, not once a barrier (it cost the 64-process barrier a
    thread switch per member)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._jobs: dict[Hashable, tuple[float, Callable[[], None]]] = {}
        self._idle = True
        self._thread: threading.Thread | None = None

    def at(self, key: Hashable, when: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` at ``when`` (``time.monotonic``) or up to a tick later, instead of
        the job ``key`` had.  The job is written without the lock (one dictionary store):
        the thread's last look before it idles and this look at ``_idle`` cannot both miss
        the other's write."""
        self._jobs[key] = (when, fn)
        if self._idle:
            with self._cv:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._run, daemon=True,
                                                    name="meshlayout-later")
                    self._thread.start()
                self._idle = False
                self._cv.notify()

    def _run(self) -> None:
        empty_since = time.monotonic()
        while True:
            with self._cv:
                while self._idle:
                    self._cv.wait()
                    empty_since = time.monotonic()
                self._cv.wait(TICK_S)
            now = time.monotonic()
            due = [(k, fn) for k, (when, fn) in list(self._jobs.items()) if when <= now]
            for k, fn in due:
                if self._jobs.get(k, (0.0, None))[1] is fn:  # not replaced meanwhile
                    self._jobs.pop(k, None)
                with contextlib.suppress(Exception):  # the store is gone: nothing to tell
                    fn()
            if self._jobs or due:
                empty_since = now
            elif now - empty_since > LINGER_S:
                self._idle = True
                if self._jobs:  # asked meanwhile (see at)
                    self._idle = False


TICK_S = 0.05
"""How often the timer thread runs what is due, while it has jobs (and :data:`LINGER_S`
after): a waiting record is written between ``GRACE_S`` and ``GRACE_S + TICK_S`` in."""

LINGER_S = 1.0
"""How long the timer thread keeps ticking with no job before it sleeps until asked."""


_LATER = _Later()


class Liveness:
    """One rank's record in the store and its beat: what its peers know of it (see
    :mod:`._rendezvous`); :class:`~._rendezvous.Rendezvous` adds the barrier.

    ``clock`` (monotonic by default) measures every deadline of this rank; the store's
    blocking calls are given the time left by it (a test gives a simulated clock and a
    store that keeps the same time).  ``namespace`` (default: the job and attempt,
    :func:`~._store.job_namespace`) prefixes every key.  ``publish_after``: how long a
    member waits before its record is written (0: at once)."""

    def __init__(self, store: Any, rank: int, *, world_size: int,
                 heartbeat: float | None = 1.0,
                 clock: Callable[[], float] = time.monotonic,
                 namespace: str | None = None, publish_after: float = GRACE_S) -> None:
        self._root = store
        self.rank = rank
        self.world = world_size
        self.clock = clock
        self.namespace = job_namespace() if namespace is None else namespace
        self.period = beat_period(world_size, heartbeat) if heartbeat else None
        self.explain_s = 2 * (self.period or 0.0) + 0.5
        """How long :meth:`silent` watches (two periods and half a second)."""
        self.publish_after = publish_after
        self._life = random.getrandbits(52)
        self._seq = 0
        self._seen: dict[int, tuple[int, int, float]] = {}  # rank -> life, seq, first seen
        self._local = threading.local()
        self._lock = threading.Lock()
        # thread -> what it does (its record, or its attempt: doing_of).  Written without the
        # lock (one dictionary store or pop, atomic), read as a whole by list()
        self._active: dict[int, Doing | Attempt] = {}
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None

    def key(self, *parts: object) -> str:
        """The store key of ``parts`` in this job's namespace."""
        return key(self.namespace, *parts)

    # ---- connections and records ------------------------------------------------------------
    def warm(self, connections: int) -> None:
        """Open ``connections`` barrier connections now (into the store's pool), so that the
        first creations do not (see :class:`~._store.Lease`: opening one may stall for seconds)."""
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

    def claim(self) -> None:
        """Claim this rank in this namespace on the store, for the store's life: ``p/<rank>``
        holds the first claimer's :func:`~._store.process_token` (one ``compare_set``, when
        the backend is made; a process claims again freely).  Another process's claim means
        the namespace's keys are an earlier job's (without a launcher every job's namespace
        is ``job.0``), or two processes run as this rank: refused with
        :class:`~backend.StoreRecordError`, before any of them is read."""
        ckey, mine = self.key("p", self.rank), process_token()
        held = bytes(self._store().compare_set(ckey, "", mine))
        if held != mine.encode():
            raise StoreRecordError(ckey, (
                f"another process claimed rank {self.rank} of namespace {self.namespace!r} on "
                f"this store ({held[:60]!r}, not this process's {mine!r}): an earlier job ran "
                "on this store in this namespace (without a launcher every job's is 'job.0'), "
                "or two processes run as this rank; give each job a namespace of its own (run "
                "it under torchrun or Slurm, or set TORCHELASTIC_RUN_ID to a name unique to "
                "the job) or a fresh store"), writer=self.rank)

    def _renew(self) -> None:
        """Replace this thread's connection (:meth:`Lease.discard <._store.Lease.discard>`):
        the next call opens another.  A store that cannot be cloned keeps its one."""
        held = getattr(self._local, "lease", None)
        if held is not None:
            held.discard()
            self._local.store = None

    def peek(self, key: str) -> bytes | None:
        """The value at ``key`` or None, in one call that never blocks (a compare_set that
        cannot match)."""
        got = bytes(self._store().compare_set(key, ABSENT, ABSENT))
        return None if got == ABSENT.encode() else got

    def record(self, rank: int) -> Seen | None:
        """Rank ``rank``'s record (read strictly: :class:`~backend.StoreRecordError` if its
        writer could not have written it), placed on this rank's clock."""
        raw = self.peek(self.key("r", rank))
        if raw is None:
            return None
        rec = LivenessRecord.read(self.key("r", rank), raw, rank=rank, world=self.world)
        now = self.clock()
        with self._lock:
            life, seq, at = self._seen.get(rank, (-1, -1, now))
            if (life, seq) != (rec.life, rec.seq):
                at = now
            self._seen[rank] = (rec.life, rec.seq, at)
        return Seen(rec, at)

    def lost(self, seen: Seen) -> bool:
        """Whether a peer marked ``seen``'s record as stopped (:meth:`silent`) and its writer
        has not written since."""
        rank = seen.record.rank
        raw = self.peek(self.key("l", rank))
        if raw is None:
            return False
        mark = LostMark.read(self.key("l", rank), raw, world=self.world)
        return (mark.life, mark.seq) == (seen.record.life, seen.record.seq)

    def _merged(self, mine: Doing) -> LivenessRecord:
        """This rank's record: this thread's, listing every group and round the rank's
        threads wait in (``in``), with the next write count."""
        now = self.clock()
        rounds = tuple((d.group, d.round) for d in map(doing_of, list(self._active.values()))
                       if d.group is not None and d.round >= 0)[:SHOWN]
        with self._lock:
            self._seq += 1
            seq = self._seq
        return LivenessRecord(
            self.rank, self._life, seq, self.period, mine.group, mine.round, mine.size,
            mine.desc[:1000], mine.ranks[:SHOWN], rounds, max(0.0, now - mine.since),
            max(-1e9, min(1e9, mine.until - now)), mine.creating,
            None if mine.left is None else max(0.0, now - mine.left), mine.interrupted,
            mine.explaining)

    def _write(self, doing: Doing) -> None:
        self._store().set(self.key("r", self.rank), self._merged(doing).to_bytes())

    def _publish(self, doing: Doing) -> None:
        """Write this rank's record, and beat it while this thread is inside the barrier or
        the creation that follows (until :meth:`_quiet`)."""
        self._activate(doing)
        self._write(doing)

    def _later(self, waiting: Attempt) -> None:
        """Write the record of ``waiting`` (an attempt this thread activated, waiting in its
        round) if this thread still waits in it :attr:`publish_after` seconds later, by the
        process's timer thread (at once if that is 0).  Not left to the next beat (up to a
        period later): a peer that closes a round on an interrupt must see who is waiting."""
        if self.publish_after <= 0:
            self._write(waiting_of(waiting))
            return
        tid = threading.get_ident()
        _LATER.at((id(self), tid), time.monotonic() + self.publish_after,
                  functools.partial(self._write_waiting, tid, waiting, waiting.round))

    def _write_waiting(self, tid: int, waiting: Attempt, round_: int) -> None:
        """The timer's job of :meth:`_later`: thread ``tid``'s record, if it still waits in
        round ``round_`` (an attempt that moved on to a later round is asked again there, or
        commits it without waiting)."""
        if self._active.get(tid) is waiting and waiting.round == round_ and \
                waiting.inside is None and not self._stop:
            self._write(doing_of(waiting))

    def _activate(self, doing: Doing | Attempt) -> None:
        """Beat ``doing`` from the next period on while this thread is inside the barrier or
        the creation (a creation that is over before then writes nothing)."""
        self._active[threading.get_ident()] = doing
        if self._thread is None and self.period is not None:
            self._start_beating()

    def _start_beating(self) -> None:
        with self._lock:
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(target=self._beat, daemon=True,
                                                name=f"meshlayout-beat-{self.rank}")
                self._thread.start()

    def _quiet(self) -> None:
        self._active.pop(threading.get_ident(), None)

    def _beat(self) -> None:
        while True:
            self._wake.wait(self.period)
            if self._stop:
                return
            active = list(self._active.values())
            if active:
                try:
                    self._write(doing_of(active[-1]))
                except Exception:  # the store is gone (rank 0 exited): nothing left to tell
                    return

    @property
    def beating(self) -> bool:
        """Whether this rank beats inside creations (so peers' silence means something)."""
        return self.period is not None and not self._stop

    def close(self) -> None:
        """Stop beating, delete this rank's record and let go of the store (idempotent), so
        that destroying the default group frees it."""
        with self._lock:
            self._stop = True
            self._active.clear()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if not isinstance(self._root, Closed):
            with contextlib.suppress(Exception):
                self._store().delete_key(self.key("r", self.rank))
        self._root = Closed()
        self._local = threading.local()

    # ---- liveness after a failure -------------------------------------------------------------
    def silent(self, ranks: Sequence[int], *, passed: tuple[str, int] | None = None
               ) -> dict[int, float | None]:
        """The ranks that write no new record within about two periods while this rank
        watches (it beats meanwhile, so peers handling the same failure see it too), with
        how long this rank has seen no new write from each (None: it has no record).  A
        rank beats only inside a creation or this call, so one that is alive but doing
        neither counts as silent, except, with ``passed`` (a barrier and round), one whose
        record says it left that round uninterrupted: its own creation of the group
        failed, and it is alive.  Each silent rank is marked lost (``l/<rank>``) until it
        writes again, for the next creation that would wait for it."""
        base = self._active.get(threading.get_ident())
        self._publish((Doing(since=self.clock()) if base is None else doing_of(base))
                      ._replace(explaining=True))
        try:
            first = {r: _stamp(self.record(r)) for r in ranks}
            quiet = set(ranks)
            end = time.monotonic() + self.explain_s
            while quiet and time.monotonic() < end:
                time.sleep(0.1)
                quiet = {r for r in quiet if _stamp(self.record(r)) == first[r]}
            if passed is not None:
                quiet = {r for r in quiet if not _left_alive(self.record(r), *passed)}
        finally:
            if base is None:
                self._quiet()
            else:
                self._activate(base)
        return {r: self._mark_lost(r, first[r]) for r in sorted(quiet)}

    def _mark_lost(self, rank: int, stamp: tuple[int, int] | None) -> float | None:
        """Mark ``rank``'s record lost; how long this rank has seen it unchanged."""
        if stamp is None:
            return None
        with contextlib.suppress(Exception):
            self._store().set(self.key("l", rank), LostMark(self.rank, *stamp).to_bytes())
        with self._lock:
            at = self._seen[rank][2] if rank in self._seen else self.clock()
        return max(0.0, self.clock() - at)

    def interrupted(self, ranks: Sequence[int]) -> dict[int, str]:
        """The ranks among ``ranks`` whose record says an exception (a Ctrl-C) ended their
        last attempt, with its type."""
        out = {}
        for r in ranks:
            seen = self.record(r)
            if seen is not None and seen.record.interrupted is not None:
                out[r] = seen.record.interrupted
        return out


def _stamp(seen: Seen | None) -> tuple[int, int] | None:
    return None if seen is None else (seen.record.life, seen.record.seq)


def _left_alive(seen: Seen | None, name: str, k: int) -> bool:
    """Whether a record says its rank left round ``k`` of ``name`` uninterrupted."""
    if seen is None:
        return False
    rec = seen.record
    return rec.group == name and rec.round == k and rec.left_s is not None and \
        rec.interrupted is None
