"""Checking fewer ranks: one run per class of ranks, the others derived.

``classes(rank)`` names the ranks that run the same program *relative to their groups*:
two ranks of one class ask for the same families of groups in the same order and issue
the same calls on them (same ops, shapes, dtypes, reduce ops, and roots and peers as
places in the group).  Then a rank's run is its class representative's with every group
replaced by the rank's own group of the same family (:func:`derive`): nothing else of a
run depends on which rank made it.  ``classes`` is the program's coordinate dependence,
e.g. ``lambda r: plan.coordinate(r)[0]`` for a step that differs only by pipeline stage.

This is exact for a program that satisfies the declaration, and no weaker than the full
check for one that does not, *if* the declaration is checked.  It can be checked only by
running; what the check does:

- runs, per class, its smallest rank, then its *group neighbours* in the class (every
  member of its groups of up to 8 ranks, the members at places 1, 2, 4, ... and the last
  of larger ones: each coordinate varied one at a time), and compares each of those runs
  with its derivation event by event;
- derives only what is derivable: groups made from views (their family and options are
  recorded); a run that reads its raw rank itself (``backend.rank``, ``mesh.get_rank()``,
  ``dist.get_rank()``), calls on groups torch code made from rank lists, cache hits,
  lifecycle calls (a rebind, a shrink, ...), a raise, a time-out, threads or foreign
  groups make it underivable;

and falls back to running every rank when a verifying run differs or a representative is
underivable.  So a program whose trace depends on something else than its class at a rank
that is neither a representative nor a verifier (``if rank == 517``) escapes it: the
reduction is sound for the programs the declaration describes, and checked, not proven,
for the others.  Without a function, ``_classes`` finds the classes itself.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import attrs

from layout import show

from .._c10d import GroupSpec
from .._core import BackendConfigError, family_view
from ._events import Call, Create, Event, GroupRef, TorchCreate, Trace, WaitWork, spec_ref

__all__ = ["Underivable", "check_derivable", "derive", "plan_classes", "same", "verifiers"]


class Underivable(Exception):
    """A run from which another rank's cannot be derived (the reason in words)."""


def plan_classes(world: int, classes: Callable[[int], Hashable]) -> dict[Hashable, list[int]]:
    """Class -> its ranks, ascending (the first is the class's representative)."""
    members: dict[Hashable, list[int]] = {}
    for r in range(world):
        try:
            key = classes(r)
            hash(key)
        except Exception as e:
            raise BackendConfigError(f"classes({r}) must return a hashable class of rank {r}; it "
                                     f"raised {type(e).__name__}: {e}") from None
        members.setdefault(key, []).append(r)
    return members


def verifiers(rep: Trace, same_class: set[int], most: int = 8) -> list[int]:
    """The ranks that verify a representative: its group neighbours in its class.  From each
    group it used, the members at places 1 .. size - 1 for a group of up to ``most``
    ranks, else at places 1, 2, 4, 8, ... and the last: so every coordinate of the
    representative's small dims, and the powers of two of its large ones, are varied one
    at a time."""
    seen: set[Hashable] = set()
    found: set[int] = set()
    for e in rep.events:
        group = e.group if isinstance(e, (Create, Call)) else None
        if group is None or group.key in seen:
            continue
        seen.add(group.key)
        members = group.members
        places = range(1, len(members)) if len(members) <= most else sorted(
            {1 << k for k in range(len(members).bit_length()) if 1 << k < len(members)}
            | {len(members) - 1})
        for place in places:
            r = members[place]
            if r in same_class and r != rep.rank:
                found.add(r)
    return sorted(found)


def check_derivable(trace: Trace) -> None:
    """Raise :class:`Underivable` saying why another rank's run cannot be derived."""
    if trace.error is not None or trace.stopped is not None:
        raise Underivable(f"rank {trace.rank}'s program raised or timed out")
    if trace.raw_rank:
        raise Underivable(f"rank {trace.rank}'s program reads its raw rank")
    if trace.foreign or trace.left_threads or len(trace.threads) > 1:
        raise Underivable(f"rank {trace.rank}'s program calls on groups it does not own or "
                          "from several threads")
    for e in trace.events:
        if isinstance(e, Create):
            continue
        if isinstance(e, Call):
            if not (e.group.world or e.group.spec is not None):
                raise Underivable(f"rank {trace.rank} calls {e.op} on {e.group.describe()}, "
                                  f"made by torch code from a rank list ({e.line})")
            continue
        if isinstance(e, WaitWork):
            continue
        if isinstance(e, TorchCreate) and not e.local and e.parent is None:
            continue  # the same on every rank (a split of a smaller parent is not)
        raise Underivable(f"rank {trace.rank}'s run holds a {type(e).__name__.lower()} "
                          f"({getattr(e, 'line', '?')}), which is not derived")


