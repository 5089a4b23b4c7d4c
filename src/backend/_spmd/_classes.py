"""Automatic classes: which ranks behave alike, found from what each rank's program reads.

A program learns its rank only through reads (``_reads``): its rank, its coordinates, the
groups it asks for.  Run under automatic classes, each answer is recorded with the
expression it came from, and the program sees rank-dependent ints only as :class:`~._reads.
Sym` values, so the recorded answers are everything it learnt of its rank.  Then:

1. the smallest rank not yet placed runs (symbolically); its recorded expressions are
   evaluated for every rank not yet placed, at once (NumPy: coordinates come from the
   layouts); the ranks on which every expression gives the same answer are its class (a
   deterministic program takes the same path there: the same requests and calls, each on
   the rank's own group of the same family); repeat until every rank is placed;
2. each class is verified: its representative runs again on plain ints (a program that
   behaves differently on a ``Sym``, e.g. an ``isinstance`` test, differs there), and its
   group neighbours in the class run (``_reduce.verifiers``) and must read the same answers
   and give the representative's run moved to their groups; past the first
   :data:`IN_FULL` classes of one shape of reads (the same expressions, other answers),
   one neighbour a class, on plain ints, checks both at once;
3. a class whose representative cannot be derived (it raised, used lifecycle calls, groups
   torch code made, threads: ``_reduce.check_derivable``) runs every member itself; any
   verification that differs, more classes than :func:`most_classes` allows (a program that
   branches on nearly every rank), or verification runs that would add up to more than half
   of running every rank (:data:`WORTH`), makes the check run every rank, and says so;
4. the others are derived (``_reduce.derive``): the replay covers every rank.

Cost: per class one run, one plain re-run and its group neighbours' runs (past the first
classes of a shape, one run and one neighbour's), plus
O(ranks left x distinct reads) array work to place the ranks; the derivation and the
replay stay O(world x calls).  What is not recorded: the members of a group the program
reads (``group.ranks``, ``dist.get_process_group_ranks``, ``mesh.mesh``), which are taken to
be used as peers and roots (as places in the group: the derivation moves them), and reads
torch code makes of ``dist.get_rank()`` for itself; the neighbours' runs check both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .._core import family_view
from ._events import Call, Create, Event, GroupRef, Trace, spec_ref
from ._matcher import collector_paused
from ._reads import Evaluator, Reads
from ._reduce import Underivable, check_derivable, derive, same, verifiers

if TYPE_CHECKING:
    import numpy as np

__all__ = ["CLASS_SHARE", "IN_FULL", "MOST_CLASSES", "WORTH", "Deriver", "automatic",
           "most_classes"]

MOST_CLASSES = 256
"""The most classes automatic classes find before running every rank instead, at worlds up
to ``MOST_CLASSES * CLASS_SHARE`` ranks (a program that branches on nearly every rank gains
nothing from them); past it the bound grows with the world (:func:`most_classes`)."""

CLASS_SHARE = 4
"""A world of ``n`` ranks allows ``n / CLASS_SHARE`` classes (16,384 at 65,536 ranks).  A class
costs its representative's symbolic run, one neighbour's run (past the first :data:`IN_FULL`
of its shape of reads) and its placement (O(ranks left x distinct reads) array work: with
its symbolic run, 1.2 to 1.5 ms a class at 16,384 ranks, 2.4 to 2.9 ms at 32,768).  Measured
on a 2-core machine, shared (bench/README.md), a program of one class per 8 ranks took 6.2 s
against 17.0 s for every rank at 16,384 ranks and 30.1 s against 89.8 s at 32,768; one class
per 4 ranks, the bound, 15.8 s against 17.0 s and 52.4 s against 89.8 s: about where the
classes stop paying (at 131,072 ranks, not measured, placing grows to minutes near the
bound).  Where a shape's first classes make the classes dearer, :data:`WORTH` stops the
verification early."""

IN_FULL = 2
"""Of the classes whose programs read the same expressions in the same order (a *shape*
of reads: the same branches taken, other answers, e.g. one class per value of a
coordinate used as an index), the first this many are verified in full (a plain re-run
and every group neighbour); each other one by one neighbour on plain ints.  A shape of
256 classes of 8 ranks (a program indexing by its cp, tp and dp_replicate coordinates,
free along dp_shard) took 9 runs a class, more than the ranks; now about 2.  What one
neighbour leaves unchecked in a class (its other places; its representative's own run on
plain ints) is checked for the shape on its first classes and, place by place, on the
other classes' neighbours: checked, not proven, as the sampled places of a large group."""

