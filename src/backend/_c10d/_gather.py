"""The discovery gather: every rank's record through the store into one agreed machine.

**Keys** live under ``meshlayout/topo/<job>.<attempt>/<call>`` (the namespace ``ns``):
the job and attempt as the barrier's keys have them (:func:`~._store.job_namespace`: the
launcher's job id and restart count), ``call`` the number of this process's discovery calls
before this one, counted when a call starts, so a call that fails still uses up its number
and the next call never fills an old round.

**Steps** of rank ``r`` of ``W`` (records: ``_discovery_record``; ``T`` the timeout,
measured on this rank's monotonic clock from the call's start):

1. ``compare_set(ns/r/<r>)`` to its :class:`Digest` (host and domain hashes, local rank),
   written once: a different value already there is a fault naming the key; ``check`` of
   ``ns/answer``: an answer there already is *early* (no machine is written before every
   rank has counted itself, step 3: an early machine is stale or planted);
2. (``r > 0``) ``wait`` + ``get`` of ``ns/r/<r - 1>``: rank ``r`` starts a run of ranks
   unless it continues that one; a run's first rank ``append``-s its :class:`RunLine`;
3. ``add(ns/n, 1)``: the rank that makes it ``W`` reads ``ns/runs``, builds the machine
   (``Topology.from_runs``) and writes ``ns/answer`` once (``compare_set``), with a fresh
   random nonce;
4. every rank ``wait`` + ``get``-s the answer and checks it against what it knows: that it
   was not early, its hostname, its device, and whether it shares a host and a domain with
   rank ``r - 1`` (their digests).  Every boundary between hosts and domains in rank order
   is so checked by the rank after it, and every rank's name and device by itself;
5. ``set(ns/ok/<nonce>/<r>)`` (its mark: it checked that answer) and
   ``add(ns/checked/<nonce>, 1)``: the rank that makes it ``W`` writes ``ns/verdict`` once:
   the answer's SHA-256;
6. every rank ``wait``-s for the verdict until ``T`` and ``get``-s it.  It adopts a machine
   only if it checked that answer itself and the verdict names it; a verdict's fault,
   otherwise.

A rank that finds a fault at any step (a record that does not read, a check that fails, a
counter past ``W``, a wait past ``T``: then it names the ranks that did not check the
answer, from their marks, or before an answer the ranks whose digest is absent; or, every
digest there but not every rank counted, the ranks that do not answer a *roll call*: it
writes a :class:`RollCall` with a fresh nonce as the answer, every rank that reads it marks
itself under that nonce, and after at most :data:`ROLL_S` the caller names the ranks without
a mark) writes the fault as the answer (waking the ranks that wait for one) and as the
verdict, each once, and then adopts the verdict like every rank. So every rank ends with
what the one verdict says: the same machine, or the same :class:`~backend.DiscoveryError`
naming the rank or key at fault, within ``T`` plus :data:`SLACK_S` (store latency: the
verdict is there by then, written at the first rank's ``T`` at the latest, or
:data:`ROLL_S` after it).  A rank that stops after publishing (a
``SIGSTOP``, a ``SIGKILL``) is named by the others at their ``T`` as the rank that did not
check; if it resumes, it finds their verdict and fails with the same error.  Store calls per
rank on the success path: 10 to 15, whatever ``W``: 11 for most, the first rank of a run
making one more (an ``append``), the last to arrive two (a ``get`` and a ``compare_set``),
the last to check one (8 to 14, 9 for most, before the marks and the check of step 1: issue
44); bytes read: a digest, the answer (the topology's compact data) and the verdict.

**Threat model.**  The store is shared and unauthenticated.  A peer (an earlier job or
attempt, a misbehaving process) may have written *any* key before the call, with any bytes.
Such a value never makes ranks disagree and never passes the call with a rank absent or
unchecked: every key this call writes is written once (the first value wins for every
reader); every value is read by one strict, bounded reader (a bad one is a typed error
naming the key); an answer there before a rank counted itself is refused by that rank (and
every rank sees a value written before the call, so all refuse it); the machine carries a
nonce drawn once every rank counted itself, which no value written before the call can
name: not a verdict, not a mark, not the count of checks (``ns/checked/<nonce>``, which so
reaches ``W`` only once every rank checked that machine); and a rank adopts a machine only
if it checked it itself and the verdict names it.  So a pre-planted value can make the call
fail (the same error on every rank, naming the key, or the line of ``ns/runs`` that
misplaced a rank), never pass it with a rank absent, nor hang it past ``T`` plus the slack,
nor hide a rank that stopped after publishing, nor break a connection for later calls: a
non-number at a counter makes the store's ``add`` fail (on TCPStore the server closes that
connection), and the call goes on with a new connection (``discover_topology`` runs it on a
pooled clone of the default store, dropped after a failure, never on the connection torch's
own calls use). What it *can* do: fail the call at will, with a fault verdict of its own
words (every rank then fails with them). A digest planted for a rank absent from the start
reads as one it wrote before stopping: the roll call still names it (its keys carry a nonce
drawn after the timeout, which no value written before the call can name), as the rank that
did not count itself. And a peer that writes well-formed values of this very call while it
runs, racing the ranks (it can then read every record and the nonce), can make the ranks
adopt a machine that agrees with every rank's own checks but differs elsewhere (say, two
far-apart hosts put in one domain) — an unauthenticated store cannot prevent that, as such a
peer could equally join the job as a rank.
"""

