"""The closer's diagnosis of a round that does not fill: what each missing member is doing
(from its record, read once: :class:`Snapshot`), the waiting policy over that
(:func:`next_deadline`, pure), the reasons the closer writes (:func:`reasons`), and the error
every member raises from them (:func:`failure`).  Listing the missing happens once per
failed round, by its closer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._core import MembersMissingError
from ._liveness import Liveness
from ._rounds import GO, QUIT, SHOWN, SLACK_S, Attempt, decision
from ._store import key

__all__ = ["Peer", "Snapshot", "failure", "look", "next_deadline", "reasons"]


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


def look(rz: Liveness, a: Attempt, seen: dict[int, float], *, passed: bool
         ) -> tuple[set[int], dict[int, Peer], Snapshot]:
    """Who holds a ticket of this round (by their records), and what each missing member
    is doing.  Members without a record of this round that may hold one of its tickets
    (the counter says more were taken than records show: they came less than a grace
    period ago, or stopped right after their ticket) are *arriving*, from when this
    closer first saw them (``seen``, kept across its looks)."""
    now = rz.clock()
    snap = Snapshot(rz)
    taken = min(int(rz.peek(key("t", a.name)) or 0) - a.round * a.size, a.size)
    arrived = {rz.rank}
    for m in a.members:
        if m != rz.rank and snap.waits_in(m, a.name, a.round):
            arrived.add(m)
    lost_after = rz.lost_after if rz.period else None
    peers = {m: snap.peer(a, m, now, lost_after) for m in a.members if m not in arrived}
    if taken > len(arrived):  # some hold a ticket without a record (yet)
        holders = [m for m, p in peers.items()  # not those whose record says more
                   if p.state not in ("busy", "creating", "interrupted", "gone")]
        for m in holders:
            peers[m] = Peer("arriving", seen.setdefault(m, now))
        snap.ticketless = max(0, len(holders) - (taken - len(arrived)))
    elif passed:  # this rank met them here before, then failed in torch
        peers = {m: attrs.evolve(p, state="created") if p.state in ("absent", "idle")
                 else p for m, p in peers.items()}
    return arrived, peers, snap


def reasons(rz: Liveness, a: Attempt, peers: Mapping[int, Peer], snap: Snapshot,
            stopped: str = "") -> dict[str, Any]:
    """The closer's reasons, from its look: who is missing and what each is doing (the
    first few; their records as the look read them).  ``stopped``: what the ticket
    holders without a record did instead (default: took a ticket and came no
    further)."""
    now = rz.clock()
    missing = sorted(peers)
    doing: dict[str, list[str]] = {}
    for m in missing[:SHOWN]:
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
    return {"by": rz.rank, "at": now, "missing": missing[:SHOWN],
            "count": len(missing), "doing": doing}


def failure(rz: Liveness, a: Attempt, why: Mapping[str, Any]) -> MembersMissingError:
    """The error a member of a failed round raises, from the closer's reasons ``why``."""
    missing = tuple(int(m) for m in why.get("missing", ()))
    doing = {int(m): tuple(v) for m, v in why.get("doing", {}).items()}
    kinds = {k for _, k in doing.values()} | ({"late"} if a.late else set())
    cause = next((text for kind, text in _CAUSES if kind in kinds), _CAUSES[-1][1])
    count = int(why.get("count", len(missing)))
    who = "; ".join(f"rank {m} {text}" for m, (text, _) in list(doing.items())[:8])
    if count > min(8, len(doing)):
        who += f"; and {count - min(8, len(doing))} more"
    closer = why.get("by")
    by = "" if closer in (None, rz.rank) else f" (rank {closer} closed the round)"
    what = "are missing" if "interrupted" in kinds else "did not arrive"
    message = (
        f"rank {rz.rank} could not create {a.desc} within "
        f"{rz.clock() - a.start:.1f} s{by}: {count} of its {a.size} members {what} "
        f"({who}). Likely cause: {cause}. Remedies: ask for groups in the same order on "
        "every rank (mesh.materialize() creates a mesh's groups in dim order on every "
        "rank), make every member ask, and check the program offline with "
        "backend.check_spmd(world_size, program).")
    return MembersMissingError(message, rank=rz.rank, dim=a.dim, ranks=a.shown,
                               missing=missing,
                               doing={m: text for m, (text, _) in doing.items()})


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


class Snapshot:
    """The store as the closing member reads it once: records and round outcomes, each
    read at most once (memoized), so a listing costs O(members + records followed)."""

    def __init__(self, rz: Liveness) -> None:
        self._rz = rz
        self._records: dict[int, dict[str, Any] | None] = {}
        self._decided: dict[tuple[Any, int], int | None] = {}
        self.ticketless = 0  # listed as arriving, but more than the tickets taken

    def record(self, rank: int) -> dict[str, Any] | None:
        if rank not in self._records:
            self._records[rank] = self._rz.record(rank)
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
            value = self._rz.peek(key("d", name, k))
            if value is not None:
                found: int | None = GO if decision(int(value))[0] else QUIT
            else:
                taken = int(self._rz.peek(key("t", name)) or 0)
                found = GO if taken >= (k + 1) * int(rec.get("size", 1)) else None
            self._decided[(name, k)] = found
        return self._decided[(name, k)]

    def peer(self, a: Attempt, m: int, now: float, lost_after: float | None) -> Peer:
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
            period = self._rz.period
            if period is not None and now - beat < period + SLACK_S:
                if "creating" in rec and now < float(rec.get("until", now)):
                    # inside torch's creation of it, or just out (its record still says so):
                    # looked at again after its next beat, as one that just finished is
                    return Peer("busy", min(float(rec["until"]), beat + period))
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
        rank = self._rz.rank
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
