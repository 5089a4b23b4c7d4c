"""The ways on after a failure, before they are priced: each a :class:`Candidate` (the views
after, who receives state, the communicators kept and made) or a refusal in words.

Every way is the recovery wing's (``survived``: drop, re-factor, spares; ``blast_of``:
which groups a failure breaks), so the views and the group counts are those
:func:`~mesh.survive` and :func:`~mesh.blast` give.  What it costs: each way lists its
surviving world once (bounded by ``limit``); drop and re-factor also count their intact
groups by one array comparison per view and dim (``Survival.group_counts``); the ways that
keep every coordinate (spares, eviction onto spares, waiting) count them from the blast,
O(|failed| × group size).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from .._core import MeshView, SurvivalError
from .._recover import Derivation, Survival, Tables, blast_of, counted_groups, survived
from ._machine import Topology
from ._values import Kind

__all__ = ["Candidate", "Context", "candidates"]


@attrs.frozen
class Context:
    """A failure checked at the door: the plan and its old views, the failed ranks
    (ascending), the spares given, the topology, the listing limit."""

    plan: Derivation
    world: MeshView
    old: dict[str, MeshView]
    failed: tuple[int, ...]
    spares: tuple[int, ...]
    topology: Topology | None
    limit: int
    tables: Tables = attrs.field(factory=dict)  # the old views' group tables, once each


@attrs.frozen
class Candidate:
    """A way on, unpriced.  ``receivers``: the only ranks whose state changes (None: any
    rank of the new world may receive); ``groups``: (kept, reconfigured, created) groups;
    ``pairs``: (view, dim) pairs with some group (reconfigured, created); ``restart``: every
    rank reads its state from the checkpoint; ``fixed``: the name of a fixed cost of
    :class:`~mesh.Costs` (``"restart_s"``, ``"repair_s"``) or None; ``changed``: per view,
    the dims with a new group (a survivor's coordinate on the other dims is its old one,
    since its group there is intact), None when not counted."""

    kind: Kind
    label: str
    views: dict[str, MeshView]
    working: int
    receivers: tuple[int, ...] | None
    groups: tuple[int, int, int]
    pairs: tuple[int, int]
    restart: bool = False
    fixed: str | None = None
    changed: dict[str, frozenset[str]] | None = None


Refused = tuple[Kind, str, str]


@attrs.define
class _Found:
    """The ways found so far and the refused, in the order they were tried."""

    ways: list[Candidate] = attrs.field(factory=list)
    refused: list[Refused] = attrs.field(factory=list)

    def refuse(self, kind: Kind, label: str, reason: str) -> None:
        self.refused.append((kind, label, reason))

    def attempt(self, kind: Kind, label: str, make: Callable[..., Candidate], *args: Any,
                same_as: Candidate | None = None) -> Candidate | None:
        """``make(*args)``'s way, or its refusal; refused too when its views are
        ``same_as``'s (the message names that way)."""
        try:
            got = make(*args)
        except SurvivalError as e:
            self.refuse(kind, label, str(e))
            return None
        if same_as is not None and got.views == same_as.views:
            self.refuse(kind, label, f"the same views as {same_as.label}")
            return None
        self.ways.append(got)
        return got


def candidates(ctx: Context) -> tuple[list[Candidate], list[Refused]]:
    """Every way on (spares, drop and re-factor per world dim, evictions, restart, wait),
    and every one refused with its reason."""
    found = _Found()
    w, n = ctx.world, len(ctx.failed)
    spare = None
    if len(ctx.spares) >= n:
        label = f"spares {list(ctx.spares[:n])}"
        spare = found.attempt(Kind.SPARE, label, _onto_spares, ctx, Kind.SPARE, ctx.failed,
                              label)
    else:
        found.refuse(Kind.SPARE, "spares", f"{n} failed ranks need {n} spares, "
                     f"{len(ctx.spares)} given: {list(ctx.spares)}")
    drops: dict[int, Candidate] = {}
    for k, name in enumerate(w.names):
        got = found.attempt(Kind.DROP, f"drop {name!r}", _shrunk, ctx, Kind.DROP,
                            f"drop {name!r}", ctx.failed, k, None)
        if got is not None:
            drops[k] = got
    for k in range(w.ndim):
        _refactor(ctx, k, drops.get(k), found)
    hosts = _evict(ctx, "host", drops, found, ())
    _evict(ctx, "domain", drops, found, hosts)
    _restart(ctx, spare, list(drops.values()), found)
    found.attempt(Kind.WAIT, "repair in place", _wait, ctx)
    return found.ways, found.refused


def _onto_spares(ctx: Context, kind: Kind, gone: tuple[int, ...], label: str) -> Candidate:
    """``gone`` (ascending, a superset of the failed) replaced by the first spares."""
    use = ctx.spares[:len(gone)]
    s = survived(ctx.plan, ctx.world, ctx.old, gone, None, use, ctx.limit)
    kept, broken, pairs = _broken(ctx, gone)
    return Candidate(kind, label, dict(s.views), ctx.world.size(), use, (kept, 0, broken),
                     (0, pairs))


def _broken(ctx: Context, gone: tuple[int, ...]) -> tuple[int, int, int]:
    """(intact groups, broken groups, (view, dim) pairs with a broken group) of the old
    plan when ``gone`` leave: a spare (or the repaired rank) takes each broken group's
    place in order, a member the group did not have, so each is created anew (Gloo's
    reconfigure re-forms a group among its own members only)."""
    entries = blast_of(tuple(ctx.old.items()), gone, 0).entries
    return (sum(e.intact_groups for e in entries), sum(e.broken_groups for e in entries),
            sum(1 for e in entries if e.broken_groups))


