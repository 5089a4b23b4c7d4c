"""Creating a group without hangs or cascades: an arrival barrier in the default store.

Torch 2.13 names a locally synchronized group ``sha1(ranks + number of groups this process
has)``, a per-process counter: one late or failed creation leaves the counters out of step,
and every later group among the same processes waits for a rendezvous that never comes.
meshlayout instead names each group from its family and members (:func:`group_name`, the
same on every process whatever it created before) and, before torch's creation, has the
members meet at a barrier of their own in the default store:

- each rank keeps a "now creating" record (``meshlayout/creating/<rank>``: the group, its
  dim and ranks, since when, until when it will wait), and a heartbeat
  (``meshlayout/alive/<rank>``) while its backend lives;
- a member announces itself (``meshlayout/here/<group>/<rank>``) and waits until every
  member has; it waits longer while a missing member is visibly busy creating another
  group that has not timed out yet (at most one more timeout), so two groups asked one
  after the other by ranks that are all present do not fail each other;
- a member that gives up withdraws and leaves a mark (``meshlayout/gaveup/<group>/<rank>``)
  that explains a later member's failure ("gave up before this rank arrived");
- on failure the error names this rank, the group, the members that did not arrive and
  what each was doing, the likely cause and the remedies.

Every wait is bounded by the group's timeout (plus at most one more timeout while a peer is
busy, plus a short slack); store failures (the store lives on rank 0) are reported, not hung on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from ._errors import MembersMissingError

__all__ = ["Rendezvous", "group_name"]

PREFIX = "meshlayout"
_SLACK_S = 1.0  # how long past a busy peer's deadline it may take to arrive here
_POLL_S = (0.002, 0.05)  # the first and the longest pause between looks at the store


def group_name(universe: str, layout: str, options: str, ranks: tuple[int, ...]) -> str:
    """The process-independent name of one group: a digest of its family (universe, dim
    layout, options) and its members, never of what else a process created."""
    text = f"{universe}|{layout}|{options}|{','.join(map(str, ranks))}"
    return "ml-" + hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:20]


class Rendezvous:
    """One process's view of the barrier keys in the default store (see the module)."""

    def __init__(self, store: Any, rank: int, heartbeat_s: float | None = 1.0) -> None:
        self._store = store
        self._rank = rank
        self._beat = heartbeat_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if heartbeat_s:
            self._thread = threading.Thread(target=self._heartbeat, daemon=True,
                                            name=f"meshlayout-heartbeat-{rank}")
            self._thread.start()

    # ---- records --------------------------------------------------------------------------
    def _key(self, *parts: object) -> str:
        return "/".join([PREFIX, *map(str, parts)])

    def _set(self, key: str, value: object) -> None:
        self._store.set(key, json.dumps(value))

    def _get(self, key: str) -> Any:
        """The JSON value at ``key``, or None if there is none (never blocks)."""
        if not self._store.check([key]):
            return None
        raw = self._store.get(key)
        return json.loads(raw) if raw else None

    def _heartbeat(self) -> None:
        while not self._stop.is_set():
            try:
                self._set(self._key("alive", self._rank), time.time())
            except Exception:  # the store is gone (rank 0 exited): nothing left to tell
                return
            self._stop.wait(self._beat)

    def close(self) -> None:
        """Stop the heartbeat (idempotent)."""
        self._stop.set()

    @property
    def beating(self) -> bool:
        """Whether this process sends heartbeats (so peers' silence means something)."""
        return self._thread is not None and not self._stop.is_set()

    @property
    def lost_after(self) -> float:
        """How long a member may stay silent before it counts as lost (3 beats + 2 s)."""
        return 3 * (self._beat or 0.0) + 2.0

    def silent_for(self, rank: int) -> float | None:
        """Seconds since ``rank``'s last heartbeat, or None if it never sent one."""
        last = self._get(self._key("alive", rank))
        return None if last is None else max(0.0, time.time() - float(last))

    @contextlib.contextmanager
    def creating(self, group: dict[str, Any], deadline: float) -> Iterator[None]:
        """Publish "now creating ``group`` until ``deadline``" for the duration."""
        key = self._key("creating", self._rank)
        self._set(key, {**group, "since": time.time(), "until": deadline})
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                self._set(key, {"idle_since": time.time(), "last": group})

    # ---- the barrier ----------------------------------------------------------------------
    def arrive(self, name: str, members: tuple[int, ...], timeout: float, dim: str,
               ranks: tuple[int, ...]) -> None:
        """Wait until every member of ``members`` has arrived at group ``name``.

        Raises :class:`~backend.MembersMissingError` when some did not in time, having
        withdrawn this rank and left its "gave up" mark (which only explains: a member
        arriving later still waits its own timeout, so retries on both sides can meet).
        Each look costs one store call; members are listed only at a deadline.
        """
        store = self._store
        here = [self._key("here", name, m) for m in members]
        mine = here[members.index(self._rank)]
        mark = self._key("gaveup", name, self._rank)
        with contextlib.suppress(Exception):
            store.delete_key(mark)  # a retry: this rank is back
        store.set(mine, "1")
        start = time.time()
        deadline, cap = start + timeout, start + 2 * timeout
        pause = _POLL_S[0]
        while True:
            if store.check(here):
                return
            now = time.time()
            if now >= deadline:
                missing = [m for m, k in zip(members, here) if not store.check([k])]
                busy = [b for b in (self._busy_until(m, name) for m in missing) if b]
                deadline = min(max([now, *[b + _SLACK_S for b in busy]]), cap)
                if now >= deadline:
                    break
            time.sleep(pause)
            pause = min(pause * 2, _POLL_S[1])
        with contextlib.suppress(Exception):
            store.delete_key(mine)
            self._set(mark, time.time())
        raise self._failure(name, members, missing, dim, ranks, time.time() - start)

    def done(self, name: str, members: tuple[int, ...]) -> None:
        """Count this member through; the last one out removes the barrier's keys."""
        try:
            if int(self._store.add(self._key("done", name), 1)) == len(members):
                for m in members:
                    self._store.delete_key(self._key("here", name, m))
                self._store.delete_key(self._key("done", name))
        except Exception:  # cleanup only: a leftover key never blocks a later creation
            pass

    def _busy_until(self, rank: int, name: str) -> float | None:
        """Until when ``rank`` waits on *another* group, if its record says it does."""
        rec = self._get(self._key("creating", rank))
        if not rec or "until" not in rec or rec.get("group") == name:
            return None
        until = float(rec["until"])
        return until if until > time.time() else None

    # ---- explaining a failure -------------------------------------------------------------
    def describe(self, rank: int, name: str) -> tuple[str, str]:
        """(what ``rank`` is doing, the kind: "order", "late", "skipped", "gone")."""
        silent = self.silent_for(rank)
        if silent is not None and self._beat and silent > self.lost_after:
            return f"has not answered for {silent:.1f} s (it may have exited)", "gone"
        if self._get(self._key("gaveup", name, rank)) is not None:
            return "gave up waiting for this group before this rank arrived", "late"
        rec = self._get(self._key("creating", rank))
        if rec is None:
            return "has not started creating any group (late, or not started)", "skipped"
        if "until" in rec:
            if rec.get("group") == name:
                return "arrived, then withdrew", "late"
            since = time.time() - float(rec["since"])
            return (f"is creating the {rec.get('dim')!r} group {tuple(rec.get('ranks', ()))} "
                    f"(for {since:.1f} s)", "order")
        last = rec.get("last") or {}
        idle = time.time() - float(rec.get("idle_since", time.time()))
        return (f"is not creating any group (idle for {idle:.1f} s; its last was the "
                f"{last.get('dim')!r} group {tuple(last.get('ranks', ()))})", "skipped")

    def _failure(self, name: str, members: tuple[int, ...], missing: list[int], dim: str,
                 ranks: tuple[int, ...], waited: float) -> MembersMissingError:
        absent = sorted(missing)
        try:
            doing = {m: self.describe(m, name) for m in absent}
        except Exception as e:  # the store itself is gone
            doing = {m: (f"cannot be asked: the store (on rank 0) is unreachable ({e})", "gone")
                     for m in absent}
        kinds = {k for _, k in doing.values()}
        if "order" in kinds:
            cause = ("ranks asked for groups in a different order (each waits for a group "
                     "another is not creating yet)")
        elif "late" in kinds:
            cause = "this rank is late: the other members gave up waiting for it"
        elif "gone" in kinds:
            cause = "a member exited or stopped answering"
        else:
            cause = "a member skipped this group (or is late)"
        who = "; ".join(f"rank {m} {text}" for m, (text, _) in doing.items())
        message = (
            f"rank {self._rank} could not create the {dim!r} group {ranks} within "
            f"{waited:.1f} s: {len(absent)} of its {len(members)} members did not arrive "
            f"({who}). Likely cause: {cause}. Remedies: ask for groups in the same order on "
            "every rank (mesh.materialize() creates a mesh's groups in dim order on every "
            "rank), make every member ask, and check the program offline with "
            "backend.check_spmd(world_size, program).")
        return MembersMissingError(message, rank=self._rank, dim=dim, ranks=ranks,
                                   missing=tuple(absent),
                                   doing={m: text for m, (text, _) in doing.items()})
