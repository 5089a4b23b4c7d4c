"""What a hung job's dumps say, in mesh coordinates and check_spmd's words:
:class:`HangReport` and :class:`HangFinding` (``desync`` and ``unmatched``, the kinds
``check_spmd`` gives the same faults before launch)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from layout import show

from .._core import (
    FindingKind,
    FlightRecordError,
    MeshView,
    RankStyle,
    StuckRank,
    finding_kind,
    never_issued,
    nth,
    ranks_text,
    verb,
)
from ._groups import PlanGroup, rank_words
from ._hidden import Hidden, hidden_skips
from ._hung import GroupState, Hang
from ._passed import Passed, got_past, in_flight, settled
from ._records import FlightCall
from ._why import CYCLE, NO_DUMP_ONLY, PIPELINE_DIMS, Cause, Order, Why, at, cause

__all__ = ["SCHEMA", "HangFinding", "HangReport", "report"]

SCHEMA = "meshlayout.hang/1"

Host = Callable[[int], "str | None"]

_MOST = 8  # lines of one kind written out
KINDS = (FindingKind.DESYNC.value, FindingKind.UNMATCHED.value)  # those a hang's records show


def _whys(values: object) -> tuple[Why, ...]:
    """The causes of a finding as :class:`Why` values (their words accepted)."""
    try:
        return tuple(Why(v) for v in values)  # type: ignore[attr-defined]  # checked below
    except (TypeError, ValueError):
        raise FlightRecordError(f"a finding's causes are words of {[w.value for w in Why]}, "
                                f"got {show(values)}") from None


@attrs.frozen
class HangFinding:
    """One cause of the hang: ``kind`` (``"desync"`` or ``"unmatched"``, as in
    ``backend.FINDING_KINDS``), ``text`` (the group, the ranks, the call), ``ranks`` at fault
    and the plan's ``group``; ``causes``: why each of ``ranks`` is (a :class:`Why` each, in
    their order); ``maybe``: ranks that may be the cause instead, where the dumps cannot tell
    (a Gloo receiver's peers, whose sends the recorder does not see)."""

    kind: str = attrs.field(converter=finding_kind)
    text: str
    ranks: tuple[int, ...]
    group: PlanGroup
    causes: tuple[Why, ...] = attrs.field(default=(), converter=_whys)
    maybe: tuple[int, ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.kind not in KINDS:
            raise FlightRecordError(f"a finding's kind is one of {', '.join(KINDS)}, got "
                                    f"{show(self.kind)}")
        if type(self.text) is not str or not isinstance(self.group, PlanGroup):
            raise FlightRecordError(f"a finding has a str text and a PlanGroup group, got "
                                    f"{show(self.text)} and {show(self.group)}")
        _ranks(self.ranks, "a finding's ranks")
        _ranks(self.maybe, "a finding's possible causes")
        if self.causes and len(self.causes) != len(self.ranks):
            raise FlightRecordError(f"a finding has one cause per rank at fault, got "
                                    f"{len(self.causes)} for {len(self.ranks)} ranks")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles its group by value, so a pickle names only ``mesh.HangFinding``."""
        return HangFinding._unpickled, (self.kind, self.text, self.ranks,
                                        attrs.astuple(self.group, recurse=False),
                                        tuple(c.value for c in self.causes), self.maybe)

    @classmethod
    def _unpickled(cls, kind: str, text: str, ranks: tuple[int, ...],
                   group: tuple[Any, ...], causes: tuple[str, ...] = (),
                   maybe: tuple[int, ...] = ()) -> HangFinding:
        return cls(kind, text, ranks, PlanGroup(*group), causes, maybe)


@attrs.frozen
class HangReport:
    """What the dumps of a hung job say under its plan.  ``findings``: the causes (a
    :class:`HangFinding` per stuck group); ``blocked``: a :class:`~mesh.StuckRank` (its group
    a ``PlanGroup``) per rank merely stuck behind them; ``groups``: every group as the dumps
    leave it; ``mismatches``: what in the dumps does not fit the plan; ``no_dump``: ranks of
    the plan without a dump; ``notes``: how the dumps were read (a format newer than the one
    checked); ``unreadable``: each dump that could not be read, as ``"FILE: why"`` (the
    report is then :attr:`partial`); ``stalled_hosts``: the hosts all of whose ranks stopped
    before a call the others wait in (look at the host: its network, file system or a
    straggling process).  ``str()`` reads as a report; :meth:`to_dict` is its JSON
    (:data:`SCHEMA`)."""

    world: int
    dumped: tuple[int, ...]
    no_dump: tuple[int, ...]
    groups: tuple[GroupState, ...]
    findings: tuple[HangFinding, ...]
    blocked: tuple[StuckRank[PlanGroup], ...]
    mismatches: tuple[str, ...]
    notes: tuple[str, ...]
    host: Host = attrs.field(eq=False, repr=False)
    views: Mapping[str, MeshView] = attrs.field(eq=False, repr=False)
    unreadable: tuple[str, ...] = ()
    stalled_hosts: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        if type(self.world) is not int or self.world < 1:
            raise FlightRecordError(f"a report's world is a positive int, got {show(self.world)}")
        _ranks(self.dumped, "a report's dumped ranks")
        _ranks(self.no_dump, "a report's ranks without a dump")
        for name, kind in (("groups", GroupState), ("findings", HangFinding),
                           ("blocked", StuckRank), ("mismatches", str), ("notes", str),
                           ("unreadable", str), ("stalled_hosts", str)):
            value = getattr(self, name)
            if type(value) is not tuple or not all(isinstance(v, kind) for v in value):
                raise FlightRecordError(f"a report's {name} is a tuple of {kind.__name__}, got "
                                        f"{show(value)}")
        if not callable(self.host) or not isinstance(self.views, Mapping) or not all(
                isinstance(v, MeshView) for v in self.views.values()):
            raise FlightRecordError("a report's host is a function of the rank and its views "
                                    f"map names to MeshViews, got {show(self.host)} and "
                                    f"{show(self.views)}")

    @property
    def ok(self) -> bool:
        """Whether no group is stuck and everything fits the plan."""
        return not (self.findings or self.blocked or self.mismatches)

    @property
    def partial(self) -> bool:
        """Whether some dumps could not be read (:attr:`unreadable`): what they hold is missing
        from the report, and their ranks count as without a dump."""
        return bool(self.unreadable)

    @property
    def suspects(self) -> tuple[int, ...]:
        """The ranks to look at first: those at fault in a finding and those that may be
        instead (:attr:`HangFinding.maybe`; ranks without a dump are only when nothing else
        explains the hang)."""
        return tuple(sorted({r for f in self.findings for r in f.ranks + f.maybe}))

    def kinds(self) -> set[str]:
        """The kinds of the findings (``"desync"``, ``"unmatched"``)."""
        return {f.kind for f in self.findings}

    def __str__(self) -> str:
        hung = sum(s.hung for s in self.groups)
        head = (f"meshlayout hang over {self.world} ranks: {len(self.dumped)} dumps, "
                f"{len(self.groups)} groups with calls, {hung} stuck; "
                + ("problems found" if not self.ok else "no hang in the records"))
        lines = [head]
        if self.unreadable:
            lines.append(f"partial: {len(self.unreadable)} of "
                         f"{len(self.unreadable) + len(self.dumped)} dumps could not be read "
                         "(their ranks count as without a dump):")
            lines += [f"  {u}" for u in self.unreadable[:_MOST]]
            if len(self.unreadable) > _MOST:
                lines.append(f"  and {len(self.unreadable) - _MOST} more")
        if self.suspects:
            lines.append("look first at " + ", ".join(
                f"rank {r}" + (f" ({h})" if (h := self.host(r)) is not None else "")
                for r in self.suspects[:_MOST]) + (f" and {len(self.suspects) - _MOST} more"
                                                   if len(self.suspects) > _MOST else ""))
        lines += [f"- all of host {h}'s ranks stopped before calls the others wait in: look at "
                  "the host (its network, file system, a straggling process)"
                  for h in self.stalled_hosts[:_MOST]]
        lines += [f"- {f.text}" for f in self.findings[:_MOST]]
        if len(self.findings) > _MOST:
            lines.append(f"- and {len(self.findings) - _MOST} more")
        lines += _behind(self.blocked)
        if self.no_dump:
            one = len(self.no_dump) == 1
            lines.append(f"- no dump given for {ranks_text(self.no_dump, RankStyle.WHO)}: "
                         + ("it may have died, hang elsewhere, or its dump was not collected; "
                            "its dump" if one else "each may have died, hang elsewhere, or its "
                            "dump was not collected; their dumps")
                         + " would say which, and may name another culprit")
        lines += [f"- does not match the plan: {m}" for m in self.mismatches[:_MOST]]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (schema :data:`SCHEMA`, keys in docs/hang.md)."""
        return {"schema": SCHEMA, "world": self.world, "dumps": len(self.dumped),
                "no_dump": list(self.no_dump), "ok": self.ok,
                "suspects": [{"rank": r, "host": self.host(r)} for r in self.suspects],
                "findings": [{"kind": f.kind, "group": _group_dict(f.group),
                              "ranks": [self._rank(r, f.group) | (
                                  {"cause": f.causes[i].value} if f.causes else {})
                                  for i, r in enumerate(f.ranks)],
                              "maybe": [self._rank(r, f.group) for r in f.maybe],
                              "text": f.text} for f in self.findings],
                "stalled_hosts": list(self.stalled_hosts),
                "blocked": [{"rank": self._rank(b.rank, b.group), "group": _group_dict(b.group),
                             "waits_for": list(b.waits_for)} for b in self.blocked],
                "groups": [self._state_dict(s) for s in self.groups if s.hung],
                "mismatches": list(self.mismatches), "notes": list(self.notes),
                "partial": self.partial, "unreadable": list(self.unreadable)}

    def _rank(self, rank: int, group: PlanGroup) -> dict[str, Any]:
        view = self.views.get(group.view)
        place = view.coordinate(rank) if view is not None and \
            view.ranks.offset_of(rank) is not None else None
        return {"rank": rank, "host": self.host(rank),
                "coordinate": dict(zip(view.names, place)) if view and place else {}}

    def _state_dict(self, s: GroupState) -> dict[str, Any]:
        return {"group": _group_dict(s.group), "torch_name": s.name, "seq": s.seq,
                "call": _call_dict(s.call), "entered": list(s.entered),
                "never_entered": [self._rank(r, s.group) for r in s.never + s.no_dump],
                "desync_seq": s.desync[0] if s.desync else None}


def _group_dict(g: PlanGroup) -> dict[str, Any]:
    return {"view": g.view, "dim": g.dim, "members": list(g.members),
            "coordinate": dict(g.coordinate), "matched_by": g.by}


def _call_dict(c: FlightCall) -> dict[str, Any]:
    return {"op": c.op, "shapes": [list(s) for s in c.shapes], "dtypes": list(c.dtypes)}


def report(hang: Hang, views: Mapping[str, MeshView], host: Host,
           unreadable: tuple[str, ...] = ()) -> HangReport:
    """Word ``hang``: each stuck group's cause, or the ranks it is stuck behind."""
    positions = hang.positions
    order = Order(hang)
    hang, past, after, note = _past_without_dumps(hang, order)
    states = {s.name: s for s in hang.states}
    said: dict[int, Why] = {}
    findings: list[HangFinding] = []
    behind: list[GroupState] = []
    unseen = _unseen(hang, host)
    names = {s.name for s in unseen}
    odd = _odd_beside_missing(hang)
    peers = _peer_votes(hang, [(s, s.desync[0]) for s in hang.states if s.hung and s.desync],
                        stages=False)
    for s in sorted(hang.states, key=lambda s: s.group.members):
        if not s.hung or s.name in names:  # waiting only on hosts whose dumps were not given
            continue
        if s.desync is not None:
            findings.append(_desync(s, peers[s.name][0]))
            continue
        causes = {x: _once(said, x, why) for x in s.never + s.no_dump if (why := past.get(
            (s.name, x)) or cause(x, s, states, positions, order, names, views) or after.get(x))}
        findings += [odd[s.name]] if s.name in odd else []
        if causes:
            findings.append(_unmatched(s, causes, views, host))
        else:
            behind.append(s)
    findings += _out_of_order(hang, order, {r for f in findings for r in f.ranks})
    if any(s.hung for s in hang.states):  # a skip is hidden only behind a hang
        findings += [_hidden(h, views, host) for h in hidden_skips(
            hang, order, {r for f in findings for r in f.ranks})]
    findings, behind = _when_nothing_else(findings, behind, unseen, views, host)
    return HangReport(hang.world, hang.dumped, hang.no_dump, hang.states, tuple(findings),
                      _blocked(behind, positions), hang.mismatches, hang.notes + note, host,
                      views, unreadable, _stalled_hosts(findings, hang.world, host))


def _when_nothing_else(findings: list[HangFinding], behind: list[GroupState],
                       unseen: Sequence[GroupState], views: Mapping[str, MeshView], host: Host
                       ) -> tuple[list[HangFinding], list[GroupState]]:
    """The findings and the groups stuck behind them, where nothing else was found: every
    stuck rank waiting behind another is a cycle; else the ranks without a dump, on hosts
    whose dumps were not given, are what is left to explain the hang."""
    if behind and not findings and not unseen:  # every stuck rank waits behind another
        return [_unmatched(s, dict.fromkeys(s.never + s.no_dump, CYCLE), views, host)
                for s in behind], []
    if unseen and not findings:  # nothing else explains the hang: the ranks without a dump
        return [_unmatched(s, dict.fromkeys(s.no_dump, NO_DUMP_ONLY), views, host)
                for s in unseen], behind
    return findings, behind


def _past_without_dumps(hang: Hang, order: Order) -> tuple[
        Hang, dict[tuple[str, int], Cause], dict[int, Cause], tuple[str, ...]]:
    """What the peers of ranks without a dump show about them (:mod:`._passed`): ``hang``
    with the Gloo calls they show completed marked so; per ``(group name, rank)`` the cause
    of a rank without a dump that got past the pending call where it is still waited for;
    per rank the cause of one whose newest call is such a call (it stalled after it, or waits
    there for them); and a note on the calls taken as completed."""
    flight = in_flight(hang)
    passed = got_past(hang, order, blocking=not flight)
    hang, moved = settled(hang, passed, blocking=not flight)
    names = {s.name for s in moved}
    past = {k: _past_cause(p) for k, p in passed.items() if k[0] not in names}
    halted = {p.state.name: p.state for p in passed.values() if p.state.name not in names
              and not p.state.never and all((p.state.name, x) in passed
                                            for x in p.state.no_dump)}
    after = {r: _after_past(c, s) for r, (n, c) in hang.positions.items()
             if (s := halted.get(n)) is not None and c.seq == s.seq}
    return hang, past, after, _settled_note([p for k, p in passed.items() if k[0] in names]) \
        + _flight_note(hang, flight)


def _after_past(call: FlightCall, s: GroupState) -> Cause:
    """The cause of a rank whose newest call is ``s``'s pending one, which every member
    without a dump got past: it stalled after it, or it waits there for them."""
    them = ranks_text(s.no_dump, RankStyle.WHO)
    whose = verb(s.no_dump, "its", "their")
    return Cause(Why.UNSURE, f"its newest call ({call.describe()} on {s.group.describe()}, seq "
                 f"{call.seq}{at(call)}) is one that {them} (no dump given) got past, by "
                 f"{whose} peers' records: either it stalled after that call completed, or it "
                 f"waits there for {them}, whose program went on without it")


def _blocked(behind: Sequence[GroupState], positions: Mapping[int, tuple[str, FlightCall]]
             ) -> tuple[StuckRank[PlanGroup], ...]:
    """A :class:`~mesh.StuckRank` per rank waiting in a group stuck behind the findings (a
    rank at fault that waits too is listed, as check_spmd lists it), by rank."""
    return tuple(sorted((StuckRank(r, s.group, s.never + s.no_dump) for s in behind
                         for r in s.entered if r in positions and positions[r][0] == s.name),
                        key=lambda b: b.rank))


def _once(said: dict[int, Why], rank: int, why: Cause) -> Cause:
    """``why``, or a short "as above" when the report already said it of ``rank`` (a stalled
    rank leaves every group it is in waiting)."""
    if said.get(rank) is why.why:
        return Cause(why.why, f"{why.why.value}, as said above", why.maybe)
    said[rank] = why.why
    return why


def _unseen(hang: Hang, host: Host) -> list[GroupState]:
    """The stuck groups waiting only on hosts whose dumps were not given (:func:`_not_given`)."""
    given = _not_given(hang, host)
    return [s for s in hang.states if s.unseen and set(s.no_dump) <= given]


def _not_given(hang: Hang, host: Host) -> set[int]:
    """The ranks without a dump whose whole host gave none: dumps collected a folder per
    host, those hosts' not given (a rank whose host-mates' dumps are there, or whose host is
    unknown, may have died: it counts as a possible cause)."""
    dumped_hosts = {host(r) for r in hang.dumped}
    return {r for r in hang.no_dump if (h := host(r)) is not None and h not in dumped_hosts}


def _stalled_hosts(findings: Sequence[HangFinding], world: int, host: Host) -> tuple[str, ...]:
    """The hosts all of whose ranks stopped before a call the others wait in (two ranks at
    least: one rank is named as itself)."""
    stopped: dict[str, set[int]] = {}
    for f in findings:
        for r, why in zip(f.ranks, f.causes):
            if why is Why.STOPPED and (h := host(r)) is not None:
                stopped.setdefault(h, set()).add(r)
    if not stopped:
        return ()
    sizes = Counter(h for r in range(world) if (h := host(r)) in stopped)
    return tuple(sorted(h for h, rs in stopped.items() if len(rs) == sizes[h] >= 2))


def _odd_beside_missing(hang: Hang) -> dict[str, HangFinding]:
    """Per stuck group waiting on members without a dump, a desync finding where a member's
    pending call differs from the one every other group of the dim made at that number (Gloo
    aborts the member whose buffer is smaller than the message it gets, so the innocent side
    leaves no dump and only the odd one's record shows it).  Only groups of the same
    pipeline stage are compared (stages make calls of other shapes by design)."""
    asked = {s.name: s for s in hang.states if s.hung and s.no_dump and s.desync is None}
    out = {}
    for name, (theirs, sample) in _peer_votes(hang, [(s, s.seq) for s in asked.values()],
                                              stages=True).items():
        if len(theirs) == 1 and sum(theirs.values()) >= 2:  # the others agree, and are several
            found = _odd(hang, asked[name], sample[next(iter(theirs))])
            if found is not None:
                out[name] = found
    return out


def _peer_votes(hang: Hang, asked: Sequence[tuple[GroupState, int]], stages: bool
                ) -> dict[str, tuple[Counter[object], dict[object, FlightCall]]]:
    """Per group of ``asked``, with a call number: how often each call signature was
    recorded at that number by the members of the other groups along the same dim (the
    program every such group runs; with ``stages``, of the same pipeline stage only), and
    one such call per signature.  One pass over the calls for every group asked."""
    if not asked:
        return {}
    dim_of = {g.name: (g.group.view, g.group.dim, _stage(g.group) if stages else ())
              for g in hang.states}
    votes: dict[tuple[Any, int], Counter[tuple[str, object]]] = {
        (dim_of[s.name], seq): Counter() for s, seq in asked}
    sample: dict[tuple[tuple[Any, int], object], FlightCall] = {}
    for calls in hang.calls.values():
        for c in calls:
            key = (dim_of.get(c.group), c.seq)
            if key in votes:
                votes[key][c.group, c.signature()] += 1
                sample.setdefault((key, c.signature()), c)
    out = {}
    for s, seq in asked:
        key = (dim_of[s.name], seq)
        theirs: Counter[object] = Counter()
        for (g, sig), n in votes[key].items():
            theirs[sig] += n if g != s.name else 0
        theirs = +theirs  # (the signatures only this group made: none)
        out[s.name] = theirs, {sig: sample[key, sig] for sig in theirs}
    return out


def _stage(group: PlanGroup) -> tuple[tuple[str, int], ...]:
    """The group's coordinates on the pipeline dims of its view (none without one)."""
    return tuple((n, c) for n, c in group.coordinate if n in PIPELINE_DIMS)


def _odd(hang: Hang, s: GroupState, usual: FlightCall) -> HangFinding | None:
    """The desync finding of :func:`_odd_beside_missing` for ``s``, whose other groups all
    made ``usual`` (None where no member's pending call differs from it)."""
    odd = tuple(r for r in s.entered if (c := _pending(hang, r, s)) is not None
                and c.signature() != usual.signature())
    call = _pending(hang, odd[0], s) if odd else None
    if call is None:
        return None
    text = (f"{s.group.describe()} [{s.group.where()}]: {ranks_text(odd, RankStyle.WHO)} "
            f"issued its {nth(s.seq)} call as {call.describe()}{at(call)}, where every other "
            f"{s.group.dim!r} group issued {usual.describe()}: a desync, whose other side "
            f"({ranks_text(s.no_dump, RankStyle.WHO)}) left no dump (on Gloo a member whose "
            "buffer is smaller than the message it gets is aborted)")
    return HangFinding(FindingKind.DESYNC, text, odd, s.group, (Why.DESYNC,) * len(odd))


def _pending(hang: Hang, rank: int, s: GroupState) -> FlightCall | None:
    """``rank``'s record of ``s``'s pending call."""
    return next((c for c in hang.calls.get(rank, ()) if c.group == s.name and c.seq == s.seq),
                None)


def _out_of_order(hang: Hang, order: Order, named: set[int]) -> list[HangFinding]:
    """A desync per rank not named yet whose calls are out of the order the other members of
    its groups keep (only while something is stuck: a skip matched by the next call of its
    kind leaves a hang behind it, which may hide behind another)."""
    if not any(s.hung for s in hang.states):
        return []
    out = []
    for rank in sorted(hang.calls):
        found = order.out_of_order(rank) if rank not in named else None
        if found is None:
            continue
        group, call, other, before = found
        text = (f"{group.describe()} [{group.where()}]: rank {rank} issued its {nth(call.seq)} "
                f"call ({call.describe()}, seq {call.seq}{at(call)}) after its "
                f"{nth(before.seq)} call on {other.describe()} ({before.describe()}"
                f"{at(before)}), and every other member of those groups the other way round: "
                "it skipped a call or swapped two, and the call completed with its group at "
                "another point of the program (wrong data, then a hang where the counts part)")
        out.append(HangFinding(FindingKind.DESYNC, text, (rank,), group, (Why.DESYNC,)))
    return out


def _hidden(h: Hidden, views: Mapping[str, MeshView], host: Host) -> HangFinding:
    """A skip hidden behind another hang (:mod:`._hidden`): the rank went past a call its
    group never reached."""
    g, new = h.group.group, h.newest
    there = f"{new.describe()} on {h.at.group.describe()}, seq {new.seq}{at(new)}"
    waits = h.at.hung and new.seq >= h.at.seq
    head = (f"{g.describe()} [{g.where()}]: rank {h.rank} never issued its {nth(h.seq)} "
            f"call ({h.call.describe()}, seq {h.seq}{at(h.call)}), which no member reached "
            f"yet ({rank_words(h.rank, views, g, host(h.rank))}: ")
    if not h.sure:
        return HangFinding(FindingKind.UNMATCHED, head + _hidden_unsure(there, waits),
                           (h.rank,), g, (Why.UNSURE,))
    if h.stopped:
        return HangFinding(FindingKind.UNMATCHED, head + _hidden_stopped(there), (h.rank,), g,
                           (Why.STOPPED,))
    went = (f"it went past it: it waits at {there}, which" if waits else
            f"its newest call ({there}) completed, and")
    text = (f"{head}{went} the other ranks issue after this call: it skipped it, hidden "
            "behind the hang above; once that is mended, this group hangs or scrambles its "
            "data here)")
    return HangFinding(FindingKind.UNMATCHED, text, (h.rank,), g,
                       (Why.WENT_PAST if waits else Why.WENT_ON,))


def _hidden_stopped(there: str) -> str:
    """The words of a rank that stopped before a call its group never reached."""
    return (f"it stopped before it: its newest call ({there}) completed, the other ranks "
            "issue this call after that one, and it made none since: it stalls there "
            "(compute, I/O, a lock, a call the recorder does not see: on Gloo, a send or recv) "
            "or its program ended without this call, hidden behind the hang above; once that "
            "is mended, this group hangs here)")


def _hidden_unsure(there: str, waits: bool) -> str:
    """The words of a hidden skip where the ranks' records tie on the order of the call and
    the rank's newest one (``there``): both readings, neither said for sure."""
    newest = f"it waits at {there}" if waits else f"its newest call ({there}) completed"
    stays = ("it merely waits there for its peers" if waits else
             "it stopped before this call (a stall, or its program ended)")
    return (f"{newest}, and the other ranks' records tie on which of the two calls comes "
            "first, so the dumps cannot tell: either it skipped this call, hidden behind the "
            "hang above (once that is mended, this group hangs or scrambles its data here), "
            f"or the program issues this call after that one and {stays})")


def _past_cause(p: Passed) -> Cause:
    """The cause of a rank without a dump that got past the pending call (:mod:`._passed`),
    where a member that entered it made no call since: both readings."""
    return Cause(Why.UNSURE, "no dump was given for it, but its peers' records show it got "
                 f"past this call: {_completed_words(p)}: either its program went on without "
                 "this call, or it made it and the ranks that entered it made no call since "
                 "(a stall after it)")


def _completed_words(p: Passed) -> str:
    """The call whose completion shows that ``p.rank`` got past a pending call."""
    return (f"{p.later.group.describe()} completed its {nth(p.call.seq)} call "
            f"({p.call.describe()}, seq {p.call.seq}), which needs it and which the other "
            f"ranks issue after that call (rank {p.by}'s records show it completed)")


def _flight_note(hang: Hang, flight: Sequence[tuple[int, FlightCall]]) -> tuple[str, ...]:
    """One note for the Gloo calls still in flight behind later calls of their rank
    (:func:`._passed.in_flight`; none if none)."""
    if not flight:
        return ()
    names = {s.name: s.group.describe() for s in hang.states}
    rank, c = flight[0]
    n = len(flight)
    return (f"{n} Gloo call{'s' if n > 1 else ''} {'were' if n > 1 else 'was'} still in flight "
            f"when {'their ranks' if n > 1 else 'its rank'} dumped, though made before later "
            f"calls ({'the first: ' if n > 1 else ''}rank {rank}'s {c.describe()} on "
            f"{names.get(c.group, repr(c.group))}, seq {c.seq}{at(c)}): the program may make "
            "Gloo calls with async_op=True, or torch had not marked a finished call yet (seen "
            "in blocking programs under load), so a later call is not taken to show that an "
            "earlier one completed",)


def _settled_note(shown: Sequence[Passed]) -> tuple[str, ...]:
    """One note for the Gloo calls taken as completed (:func:`._passed.settled`), by what
    the peers of the ranks without a dump show (none if none)."""
    if not shown:
        return ()
    ranks = sorted({p.rank for p in shown})
    words = "; ".join(f"rank {p.rank} past {p.state.group.describe()}'s {nth(p.state.seq)} "
                      f"call ({_completed_words(p)})" for p in shown[:3])
    more = f"; and {len(shown) - 3} more" if len(shown) > 3 else ""
    return (f"{ranks_text(ranks, RankStyle.WHO)} gave no dump, but "
            f"{verb(ranks, 'its', 'their')} peers' records show {verb(ranks, 'it', 'they')} "
            "got past calls that every member with a dump made a call after, so those calls "
            "are taken as completed (a Gloo call returns once it completed, and no dump shows "
            f"one made with async_op=True still in flight): {words}{more}",)


def _desync(s: GroupState, peers: Counter[object]) -> HangFinding:
    """The desync of ``s``; the odd side is the smaller one, and between sides of one size
    (a 2-member group) the one whose call the other groups of the dim did not make there
    (``peers``), then the one with the lower ranks."""
    assert s.desync is not None, "a desync finding needs the desync"
    seq, sides = s.desync
    words = [f"{ranks_text(ranks, RankStyle.WHO)} {call.describe()}{at(call)}"
             for ranks, call in sides]
    odd = min(sides, key=lambda side: (len(side[0]), peers[side[1].signature()]))[0]
    text = (f"{s.group.describe()} [{s.group.where()}] desyncs at its {nth(seq)} call "
            f"(seq {seq}): " + "; ".join(words) + " (each side's first differing call)")
    return HangFinding(FindingKind.DESYNC, text, odd, s.group, (Why.DESYNC,) * len(odd))


def _unmatched(s: GroupState, causes: Mapping[int, Cause], views: Mapping[str, MeshView],
               host: Host) -> HangFinding:
    gone = tuple(sorted(causes))
    shown = "; ".join(f"{rank_words(x, views, s.group, host(x))}: {why.words}"
                      for x, why in list(causes.items())[:3])
    more = f"; and {len(gone) - 3} more" if len(gone) > 3 else ""
    text = never_issued(f"{s.group.describe()} [{s.group.where()}]", gone,
                        ranks_text(gone, RankStyle.WHO), s.seq,
                        f"{s.call.describe()}, seq {s.seq}{at(s.call)}", s.entered,
                        ranks_text(s.entered, RankStyle.WHO), shown + more)
    maybe = sorted({m for c in causes.values() for m in c.maybe} - set(gone))
    return HangFinding(FindingKind.UNMATCHED, text, gone, s.group,
                       tuple(causes[x].why for x in gone), tuple(maybe))


def _behind(blocked: Sequence[StuckRank[PlanGroup]]) -> list[str]:
    """One entry per group the blocked ranks wait at (a 10,000-rank job has thousands of
    them behind one cause): its waiting ranks and whom they wait for."""
    if not blocked:
        return []
    by_group: dict[tuple[int, ...], tuple[PlanGroup, list[int], set[int]]] = {}
    for b in blocked:
        entry = by_group.setdefault(b.group.members, (b.group, [], set()))
        entry[1].append(b.rank)
        entry[2].update(b.waits_for)
    words = [f"{ranks_text(ranks, RankStyle.WHO)} at {g.describe()} "
             f"(waiting for {', '.join(map(str, sorted(w)))})"
             for g, ranks, w in list(by_group.values())[:_MOST]]
    more = f"; and {len(by_group) - _MOST} more groups" if len(by_group) > _MOST else ""
    return ["- stuck behind those: " + "; ".join(words) + more]


def _ranks(value: object, what: str) -> None:
    """Refuse ``value`` unless it is a tuple of non-negative plain ints."""
    if type(value) is not tuple or not all(type(r) is int and r >= 0 for r in value):
        raise FlightRecordError(f"{what} are a tuple of ranks (ints >= 0), got {show(value)}")