from __future__ import annotations

import functools
import logging
import secrets
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from layout import show, show_error
from mesh import MeshError, Topology

from .._core import DiscoveryError
from ._discovery_record import Answer, Digest, Fault, RollCall, RunLine, Verdict, sha
from ._store import job_namespace, reconnected

__all__ = ["PREFIX", "SLACK_S", "Gather", "machine", "namespace"]

log = logging.getLogger(__name__)

PREFIX = "meshlayout/topo"
SLACK_S = 10.0
"""How long past its own timeout a rank waits for the verdict (written by the first rank to
time out, at that rank's ``T``): store latency and start skew between ranks."""

ROLL_S = SLACK_S / 2
"""How long the caller of a roll call waits for the answers (the others wait for its
verdict until their ``T`` plus :data:`SLACK_S`)."""

_MOST_NAMED = 8  # the absent ranks a timeout names


class _Stop(Exception):
    """A fault found by this rank: written as the verdict, unless another came first."""

    def __init__(self, fault: Fault) -> None:
        super().__init__(fault.reason)
        self.fault = fault


class _Uncounted(Exception):
    """No answer within ``T``, every rank's digest there, ``counted`` ranks counted: a roll
    call names the ranks that did not count themselves."""

    def __init__(self, counted: int) -> None:
        super().__init__(counted)
        self.counted = counted


class _Answered(Exception):
    """This rank answered another's roll call: the caller writes the verdict."""


def namespace(call: int) -> str:
    """The keys' prefix for this process's ``call``-th discovery in this job and attempt
    (:func:`~._store.job_namespace`)."""
    return f"{PREFIX}/{job_namespace()}/{call}"


def machine(lines: list[RunLine], world: int) -> Topology:
    """The machine of the runs' first records (in rank order): runs of ranks per host (a
    device unknown goes on from the host's last), one domain per host (its own where none is
    known); a hostname that two hosts share is told apart by their identities."""
    hosts: dict[str, int] = {}
    names: list[str] = []
    taken: dict[str, str] = {}
    next_device: list[int] = []
    domains: list[str] = []
    runs = []
    for i, line in enumerate(lines):
        end = lines[i + 1].rank if i + 1 < len(lines) else world
        domain = line.domain or f"host:{line.host}"
        h = hosts.get(line.host)
        if h is None:
            h = hosts[line.host] = len(names)
            shared = taken.setdefault(line.hostname, line.host) != line.host
            names.append(f"{line.hostname}#{line.host[:6]}" if shared else line.hostname)
            next_device.append(0)
            domains.append(domain)
        elif domain != domains[h]:
            raise DiscoveryError(f"host {names[h]!r} reports two fast domains: "
                                 f"{domains[h]!r} and {line.domain!r}")
        first = next_device[h] if line.local_rank is None else line.local_rank
        runs.append((h, end - line.rank, first))
        next_device[h] = first + end - line.rank
    return Topology.from_runs(runs, hosts=names, domains=domains)


