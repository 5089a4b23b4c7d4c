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
- a member announces itself (``meshlayout/here/<group>/<round>/<rank>``) and waits until
  every member has; the round's outcome is agreed through one ``compare_set`` ("go" by
  whoever sees everyone, "quit" by whoever times out first), so no member creates the
  group while another gave up; it waits longer while a missing member is visibly busy
  creating another group that has not timed out (or left one a moment ago) and does not
  wait for this rank (at most one more timeout), so two groups asked one after the other
  by ranks that are all present do not fail each other;
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


def _busy_until(rec: Any, name: str, now: float) -> float | None:
    """Until when a member is busy, if its record ``rec`` says it is creating a group:
    another one (until that one's deadline; just past it, it is about to fail and come),
    this one (it is arriving right now), or it left another group less than
    :data:`_SLACK_S` ago (it may be on its way here: a failure's report and the next
    request take a moment between two records)."""
    if not rec:
        return None
    if "until" in rec:
        if rec.get("group") == name:
            return now
        until = float(rec["until"])
    elif "idle_since" in rec:
        until = float(rec["idle_since"])
    else:
        return None
    return until if until + _SLACK_S > now else None


class _Closed:
    """The store of a closed rendezvous: every use says so."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("this backend was shut down; its store is released")


class Rendezvous:
    """One process's view of the barrier keys in the default store (see the module)."""

    def __init__(self, store: Any, rank: int, heartbeat_s: float | None = 1.0) -> None:
        self._store = store
        self._rank = rank
        self._beat = heartbeat_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._record: dict[str, Any] | None = None  # what this rank is creating now
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
        """Stop the heartbeat and let go of the store (idempotent), so that destroying the
        default group frees it and a new world can be started on the same port."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * (self._beat or 0.0) + 1)
        self._store = _Closed()

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

    def silent(self, ranks: list[int]) -> dict[int, float | None]:
        """The ranks whose heartbeat does not move within ~2 beats, with how long they have
        been silent (None: never beat).  A rank that died a moment ago still has a fresh
        beat, so this watches for the next one instead of judging by age alone."""
        first = {r: self._get(self._key("alive", r)) for r in ranks}
        quiet = set(ranks)
        deadline = time.time() + 2 * (self._beat or 0.0) + 0.5
        while quiet and time.time() < deadline:
            time.sleep(0.1)
            quiet = {r for r in quiet if self._get(self._key("alive", r)) == first[r]}
        return {r: (None if first[r] is None else max(0.0, time.time() - float(first[r])))
                for r in sorted(quiet)}

    @contextlib.contextmanager
    def creating(self, group: dict[str, Any], deadline: float) -> Iterator[None]:
        """Publish "now creating ``group`` until ``deadline``" for the duration."""
        key = self._key("creating", self._rank)
        self._record = {**group, "since": time.time(), "until": deadline}
        self._set(key, self._record)
        try:
            yield
        finally:
            self._record = None
            with contextlib.suppress(Exception):
                self._set(key, {"idle_since": time.time(), "last": group})

    def _extend(self, until: float) -> None:
        """Publish that this rank now waits until ``until`` (its deadline moved)."""
        if self._record is not None and self._record["until"] < until:
            self._record["until"] = until
            self._set(self._key("creating", self._rank), self._record)

    # ---- the barrier ----------------------------------------------------------------------
    def arrive(self, name: str, members: tuple[int, ...], timeout: float, dim: str,
               ranks: tuple[int, ...]) -> None:
        """Wait until every member of ``members`` has arrived at group ``name``.

        The barrier runs in rounds so that members agree on its outcome: a member that
        sees everyone present commits the round (``compare_set`` of its state to "go"),
        a member whose deadline passes closes it ("quit"), and whichever comes first
        wins, so no member creates the group while another gave up.  Members of a
        closed round move to the next one.  Raises :class:`~backend.MembersMissingError`
        when this rank closes its round, having left its "gave up" mark (which only
        explains: a member arriving later still waits its own timeout, so retries on
        both sides can meet).  Each look costs two store calls; members are listed only
        at a deadline.
        """
        store = self._store
        mark = self._key("gaveup", name, self._rank)
        with contextlib.suppress(Exception):
            store.delete_key(mark)  # a retry: this rank is back
        start = time.time()
        deadline, cap = start + timeout, start + 2 * timeout
        pause = _POLL_S[0]
        seen: dict[int, Any] = {}
        k = self._join(name, int(store.add(self._key("round", name), 0)))
        while True:
            state = self._key("state", name, k)
            here = [self._key("here", name, k, m) for m in members]
            if store.check([state]):
                if store.get(state) == b"go":
                    return
                k = self._join(name, k + 1)  # a closed round: on to the next one
                continue
            if store.check(here):
                if store.compare_set(state, "", "go") == b"go":
                    return
                continue  # closed meanwhile: the next look moves on
            now = time.time()
            if now >= deadline:
                missing = [m for m, key in zip(members, here) if not store.check([key])]
                if not missing:
                    continue  # the last member arrived just now: the next look commits "go"
                seen = {m: self._get(self._key("creating", m)) for m in missing}
                busy = [b for b in (_busy_until(seen[m], name, now) for m in missing
                                    if not self._waits_for_me(seen[m], name)) if b]
                deadline = min(max([now, *[b + _SLACK_S for b in busy]]), cap)
                if now >= deadline:
                    if store.compare_set(state, "", "quit") == b"go":
                        return  # everyone came as this rank was giving up
                    break
                self._extend(deadline)
            time.sleep(pause)
            pause = min(pause * 2, _POLL_S[1])
        with contextlib.suppress(Exception):
            self._set(mark, time.time())
        raise self._failure(name, members, seen, dim, ranks, time.time() - start)

    def _join(self, name: str, k: int) -> int:
        """Announce this rank in round ``k`` (or a later one, if it is current); its number."""
        current = int(self._store.compare_set(self._key("round", name), str(k - 1), str(k))) \
            if k else 0
        k = max(k, current)
        self._store.set(self._key("here", name, k, self._rank), "1")
        return k

    def _waits_for_me(self, rec: Any, name: str, most: int = 256) -> bool:
        """Whether the member with record ``rec`` waits, directly or through others' groups,
        for this rank: then waiting longer for it is a cycle (groups asked in different
        orders) and this rank gives up at its own deadline instead.  Follows the records
        of at most ``most`` ranks."""
        todo = [r for r in (rec or {}).get("ranks", ()) if (rec or {}).get("group") != name]
        seen: set[int] = set()
        while todo and len(seen) < most:
            r = todo.pop()
            if r == self._rank:
                return True
            if r in seen:
                continue
            seen.add(r)
            other = self._get(self._key("creating", r))
            if other and "until" in other and other.get("group") != name:
                todo.extend(other.get("ranks", ()))
        return False

    def done(self, name: str, members: tuple[int, ...]) -> None:
        """Count this member through; the last one out opens a fresh round for a later
        creation under this name (a new backend after a shutdown) and removes the keys."""
        try:
            k = int(self._store.add(self._key("round", name), 0))
            if int(self._store.add(self._key("done", name, k), 1)) == len(members):
                self._store.compare_set(self._key("round", name), str(k), str(k + 1))
                for m in members:
                    self._store.delete_key(self._key("here", name, k, m))
                self._store.delete_key(self._key("state", name, k))
                self._store.delete_key(self._key("done", name, k))
        except Exception:  # cleanup only
            pass

    # ---- explaining a failure -------------------------------------------------------------
    def describe(self, rank: int, name: str, rec: Any) -> tuple[str, str]:
        """(what ``rank`` was doing, from its record ``rec`` as seen at the deadline, and the
        kind: "order", "late", "skipped", "gone")."""
        silent = self.silent_for(rank)
        if silent is not None and self._beat and silent > self.lost_after:
            return f"has not answered for {silent:.1f} s (it may have exited)", "gone"
        if self._get(self._key("gaveup", name, rank)) is not None:
            return "gave up waiting for this group before this rank arrived", "late"
        if rec is None:
            return "has not started creating any group (late, or not started)", "skipped"
        if "until" in rec:
            if rec.get("group") == name:
                return "was arriving as this rank gave up", "late"
            since = time.time() - float(rec["since"])
            return (f"is creating the {rec.get('dim')!r} group {tuple(rec.get('ranks', ()))} "
                    f"(for {since:.1f} s)", "order")
        last = rec.get("last") or {}
        idle = time.time() - float(rec.get("idle_since", time.time()))
        return (f"is not creating any group (idle for {idle:.1f} s; its last was the "
                f"{last.get('dim')!r} group {tuple(last.get('ranks', ()))})", "skipped")

    def _failure(self, name: str, members: tuple[int, ...], seen: dict[int, Any], dim: str,
                 ranks: tuple[int, ...], waited: float) -> MembersMissingError:
        absent = sorted(seen)
        try:
            doing = {m: self.describe(m, name, seen[m]) for m in absent}
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
