"""Liveness: each rank's record in the store (the groups and rounds its threads wait in,
whether it is inside torch's creation, left a failed round or was interrupted), beaten while
it creates or explains a failure, and the check after a failure of which peers are silent.

Liveness costs nothing while nothing is being created: a rank beats its record only while
it is inside a creation that lasts (or explains a failure), every :func:`beat_period`
seconds (1 s, longer for worlds over 2,000 ranks: at most :data:`LIVENESS_WRITES_PER_S`
beats per second whatever the world).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._store import ABSENT, Closed, key, lease

__all__ = ["LIVENESS_WRITES_PER_S", "Liveness", "beat_period"]

LIVENESS_WRITES_PER_S = 2000  # the most beats per second a whole world sends


def beat_period(world_size: int, heartbeat: float) -> float:
    """Seconds between two beats of a rank inside a creation: ``heartbeat``, or longer
    in worlds so large that all ranks beating at once would pass
    :data:`LIVENESS_WRITES_PER_S` writes per second.

    >>> beat_period(8, 1.0), beat_period(131072, 1.0)
    (1.0, 65.536)
    """
    return max(heartbeat, world_size / LIVENESS_WRITES_PER_S)


class Liveness:
    """One rank's record in the store and its beat: what its peers know of it (see
    :mod:`._rendezvous`); :class:`~._rendezvous.Rendezvous` adds the barrier.

    ``clock`` (wall time by default) stamps records and measures every deadline; the
    store's blocking calls are given the time left by it (a test gives a simulated clock
    and a store that keeps the same time)."""

    def __init__(self, store: Any, rank: int, *, world_size: int,
                 heartbeat: float | None = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._root = store
        self.rank = rank
        self.clock = clock
        self.period = beat_period(world_size, heartbeat) if heartbeat else None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._active: dict[int, dict[str, Any]] = {}  # thread -> the record it beats
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None

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

    def peek(self, key: str) -> bytes | None:
        """The value at ``key`` or None, in one call that never blocks (a compare_set that
        cannot match)."""
        got = bytes(self._store().compare_set(key, ABSENT, ABSENT))
        return None if got == ABSENT.encode() else got

    def record(self, rank: int) -> dict[str, Any] | None:
        raw = self.peek(key("r", rank))
        return json.loads(raw) if raw else None

    def _merged(self, mine: dict[str, Any]) -> dict[str, Any]:
        """This rank's record: this thread's, listing every group and round the rank's
        threads wait in (``in``)."""
        with self._lock:
            rounds = [[r["group"], r["round"]] for r in self._active.values()
                      if r.get("group") and "round" in r]
        return {**mine, "in": rounds, "beat": self.clock()}

    def _publish(self, record: dict[str, Any]) -> None:
        """Write this rank's record, and beat it while this thread is inside the barrier or
        the creation that follows (until :meth:`_quiet`)."""
        self._activate(record)
        self._store().set(key("r", self.rank), json.dumps(self._merged(record)))

    def _activate(self, record: dict[str, Any]) -> None:
        """Beat ``record`` from the next period on while this thread is inside the barrier or
        the creation (a creation that is over before then writes nothing)."""
        with self._lock:
            self._active[threading.get_ident()] = record
            if self.period is not None and self._thread is None and not self._stop:
                self._thread = threading.Thread(target=self._beat, daemon=True,
                                                name=f"meshlayout-beat-{self.rank}")
                self._thread.start()

    def _quiet(self) -> None:
        with self._lock:
            self._active.pop(threading.get_ident(), None)

    def _beat(self) -> None:
        while True:
            self._wake.wait(self.period)
            with self._lock:
                if self._stop:
                    return
                record = next(reversed(self._active.values()), None)
            if record is not None:
                try:
                    self._store().set(key("r", self.rank), json.dumps(self._merged(record)))
                except Exception:  # the store is gone (rank 0 exited): nothing left to tell
                    return

    @property
    def beating(self) -> bool:
        """Whether this rank beats inside creations (so peers' silence means something)."""
        return self.period is not None and not self._stop

    @property
    def lost_after(self) -> float:
        """How long a rank inside a creation may go without a beat before it counts as lost
        (3 periods + 2 s)."""
        return 3 * (self.period or 0.0) + 2.0

    @property
    def explain_s(self) -> float:
        """How long :meth:`silent` watches (two periods and half a second)."""
        return 2 * (self.period or 0.0) + 0.5

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
                self._store().delete_key(key("r", self.rank))
        self._root = Closed()
        self._local = threading.local()

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
        self._publish({**(base or {"group": None, "since": self.clock()}), "explaining": True})
        try:
            first = {r: (self.record(r) or {}).get("beat") for r in ranks}
            quiet = set(ranks)
            end = time.monotonic() + self.explain_s
            while quiet and time.monotonic() < end:
                time.sleep(0.1)
                quiet = {r for r in quiet if (self.record(r) or {}).get("beat") == first[r]}
            if passed is not None:
                quiet = {r for r in quiet if not _left_alive(self.record(r) or {}, *passed)}
        finally:
            if base is None:
                self._quiet()
            else:
                self._activate(base)
        now = self.clock()
        for r in quiet:  # say so in its record, for the next creation that waits for it
            with contextlib.suppress(Exception):
                self._store().set(key("r", r), json.dumps(
                    {**(self.record(r) or {}), "lost": now, "seen_by": self.rank}))
        return {r: None if (beat := first[r]) is None else max(0.0, now - float(beat))
                for r in sorted(quiet)}

    def interrupted(self, ranks: Sequence[int]) -> dict[int, str]:
        """The ranks among ``ranks`` whose record says an exception (a Ctrl-C) ended their
        last attempt, with its type."""
        out = {}
        for r in ranks:
            rec = self.record(r) or {}
            if "interrupted" in rec:
                out[r] = str(rec["interrupted"])
        return out


def _left_alive(rec: Mapping[str, Any], name: str, k: int) -> bool:
    """Whether record ``rec`` says its rank left round ``k`` of ``name`` uninterrupted."""
    return rec.get("group") == name and int(rec.get("round", -1)) == k and "left" in rec \
        and "interrupted" not in rec and "lost" not in rec