def _shrunk(ctx: Context, kind: Kind, label: str, gone: tuple[int, ...], k: int,
            size: int | None) -> Candidate:
    """The world without ``gone``'s slices along dim ``k`` (or re-factored to ``size``):
    a drop keeps each new group's members in their old order, so its new groups are
    reconfigured; a re-factor packs the survivors, so its new groups are created."""
    s = survived(ctx.plan, ctx.world, ctx.old, gone, k, (), ctx.limit, size=size)
    kept, new, changed = _counted(s, ctx)
    pairs = sum(len(dims) for dims in changed.values())
    made = (kept, new, 0) if size is None else (kept, 0, new)
    return Candidate(kind, label, dict(s.views), s.world.size(), None, made,
                     (pairs, 0) if size is None else (0, pairs), changed=changed)


def _counted(s: Survival, ctx: Context) -> tuple[int, int, dict[str, frozenset[str]]]:
    """(intact groups, new groups, per view the dims with a new group) of a survival (the
    old views' tables listed once for every way, in ``ctx.tables``)."""
    kept = new = 0
    changed: dict[str, frozenset[str]] = {}
    for name, v in s.views.items():
        dims = []
        for k, d in enumerate(v.names):
            a, b = counted_groups(s.old_views[name], v, k, ctx.limit,
                                  f"the group counts of {name!r}, {d!r}", ctx.tables)
            kept, new = kept + a, new + b
            if b:
                dims.append(d)
        changed[name] = frozenset(dims)
    return kept, new, changed


def _refactor(ctx: Context, k: int, drop: Candidate | None, found: _Found) -> None:
    """Dim ``k`` shrunk to the most slices the survivors fill; refused when that keeps no
    more ranks than dropping along ``k`` (it would only change more groups)."""
    w = ctx.world
    name, rest = w.names[k], w.size() // w.shape[k]
    size = min(w.shape[k] - 1, (w.size() - len(ctx.failed)) // rest)
    label = f"re-factor {name!r} {w.shape[k]} -> {size}"
    if size < 1:
        found.refuse(Kind.REFACTOR, f"re-factor {name!r}",
                     f"{w.size() - len(ctx.failed)} survivors cannot fill one slice of "
                     f"{rest} ranks along {name!r}")
    elif drop is not None and drop.working >= size * rest:
        found.refuse(Kind.REFACTOR, label, f"keeps no more ranks than drop {name!r} "
                     f"({drop.working}) and changes more groups")
    else:
        found.attempt(Kind.REFACTOR, label, _shrunk, ctx, Kind.REFACTOR, label, ctx.failed,
                      k, size)


def _evict(ctx: Context, level: str, drops: dict[int, Candidate], found: _Found,
           hosts: tuple[int, ...]) -> tuple[int, ...]:
    """The failed ranks' whole hosts (or fast domains) left out, onto spares when there
    are enough, else with a drop along each dim; the evicted ranks (``hosts``: those of
    evicting hosts, to refuse a domain eviction that evicts no more)."""
    kind = Kind.EVICT_HOST if level == "host" else Kind.EVICT_DOMAIN
    t = ctx.topology
    if t is None:
        found.refuse(kind, f"evict {level}", f"needs a topology (which ranks share a "
                     f"{level}); none given")
        return ()
    places = sorted({t.host(r) if level == "host" else t.domain(r) for r in ctx.failed})
    on = places if level == "host" else [h for d in places for h in t.hosts_in(d)]
    gone = tuple(sorted({r for h in on for r in t.ranks_on(h)
                         if ctx.world.ranks.offset_of(r) is not None}))
    label = f"evict {level}s {places}"
    if gone == ctx.failed:
        found.refuse(kind, label, f"the failed ranks are every rank of their {level}s in "
                     "the world: the spare and drop ways already evict them")
    elif gone == hosts:
        found.refuse(kind, label, "the failed ranks' domains hold no other rank of the "
                     "world than their hosts': the same as evicting the hosts")
    elif len(ctx.spares) >= len(gone):
        found.attempt(kind, f"{label} onto spares", _onto_spares, ctx, kind, gone,
                      f"{label} onto spares")
    else:
        for k, name in enumerate(ctx.world.names):
            this = f"{label}, drop {name!r}"
            found.attempt(kind, this, _shrunk, ctx, kind, this, gone, k, None,
                          same_as=drops.get(k))
    return gone


def _restart(ctx: Context, spare: Candidate | None, drops: list[Candidate],
             found: _Found) -> None:
    """Every rank restarted from the checkpoint: onto the spares' world when there are
    enough spares, else onto the drop that keeps the most ranks (the first such dim)."""
    base = spare or max(drops, key=lambda c: c.working, default=None)
    if base is None:
        found.refuse(Kind.RESTART, "restart", "no world to restart on: too few spares and "
                     "no dim to drop")
        return
    total = sum(v.ranks.size // v.shape[i] for v in base.views.values()
                for i in range(v.ndim))
    pairs = sum(v.ndim for v in base.views.values())
    label = f"restart from the checkpoint ({base.label})"
    found.ways.append(attrs.evolve(
        base, kind=Kind.RESTART, label=label, receivers=None, groups=(0, 0, total),
        pairs=(0, pairs), restart=True, fixed="restart_s", changed=None))


def _wait(ctx: Context) -> Candidate:
    kept, broken, pairs = _broken(ctx, ctx.failed)
    return Candidate(Kind.WAIT, "repair in place", dict(ctx.old), ctx.world.size(),
                     ctx.failed, (kept, 0, broken), (0, pairs), fixed="repair_s")
