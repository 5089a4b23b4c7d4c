"""Reading one job's dumps against its plan: which groups are stuck, who never entered their
pending call, where members first diverge, and who merely waits behind them.

Per group (a process group of the dumps, placed in the plan by ``_groups``) the members'
collective calls are lined up by sequence number.  The first number at which members that
reached it recorded different calls (op, shapes, dtypes) is a ``desync``.  Otherwise the
highest number any member reached is the pending call; members that never reached it are
``unmatched`` when they are the cause, and the members that did wait for them.  A member
with a dump that never reached it is the cause when its own newest call completed (its
program went on without the call), or when it went past it: it waits at a call that every
other rank recording that call had issued after this one.  Otherwise it is stuck elsewhere,
and the group's waiting members are *stuck behind* it (check_spmd's words).  A member
without a dump may have died, hang elsewhere, or its dump was not given: it is a possible
cause, worded so, unless its whole host gave no dump (dumps collected a folder per host):
then a group whose dumped members all entered its pending call is *unseen* (it completed if
the others came; a dump marking it completed settles it), and a rank whose newest call is in
such a group went on unless they did not come.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import attrs

from .._core import GROUP_DESC_PREFIX, FlightRecordError, MeshView, RankStyle, ranks_text
from ._groups import PlanGroup, place_group
from ._records import FORMATS, FlightCall, FlightDump

__all__ = ["GroupState", "Hang", "analyse"]

MIXED_JOB_NS = 24 * 3600 * 10**9
"""Dumps whose newest calls are further apart than a day are not one job's hang."""

Calls = dict[int, dict[int, FlightCall]]  # rank -> seq -> call, on one group


@attrs.frozen
class GroupState:
    """One group as the dumps leave it: torch's ``name``, the plan's ``group``, the pending
    call (``seq``, ``call``: the highest any member reached), the members that ``entered``
    it, those that ``never`` did (with a dump) and those with ``no_dump``; ``desync``: the
    first sequence number where members differ and each side ``(ranks, call)``;
    ``entered_ns``: when the first member entered the pending call (0: the dumps do not
    say)."""

    name: str
    group: PlanGroup
    seq: int
    call: FlightCall
    entered: tuple[int, ...]
    never: tuple[int, ...]
    no_dump: tuple[int, ...]
    desync: tuple[int, tuple[tuple[tuple[int, ...], FlightCall], ...]] | None

    done: bool = False
    entered_ns: int = 0

    @property
    def hung(self) -> bool:
        """Whether some member never entered the pending call, or members differ; members
        without a dump count only while no dump says the pending call completed (a
        collective completes only once every member entered it)."""
        return bool(self.never or self.desync or (self.no_dump and not self.done))

    @property
    def unseen(self) -> bool:
        """Whether every member with a dump entered the pending call and only members
        without one may be missing: the dumps alone cannot tell whether it completed (Gloo's
        records are never marked completed)."""
        return self.hung and not self.never and self.desync is None


@attrs.frozen
class Hang:
    """Everything the analysis found (the report words it): the groups, each rank's newest
    call (``positions``: rank -> (torch group name, call)), the dumps' ranks, the ranks of
    the plan without a dump, what does not match the plan (``mismatches``) and each rank's
    collective calls (``calls``); ``notes`` on how they were read."""

    world: int
    states: tuple[GroupState, ...]
    positions: Mapping[int, tuple[str, FlightCall]]
    dumped: tuple[int, ...]
    no_dump: tuple[int, ...]
    mismatches: tuple[str, ...]
    calls: Mapping[int, tuple[FlightCall, ...]]
    notes: tuple[str, ...] = ()


def analyse(dumps: Sequence[FlightDump], views: Mapping[str, MeshView]) -> Hang:
    """The groups and positions of one job's ``dumps`` under the plan ``views``."""
    world = max(v.ranks.max_rank for v in views.values()) + 1
    _check_one_job(dumps)
    for d in dumps:
        if d.rank >= world:
            _refuse(f"{d.path!r} is rank {d.rank}'s dump, and the plan has {world} ranks "
                    f"(0 to {world - 1})")
    by_group, descs = _by_group(dumps)
    listed = {n: m for d in dumps for n, m in d.members.items()}
    states, mismatches = [], []
    placed: dict[tuple[str, str, tuple[int, ...]], tuple[str, set[int]]] = {}
    for name, calls in by_group.items():
        group = place_group(descs[name], name, calls, views, world, listed.get(name))
        if group is None:
            why = _not_the_plans(name, descs[name], calls, listed.get(name), views)
            if descs[name].startswith(GROUP_DESC_PREFIX) or name in listed:  # the job names it
                _refuse(why)
            mismatches.append(why)  # a group made by hand the plan does not know
            continue
        _one_group_each(placed, name, group, set(calls))
        states.append(_state(name, group, calls, {d.rank for d in dumps}))
    if by_group and not states:
        _refuse(f"none of the dumps' {len(by_group)} groups is a group of the plan ("
                + "; ".join(mismatches[:3]) + ")")
    dumped = tuple(sorted(d.rank for d in dumps))
    have = set(dumped)
    return Hang(world, tuple(states), _positions(dumps), dumped,
                tuple(r for r in range(world) if r not in have), tuple(mismatches),
                {d.rank: tuple(c for c in d.calls if not c.p2p) for d in dumps},
                tuple(f"the dumps' format {v} is newer than {', '.join(FORMATS)}, which this "
                      "release was checked on (torch 2.13 to 2.15): read as that, field by field"
                      for v in sorted({d.version for d in dumps} - set(FORMATS))))


