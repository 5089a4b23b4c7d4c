"""The closer's diagnosis of a round that does not fill: what each missing member is doing
(from its record, read once: :class:`Snapshot`), as a :class:`PeerState`; the waiting policy
over that (:func:`next_deadline`, pure), the reasons the closer writes (:func:`reasons`), and
the error every member raises from them (:func:`failure`).  Listing the missing happens once
per failed round, by its closer."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

import attrs

from .._core import BackendError, MembersMissingError, StoreRecordError
from ._liveness import Liveness, Seen
from ._records import LivenessRecord, Reasons, read_outcome, read_tickets
from ._rounds import GO, QUIT, SHOWN, SLACK_S, Attempt, decision

__all__ = ["Peer", "PeerState", "Snapshot", "failure", "look", "next_deadline", "reasons"]


class PeerState(enum.Enum):
    """What a missing member is doing, as the member closing a round sees it: its word, the
    kind of cause it points to, whether it is on its way here (the policy waits for it until
    its :attr:`Peer.until` plus :data:`~._rounds.SLACK_S`), and its words in a message."""

    ABSENT = ("absent", "skipped", False,
              "is not creating any group (it has no record of waiting in one: it skipped this "
              "group, is late, or has not started)")
    ARRIVING = ("arriving", "late", True, "was arriving as this rank gave up")
    GAVE_UP = ("gave_up", "late", True,
               "gave up waiting for this group before this rank arrived")
    CREATED = ("created", "created", False,
               "already created this group with the other members (in an earlier round); it "
               "will not ask for it again")
    BUSY = ("busy", "order", True, "is creating {desc} (for {busy_for:.1f} s)")
    CREATING = ("creating", "retry", True,
                "is still inside torch's creation of an earlier attempt at this group, which "
                "fails by its timeout (in {until_in:.1f} s)")
    LEFT = ("left", "skipped", True,
            "is not creating any group (it left {desc} {ago:.1f} s ago, when that failed)")
    IDLE = ("idle", "skipped", False, "is not creating any group (its last was {desc})")
    FINISHED = ("finished", "skipped", True,
                "is not creating any group (it created {desc} a moment ago)")
    CLAIMED = ("claimed", "gone", False,
               "claimed this round to close it and stopped before it did (it exited or hangs)")
    INTERRUPTED = ("interrupted", "interrupted", False,
                   "was interrupted ({interrupted}) while creating {desc}, {ago:.1f} s ago")
    GONE = ("gone", "gone", False,
            "has not answered for {ago:.1f} s while creating {desc} (it may have exited)")

    def __init__(self, word: str, kind: str, on_its_way: bool, words: str) -> None:
        self.word, self.kind, self.on_its_way, self.words = word, kind, on_its_way, words


@attrs.frozen
class Peer:
    """What the member closing a round knows of one missing member: its ``state``, the time
    (on the closer's clock) that state is about (``ARRIVING``: first seen; ``BUSY``: its
    deadline there; ``CREATING``: when torch's creation fails; ``LEFT``, ``GAVE_UP``,
    ``INTERRUPTED``: when it left; ``FINISHED``: its next beat; ``GONE``: since when it
    wrote nothing), and whether its group waits, directly or through others, for the
    closing rank (``waits_for_me``: a cycle)."""

    state: PeerState
    until: float = 0.0
    waits_for_me: bool = False


def next_deadline(now: float, deadline: float, cap: float, peers: Sequence[Peer]) -> float | None:
    """When the closing member looks again, or None: close the round now.

    A member waits past its deadline only for peers on their way here
    (:attr:`PeerState.on_its_way`), each until its ``until`` plus :data:`SLACK_S`: one that
    holds a ticket of this round (first seen at ``until``: the commit, or its record, is in
    flight), one busy with another group until that one's deadline (it then fails there and
    comes), one inside torch's creation of an earlier round of this group until that
    creation fails, one that left a failed round (of another group, or an earlier one of
    this group: it may ask again) or finished creating another group at ``until``.  A peer
    that waits for this member (a cycle: groups asked in different orders) is not waited
    for.  Never past ``cap``.

    >>> next_deadline(10.0, 10.0, 20.0, [Peer(PeerState.BUSY, until=12.0)])
    13.0
    >>> next_deadline(10.0, 10.0, 20.0, [Peer(PeerState.BUSY, 12.0, waits_for_me=True)]) is None
    True
    """
    if now >= cap:
        return None
    ahead = [p.until + SLACK_S for p in peers if p.state.on_its_way and not p.waits_for_me]
    until = min(max([deadline, *ahead]), cap)
    return until if until > now else None


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
_ON_RECORD = (PeerState.BUSY, PeerState.CREATING, PeerState.INTERRUPTED, PeerState.GONE)


def look(rz: Liveness, a: Attempt, seen: dict[int, float], *, passed: bool
         ) -> tuple[set[int], dict[int, Peer], Snapshot]:
    """Who holds a ticket of this round (by their records), and what each missing member
    is doing.  Members without a record of this round that may hold one of its tickets
    (the counter says more were taken than records show: they came less than a grace
    period ago, or stopped right after their ticket) are *arriving*, from when this
    closer first saw them (``seen``, kept across its looks).  A ticket counter that went
    back below a ticket taken, or that every member's record contradicts, raises
    :class:`~backend.StoreRecordError` naming it."""
    now = rz.clock()
    snap = Snapshot(rz)
    counter = rz.key("t", a.name)
    count = read_tickets(counter, rz.peek(counter))
    if a.tickets and count < a.ticket:
        raise StoreRecordError(counter, f"it reads {count}, below the ticket {a.ticket} "
                               "this rank took from it: it was deleted or set back")
    taken = min(count - a.round * a.size, a.size)
    arrived = {rz.rank} | {m for m in a.members if m != rz.rank and
                           snap.waits_in(m, a.name, a.round)}
    peers = {m: snap.peer(a, m, now) for m in a.members if m not in arrived}
    if not peers and taken < a.size:
        raise StoreRecordError(counter, f"it reads {count}, but the records of all "
                               f"{a.size} members say they hold tickets of round {a.round} "
                               "(it was deleted or set back)")
    if taken > len(arrived):  # some hold a ticket without a record (yet)
        holders = [m for m, p in peers.items() if p.state not in _ON_RECORD]
        for m in holders:
            peers[m] = Peer(PeerState.ARRIVING, seen.setdefault(m, now))
        snap.ticketless = max(0, len(holders) - (taken - len(arrived)))
    elif passed:  # this rank met them here before, then failed in torch
        peers = {m: attrs.evolve(p, state=PeerState.CREATED)
                 if p.state in (PeerState.ABSENT, PeerState.IDLE) else p
                 for m, p in peers.items()}
    return arrived, peers, snap


def reasons(rz: Liveness, a: Attempt, peers: Mapping[int, Peer], snap: Snapshot,
            stopped: str = "") -> Reasons:
    """The closer's reasons, from its look: who is missing and what each is doing (the
    first few; their records as the look read them).  ``stopped``: what the ticket
    holders without a record did instead (default: took a ticket and came no
    further)."""
    now = rz.clock()
    missing = sorted(peers)
    doing = []
    for m in missing[:SHOWN]:
        peer = peers[m]
        kind = "behind" if peer.state is PeerState.BUSY and not peer.waits_for_me else \
            peer.state.kind
        text = _words(peer, snap.record(m), now)
        if peer.state is PeerState.ARRIVING and (stopped or now >= peer.until + SLACK_S):
            kind = "gone"  # it took a ticket and came no further
            text = stopped or ("took a ticket of this round and came no further in "
                               f"{now - peer.until:.1f} s (it exited, hangs or was "
                               "interrupted)")
            if snap.ticketless:
                text = (f"either never came or {text} ({snap.ticketless} of the ranks "
                        "listed so never came)")
        doing.append((m, text, kind))
    return Reasons(rz.rank, tuple(missing[:SHOWN]), len(missing), tuple(doing))


def failure(rz: Liveness, a: Attempt, why: Reasons) -> BackendError:
    """The error a member of a failed round raises, from the closer's reasons ``why``: a
    :class:`~backend.StoreRecordError` where the closer found a store value not valid, else
    a :class:`~backend.MembersMissingError`."""
    if why.bad is not None:
        key, writer, reason = why.bad
        return StoreRecordError(key, f"{reason} (rank {why.by} found it and closed round "
                                f"{a.round} of {a.desc}; rank {rz.rank} fails with it)",
                                writer=writer)
    doing = {m: (text, kind) for m, text, kind in why.doing}
    kinds = {k for _, k in doing.values()} | ({"late"} if a.late else set())
    cause = next((text for kind, text in _CAUSES if kind in kinds), _CAUSES[-1][1])
    who = "; ".join(f"rank {m} {text}" for m, (text, _) in list(doing.items())[:8])
    if why.count > min(8, len(doing)):
        who += f"; and {why.count - min(8, len(doing))} more"
    by = "" if why.by == rz.rank else f" (rank {why.by} closed the round)"
    what = "are missing" if "interrupted" in kinds else "did not arrive"
    message = (
        f"rank {rz.rank} could not create {a.desc} within "
        f"{rz.clock() - a.start:.1f} s{by}: {why.count} of its {a.size} members {what} "
        f"({who}). Likely cause: {cause}. Remedies: ask for groups in the same order on "
        "every rank (mesh.materialize() creates a mesh's groups in dim order on every "
        "rank), make every member ask, and check the program offline with "
        "backend.check_spmd(world_size, program).")
    return MembersMissingError(message, rank=rz.rank, dim=a.dim, ranks=a.shown,
                               missing=why.missing,
                               doing={m: text for m, (text, _) in doing.items()})


def _words(peer: Peer, seen: Seen | None, now: float) -> str:
    """What a missing member is doing, in words, from its state and record."""
    rec = None if seen is None else seen.record
    desc = (rec.desc if rec is not None and rec.desc else
            "no group (it is diagnosing a failed collective)" if rec is not None and
            rec.explaining else "a group")
    return peer.state.words.format(
        desc=desc, busy_for=now - (now if seen is None else seen.since),
        until_in=max(0.0, peer.until - now), ago=now - peer.until,
        interrupted=(rec.interrupted if rec is not None and rec.interrupted else
                     "an exception"))


class Snapshot:
    """The store as the closing member reads it once: records and round outcomes, each
    read at most once (memoized), so a listing costs O(members + records followed)."""

    def __init__(self, rz: Liveness) -> None:
        self._rz = rz
        self._records: dict[int, Seen | None] = {}
        self._decided: dict[tuple[str, int], int | None] = {}
        self.ticketless = 0  # listed as arriving, but more than the tickets taken

    def record(self, rank: int) -> Seen | None:
        if rank not in self._records:
            self._records[rank] = self._rz.record(rank)
        return self._records[rank]

    def waits_in(self, rank: int, name: str, k: int) -> bool:
        """Whether ``rank``'s record says one of its threads waits (or waited, and left when
        the round failed) in round ``k`` of ``name``; not if an interrupt ended it."""
        seen = self.record(rank)
        if seen is None or seen.record.interrupted is not None:
            return False
        rec = seen.record
        return (name, k) in rec.in_ or (rec.group == name and rec.round == k)

    def decided(self, rec: LivenessRecord) -> int | None:
        """GO or QUIT if the round in ``rec`` is decided (a full round is being committed),
        None while it is open."""
        name, k = rec.group or "", rec.round
        if (name, k) not in self._decided:
            dkey = self._rz.key("d", name, k)
            value = self._rz.peek(dkey)
            found: int | None
            if value is not None:
                found = GO if decision(read_outcome(dkey, value, range(self._rz.world)))[0] \
                    else QUIT
            else:
                counter = self._rz.key("t", name)
                taken = read_tickets(counter, self._rz.peek(counter))
                found = GO if taken >= (k + 1) * max(rec.size, 1) else None
            self._decided[(name, k)] = found
        return self._decided[(name, k)]

    def peer(self, a: Attempt, m: int, now: float) -> Peer:
        """What missing member ``m`` is doing, from its record."""
        seen = self.record(m)
        if seen is None:
            return Peer(PeerState.ABSENT)
        rec = seen.record
        if self._rz.lost(seen):  # a peer found it silent after a failure; it wrote nothing since
            return Peer(PeerState.GONE, seen.at)
        if rec.interrupted is not None:
            return Peer(PeerState.INTERRUPTED, now if seen.left is None else seen.left)
        if rec.group is None:
            return Peer(PeerState.IDLE)  # explaining a failure, not creating
        if rec.group == a.name:
            return self._here(a, seen, now)
        return self._elsewhere(seen, now)

    def _here(self, a: Attempt, seen: Seen, now: float) -> Peer:
        """A missing member whose record is about this group."""
        rec, silent = seen.record, seen.silent(now)
        if rec.round >= a.round:
            return Peer(PeerState.GONE, seen.at) if silent else Peer(PeerState.ARRIVING, now)
        if seen.left is not None:  # it gave up an earlier round: on its way if just now
            return Peer(PeerState.GAVE_UP, seen.left)
        if silent:
            return Peer(PeerState.GONE, seen.at)
        if rec.creating:  # inside torch's creation of an earlier round
            return Peer(PeerState.CREATING, seen.until)
        if self.decided(rec) is None:  # still waiting in an earlier round
            return Peer(PeerState.BUSY, _busy_until(seen))
        return Peer(PeerState.CREATED)

    def _elsewhere(self, seen: Seen, now: float) -> Peer:
        """A missing member whose record is about another group."""
        rec = seen.record
        if seen.left is not None:
            return Peer(PeerState.LEFT, seen.left)
        decided = self.decided(rec)
        if decided == GO:  # it created that group: moments ago, or long ago
            return _after_go(seen, now)
        if decided is None and seen.silent(now):
            return Peer(PeerState.GONE, seen.at)
        return Peer(PeerState.BUSY, _busy_until(seen), self.waits_for(rec))

    def waits_for(self, rec: LivenessRecord, most: int = 256) -> bool:
        """Whether the member with record ``rec`` waits, directly or through the open groups
        of the members it waits for, for the closing rank (a cycle).  Follows at most
        ``most`` records; a group too large to be written out in a record is assumed to."""
        rank = self._rz.rank
        todo = [rec]
        seen: set[int] = set()
        while todo and len(seen) < most:
            r = todo.pop()
            if rank in r.ranks or r.size > len(r.ranks):
                return True
            for m in r.ranks:
                if m in seen:
                    continue
                seen.add(m)
                other = self.record(m)
                o = None if other is None else other.record
                if o is not None and o.group and o.left_s is None and \
                        o.group != r.group and self.decided(o) != GO:
                    todo.append(o)  # still in a round (open, or closed unnoticed)
        return False


def _busy_until(seen: Seen) -> float:
    """How long a member busy in another round is waited for: until its deadline there,
    and, if it beats, no longer than its liveness bound past the moment this rank first
    saw its record (looked at again then, a member whose beat stopped is named gone)."""
    period = seen.record.period
    if period is None:
        return seen.until
    return min(seen.until, seen.at + 3 * period + 2.0)


def _after_go(seen: Seen, now: float) -> Peer:
    """A member whose last group went ahead: finishing it (this rank first saw its record
    less than a beat period and the slack ago: it may be on its way here), or idle."""
    period = seen.record.period
    if period is None or now - seen.at >= period + SLACK_S:
        return Peer(PeerState.IDLE)
    if seen.record.creating and now < seen.until:  # inside torch's creation of it, or just out
        return Peer(PeerState.BUSY, min(seen.until, seen.at + period))
    return Peer(PeerState.FINISHED, seen.at + period)
