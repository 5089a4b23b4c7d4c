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
the plans name and the number of earlier calls over those ranks (every rank of a plan calls
in the same order).  A rank alone in its plans checks nothing.

Plans over other ranks.  A rank given plans that name other ranks than its peers' counts in
another key space, so the two sides would wait for each other until the store's timeout.
So each rank also says where it is (``set(reshard/at/<rank>, "<digest of the ranks>/<k>")``),
appends itself to ``<call>/in``, and the first rank of a key space writes the space's ranks
once (``<space>/members``, as runs: ``0-3,8``).  A rank that has waited :data:`POLL` for
the verdict reads which of its ranks have not arrived, and where the first
:data:`LOOK` of them are: one waiting in a call over other ranks that names this one too
(a call this rank has not made yet) waits for it while it waits for them, so it raises a
typed error naming both sets of ranks, and marks itself failed
(``reshard/at/<rank> = "failed <space>/<k>"``); a rank that finds a peer so marked raises
too, naming it, and marks itself in turn.  Only these errors are marked: a rank that raised
because its plans differ from its peers' (they all raise) may call again.  Only the store's
timeout ends a wait for a rank that is elsewhere.
"""

from __future__ import annotations

import hashlib
import threading
import time
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

POLL = timedelta(seconds=2)
"""How long a rank waits for the verdict before it looks where the missing ranks are."""

LOOK = 8
"""How many missing ranks a rank looks up each time (each a few store calls)."""


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
               salt: str = "", space: str = "") -> None:
    """Return once every rank the plans name runs these plans; else a typed error on every
    one of them, before anything moves (the protocol is the module's).  ``refused``: this
    rank refused its arguments (it raises its own error after this): it counts as running
    another plan, so the others raise at once instead of waiting for it.  ``salt``: more
    the ranks must agree on (:func:`state_digest`).  ``space``: the numbering's own key
    space where ``rank`` is not the world's (a group's ranks)."""
    ranks = participants(p for _, p in named)
    if rank not in ranks or len(ranks) < 2:
        return
    mine = "refused" if refused else state_digest(named, salt)
    over = hashlib.blake2b((space + "|" + ",".join(map(str, sorted(ranks)))).encode(),
                           digest_size=8).hexdigest()
    with _LOCK:
        k = _CALLS.get((over, rank), 0)
        _CALLS[over, rank] = k + 1
    root = f"meshlayout/{job_namespace()}/reshard" + (f"/{space}" if space else "")
    base = f"{root}/{over}"
    call = f"{base}/{k}"
    _announce(store, root, over, k, rank, ranks)
    store.add(f"{call}/d/{mine}", 1)
    store.append(f"{call}/who/{mine}", f"{rank},")
    if store.add(f"{call}/n", 1) == len(ranks):
        held = store.add(f"{call}/d/{mine}", 0)
        store.set(f"{call}/verdict", mine if held == len(ranks) else "mismatch")
        for key in ("n", "in", "verdict", f"d/{mine}", f"who/{mine}") if k else ():
            store.delete_key(f"{base}/{k - 1}/{key}")
    _verdict(store, call, mine, rank, ranks, timeout, root)


def _announce(store: Any, root: str, over: str, k: int, rank: int,
              ranks: frozenset[int]) -> None:
    """Say where this rank is (its call ``k`` over the ranks of digest ``over``), that it
    arrived there, and, the first time a rank comes to this key space, its ranks."""
    store.set(f"{root}/at/{rank}", f"{over}/{k}")
    store.append(f"{root}/{over}/{k}/in", f"{rank},")
    if store.add(f"{root}/{over}/members_n", 1) == 1:
        store.set(f"{root}/{over}/members", _runs(sorted(ranks)))


def _runs(ranks: list[int]) -> str:
    """``0-3,8``: ascending ranks as runs (a plan's ranks are a few runs, whatever the world)."""
    out: list[str] = []
    for r in ranks:
        if out and r == int(out[-1].rsplit("-", 1)[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ",".join(out)


def _unruns(text: str) -> set[int]:
    """The ranks of :func:`_runs`' text."""
    out: set[int] = set()
    for run in filter(None, text.split(",")):
        low, _, high = run.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def _verdict(store: Any, call: str, mine: str, rank: int, ranks: frozenset[int],
             timeout: timedelta | None, root: str) -> None:
    _waited(store, call, rank, ranks, timeout, root)
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



def _waited(store: Any, call: str, rank: int, ranks: frozenset[int],
            timeout: timedelta | None, root: str) -> None:
    """Wait for ``call``'s verdict, looking every :data:`POLL` where the missing ranks are
    (:func:`_crossed`); a typed error once one waits for this rank elsewhere, or failed, or
    when ``timeout`` (default: the store's) passes."""
    limit = timeout if timeout is not None else getattr(store, "timeout", None)
    end = time.monotonic() + (limit.total_seconds() if isinstance(limit, timedelta) else 300.0)
    while True:  # (a wait of 0 s waits for ever: the last slice is at least 1 ms)
        left = max(0.001, min(POLL.total_seconds(), end - time.monotonic()))
        try:
            store.wait([f"{call}/verdict"], timedelta(seconds=left))
            return
        except Exception as e:  # a slice's timeout, in whatever type this torch raises it
            if time.monotonic() >= end:
                raise BackendConfigError(
                    f"reshard_state: rank {rank} waited for the {len(ranks)} ranks of its plans "
                    f"to compare plans, and some never came ({type(e).__name__}: {e}): a rank "
                    "runs plans over other ranks, or did not call") from e
        crossed = _crossed(store, call, rank, ranks, root)
        if crossed:  # marked, so that the ranks waiting for this one elsewhere raise too
            store.set(f"{root}/at/{rank}", "failed " + "/".join(call.rsplit("/", 2)[-2:]))
            raise BackendConfigError(crossed)


def _crossed(store: Any, call: str, rank: int, ranks: frozenset[int], root: str) -> str:
    """Why this rank can never get its verdict (in words; "" while it may): a missing rank
    waits in a call over other ranks that names this one (which has not made that call),
    or marked itself failed."""
    over, k = call.rsplit("/", 2)[-2:]
    arrived = _get(store, f"{call}/in")
    missing = sorted(ranks - {int(r) for r in arrived.split(",") if r} - {rank})
    for peer in missing[:LOOK]:
        where = _get(store, f"{root}/at/{peer}")
        failed = where.startswith("failed ")
        other, _, theirs = where.removeprefix("failed ").rpartition("/")
        if not other or (other == over and not failed):
            continue
        members = _get(store, f"{root}/{other}/members")
        with _LOCK:
            done = _CALLS.get((other, rank), 0) > int(theirs)
        named = _runs(sorted(_unruns(members))) if members else "unknown"
        head = (f"reshard_state: ranks were given plans over different ranks (nothing moved): "
                f"{_side(rank, ranks, k)}; rank {peer} ")
        if failed:
            return f"{head}raised in a reshard whose plans name ranks {named}"
        if members and rank in _unruns(members) and not done:
            return (f"{head}waits in a reshard whose plans name ranks {named}, rank {rank} "
                    "among them")
    return ""


def _side(rank: int, ranks: frozenset[int], k: str) -> str:
    return f"rank {rank}'s plans name ranks {_runs(sorted(ranks))} (its call {k} over them)"


def _get(store: Any, key: str) -> str:
    """``key``'s value, or "" where it is not set (a get would wait for it)."""
    return store.get(key).decode() if store.check([key]) else ""