WORTH = 0.5
"""Verification stops, and every rank runs, once the runs it projects (the runs per class
so far, times the classes) pass this share of the world: past it the classes no longer pay
for themselves."""


def most_classes(world: int) -> int:
    """The most classes automatic classes find at ``world`` ranks: :data:`MOST_CLASSES`, or
    one per :data:`CLASS_SHARE` ranks when that is more; after 16 classes, a pace that would
    pass it (classes found x world > bound x ranks placed) stops them early.

    >>> most_classes(512), most_classes(2048), most_classes(131072)
    (256, 512, 32768)
    """
    return max(MOST_CLASSES, world // CLASS_SHARE)

Run = Callable[[int, "Reads | None"], Trace]


@attrs.define
class _Class:
    rep: Trace
    reads: Reads
    members: np.ndarray
    derivable: bool = True


def automatic(world: int, run: Run, traces: list[Trace | None], notes: list[str]) -> int:
    """Place every rank in a class, verify the classes, derive the members' runs into
    ``traces`` (rank ``r``'s at ``traces[r]``); ranks left ``None`` are to be run.  Returns
    on how many ranks the program ran (0 when every rank is to run); ``notes`` says how
    the check ran."""
    try:
        import numpy  # noqa: F401  # the classes are found with array arithmetic
    except ModuleNotFoundError:
        notes.append("ran every rank: automatic classes need NumPy (pip install numpy)")
        return 0
    found, ran = _place(world, run)
    if found is None:  # a representative ran past its time limit: the check stops
        return ran
    if isinstance(found, str):
        _forget(traces)
        notes.append(f"ran every rank: {found}")
        return 0  # the symbolic runs are dropped: every rank runs on plain ints
    try:
        ran += _verify(found, run, world)
    except Underivable as e:
        _forget(traces)
        notes.append(f"ran every rank: automatic classes could not stand for them ({e})")
        return 0
    except _NotWorth as e:
        _forget(traces)
        notes.append(f"ran every rank: {e}")
        return 0
    distinct = sum(t is not None for t in traces)
    derived = _derive_all(world, found, traces)
    plain = sum(not c.derivable for c in found)
    notes.append(f"automatic classes: {len(found)} by what each rank's program reads"
                 + (f" ({plain} not derivable: their ranks run)" if plain else "")
                 + f"; ran {distinct} of {world} ranks ({ran} runs: each representative, "
                 f"again on plain ints, and its group neighbours; one neighbour a class past "
                 f"a shape's first {IN_FULL}); derived {derived}")
    return distinct


def _derive_all(world: int, found: list[_Class], traces: list[Trace | None]) -> int:
    """Derive every rank not run of each derivable class into ``traces``; how many."""
    derived, deriver = 0, Deriver(world)
    with collector_paused():
        for c in found:
            if not c.derivable:
                continue
            for r in c.members.tolist():
                if traces[r] is None:
                    traces[r] = deriver.trace(c.rep, r)
                    derived += 1
    return derived


def _forget(traces: list[Trace | None]) -> None:
    """Clear the symbolic runs (the check then runs every rank on plain ints)."""
    traces[:] = [None] * len(traces)


def _place(world: int, run: Run) -> tuple[list[_Class] | str | None, int]:
    """The classes, or why there are none worth having (None: a run timed out); and how
    many ranks ran."""
    import numpy as np

    evaluator = Evaluator(world)
    left = np.arange(world, dtype=np.int64)
    found: list[_Class] = []
    most = most_classes(world)
    while left.size:
        placed = world - left.size  # at this pace, how many classes will there be?
        if len(found) == most or (len(found) >= 16 and len(found) * world > most * placed):
            return (f"the program's reads split the ranks into more than {most} "
                    "classes (it branches on nearly every rank)"), len(found)
        reads = Reads(int(left[0]))
        rep = run(int(left[0]), reads)
        if rep.stopped is not None:
            return None, len(found) + 1
        if type(reads.seen.get(("rank",))) is int:
            return ("the program reads its rank as a number (an index, a str, the "
                    "environment's RANK): every rank is a class of its own"), len(found) + 1
        alike = evaluator.matching(reads, left)
        alike[0] = True
        found.append(_Class(rep, reads, left[alike]))
        left = left[~alike]
    return found, len(found)


class _NotWorth(Exception):
    """The classes' verification would cost more runs than they save."""


def _verify(found: list[_Class], run: Run, world: int) -> int:
    """Check each class (raises :class:`Underivable` saying where it does not stand);
    marks the classes whose representative cannot be derived.  The first
    :data:`IN_FULL` classes of each shape of reads are verified in full
    (:func:`_in_full`), the others by one neighbour each (:func:`_one_neighbour`).
    Returns the runs made.  Raises :class:`_NotWorth` once, after 8 classes, the runs per
    class so far project more than :data:`WORTH` of the world's runs."""
    ran = 0
    shapes: dict[tuple[Any, ...], int] = {}
    for i, c in enumerate(found):
        if i >= 8 and ran * len(found) > WORTH * world * i:
            raise _NotWorth(f"verifying the {len(found)} classes would take about "
                            f"{ran * len(found) // i:,} runs ({ran / i:.1f} a class so far), "
                            f"more than half of running the {world:,} ranks")
        shape = tuple(c.reads.seen)
        nth = shapes[shape] = shapes.get(shape, 0) + 1
        light = _one_neighbour(c, run, nth) if nth > IN_FULL else 0
        ran += light or _in_full(c, run)
    return ran


def _in_full(c: _Class, run: Run) -> int:
    """Verify ``c`` in full: its representative again on plain ints (a ``Sym`` must not
    change the run), then every group neighbour in the class (:func:`~._reduce.verifiers`),
    each reading the representative's answers and giving its run moved to its groups; a
    representative that cannot be derived is marked so.  Returns the runs made."""
    again = run(c.rep.rank, None)
    why = same(again, c.rep) or (None if again.error == c.rep.error else
                                 f"it raised {again.error or 'nothing'} where the "
                                 f"symbolic run raised {c.rep.error or 'nothing'}")
    if why:
        raise Underivable(f"rank {c.rep.rank} runs differently on plain ints: {why}")
    again.raw_rank = c.rep.raw_rank  # the rank reads were recorded, on the Sym run
    c.rep = again
    try:
        check_derivable(again)
    except Underivable:
        c.derivable = False
        return 1
    near = verifiers(again, set(c.members.tolist()))
    for r in near:
        reads = Reads(r)
        got = run(r, reads)
        why = _differs(c.reads, reads) or same(got, derive(again, r))
        if got.stopped is not None or why:
            raise Underivable(why or f"rank {r}'s program {got.stopped}")
    return 1 + len(near)


def _one_neighbour(c: _Class, run: Run, nth: int) -> int:
    """Verify ``c``, the ``nth`` class of a shape of reads whose first were verified in
    full, by one run: a group neighbour in the class, on plain ints, must give the
    representative's symbolic run moved to its groups (so the ``Sym`` and the move are
    checked at once).  The neighbour taken turns with ``nth`` (the shape's classes vary
    each coordinate between them).  Returns 1, or 0 (nothing run) where the representative
    cannot be derived or has no neighbour in its class: then it is verified in full."""
    try:
        check_derivable(c.rep)
    except Underivable:
        return 0
    near = verifiers(c.rep, set(c.members.tolist()))
    if not near:
        return 0
    r = near[nth % len(near)]
    got = run(r, None)
    why = same(got, derive(c.rep, r))
    if got.stopped is not None or why:
        raise Underivable(why or f"rank {r}'s program {got.stopped}")
    return 1


def _differs(want: Reads, got: Reads) -> str | None:
    """None when ``got`` read what ``want`` did, with the same answers; else the first
    difference in words."""
    if want.seen == got.seen:
        return None
    for expr, answer in got.seen.items():
        if want.seen.get(expr, answer) != answer or expr not in want.seen:
            return (f"rank {got.rank_value} read {_show(expr)} = {answer!r} where its class "
                    f"representative, rank {want.rank_value}, read "
                    f"{want.seen.get(expr, 'nothing')!r}")
    return f"rank {got.rank_value} read less than rank {want.rank_value}"


def _show(expr: object) -> str:
    """An expression in words: ``(rank // 4) == 1``, ``coordinate 0 of MeshView(...)``."""
    if isinstance(expr, int):
        return str(expr)
    assert isinstance(expr, tuple), f"an expression is an int or a tuple, got {expr!r}"
    if expr[0] == "rank":
        return "rank"
    if expr[0] == "coord":
        return f"{expr[1].names[expr[2]]!r} coordinate"
    if expr[0] == "in":
        return "membership of a mesh"
    return f"({_show(expr[1])} {expr[0]} {_show(expr[2])})"


class Deriver:
    """Derives runs as :func:`~._reduce.derive` does, for many ranks of one world: each
    group's :class:`GroupRef`, barrier and members, and each call and creation of a
    representative on it, are made once and shared by every member that derives them
    (events are values), and each family's group offsets and members are computed for all
    ranks at once (NumPy over its groups, not a view per group).  The representatives'
    traces must outlive the deriver (events are keyed by their id)."""

    def __init__(self, world: int) -> None:
        self.world = world
        self._groups: dict[str, tuple[GroupRef, str, Sequence[int]]] = {}
        self._offsets: dict[Any, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # a derived group's key -> the id of a rep's event -> the event moved there
        self._events: dict[Any, dict[int, Event]] = {}

    def trace(self, rep: Trace, rank: int) -> Trace:
        """``rank``'s run, from its class representative's ``rep``."""
        moved: dict[int, tuple[tuple[GroupRef, str, Sequence[int]], dict[int, Event]]] = {}
        events: list[Event] = []
        for e in rep.events:
            if isinstance(e, (Create, Call)) and not e.group.world:
                slot = moved.get(id(e.group))
                if slot is None:  # the group moved to this rank, and its events there
                    got = self._group(e.group, rank)
                    slot = moved[id(e.group)] = (got, self._events.setdefault(got[0].key, {}))
                shared = slot[1].get(id(e))
                if shared is None:  # one value for every member of the group alike
                    shared = slot[1][id(e)] = self._moved(e, slot[0])
                events.append(shared)
            else:
                events.append(e)
        return Trace(rank, events, device_types=set(rep.device_types))

    @staticmethod
    def _moved(e: Create | Call, got: tuple[GroupRef, str, Sequence[int]]) -> Create | Call:
        """The representative's event ``e`` on the group ``got`` (its ref, barrier and
        members)."""
        if isinstance(e, Call):
            return Call(e.op, got[0], e.shapes, e.dtype, e.line, e.reduce_op, e.root, e.peer,
                        e.splits, e.post, e.batch)
        if e.split:  # one barrier and the whole world: the same on every rank
            return Create(e.barrier, e.dim, e.members, True, e.hidden, got[0], e.line,
                          e.backend, e.lazy)
        return Create(got[1], e.dim, got[2], False, e.hidden, got[0], e.line, e.backend,
                      e.lazy)

    def _group(self, ref: GroupRef, rank: int) -> tuple[GroupRef, str, Sequence[int]]:
        spec = ref.spec
        assert spec is not None, f"a derivable run's groups come from views: {ref!r}"
        identity = spec.identity
        offsets, rows, groups = self._table(spec.family)
        offset = int(offsets[rank])
        key = f"{identity}@{offset}"
        found = self._groups.get(key)
        if found is None:
            mine = attrs.evolve(spec, rank=rank)
            # what the spec would compute from a fresh view of its family (about 0.1 ms a
            # group), read from the family's table instead: the same identity and members
            object.__setattr__(mine, "identity", identity)
            object.__setattr__(mine, "members", tuple(groups[rows[rank]].tolist()))
            found = self._groups[key] = (spec_ref(mine, offset, identity), mine.barrier,
                                         mine.barrier_members())
        return found

    def _table(self, family: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every rank's group offset in ``family`` (the universe offset of its group's
        first member; -1 outside the universe), its group's row in the family's groups,
        and the groups (one row each, in group order)."""
        import numpy as np

        table = self._offsets.get(family)
        if table is None:
            view = family_view(family)
            groups = np.asarray(view.groups(0, limit=view.ranks.size), dtype=np.int64)
            firsts = groups[:, 0]
            if not view.ranks.is_identity:
                firsts = np.asarray([view.ranks.offset_of(int(f)) for f in firsts],
                                    dtype=np.int64)
            size = max(self.world, int(groups.max()) + 1)
            offsets = np.full(size, -1, dtype=np.int64)
            offsets[groups] = firsts[:, None]
            rows = np.full(size, -1, dtype=np.int64)
            rows[groups] = np.arange(len(groups), dtype=np.int64)[:, None]
            table = self._offsets[family] = (offsets, rows, groups)
        return table
