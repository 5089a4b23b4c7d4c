"""Values planted on the very keys a clean run writes (issue 44, items 3-5), on torch's
``HashStore`` and on a real ``TCPStore`` with one client connection per rank.

A driver first runs a clean barrier and a clean discovery (``tests/virtual_store.py``) and
prints the keys they write, so each plant below lands on a key a run really uses (the tests
assert it).  Then four ranks, one thread and one store connection each (wrapped as torch's
default store is, ``PrefixStore("default_pg", ...)``), meet on a store holding the plant.
What must hold: no value a peer plants breaks a rank's store connection for later calls (a
TCPStore server drops a client whose ``add`` meets a non-number); the error names the key;
a counter that only starts with digits never lets a member pass alone; and a second job
without a launcher on the store of a first one is refused before it reads any of its keys.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("torch")
from torch.distributed import HashStore, PrefixStore, TCPStore
from virtual_store import World

from backend import DiscoveryError, DiscoveryRecord, StoreRecordError
from backend._c10d import _store
from backend._c10d._discover import gather
from backend._c10d._gather import namespace
from backend._c10d._rendezvous import Rendezvous
from backend._c10d._rounds import TICKET
from backend._c10d._store import job_namespace, key

pytestmark = pytest.mark.timeout(300)
MEMBERS = (0, 1, 2, 3)
T_S = 60.0  # the barrier's timeout: generous (no test here is about it)
AT_ONCE_S = 20.0  # "at once": well before the timeout, however loaded the machine
NS = job_namespace()
COUNTER = key(NS, "t", "g")
DISCOVERY_COUNTER = f"{namespace(0)}/n"
PROBE = "probe"  # a key each rank reads on its own connection afterwards
KINDS = ["HashStore", "TCPStore"]


# ---- the driver: the keys a clean run writes -------------------------------------------------
def _clean_keys() -> list[str]:
    """The keys a clean barrier of four ranks ("g") and a clean discovery (call 0) write."""
    world = World()

    def rank(r: int) -> None:
        rz = Rendezvous(world.store(r), r, world_size=4, heartbeat=None,
                        clock=world.clock_for(r))
        rz.claim()
        with rz.meet("g", MEMBERS, T_S, dim="tp", desc="g", shown=MEMBERS):
            pass
        gather(world.store(r), r, 4, DiscoveryRecord.of("n0", local_rank=r), T_S, 0,
               clock=world.clock_for(r)).run()

    for r in MEMBERS:
        world.spawn(rank, r)
    world.join(60)
    return world.keys()


def test_the_driver_prints_the_keys_a_clean_run_writes_and_the_plants_target_them() -> None:
    keys = _clean_keys()
    print("keys a clean run writes:", *keys, sep="\n  ")
    assert {COUNTER, DISCOVERY_COUNTER, key(NS, "p", 3)} <= set(keys), keys


# ---- one connection per rank -------------------------------------------------------------------
@contextmanager
def _connections(kind: str) -> Iterator[tuple[list[Any], Any]]:
    """Four ranks' stores (each its own client connection, wrapped as torch's default
    store) and a planter's."""
    if kind == "HashStore":
        shared = HashStore()
        yield [PrefixStore("default_pg", shared) for _ in MEMBERS], \
            PrefixStore("default_pg", shared)
        return
    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=T_S))

    def client() -> Any:
        return PrefixStore("default_pg", TCPStore("127.0.0.1", server.port, is_master=False,
                                                  timeout=timedelta(seconds=T_S)))

    yield [client() for _ in MEMBERS], client()


def _each(stores: list[Any], fn: Callable[[Rendezvous, Any], Any], *,
          late: dict[int, float] | None = None) -> dict[int, Any]:
    """``fn(rendezvous, store)`` on one thread per rank (rank r starts ``late[r]`` seconds
    late); each rank's result or exception, and the seconds it took."""
    out: dict[int, Any] = {}

    def run(r: int) -> None:
        time.sleep((late or {}).get(r, 0.0))
        start = time.monotonic()
        try:
            got: Any = fn(rzs[r], stores[r])
        except Exception as e:
            got = e
        out[r] = (got, time.monotonic() - start)

    rzs = [Rendezvous(stores[r], r, world_size=4, heartbeat=None) for r in MEMBERS]
    threads = [threading.Thread(target=run, args=(r,)) for r in MEMBERS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * T_S + 30)
    assert sorted(out) == list(MEMBERS), out
    for rz in rzs:
        rz.close()
    return out


def _meet(name: str) -> Callable[[Rendezvous, Any], Any]:
    def meet(rz: Rendezvous, _: Any) -> Any:
        with rz.meet(name, MEMBERS, T_S, dim="tp", desc=f"the {name!r} group",
                     shown=MEMBERS) as k:
            return ("go", k)
    return meet


def _meet_twice(rz: Rendezvous, store: Any) -> Any:
    """Meet at "g" (planted); then, on the same rendezvous and connection, at "h"."""
    try:
        first: Any = _meet("g")(rz, store)
    except StoreRecordError as e:
        first = e
    return first, _meet("h")(rz, store), bytes(store.get(PROBE))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("junk", [b"junk", b"", b"9" * 20], ids=["junk", "empty", "20 digits"])
