"""What failed ranks do to a plan, as plain data: ``meshlayout explain --fail``.

:func:`failure` puts the recovery wing's answers (those of :func:`~mesh.blast` and
:func:`~mesh.survive`) into the JSON-able fields the command prints next to the
explanation: ``failure`` (which ranks, on which hosts, the broken instances per view),
``blast`` (one entry per view and dim) and ``ways`` (the plan re-derived from the survivors
under each way to continue, with its intact and new groups).  It checks the failed ranks
and the spares once, at the recovery wing's door, and asks the wing's trusting cores
(``blast_of``, ``survived``) for every answer.  Pure: no I/O; the text is
:func:`~mesh._plan._report.failure_report`'s.

Only the ways list a universe (each builds its survivors' rank map), and
:meth:`~mesh.Survival.group_counts` compares groups as arrays; the blast and every per-rank
answer are O(ndim + |failed| × group size) arithmetic.  What is listed is bounded before
anything is: at most :data:`MOST_FAILED` failed ranks (counted per host, not listed, for
``--fail-host``), and the ways only for worlds of at most :data:`MOST_WAYS_RANKS` ranks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._core import MAX_LISTED_RANKS, MeshView, SurvivalError, TooManyRanksError
from .._recover import (
    SHOWN,
    Blast,
    Derivation,
    Survival,
    blast_of,
    derived,
    failed_ranks,
    spare_ranks,
    survived,
)
from .._topology import Topology

__all__ = ["MOST_FAILED", "MOST_WAYS_RANKS", "DerivedFrom", "failed_on", "failure"]

DerivedFrom = tuple[Derivation, MeshView]
"""A plan file's PLAN and WORLD: the plan's views are ``PLAN(WORLD)``."""

MOST_FAILED = 1 << 16
"""The most failed ranks ``--fail`` and ``--fail-host`` name together (``--fail`` lists at most
as many): each is located in every view and dim."""
MOST_WAYS_RANKS = 1 << 20
"""The largest world whose ways to continue ``--fail`` derives: each way lists the surviving
world, and intact groups are counted over it per view and dim (a 2**20-rank torchtitan plan
with six ways takes a few seconds and about 150 MB)."""


def failed_on(topology: Topology, ranks: Sequence[int], hosts: Sequence[int]) -> list[int]:
    """The failed ranks: ``ranks`` and every rank on one of ``hosts``, ascending and distinct
    (each on the topology, else :class:`~mesh.TopologyError` naming the valid ones).  More
    than :data:`MOST_FAILED` in all are refused (:class:`~mesh.TooManyRanksError`) from the
    hosts' sizes, before any host's ranks are listed."""
    for r in ranks:
        topology.host(r)
    named = sorted(set(hosts))
    on_hosts = sum(topology.host_size(h) for h in named)  # each host checked there
    if len(set(ranks)) + on_hosts > MOST_FAILED:
        raise TooManyRanksError(
            f"--fail and --fail-host name {len(set(ranks)) + on_hosts:,} failed ranks "
            f"({on_hosts:,} on {len(named):,} host{'s' if len(named) != 1 else ''}), more than "
            f"the {MOST_FAILED:,} a failure may have here; mesh.blast takes any number in "
            "Python")
    return sorted({*ranks, *(r for h in named for r in topology.ranks_on(h))})


def failure(views: Mapping[str, MeshView], topology: Topology, failed: Sequence[int], *,
            hosts: Sequence[int] = (), derived_from: DerivedFrom | None = None,
            spares: Sequence[int] | None = None, rank: int | None = None) -> dict[str, Any]:
    """The ``failure``, ``blast`` and ``ways`` fields of ``meshlayout explain --fail``.

    ``views`` are the plan's views as the command checked them (at most
    :data:`~mesh.MAX_PLAN_DIMS` dims), and with ``derived_from`` (the plan as a function of
    its world, and that world: what :func:`~mesh.survive` takes) they are ``PLAN(WORLD)``;
    without it ``ways`` is None (views alone do not say how they were derived).  The failed
    ranks are checked once, and the spares once, then every answer comes from the recovery
    wing's trusting cores.  Every dim of the world where a drop works gives a way (one where
    it does not gives an entry with its ``error``), and ``spares`` one more (refused spares
    raise :class:`~mesh.SurvivalError`: they are bad input).  ``rank`` adds, per way, which
    of its groups are intact (kept) or new (rebuilt).  A world over :data:`MOST_WAYS_RANKS`
    ranks is refused (:class:`~mesh.TooManyRanksError`) before anything is computed.
    """
    if derived_from is not None and derived_from[1].ranks.size > MOST_WAYS_RANKS:
        raise TooManyRanksError(
            f"the ways to continue would each list the surviving world, and the world has "
            f"{derived_from[1].ranks.size:,} ranks, more than the {MOST_WAYS_RANKS:,} --fail "
            "derives them for: for the blast radius alone, give a plan file with VIEWS only "
            "(no WORLD and PLAN); mesh.survive(..., limit=) derives the ways in Python")
    dead = failed_ranks(failed, [v.ranks for v in views.values()])
    hit = blast_of(tuple(views.items()), dead, SHOWN)
    ways = None if derived_from is None else _ways(derived_from, dead, spares, rank)
    return {"failure": _failure_data(hit, topology, hosts, rank),
            "blast": [d.to_dict() for d in hit.entries], "ways": ways}


def _failure_data(hit: Blast, topology: Topology, hosts: Sequence[int],
                  rank: int | None) -> dict[str, Any]:
    """Which ranks failed (the first :data:`~mesh.SHOWN`), their hosts, broken instances."""
    on = sorted({topology.host(r) for r in hit.failed})
    return {"ranks": list(hit.failed[:SHOWN]), "count": len(hit.failed),
            "hosts": on[:SHOWN], "num_hosts": len(on), "fail_hosts": sorted(set(hosts)),
            "views": [v.to_dict() for v in hit.views],
            "rank": None if rank is None else _rank_blast(hit, rank)}


def _rank_blast(hit: Blast, rank: int) -> dict[str, Any]:
    """Whether ``rank`` failed, and which of its groups lost a member."""
    groups = [{"view": v.name, "dim": d.dim, "broken": v.is_broken(d.dim, rank)}
              for v in hit.views if v.view.ranks.offset_of(rank) is not None for d in v.dims]
    return {"rank": rank, "failed": rank in hit.failed, "groups": groups}


def _ways(derived_from: DerivedFrom, failed: tuple[int, ...], spares: Sequence[int] | None,
          rank: int | None) -> list[dict[str, Any]]:
    """A drop along every dim of the world (or why not), then the spares if given.
    ``failed`` is checked: every view is over the world, so each failed rank is in it."""
    fn, world = derived_from
    try:
        old = derived(fn, world, "world")
    except SurvivalError as e:  # no way works: the plan does not derive from its world
        if spares is not None:
            raise
        return [_refused(d, str(e)) for d in world.names]
    out = []
    for k, d in enumerate(world.names):
        try:
            out.append(_way(survived(fn, world, old, failed, k, (), MAX_LISTED_RANKS), rank))
        except SurvivalError as e:
            out.append(_refused(d, str(e)))
    if spares is not None:
        use = spare_ranks(spares, len(failed), world.ranks)
        out.append(_way(survived(fn, world, old, failed, None, use, MAX_LISTED_RANKS), rank))
    return out


def _refused(dim: str, why: str) -> dict[str, Any]:
    """The entry of a drop that does not work, and why."""
    return {"way": "drop", "dim": dim, "spares": [], "error": why, "shape": None,
            "names": None, "survivors": None, "lost": None, "groups": [], "rank": None}


def _way(s: Survival, rank: int | None) -> dict[str, Any]:
    """One way to continue: the surviving world, its groups counted, and ``rank``'s."""
    groups = []
    for name, v in s.views.items():
        for k, d in enumerate(v.names):
            # A group of one rank is no communicator: none kept, none to make.
            kept, made = s.group_counts(name, d) if v.shape[k] > 1 else (0, 0)
            groups.append({"view": name, "dim": d, "size": v.shape[k], "intact_groups": kept,
                           "new_groups": made})
    return {"way": "substitute" if s.dropped is None else "drop", "dim": s.dropped,
            "spares": list(s.spares[:SHOWN]), "error": None, "shape": list(s.world.shape),
            "names": list(s.world.names), "survivors": s.world.ranks.size,
            "lost": s.old_world.ranks.size - s.world.ranks.size, "groups": groups,
            "rank": None if rank is None else _rank_way(s, rank)}


def _rank_way(s: Survival, rank: int) -> dict[str, Any]:
    """Whether ``rank`` survives this way, and which of its groups are intact (kept)."""
    if s.world.ranks.offset_of(rank) is None:
        return {"rank": rank, "survives": False, "groups": []}
    groups = [{"view": name, "dim": d, "intact": s.is_intact(name, d, rank)}
              for name, v in s.views.items() for d in v.names]
    return {"rank": rank, "survives": True, "groups": groups}
