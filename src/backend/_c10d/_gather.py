"""The discovery gather: every rank's record through the store into one agreed machine.

**Keys** live under ``meshlayout/topo/<job>.<attempt>/<call>`` (the namespace ``ns``):
the job and attempt as the barrier's keys have them (:func:`~._store.job_namespace`: the
launcher's job id and restart count), ``call`` the number of this process's discovery calls
before this one, counted when a call starts, so a call that fails still uses up its number
and the next call never fills an old round.

**Steps** of rank ``r`` of ``W`` (records: ``_discovery_record``; ``T`` the timeout,
measured on this rank's monotonic clock from the call's start):

1. ``compare_set(ns/r/<r>)`` to its :class:`Digest` (host and domain hashes, local rank),
   written once: a different value already there is a fault naming the key;
2. (``r > 0``) ``wait`` + ``get`` of ``ns/r/<r - 1>``: rank ``r`` starts a run of ranks
   unless it continues that one; a run's first rank ``append``-s its :class:`RunLine`;
3. ``add(ns/n, 1)``: the rank that makes it ``W`` reads ``ns/runs``, builds the machine
   (``Topology.from_runs``), makes sure ``ns/checked`` counts nothing yet (``add`` of 0)
   and writes ``ns/answer`` once (``compare_set``);
4. every rank ``wait`` + ``get``-s the answer and checks it against what it knows: its
   hostname, its device, and whether it shares a host and a domain with rank ``r - 1``
   (their digests).  Every boundary between hosts and domains in rank order is so checked
   by the rank after it, and every rank's name and device by itself;
5. ``add(ns/checked, 1)``: the rank that makes it ``W`` writes ``ns/verdict`` once: the
   answer's SHA-256;
6. every rank ``wait`` + ``get``-s the verdict and adopts it: the answer whose SHA-256 it
   names, or its fault.

A rank that finds a fault at any step (a record that does not read, a check that fails,
a counter past ``W``, a wait past ``T``: then it names the ranks whose digest is absent)
writes the fault as the answer (waking the ranks that wait for one) and as the verdict, each
once, and then adopts the verdict like every rank.  So every rank ends with what the one
verdict says: the same machine, or the same :class:`~backend.DiscoveryError` naming the rank
or key at fault, within ``T`` plus :data:`SLACK_S` (the wait for a verdict that another rank
writes at its own ``T``).  Store calls per rank on the
success path: 8 to 14 (the first rank of a run, the last to arrive and the last to check
make one to three more), whatever ``W``;
bytes read: a digest, the answer (the topology's compact data) and the verdict.

**Threat model.**  The store is shared and unauthenticated.  A peer (an earlier job or
attempt, a misbehaving process) may have written *any* key before the call, with any bytes.
Such a value never makes ranks disagree: every key this call writes is written once (the
first value wins for every reader), every value is read by one strict, bounded reader (a
bad one is a typed error naming the key), the answer is checked by every rank against its
own record and its neighbour's before anyone adopts it, and the outcome of every rank is
the one verdict.  A pre-planted value can make the call fail (the same error on every
rank), never hang it past ``T`` plus the slack, nor pass with a rank absent, nor break a
connection for later calls: a non-number at a counter makes the store's ``add`` fail (on
TCPStore the server closes that connection), and the call goes on with a new connection
(``discover_topology`` runs it on a pooled clone of the default store, dropped after a
failure, never on the connection torch's own calls use).  What a peer *can* do: fail the
call at will; and a peer that writes well-formed values of this very call while it runs,
racing the ranks (it can then read every record), can make the ranks adopt a machine that
agrees with every rank's own checks but differs elsewhere (say, two far-apart hosts put in
one domain) — an unauthenticated store cannot prevent that, as such a peer could equally
join the job as a rank.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from layout import show_error
from mesh import MeshError, Topology

from .._core import DiscoveryError
from ._discovery_record import Answer, Digest, Fault, RunLine, Verdict, sha
from ._store import job_namespace, reconnected

__all__ = ["PREFIX", "SLACK_S", "Gather", "machine", "namespace"]

log = logging.getLogger(__name__)

PREFIX = "meshlayout/topo"
SLACK_S = 10.0
"""How long past its own timeout a rank waits for the verdict (written by the first rank to
time out, at that rank's ``T``): store latency and start skew between ranks."""

_MOST_NAMED = 8  # the absent ranks a timeout names


class _Stop(Exception):
    """A fault found by this rank: written as the verdict, unless another came first."""

    def __init__(self, fault: Fault) -> None:
        super().__init__(fault.reason)
        self.fault = fault


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
        self.answer: bytes | None = None  # the answer's bytes, once read and checked
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

    def _publish(self) -> None:
        own = self.key(f"r/{self.rank}")
        mine = self.digest.encode()
        held = bytes(self.store.compare_set(own, "", mine))
        if held != mine:
            raise _Stop(Fault(f"key {own!r} held {held[:40]!r} before rank {self.rank} wrote "
                              "its digest (a stale or planted value)", self.rank, own))
        if self.rank:
            key = self.key(f"r/{self.rank - 1}")
            self.prev = self._read(key, lambda raw: Digest.read(raw, key, self.world))
        if self.prev is None or not self.digest.continues(self.prev):
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
        self._count("checked", 0)  # no rank counts before the answer: a count is planted
        raw = Answer(self.ns, self.world, topo.to_dict(), None).encode()
        self.store.compare_set(self.key("answer"), "", raw)

    def _check(self) -> None:
        key = self.key("answer")
        answer = self._read(key, lambda raw: _answer(raw, key, self.ns, self.world))
        answer_raw = self._raw
        if answer.fault is not None:
            raise _Stop(answer.fault)
        try:
            topo = _topology(answer_raw, key, self.ns, self.world)
        except DiscoveryError as e:
            raise _Stop(Fault(str(e), None, key)) from None
        self._verify(topo)
        self.answer = answer_raw
        if self._count("checked") == self.world:
            raw = Verdict(self.ns, self.world, sha(self.answer), None).encode()
            self.store.compare_set(self.key("verdict"), "", raw)

    def _verify(self, topo: Topology) -> None:
        """Step 4: the answer against this rank's record and its neighbour's digest."""
        r, key = self.rank, self.key("answer")
        name = topo.host_name(topo.host(r))
        if name not in (self.hostname, f"{self.hostname}#{self.line.host[:6]}"):
            raise _Stop(Fault(f"the answer puts rank {r} on host {name!r}, but it runs on "
                              f"{self.hostname!r}", r, key))
        local = self.digest.local_rank
        if local is not None and topo.device(r) != local:
            raise _Stop(Fault(f"the answer puts rank {r} on device {topo.device(r)}, but it "
                              f"runs on device {local}", r, key))
        if self.prev is None:
            return
        for what, ours, same in (
                ("host", self.digest.host == self.prev.host, topo.host(r) == topo.host(r - 1)),
                ("fast domain", self.digest.domain == self.prev.domain,
                 topo.domain(r) == topo.domain(r - 1))):
            if ours != same:
                raise _Stop(Fault(f"the answer says ranks {r - 1} and {r} are "
                                  f"{'' if same else 'not '}on one {what}, but their records "
                                  f"say they {'are' if ours else 'are not'}", r, key))

    def adopt(self) -> Topology:
        """Step 6: what the verdict says, on every rank alike."""
        key = self.key("verdict")
        verdict = self._wait_get(key, SLACK_S, self._verdict)
        if verdict.fault is not None:
            raise DiscoveryError(f"discovering the machine failed ({self.ns}): "
                                 f"{verdict.fault}")
        answer_key = self.key("answer")
        raw = self.answer if self.answer is not None else bytes(self.store.get(answer_key))
        if sha(raw) != verdict.answer:
            raise DiscoveryError(f"key {answer_key!r} changed after the verdict named it (a "
                                 "peer writing this call's keys while it runs)")
        _answer(raw, answer_key, self.ns, self.world)  # a fault answer is no machine
        return _topology(raw, answer_key, self.ns, self.world)

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

    def _count(self, name: str, amount: int = 1) -> int:
        """``add(ns/<name>, amount)``, strictly: a count of this call's ranks (``amount`` 0:
        the builder's look before any rank counts: it must read 0).  On a value that is no
        number the store's ``add`` fails (TCPStore's server closes the connection): the
        rest of the call runs on a new connection, so the fault is still written."""
        key = self.key(name)
        try:
            n = int(self.store.add(key, amount))
        except Exception as e:  # a value that is no int: ValueError, IndexError, torch's
            self.store = reconnected(self.store)  # DistNetworkError: the server dropped it
            raise _Stop(Fault(f"key {key!r} is not a counter ({str(e)[:100]}): a stale or "
                              "planted value", None, key)) from None
        if not amount <= n <= self.world * amount:
            raise _Stop(Fault(f"key {key!r} counted {n:,} of {self.world:,} ranks: it held a "
                              "value before this call (a stale or planted counter)", None, key))
        return n

    def _late(self, key: str) -> Fault:
        """The fault of a wait past the deadline: the ranks whose digest is absent."""
        keys = [self.key(f"r/{r}") for r in range(self.world)]
        absent = _absent(self.store, keys)
        if not absent:
            return Fault(f"no value at {key!r} within {self.timeout:g} s, though every rank "
                         "wrote its digest (a rank stopped, or a stale or planted counter)",
                         None, key)
        more = "" if len(absent) < _MOST_NAMED else " (at least; the first named)"
        return Fault(f"rank{'s' if len(absent) > 1 else ''} {', '.join(map(str, absent))} did "
                     f"not arrive within {self.timeout:g} s{more}: every rank of the world must "
                     "call discover_topology (or bind with expect_intra_*) the same number of "
                     "times", absent[0], keys[absent[0]])

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
