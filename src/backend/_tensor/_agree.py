"""Every rank of a reshard runs the same plans: checked over the store before anything moves.

A rank given another plan than its peers posts other messages: where the pair's byte counts
differ the headers catch it, but a plan with the same counts moves wrong elements silently,
and a rank that expects a peer the peer's plan does not name waits for ever.  So before its
first message each rank of a state's plans (:func:`same_plans`) compares the digest of its
plans (:attr:`mesh.Reshard.digest` of each, with the tensor names) with every other rank's,
in a few store calls per rank whatever the world:

1. ``add(<call>/d/<digest>, 1)``: one more rank holds this digest;
2. ``append(<call>/who/<digest>, "<rank>,")``: which ranks hold it;
3. ``add(<call>/n, 1)``: one more rank arrived; the last of the ranks its plans name (it
   sees the count reach them) reads its digest's count and writes the verdict: its digest
   if every rank holds it, else a mismatch; it also deletes the previous call's keys (every
   rank has read them: they all arrived here);
4. ``wait`` for the verdict and read it: a rank whose digest is not the verdict raises a
   :class:`~backend.BackendConfigError` naming the ranks that hold its digest and those
   that do not, before any message: every rank of the plans raises, none waits.

``<call>`` is ``meshlayout/<job namespace>/reshard/<digest of the ranks>/<k>``: the ranks
the plans name (a rank given plans over other ranks counts in another key space: it and
the ranks that wait for it raise when the store's timeout passes, naming the ranks) and
the number of earlier calls over those ranks (every rank of a plan calls in the same
order).  A rank alone in its plans checks nothing.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import mesh
from mesh._core import RankStyle, ranks_text

from .._c10d import job_namespace
from .._core import BackendConfigError

__all__ = ["participants", "same_plans", "state_digest"]

_CALLS: dict[tuple[str, int], int] = {}  # (digest of a set of ranks, rank) -> calls so far
_LOCK = threading.Lock()


def participants(plans: Iterable[mesh.Reshard]) -> frozenset[int]:
    """The ranks of every plan's source and destination views, but its ``down`` ones (they
    have failed: they call nothing)."""
    views: dict[tuple[mesh.MeshView, frozenset[int]], mesh.Sharding] = {}
    for p in plans:
        views[p.src.view, p.down] = p.src
        views[p.dst.view, frozenset()] = p.dst
    return frozenset(r for (_, down), s in views.items() for r in s.holders({})
                     if r not in down)


def state_digest(named: list[tuple[str, mesh.Reshard]], salt: str = "") -> str:
    """16 hex digits of the named plans (in the order given: name order, or a state
    plan's), and ``salt`` (what else the ranks must share: a state plan's buckets)."""
    text = "|".join(f"{name}={plan.digest}" for name, plan in named) + salt
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def same_plans(named: list[tuple[str, mesh.Reshard]], rank: int, store: Any,
               timeout: timedelta | None = None, *, refused: bool = False,
               salt: str = "") -> None:
    """Return once every rank the plans name runs these plans; else a typed error on every
    one of them, before anything moves (the protocol is the module's).  ``refused``: this
    rank refused its arguments (it raises its own error after this): it counts as running
    another plan, so the others raise at once instead of waiting for it.  ``salt``: more
    the ranks must agree on (:func:`state_digest`)."""
    ranks = participants(p for _, p in named)
    if rank not in ranks or len(ranks) < 2:
        return
    mine = "refused" if refused else state_digest(named, salt)
    over = hashlib.blake2b(",".join(map(str, sorted(ranks))).encode(),
                           digest_size=8).hexdigest()
    with _LOCK:
        k = _CALLS.get((over, rank), 0)
        _CALLS[over, rank] = k + 1
    base = f"meshlayout/{job_namespace()}/reshard/{over}"
    call = f"{base}/{k}"
    store.add(f"{call}/d/{mine}", 1)
    store.append(f"{call}/who/{mine}", f"{rank},")
    if store.add(f"{call}/n", 1) == len(ranks):
        held = store.add(f"{call}/d/{mine}", 0)
        store.set(f"{call}/verdict", mine if held == len(ranks) else "mismatch")
        for key in ("n", "verdict", f"d/{mine}", f"who/{mine}") if k else ():
            store.delete_key(f"{base}/{k - 1}/{key}")
    _verdict(store, call, mine, rank, ranks, timeout)


def _verdict(store: Any, call: str, mine: str, rank: int, ranks: frozenset[int],
             timeout: timedelta | None) -> None:
    try:
        store.wait([f"{call}/verdict"], *(() if timeout is None else (timeout,)))
    except Exception as e:  # the store's timeout, in whatever type this torch raises it
        raise BackendConfigError(
            f"reshard_state: rank {rank} waited for the {len(ranks)} ranks of its plans to "
            f"compare plans, and some never came ({type(e).__name__}: {e}): a rank runs plans "
            "over other ranks, or did not call") from e
    if store.get(f"{call}/verdict").decode() == mine or mine == "refused":
        return  # a rank that refused raises its own error
    same = sorted(int(r) for r in store.get(f"{call}/who/{mine}").decode().split(",") if r)
    other = sorted(ranks - set(same))
    raise BackendConfigError(
        f"reshard_state: the ranks of these plans run different plans (nothing moved): rank "
        f"{rank}'s plans (digest {mine}) are those of ranks "
        f"{ranks_text(same, RankStyle.AGREE)}; ranks {ranks_text(other, RankStyle.AGREE)} "
        "run others (a plan, a shape, a placement or a tensor name differs) or refused "
        "their arguments")