def derive(trace: Trace, rank: int,
           shared: dict[Hashable, tuple[str, Sequence[int]]] | None = None) -> Trace:
    """``rank``'s run from ``trace`` (of a rank of its class): each group replaced by
    ``rank``'s group of the same family (checked derivable first).  ``shared`` keeps, across
    the ranks derived from one ``trace``, each group's barrier and members by the group's
    key (its family's identity and its offset): the same for every rank of the group."""
    move = _Move(rank, {} if shared is None else shared)
    events: list[Event] = []
    for e in trace.events:
        if isinstance(e, Create):
            events.append(move.create(e))
        elif isinstance(e, Call):
            events.append(attrs.evolve(e, group=move.group(e.group)))
        else:
            events.append(e)
    return Trace(rank, events, device_types=set(trace.device_types))


class _Move:
    """Moves a representative's groups to ``rank``'s groups of the same families."""

    def __init__(self, rank: int, shared: dict[Hashable, tuple[str, Sequence[int]]]) -> None:
        self.rank = rank
        self.shared = shared
        self.memo: dict[int, GroupRef] = {}

    def group(self, ref: GroupRef) -> GroupRef:
        """``rank``'s group of ``ref``'s family (the world group stays)."""
        if ref.world:
            return ref
        found = self.memo.get(id(ref))
        if found is None:
            spec = _spec(ref)
            found = self.memo[id(ref)] = spec_ref(attrs.evolve(spec, rank=self.rank),
                                                  _offset(spec.family, self.rank),
                                                  spec.identity)
        return found

    def create(self, e: Create) -> Create:
        """The creation of ``rank``'s group: its own barrier and members (a split's are the
        same on every rank)."""
        g = self.group(e.group)
        if e.split:
            return attrs.evolve(e, group=g)
        met = self.shared.get(g.key)
        if met is None:
            spec = _spec(g)
            met = self.shared[g.key] = (spec.barrier, spec.barrier_members())
        return attrs.evolve(e, barrier=met[0], members=met[1], group=g)


def _spec(ref: GroupRef) -> GroupSpec:
    """The request a group came from (only groups made from views are derived)."""
    if ref.spec is None:
        raise Underivable(f"{ref.describe()} was not made from a view")
    return ref.spec


_VIEWS: dict[Any, Any] = {}


def _offset(family: Any, rank: int) -> int:
    """The offset of the first member of ``rank``'s group in ``family``."""
    view = _VIEWS.get(family)
    if view is None:
        if len(_VIEWS) > 4096:
            _VIEWS.clear()
        view = _VIEWS[family] = family_view(family)
    offset: int = view.group_offset(rank, 0)
    return offset


def same(real: Trace, derived: Trace) -> str | None:
    """None when ``real`` is ``derived`` event by event; else the first difference in words."""
    for i, (a, b) in enumerate(zip(real.events, derived.events)):
        if _print(a) != _print(b):
            return (f"rank {real.rank}'s event {i} is {_words(a)} where its class "
                    f"representative's derivation gives {_words(b)}")
    if len(real.events) != len(derived.events):
        return (f"rank {real.rank} makes {len(real.events)} calls and requests where its class "
                f"representative's derivation makes {len(derived.events)}")
    return None


def _print(e: Event) -> tuple[Any, ...]:
    if isinstance(e, Create):
        return ("create", e.barrier, e.split, e.hidden)
    if isinstance(e, Call):
        return ("call", e.op, e.group.key, e.signature(), e.peer, e.splits, e.post, e.line)
    return (type(e).__name__, show(e))


def _words(e: Event) -> str:
    if isinstance(e, Call):
        return f"{e.describe()} on {e.group.describe()} ({e.line})"
    if isinstance(e, Create):
        return f"a request for {e.group.describe()} ({e.line})"
    return show(e)
