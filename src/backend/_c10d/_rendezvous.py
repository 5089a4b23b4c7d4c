"""The creation barrier: members of a group meet in the default store before torch creates it.

Torch 2.13 names a locally synchronized group ``sha1(ranks + number of groups this process
has)``, a per-process counter: one late or failed creation leaves the counters out of step,
and every later group among the same processes waits for a rendezvous that never comes.
meshlayout names each group from its family and members (:class:`~backend._c10d._spec.GroupSpec`)
and, before torch's creation, has the members meet at this barrier.

**Rounds and tickets.**  A barrier named ``G`` with ``N`` members runs in rounds.  Every
attempt of a member takes a *ticket* ``t = add(t/G, 1)``; tickets ``kN+1 .. kN+N`` make
round ``k``.  The member holding the round's last ticket *commits* it: it wins
``compare_set(d/G/k, "", GO)`` and then wakes the others by writing ``o/G/k``.  The others
block in the store on ``o/G/k`` (``wait``, on a connection of their own, so nothing else of
the process waits behind them): first for a grace period (:data:`GRACE_S`; a barrier whose
members all come passes here), then, having written their record and looked at the decision
key (a ticket taken in a round already closed learns it there), until their deadline.  A
member whose deadline passes *claims* the round (``add(c/G/k, 1) == 1``), lists who is
missing (the only listing: once per failed round), applies the waiting policy
(:func:`next_deadline`) and, when the policy says so, *closes* it: it writes the reasons
(``w/G/k``), then ``compare_set(d/G/k, "", QUIT)``.  Commit and close are the same
``compare_set`` on one key, so exactly one wins and every member agrees on the round's
outcome; a close wakes nobody: each member learns it at its own deadline (or its next look)
and fails with the closer's reasons.

**States of a round** (of its decision key ``d/G/k``): *open* (absent, fewer than N tickets
taken), *full* (N tickets, being committed), *go* (``GO``; ``o/G/k`` written), *quit*
(``QUIT``; reasons in ``w/G/k``).  Transitions: open → full → go; open or full → quit (a
close wins the ``compare_set``).  A round never reopens.

**Store keys** (under ``meshlayout/``): ``t/G`` the ticket counter; ``d/G/k`` the decision
and ``o/G/k`` the wake-up of each round; ``c/G/k`` the close claim and ``w/G/k`` the reasons
of a failed one; ``r/<rank>`` this rank's record (the group and round it waits in, since
and until when, its last beat; deleted at :meth:`Rendezvous.close`); ``n/G`` the notes of a
rebind's barrier (:meth:`Rendezvous.agree`).  A group created at the
first try leaves its three keys (``t``, ``d``, ``o``: about 200 bytes, as torch leaves its
own per-group keys) for the store's life; a failed round adds three more.  Round numbers
never repeat, so nothing is deleted while a member may still read it.

**Invariants.**
- *Agreement*: a round is go for all its members or quit for all of them.
- *No lone pass*: go needs N tickets in one round, and a member leaves a round only once it
  is decided, so the N tickets are N distinct members present at once; an attempt that
  failed after go (in torch) takes its retry's ticket in a later round, where it waits for
  its peers' retries or fails within its timeout naming who did not come.
- *Bounded waiting*: a member waits until its deadline (its timeout), longer only while the
  policy sees a missing member busy with another group that does not wait for it, and
  never past twice its timeout plus :data:`SLACK_S` (then it closes the round itself).
- *Cost*: on the success path a member makes 2 store calls (its ticket, the wait) and the
  committer 3 (its ticket, the commit, the wake-up), whatever N; nobody lists the members; a
  member that waits past the grace period adds its record and one look.  Liveness costs
  nothing while nothing is being created: a rank beats its record only while it is inside
  a creation that lasts (or explains a failure), every :func:`beat_period` seconds (1 s,
  longer for worlds over 2,000 ranks: at most :data:`LIVENESS_WRITES_PER_S` beats per
  second whatever the world).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs

from .._core import MembersMissingError

__all__ = ["Peer", "Rendezvous", "beat_period", "next_deadline"]

PREFIX = "meshlayout"
GO = 1 << 40  # o/G/k holds GO + readers after a commit
QUIT = 2 << 40  # ... or QUIT + readers after a close
SLACK_S = 1.0  # how long past a busy peer's deadline it may take to arrive here
GRACE_S = 0.05  # a member that waits longer than this writes its record
LIVENESS_WRITES_PER_S = 2000  # the most beats per second a whole world sends
_ABSENT = "\x00meshlayout-absent"
_SHOWN = 64  # ranks written into a record or a reason, at most


def beat_period(world_size: int, heartbeat: float) -> float:
    """Seconds between two beats of a rank inside a creation: ``heartbeat``, or longer
    in worlds so large that all ranks beating at once would pass
    :data:`LIVENESS_WRITES_PER_S` writes per second.

    >>> beat_period(8, 1.0), beat_period(131072, 1.0)
    (1.0, 65.536)
    """
    return max(heartbeat, world_size / LIVENESS_WRITES_PER_S)


# ---- the waiting policy: pure -------------------------------------------------------------
@attrs.frozen
class Peer:
    """What the member closing a round knows of one missing member.

    ``state``: ``"absent"`` (no record), ``"arriving"`` (it holds a ticket of this round),
    ``"busy"`` (waiting in another group's round until ``until``), ``"left"`` (it left a
    failed group at ``until``), ``"finished"`` (it created another group a moment ago: its
    last beat, one period before ``until``), ``"idle"`` (its last group was created), ``"gave_up"``
    (it closed or left an earlier round of this group), ``"created"`` (an earlier round
    of this group went ahead with it), ``"gone"`` (busy, but its beat stopped).
    ``waits_for_me``: its group waits, directly or through others, for the closing rank.
    """

    state: str
    until: float = 0.0
    waits_for_me: bool = False


def next_deadline(now: float, deadline: float, cap: float, peers: Sequence[Peer],
                  everyone_arrived: bool = False) -> float | None:
    """When the closing member looks again, or None: close the round now.

    A member waits past its deadline only for peers on their way here: one that holds a
    ticket of this round (or all do: the commit is in flight) for :data:`SLACK_S`; one
    busy with another group until that one's deadline plus :data:`SLACK_S` (it then
    fails there and comes); one that left a failed group, or finished creating one, less
    than :data:`SLACK_S` ago.
    A peer that waits for this member (a cycle: groups asked in different orders) is
    not waited for.  Never past ``cap``.

    >>> next_deadline(10.0, 10.0, 20.0, [Peer("busy", until=12.0)])
    13.0
    >>> next_deadline(10.0, 10.0, 20.0, [Peer("busy", until=12.0, waits_for_me=True)]) is None
    True
    """
    if now >= cap:
        return None
    ahead = [now + SLACK_S] if everyone_arrived else []
    for p in peers:
        if p.waits_for_me:
            continue
        if p.state == "arriving":
            ahead.append(now + SLACK_S)
        elif p.state in ("busy", "left", "finished"):
            ahead.append(p.until + SLACK_S)
    until = min(max([deadline, *ahead]), cap)
    return until if until > now else None


_KINDS = {"absent": "skipped", "idle": "skipped", "left": "skipped", "finished": "skipped",
          "busy": "order",
          "arriving": "late", "gave_up": "late", "created": "created", "gone": "gone"}
_CAUSES = (  # the first kind present among the missing names the likely cause
    ("order", "ranks asked for groups in a different order (each waits for a group another "
              "is not creating yet)"),
    ("behind", "this rank is waiting behind ranks that asked for groups in different orders "
               "(its missing members are creating other groups, which wait on yet others)"),
    ("created", "an earlier attempt of this rank failed after its members had met: they "
                "created the group and will not ask again (shut the backend down on every "
                "rank and start a new one to create it again)"),
    ("late", "this rank is late: the other members gave up waiting for it"),
    ("gone", "a member exited or stopped answering"),
    ("skipped", "a member skipped this group (or is late)"),
)


# ---- the store ------------------------------------------------------------------------------
def _key(*parts: object) -> str:
    return "/".join([PREFIX, *map(str, parts)])


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


class Rendezvous:
    """One process's side of the barrier (see the module)."""

    def __init__(self, store: Any, rank: int, *, world_size: int,
                 heartbeat: float | None = 1.0) -> None:
        self._root = store
        self._rank = rank
        self._period = beat_period(world_size, heartbeat) if heartbeat else None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._active: dict[int, dict[str, Any]] = {}  # thread -> the record it beats
        self._passed: dict[str, int] = {}  # barrier -> the last round this rank passed
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None

    # ---- connections and records ------------------------------------------------------------
    def _store(self) -> Any:
        """This thread's connection: a clone of the default store's, so that a blocking wait
        holds up nothing else of the process (torch's own store calls included)."""
        mine = getattr(self._local, "store", None)
        if mine is None:
            root = self._root
            mine = root.clone() if hasattr(root, "clone") else root
            self._local.store = mine
        return mine

    def _peek(self, key: str) -> bytes | None:
        """The value at ``key`` or None, in one call that never blocks (a compare_set that
        cannot match)."""
        got = bytes(self._store().compare_set(key, _ABSENT, _ABSENT))
        return None if got == _ABSENT.encode() else got

    def _record(self, rank: int) -> dict[str, Any] | None:
        raw = self._peek(_key("r", rank))
        return json.loads(raw) if raw else None

    def _publish(self, record: dict[str, Any]) -> None:
        """Write this rank's record, and beat it while this thread is inside the barrier or
        the creation that follows (until :meth:`_quiet`)."""
        record["beat"] = time.time()
        self._store().set(_key("r", self._rank), json.dumps(record))
        self._activate(record)

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
                record = {**record, "beat": time.time()}
                try:
                    self._store().set(_key("r", self._rank), json.dumps(record))
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

    def close(self) -> None:
        """Stop beating, delete this rank's record and let go of the store (idempotent), so
        that destroying the default group frees it."""
        with self._lock:
            self._stop = True
            self._active.clear()
        self._wake.set()
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
             desc: str, shown: tuple[int, ...]) -> Iterator[None]:
        """Meet the other ``members`` at barrier ``name``, then run the body (the creation)
        while beating.  Raises :class:`~backend.MembersMissingError` when the round this rank
        is in closes (see the module)."""
        start = time.time()
        attempt = _Attempt(name, len(members), members, desc, dim, shown, start,
                           start + timeout, start + 2 * timeout)
        try:
            self._arrive(attempt)
            yield
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

    def _arrive(self, a: _Attempt) -> None:
        store = self._store()
        while True:
            arrived = time.time()
            ticket = int(store.add(_key("t", a.name), 1))
            a.round = k = (ticket - 1) // a.size
            self._activate(self._record_of(a))  # written only if this takes a while
            if ticket == (k + 1) * a.size:
                outcome, why = self._decide(a, GO), dict[str, Any]()
            else:
                outcome, why = self._await(a)
            if outcome == GO:
                self._passed[a.name] = k
                return
            why = why or self._why(a)
            mine = why.get("by") == self._rank
            if float(why.get("at", 0.0)) < arrived or (
                    not mine and self._rank in why.get("missing", ())):
                if not mine:  # the others gave up before this rank came
                    a.late = True
                continue  # a round closed before this attempt's ticket: on to the next one
            self._left(a)
            raise self._failure(a, why)

    def _record_of(self, a: _Attempt, **more: Any) -> dict[str, Any]:
        return {"group": a.name, "round": a.round, "size": a.size, "desc": a.desc,
                "ranks": list(a.members[:_SHOWN]), "since": a.start, "until": a.deadline,
                **more}

    def _decide(self, a: _Attempt, outcome: int) -> int:
        """Commit (GO) or close (QUIT) this rank's round: one ``compare_set`` on its decision
        key, so exactly one wins; a commit then wakes the waiters.  Which won."""
        store = self._store()
        won = int(store.compare_set(_key("d", a.name, a.round), "", str(outcome)))
        if won == GO == outcome:
            store.set(_key("o", a.name, a.round), "1")
        return won

    def _decision(self, a: _Attempt) -> int | None:
        value = self._peek(_key("d", a.name, a.round))
        return None if value is None else int(value)

    def _why(self, a: _Attempt) -> dict[str, Any]:
        """The closer's reasons (written just before it closed the round)."""
        key = _key("w", a.name, a.round)
        self._wait(key, time.time() + SLACK_S)
        found: dict[str, Any] = json.loads(self._peek(key) or b"{}")
        return found

    def _await(self, a: _Attempt) -> tuple[int, dict[str, Any]]:
        """Block until this round is committed (GO), or closed (QUIT, with the reasons): a
        short wait first (a barrier whose members all come passes there, with no other
        store call), then the record and a look at the decision (a ticket taken in a round
        already closed learns it here), then the wait to the deadline, where the round is
        claimed and closed, or its closer awaited."""
        out = _key("o", a.name, a.round)
        try:
            if self._wait(out, min(time.time() + GRACE_S, a.deadline)):
                return GO, {}
            self._publish(self._record_of(a))
            decided = self._decision(a)
            if decided is None:
                if self._wait(out, a.deadline):
                    return GO, {}
                decided = self._decision(a)  # closed by a member whose deadline came first?
            if decided is None and int(self._store().add(_key("c", a.name, a.round), 1)) == 1:
                return self._close(a)
            while decided is None and time.time() < a.cap + SLACK_S:  # the closer decides
                if self._wait(out, min(time.time() + 0.5, a.cap + SLACK_S)):
                    return GO, {}
                decided = self._decision(a)
            if decided is None:  # the closer is gone: close the round here
                _, peers, snap = self._look(a)
                decided = self._conclude(a, self._reasons(peers, snap))
            return (GO, {}) if decided == GO else (QUIT, self._why(a))
        except BaseException:
            with contextlib.suppress(Exception):  # leave no round that can pass without us
                self._conclude(a, {"by": self._rank, "at": time.time(),
                                   "missing": [self._rank], "count": 1,
                                   "doing": {str(self._rank): ["stopped waiting (interrupted)",
                                                               "gone"]}})
            raise

    def _wait(self, key: str, until: float) -> bool:
        """Whether ``key`` exists before ``until`` (a blocking wait in the store)."""
        left = until - time.time()
        try:
            self._store().wait([key], timedelta(seconds=max(left, 0.001)))
            return True
        except Exception:  # the store's wait timeout (DistStoreError)
            if time.time() < until - 0.05:  # not a timeout: the store itself failed
                raise
            return False

    def _close(self, a: _Attempt) -> tuple[int, dict[str, Any]]:
        """The claiming member: wait while the policy says so, then close the round."""
        out = _key("o", a.name, a.round)
        deadline = a.deadline
        while True:
            arrived, peers, snap = self._look(a)
            until = next_deadline(time.time(), deadline, a.cap, list(peers.values()),
                                  everyone_arrived=len(arrived) == a.size)
            if until is None:
                break
            self._publish(self._record_of(a, until=until))
            if self._wait(out, until):
                return GO, {}
            deadline = until
        why = self._reasons(peers, snap)
        return (GO, {}) if self._conclude(a, why) == GO else (QUIT, why)

    def _conclude(self, a: _Attempt, why: dict[str, Any]) -> int:
        """Write the reasons, then close the round unless it was committed first; which won."""
        self._store().set(_key("w", a.name, a.round), json.dumps(why))
        return self._decide(a, QUIT)

    def _left(self, a: _Attempt) -> None:
        """Mark that this rank left a failed round (so a peer's policy sees it on its way)."""
        with contextlib.suppress(Exception):
            self._store().set(_key("r", self._rank), json.dumps(
                {**self._record_of(a), "left": time.time()}))

    # ---- listing a failed round (once, by its closer) ----------------------------------------
    def _look(self, a: _Attempt) -> tuple[set[int], dict[int, Peer], _Snapshot]:
        """Who holds a ticket of this round (by their records, and all of them once every
        ticket is taken), and what each missing member is doing.  Ticket holders that have
        not written their record yet (they came less than a grace period ago) are on their
        way: they count as arriving."""
        now = time.time()
        snap = _Snapshot(self)
        taken = int(self._peek(_key("t", a.name)) or 0) - a.round * a.size
        if taken >= a.size:  # every ticket is taken: the commit is on its way
            return set(a.members), {}, snap
        arrived = {self._rank}
        for m in a.members:
            rec = snap.record(m)
            if m != self._rank and rec and rec.get("group") == a.name and \
                    int(rec.get("round", -1)) == a.round:
                arrived.add(m)
        lost_after = self.lost_after if self._period else None
        peers = {m: snap.peer(a, m, now, lost_after) for m in a.members if m not in arrived}
        if taken > len(arrived):  # some came a moment ago: wait for their records
            peers = {m: attrs.evolve(p, state="arriving") if p.state in ("absent", "idle")
                     else p for m, p in peers.items()}
        elif a.name in self._passed:  # this rank met them here before, then failed in torch
            peers = {m: attrs.evolve(p, state="created") if p.state in ("absent", "idle")
                     else p for m, p in peers.items()}
        return arrived, peers, snap

    def _reasons(self, peers: Mapping[int, Peer], snap: _Snapshot) -> dict[str, Any]:
        """The closer's reasons, from its look: who is missing and what each is doing (the
        first few; their records as the look read them)."""
        now = time.time()
        missing = sorted(peers)
        doing: dict[str, list[str]] = {}
        for m in missing[:_SHOWN]:
            peer = peers[m]
            kind = "behind" if peer.state == "busy" and not peer.waits_for_me else \
                _KINDS[peer.state]
            doing[str(m)] = [_doing(peer, snap.record(m) or {}, now), kind]
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
        message = (
            f"rank {self._rank} could not create {a.desc} within {time.time() - a.start:.1f} s"
            f"{by}: {count} of its {a.size} members did not arrive ({who}). Likely cause: "
            f"{cause}. Remedies: ask for groups in the same order on every rank "
            "(mesh.materialize() creates a mesh's groups in dim order on every rank), make "
            "every member ask, and check the program offline with "
            "backend.check_spmd(world_size, program).")
        return MembersMissingError(message, rank=self._rank, dim=a.dim, ranks=a.shown,
                                   missing=missing,
                                   doing={m: text for m, (text, _) in doing.items()})

    # ---- liveness after a failure -------------------------------------------------------------
    def silent(self, ranks: Sequence[int]) -> dict[int, float | None]:
        """The ranks that do not beat within about two periods while this rank waits (it
        beats meanwhile, so peers handling the same failure see it too), with how long since
        their last beat (None: never).  A rank beats only inside a creation or this call,
        so one that is alive but doing neither counts as silent."""
        self._publish({"group": None, "explaining": True, "since": time.time()})
        try:
            first = {r: (self._record(r) or {}).get("beat") for r in ranks}
            quiet = set(ranks)
            end = time.time() + 2 * (self._period or 0.0) + 0.5
            while quiet and time.time() < end:
                time.sleep(0.1)
                quiet = {r for r in quiet if (self._record(r) or {}).get("beat") == first[r]}
        finally:
            self._quiet()
        now = time.time()
        for r in quiet:  # say so in its record, for the next creation that waits for it
            with contextlib.suppress(Exception):
                self._store().set(_key("r", r), json.dumps(
                    {**(self._record(r) or {}), "lost": now, "seen_by": self._rank}))
        return {r: None if (beat := first[r]) is None else max(0.0, now - float(beat))
                for r in sorted(quiet)}


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
        "left": f"is not creating any group (it left {desc} {now - peer.until:.1f} s ago, "
                "when that failed)",
        "idle": f"is not creating any group (its last was {desc})",
        "finished": f"is not creating any group (it created {desc} a moment ago)",
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

    def record(self, rank: int) -> dict[str, Any] | None:
        if rank not in self._records:
            self._records[rank] = self._rz._record(rank)
        return self._records[rank]

    def decided(self, rec: Mapping[str, Any]) -> int | None:
        """GO or QUIT if the round in ``rec`` is decided (a full round is being committed),
        None while it is open."""
        name, k = rec.get("group"), int(rec.get("round", 0))
        if (name, k) not in self._decided:
            value = self._rz._peek(_key("d", name, k))
            if value is not None:
                found: int | None = int(value)
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
        if not rec.get("group"):
            return Peer("idle")  # explaining a failure, not creating
        beat = float(rec.get("beat", now))
        silent = lost_after is not None and now - beat > lost_after
        if rec["group"] == a.name:
            if int(rec.get("round", -1)) >= a.round:
                return Peer("gone", beat) if silent else Peer("arriving")
            return Peer("gave_up" if "left" in rec else "created")
        if "left" in rec:
            return Peer("left", float(rec["left"]))
        decided = self.decided(rec)
        if decided == GO:  # it created that group: moments ago (it still beat), or long ago
            period = self._rz._period
            if period is not None and now - beat < period + SLACK_S:
                return Peer("finished", beat + period)
            return Peer("idle")
        if decided == QUIT:  # closed by another member; it learns so at its own deadline
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