class Gather:
    """One rank's part in one discovery call (the steps of the module's docs).
    :meth:`run` does them all; a bench runs a simulated world phase by phase
    (:meth:`publish` for every rank, then :meth:`check`, then :meth:`adopt`)."""

    def __init__(self, store: Any, rank: int, world: int, digest: Digest, line: RunLine,
                 hostname: str, timeout: float, ns: str, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.rank, self.world, self.ns = store, rank, world, ns
        self.digest, self.line, self.hostname, self.timeout = digest, line, hostname, timeout
        self.clock = clock  # local and monotonic: no deadline compares two hosts' clocks
        self.deadline = clock() + timeout
        self.prev: Digest | None = None
        self.starts = False  # this rank starts a run: it wrote a line of ns/runs
        self.early = False  # ns/answer was there before this rank counted itself
        self.answer: bytes | None = None  # the answer's bytes, once read and checked
        self.nonce: str | None = None  # the checked answer's
        self.failed = False  # this rank found a fault: the verdict is written
        self._raw = b""  # the last value read

    def key(self, part: str) -> str:
        return f"{self.ns}/{part}"

    def run(self) -> Topology:
        """Every step; the agreed machine, or the agreed :class:`~backend.DiscoveryError`."""
        self.publish()
        self.check()
        return self.adopt()

    def publish(self) -> None:
        """Steps 1 to 3."""
        self._step(self._publish)

    def check(self) -> None:
        """Steps 4 and 5 (nothing after a fault: the verdict is written)."""
        self._step(self._check)

    def _step(self, step: Any) -> None:
        if self.failed:
            return
        try:
            step()
        except _Stop as stop:
            self.failed = True
            self._fail(stop.fault)
        except _Answered:
            self.failed = True

    def _publish(self) -> None:
        own = self.key(f"r/{self.rank}")
        mine = self.digest.encode()
        held = bytes(self.store.compare_set(own, "", mine))
        if held != mine:
            raise _Stop(Fault(f"key {own!r} held {held[:40]!r} before rank {self.rank} wrote "
                              "its digest (a stale or planted value)", None, own))
        local = self.digest.local_rank
        if local is not None and local >= self.world:  # its neighbour refuses it too
            raise _Stop(Fault(f"rank {self.rank}'s local rank {local:,} is past the world "
                              f"(valid: 0 <= local rank < {self.world:,}): its LOCAL_RANK or "
                              "record is wrong", self.rank, own))
        self.early = bool(self.store.check([self.key("answer")]))
        if self.rank:
            key = self.key(f"r/{self.rank - 1}")
            self.prev = self._read(key, lambda raw: Digest.read(raw, key, self.world))
        self.starts = self.prev is None or not self.digest.continues(self.prev)
        if self.starts:
            self.store.append(self.key("runs"), self.line.encode())
        if self._count("n") == self.world:
            self._build()

    def _build(self) -> None:
        """The last rank to arrive: the machine of the runs, written once as the answer."""
        key = self.key("runs")
        try:
            lines = RunLine.read_all(bytes(self.store.get(key)), key, self.world)
            topo = machine(lines, self.world)
        except (MeshError, DiscoveryError) as e:
            raise _Stop(Fault("the ranks' records do not make one machine: "
                              + show_error(e).split(": ", 1)[-1], None, key)) from None
        raw = Answer(self.ns, self.world, topo.to_dict(), None, secrets.token_hex(8)).encode()
        self.store.compare_set(self.key("answer"), "", raw)

    def _check(self) -> None:
        key = self.key("answer")
        try:
            answer = self._read(key, lambda raw: _answer(raw, key, self.ns, self.world))
            mine = False
        except _Uncounted as late:
            answer, mine = self._call_roll(late.counted)
        answer_raw = self._raw
        if answer.fault is not None:
            raise _Stop(answer.fault)
        if answer.roll is not None:
            if self.early:
                raise self._early(key)
            self._answer_roll(answer.roll, caller=mine)
        try:
            topo = _topology(answer_raw, key, self.ns, self.world)
        except DiscoveryError as e:
            raise _Stop(Fault(str(e), None, key)) from None
        if self.early:  # the machine is written once every rank has counted itself
            raise self._early(key)
        self._verify(topo)
        self.answer, self.nonce = answer_raw, answer.nonce
        self.store.set(self._checked_mark(self.rank), b"1")
        if self._count(f"checked/{self.nonce}") == self.world:
            raw = Verdict(self.ns, self.world, sha(self.answer), None).encode()
            self.store.compare_set(self.key("verdict"), "", raw)

    def _early(self, key: str) -> _Stop:
        return _Stop(Fault(f"key {key!r} held a value before every rank had counted itself "
                           "(a stale or planted answer)", None, key))

    def _call_roll(self, counted: int) -> tuple[Answer, bool]:
        """Write a roll call as the answer, once; the answer there, and whether it is this
        rank's roll call."""
        key = self.key("answer")
        raw = Answer(self.ns, self.world, None, None,
                     roll=RollCall(secrets.token_hex(8), counted - 1)).encode()
        self._raw = bytes(self.store.compare_set(key, "", raw))
        try:
            return _answer(self._raw, key, self.ns, self.world), self._raw == raw
        except DiscoveryError as e:
            raise _Stop(Fault(str(e), None, key)) from None

    def _answer_roll(self, roll: RollCall, *, caller: bool) -> None:
        """Answer a roll call: set this rank's mark and count it.  Its caller then waits (at
        most :data:`ROLL_S`) for the others' answers and names the ranks without a mark: they
        did not come (a digest written for them before the call), or stopped between writing
        their digest and counting themselves, or came after ``T``."""
        def key(part: object) -> str:
            return self.key(f"roll/{roll.nonce}/{part}")

        self.store.set(key(self.rank), b"1")
        if not caller:
            if int(self.store.add(key("n"), 1)) == roll.expect:
                self.store.set(key("all"), b"1")
            raise _Answered
        if roll.expect:
            try:
                self.store.wait([key("all")], timedelta(seconds=ROLL_S))
            except Exception:  # torch's DistStoreError on a timeout: a rank did not answer
                pass
        absent = _absent(self.store, [key(r) for r in range(self.world)])
        if not absent:
            raise _Stop(Fault(f"no answer within {self.timeout:g} s, though every rank wrote "
                              "its digest: every rank answered the roll call, the last to "
                              "count itself after the others' timeout (slow)", None,
                              self.key("n")))
        more = " (at least; the first named)" if len(absent) >= _MOST_NAMED else ""
        many = len(absent) > 1
        digest = self.key(f"r/{absent[0]}")
        raise _Stop(Fault(
            f"rank{'s' if many else ''} {', '.join(map(str, absent))}{more} did not count "
            f"{'themselves' if many else 'itself'} in {self.key('n')!r} within "
            f"{self.timeout:g} s, though {'their digests were' if many else 'its digest was'}"
            f" there (at {digest!r}{', ...' if many else ''}): written before the call for a "
            "rank that never came (stale or planted), or the rank stopped between writing it "
            "and counting itself", absent[0], digest))

    def _checked_mark(self, rank: int) -> str:
        """Rank ``rank``'s mark that it checked the answer (of this nonce: no value written
        before the call can be one)."""
        return self.key(f"ok/{self.nonce}/{rank}")

    def _verify(self, topo: Topology) -> None:
        """Step 4: the answer against this rank's record and its neighbour's digest."""
        r = self.rank
        name = topo.host_name(topo.host(r))
        if name not in (self.hostname, f"{self.hostname}#{self.line.host[:6]}"):
            raise self._misplaced(f"puts rank {r} on host {show(name)}, but it runs on "
                                  f"{show(self.hostname)}")
        local = self.digest.local_rank
        if local is not None and topo.device(r) != local:
            raise self._misplaced(f"puts rank {r} on device {topo.device(r)}, but it runs on "
                                  f"device {local}")
        if self.prev is None:
            return
        for what, ours, same in (
                ("host", self.digest.host == self.prev.host, topo.host(r) == topo.host(r - 1)),
                ("fast domain", self.digest.domain == self.prev.domain,
                 topo.domain(r) == topo.domain(r - 1))):
            if ours != same:
                raise self._misplaced(f"says ranks {r - 1} and {r} are {'' if same else 'not '}"
                                      f"on one {what}, but their records say they "
                                      f"{'are' if ours else 'are not'}")

    def _misplaced(self, what: str) -> _Stop:
        """The fault of an answer this rank's check refuses.  Built from the ranks' own
        lines, the machine places every rank where its records say; so a line this rank did
        not write (a rank that continues its neighbour's run writes none) placed it, or the
        answer was not built from the lines."""
        runs = self.key("runs")
        if self.starts:
            return _Stop(Fault(f"the answer {what}: it was not built from rank {self.rank}'s "
                               "line (a peer writing this call's keys while it runs)", None,
                               self.key("answer")))
        return _Stop(Fault(f"the answer {what}: a line of {runs!r} that rank {self.rank} did "
                           "not write places it (a stale or planted line; or a stale or planted "
                           f"count at {self.key('n')!r} let the machine be built before every "
                           "rank's line was there)", None, runs))

    def adopt(self) -> Topology:
        """Step 6: what the verdict says, on every rank alike.  A machine only if this rank
        checked it and the verdict names it: the answer's nonce is fresh, so no verdict
        written before the call can, and this call's is written once every rank checked."""
        key = self.key("verdict")
        try:
            verdict = self._wait_get(key, SLACK_S if self.failed else 0.0, self._verdict)
        except _Stop as stop:  # none within this rank's T: its fault, unless one came first
            self.failed = True
            self._fail(stop.fault)
            verdict = self._wait_get(key, SLACK_S, self._verdict)
        if verdict.fault is not None:
            raise DiscoveryError(f"discovering the machine failed ({self.ns}): "
                                 f"{verdict.fault}")
        if self.answer is None or sha(self.answer) != verdict.answer:
            raise DiscoveryError(f"discovering the machine failed ({self.ns}): key {key!r} "
                                 "names a machine that not every rank of this call checked (a "
                                 "stale or planted verdict)")
        return _topology(self.answer, self.key("answer"), self.ns, self.world)

    def _verdict(self, raw: bytes) -> Verdict:
        """The verdict, strictly.  An empty value (planted: ``compare_set`` from absent also
        replaces an empty value, so its writer may still come) is first claimed by a fault,
        once, so that every rank reads one value."""
        key = self.key("verdict")
        if not raw:
            empty = Fault(f"key {key!r} held an empty value before the call (planted)", None,
                          key)
            self.store.compare_set(key, "", Verdict(self.ns, self.world, None, empty).encode())
            raw = bytes(self.store.get(key))
        return Verdict.read(raw, key, self.ns, self.world)

    # ---- store calls ----------------------------------------------------------------------
    def _read(self, key: str, read: Any) -> Any:
        """``read`` of ``key``'s value once it is there, before this rank's deadline; a bad
        value or the deadline is a fault."""
        try:
            return self._wait_get(key, 0.0, read)
        except DiscoveryError as e:
            raise _Stop(Fault(str(e), None, key)) from None

    def _wait_get(self, key: str, slack: float, read: Any) -> Any:
        left = self.deadline + slack - self.clock()
        try:
            self.store.wait([key], timedelta(seconds=max(left, 1e-3)))
        except Exception as e:  # torch's DistStoreError (a RuntimeError) on a timeout
            if slack:
                raise DiscoveryError(
                    f"discovering the machine ({self.ns}): no verdict within {self.timeout:g} "
                    f"s + {slack:g} s ({type(e).__name__}: {str(e)[:200]})") from None
            raise _Stop(self._late(key)) from None
        self._raw = bytes(self.store.get(key))
        return read(self._raw)

    def _count(self, name: str) -> int:
        """``add(ns/<name>, 1)``, strictly: a count of this call's ranks.  On a value that is
        no number the store's ``add`` fails (TCPStore's server closes the connection): the
        rest of the call runs on a new connection, so the fault is still written."""
        key = self.key(name)
        try:
            n = int(self.store.add(key, 1))
        except Exception as e:  # a value that is no int: ValueError, IndexError, torch's
            self.store = reconnected(self.store)  # DistNetworkError: the server dropped it
            raise _Stop(Fault(f"key {key!r} is not a counter ({str(e)[:100]}): a stale or "
                              "planted value", None, key)) from None
        if not 1 <= n <= self.world:
            raise _Stop(Fault(f"key {key!r} counted {n:,} of {self.world:,} ranks: it held a "
                              "value before this call (a stale or planted counter)", None, key))
        return n

    def _late(self, key: str) -> Fault:
        """The fault of a wait past the deadline: the ranks that did not check the answer
        (waiting for the verdict), else those whose digest is absent."""
        every = None
        if self.nonce is not None:
            keys = [self._checked_mark(r) for r in range(self.world)]
            did = (f"did not check the answer within {self.timeout:g} s (stopped or killed "
                   "after arriving, or slow): no rank adopts a machine that one has not checked")
            every = "checked the answer (the last to check stopped before the verdict)"
        else:
            keys = [self.key(f"r/{r}") for r in range(self.world)]
            did = (f"did not arrive within {self.timeout:g} s: every rank of the world must "
                   "call discover_topology (or bind with expect_intra_*) the same number of "
                   "times")
        absent = _absent(self.store, keys)
        if not absent and every is None and key == self.key("answer"):
            counted = self._counted()
            if counted is not None and 1 <= counted < self.world:
                raise _Uncounted(counted)
        if not absent:
            return Fault(f"no value at {key!r} within {self.timeout:g} s, though every rank "
                         f"{every or self._uncounted()}", None, key)
        more = " (at least; the first named)" if len(absent) >= _MOST_NAMED else ""
        return Fault(f"rank{'s' if len(absent) > 1 else ''} {', '.join(map(str, absent))}"
                     f"{more} {did}", absent[0], keys[absent[0]])

    def _counted(self) -> int | None:
        """The count at ``ns/n``; None if it is not a counter (its own fault, named where it
        is read)."""
        try:
            return int(self.store.add(self.key("n"), 0))
        except Exception:  # the server may have closed the connection: a new one
            self.store = reconnected(self.store)
            return None

    def _uncounted(self) -> str:
        """Why no answer came though every rank's digest is there, from the count at
        ``ns/n`` (a message after a timeout)."""
        key = self.key("n")
        n = self._counted()
        if n is None:
            return f"wrote its digest ({key!r} is not a counter)"
        if n == self.world:
            return (f"wrote its digest and counted itself in {key!r}: the last to arrive, "
                    "which writes the answer, stopped before it did")
        return (f"wrote its digest, but {n:,} of {self.world:,} counted themselves in {key!r}: "
                "a rank stopped between the two, or a digest was written before the call for "
                "a rank that never came (the two cannot be told apart)")

    def _fail(self, fault: Fault) -> None:
        """Write ``fault`` as the answer (waking the ranks that wait for one) and as the
        verdict, each unless a value is there already."""
        log.debug("discovery %s: rank %d found a fault: %s", self.ns, self.rank, fault)
        try:
            self.store.compare_set(self.key("answer"), "",
                                   Answer(self.ns, self.world, None, fault).encode())
            self.store.compare_set(self.key("verdict"), "",
                                   Verdict(self.ns, self.world, None, fault).encode())
        except RuntimeError as e:
            raise DiscoveryError(f"discovering the machine failed ({self.ns}): {fault}; and "
                                 f"the store did not take the fault ({str(e)[:200]})") from None


def _topology(raw: bytes, key: str, call: str, world: int) -> Topology:
    """The machine of the answer ``raw``, read by ``Topology.from_dict`` (every index
    bounded)."""
    try:
        topo = _machine_of(raw, key, call, world)
    except MeshError as e:
        raise DiscoveryError(f"key {key!r}: not a machine: {show_error(e)}") from None
    if topo.world_size != world:
        raise DiscoveryError(f"key {key!r}: a machine of {topo.world_size:,} ranks, not the "
                             f"world's {world:,}")
    return topo


# Memoized, invisibly (pure functions of hashable values): a process reads one answer once
# anyway; a bench simulating a world in one process then reads it once, not once per rank.
@functools.lru_cache(maxsize=4)
def _answer(raw: bytes, key: str, call: str, world: int) -> Answer:
    return Answer.read(raw, key, call, world)


@functools.lru_cache(maxsize=4)
def _machine_of(raw: bytes, key: str, call: str, world: int) -> Topology:
    return Topology.from_dict(_answer(raw, key, call, world).topology)


def _absent(store: Any, keys: list[str]) -> list[int]:
    """The first few indices of ``keys`` that are absent: halving the range with ``check``
    (O(absent × log W) calls, only after a timeout)."""
    out: list[int] = []
    todo = [(0, len(keys))]
    while todo and len(out) < _MOST_NAMED:
        lo, hi = todo.pop()
        if store.check(keys[lo:hi]):
            continue
        if hi - lo == 1:
            out.append(lo)
            continue
        mid = (lo + hi) // 2
        todo += [(mid, hi), (lo, mid)]
    return sorted(out)