def test_a_non_number_at_the_ticket_counter_is_named_and_breaks_no_connection(
        kind: str, junk: bytes) -> None:
    """Item 3: TCPStore's server drops a client whose ``add`` meets a non-number; the
    barrier escaped with an untyped "Broken pipe" and reused the broken connection.  Now
    every rank fails at once with a StoreRecordError naming the counter, and its next
    barrier, on the same rendezvous and connection, passes.  (HashStore's ``add`` reads an
    empty value as 0, the count of an absent key: nothing is shifted, and all pass.)"""
    with _connections(kind) as (stores, planter):
        planter.set(COUNTER, junk)
        planter.set(PROBE, b"alive")
        out = _each(stores, _meet_twice)
    read_as_zero = kind == "HashStore" and junk == b""
    for r, (got, took) in out.items():
        assert not isinstance(got, Exception), (r, got)
        first, second, probe = got
        if read_as_zero:
            assert first == ("go", 0), (r, first)
        else:
            assert isinstance(first, StoreRecordError) and first.key == COUNTER, (r, first)
            assert COUNTER in str(first)
        assert second == ("go", 0) and probe == b"alive", (r, got)
        assert took < AT_ONCE_S, (r, took)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("prefix", [b"1junk", b"1.5", b" 1", b"-1", b"3"])
def test_a_counter_that_starts_with_digits_lets_no_member_pass_alone(kind: str,
                                                                      prefix: bytes) -> None:
    """Item 4: the store's ``add`` reads "1junk", "1.5" or " 1" as 1, so ranks 0-2 passed
    round 0 while rank 3 (late) failed.  Now every rank, early or late, fails at once naming
    the counter; none passes."""
    with _connections(kind) as (stores, planter):
        planter.set(COUNTER, prefix)
        out = _each(stores, _meet("g"), late={3: 1.0})
    for r, (got, took) in out.items():
        assert isinstance(got, StoreRecordError) and got.key == COUNTER, (r, got)
        assert took < AT_ONCE_S, (r, took)


# ---- discovery's counter ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_a_non_number_at_discoverys_counter_is_one_error_naming_it_on_every_rank(
        kind: str) -> None:
    """Item 3 in discovery: the add on ``.../topo/<job>/0/n`` broke each rank's connection
    before it could write the fault.  Now every rank ends with the one DiscoveryError
    naming the key, at once.  (Its other counter, of the checks, lives under the answer's
    nonce, ``checked/<nonce>``: no value written before the call can be at it.)"""
    counter = DISCOVERY_COUNTER
    def discover(rz: Rendezvous, store: Any) -> Any:
        record = DiscoveryRecord.of("n0", local_rank=rz.rank)
        return gather(store, rz.rank, 4, record, T_S, 0).run()

    with _connections(kind) as (stores, planter):
        planter.set(counter, b"junk")
        out = _each(stores, discover)
        written = planter.check([f"{namespace(0)}/verdict"])
    errors = {str(got) for got, _ in out.values()}
    assert len(errors) == 1, errors
    assert all(isinstance(got, DiscoveryError) for got, _ in out.values()), out
    assert f"{counter!r} is not a counter" in errors.pop()
    assert all(took < AT_ONCE_S for _, took in out.values()), out
    assert written  # the fault was written (before: every rank's add closed its connection,
    # and none could write it)


# ---- two jobs without a launcher on one store ----------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_a_second_job_without_a_launcher_is_refused_before_it_reads_the_firsts_keys(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 5: without a launcher every job's namespace is ``job.0``, so a second job on a
    long-lived store met the first one's counters.  Here the first job left round 0 of "g"
    half full (ranks 0 and 1 took tickets, then the job ended): the second job's ranks are
    refused when they claim their rank, naming the claim, so none of them meets that round;
    the same job with a namespace of its own (as a launcher gives) passes."""
    with _connections(kind) as (stores, _):
        first = _each(stores, lambda rz, _: rz.claim())
        assert all(got is None for got, _ in first.values()), first
        for r in (0, 1):  # a half-full round, as a job killed mid-barrier leaves it
            stores[r].add(COUNTER, TICKET)
        monkeypatch.setattr(_store, "_TOKEN", [_store._new_token()])  # another process

        def second_job(rz: Rendezvous, store: Any) -> Any:
            rz.claim()
            return _meet("g")(rz, store)

        refused = _each(stores, second_job)
        for r, (got, _) in refused.items():
            assert isinstance(got, StoreRecordError) and got.key == key(NS, "p", r), (r, got)
            assert "TORCHELASTIC_RUN_ID" in str(got)
        monkeypatch.setenv("TORCHELASTIC_RUN_ID", "second")
        ok = _each(stores, second_job)
    assert all(got == ("go", 0) for got, _ in ok.values()), ok


@pytest.mark.parametrize("kind", KINDS)
def test_the_control_on_a_clean_store_every_rank_passes(kind: str) -> None:
    """The same drive on a clean store: every rank passes round 0 (so the failures above
    are the plants')."""
    with _connections(kind) as (stores, _):
        out = _each(stores, _meet("g"))
    assert all(got == ("go", 0) for got, _ in out.values()), out