def _refuse(why: str) -> None:
    """The plan is not the job's: refused before any finding (a finding under the wrong plan
    would name the wrong ranks with confidence)."""
    raise FlightRecordError(f"the plan does not match the job: {why}; give the job's plan")


def _one_group_each(placed: dict[tuple[str, str, tuple[int, ...]], tuple[str, set[int]]],
                    name: str, group: PlanGroup, seen: set[int]) -> None:
    """Refuse when two of torch's groups with no rank in common land on one group of the
    plan: the job's groups are smaller than the plan's (a plan of ``tp=4`` read on dumps of
    ``tp=2``), and its findings would say the other half never came."""
    key = (group.view, group.dim, group.members)
    other = placed.setdefault(key, (name, seen))
    if other[0] != name and not other[1] & seen:
        _refuse(f"torch's groups {other[0]!r} (ranks "
                f"{ranks_text(sorted(other[1]), RankStyle.HANG)}) and {name!r} (ranks "
                f"{ranks_text(sorted(seen), RankStyle.HANG)}) both land on "
                f"{group.describe()} of view {group.view!r}: the job's groups are smaller "
                "than the plan's")


def _not_the_plans(name: str, desc: str, calls: Calls, members: Sequence[int] | None,
                   views: Mapping[str, MeshView]) -> str:
    """Why torch's group ``name`` is listed under "does not match the plan"."""
    dims = sorted({f"{v}.{d}" for v, view in views.items() for d in view.names})
    listed = f" and members {ranks_text(members, RankStyle.HANG)} in pg_config" \
        if members is not None else ""
    return (f"torch's group {name!r} (group_desc {desc!r}) with calls from ranks "
            f"{ranks_text(sorted(calls), RankStyle.HANG)}{listed} is no group of the plan "
            f"(its dims: {', '.join(dims[:12])})")


def _check_one_job(dumps: Sequence[FlightDump]) -> None:
    seen: dict[int, str] = {}
    for d in dumps:
        if d.rank in seen:
            raise FlightRecordError(f"two dumps of rank {d.rank}: {seen[d.rank]!r} and "
                                    f"{d.path!r} (dumps of several jobs or attempts mixed?)")
        seen[d.rank] = d.path
    versions = {d.version for d in dumps}
    if len(versions) > 1:
        raise FlightRecordError(f"the dumps have several formats {sorted(versions)}: they "
                                "come from different torch versions, so not from one job")
    times = sorted((d.newest_ns, d.path) for d in dumps if d.newest_ns)
    if times and times[-1][0] - times[0][0] > MIXED_JOB_NS:
        raise FlightRecordError(f"the newest calls of {times[0][1]!r} and {times[-1][1]!r} "
                                f"are {(times[-1][0] - times[0][0]) / 3.6e12:.0f} hours apart: "
                                "these dumps are not of one hang of one job")


def _by_group(dumps: Sequence[FlightDump]) -> tuple[dict[str, Calls], dict[str, str]]:
    by_group: dict[str, Calls] = defaultdict(dict)
    descs: dict[str, str] = {}
    for d in dumps:
        for c in d.calls:
            if not c.p2p:
                by_group[c.group].setdefault(d.rank, {})[c.seq] = c
                descs.setdefault(c.group, c.desc)
    return dict(by_group), descs


def _state(name: str, group: PlanGroup, calls: Calls, dumped: set[int]) -> GroupState:
    last = {r: max(calls[r], default=0) if r in calls else 0 for r in group.members
            if r in dumped}
    top = max(last.values())
    pending = next(calls[r][top] for r in calls if top in calls[r])
    entered = tuple(r for r in group.members if last.get(r, 0) >= top and r in dumped)
    never = tuple(r for r in group.members if r in dumped and last[r] < top)
    no_dump = tuple(r for r in group.members if r not in dumped)
    done = any(calls[r][top].state == "completed" for r in calls if top in calls[r])
    first = min((t for r in entered if (t := calls[r][top].created_ns)), default=0)
    return GroupState(name, group, top, pending, entered, never, no_dump,
                      _first_desync(calls, group.members), done, first)


def _first_desync(calls: Calls, members: Sequence[int]
                  ) -> tuple[int, tuple[tuple[tuple[int, ...], FlightCall], ...]] | None:
    seqs = sorted({s for r in calls for s in calls[r]})
    for s in seqs:
        sides: dict[object, list[int]] = defaultdict(list)
        first: dict[object, FlightCall] = {}
        for r in members:
            call = calls.get(r, {}).get(s)
            if call is not None:
                sides[call.signature()].append(r)
                first.setdefault(call.signature(), call)
        if len(sides) > 1:
            ordered = sorted(sides.items(), key=lambda kv: kv[1][0])
            return s, tuple((tuple(rs), first[sig]) for sig, rs in ordered)
    return None


def _positions(dumps: Sequence[FlightDump]) -> dict[int, tuple[str, FlightCall]]:
    """Each rank's newest collective call: where it was when it dumped."""
    out = {}
    for d in dumps:
        calls = [c for c in d.calls if not c.p2p]
        if calls:
            newest = max(calls, key=lambda c: c.order)
            out[d.rank] = (newest.group, newest)
    return out
