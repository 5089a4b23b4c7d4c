"""Discovery on a store that is not to be trusted (issue 34, items 1-3): values planted before
the call, malformed records, huge indices, a rank that fails locally or never arrives.

Each case runs 4 ranks as threads on :class:`virtual_store.World` (virtual time: a timeout
costs nothing, and "within the timeout" is exact).  The law every case checks: all ranks end
alike, with the same machine or the same :class:`~backend.DiscoveryError`, no other
exception, and none waits past the timeout plus ``SLACK_S``.  A Hypothesis fuzz plants
random store contents and checks the same law.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from virtual_store import World

from backend import DiscoveryError, DiscoveryRecord
from backend._c10d._discover import gather
from backend._c10d._discovery_record import Answer, Digest, Verdict, sha
from backend._c10d._gather import SLACK_S, namespace
from mesh import Topology

TIMEOUT = 30.0
NS = namespace(0)


def _records(world: int = 4) -> list[DiscoveryRecord]:
    """Two hosts of two GPUs: n0 and n1."""
    return [DiscoveryRecord.of(f"n{r // 2}", local_rank=r % 2) for r in range(world)]


def _run(plant: dict[str, bytes], records: list[DiscoveryRecord] | None = None, *,
         absent: tuple[int, ...] = (), call: int = 0, world: World | None = None,
         late: dict[int, float] | None = None, racer: tuple[float, str, bytes] | None = None
         ) -> tuple[dict[int, Any], float]:
    """Every rank's outcome (a Topology or an exception) with ``plant`` in the store before
    the call (keys relative to the call's namespace), and the virtual seconds it took;
    ``late``: ranks that call that many seconds after the others; ``racer``: a peer writing
    a value at that time while the call runs."""
    records = records or _records()
    w = world or World()
    for key, value in plant.items():
        w.store(0).set(f"{namespace(call)}/{key}", value)
    out: dict[int, Any] = {}
    if racer is not None:
        def race(at: float, key: str, value: bytes) -> None:
            w.sleep(at)
            w.set(f"{namespace(call)}/{key}", value)
        w.spawn(race, *racer)

    def rank(r: int) -> None:
        w.sleep((late or {}).get(r, 0.0))
        try:
            out[r] = gather(w.store(r), r, len(records), records[r], TIMEOUT, call,
                            clock=w.clock_for(r)).run()
        except Exception as e:  # the law: only DiscoveryError; kept to be checked
            out[r] = e

    start = w.at()
    for r in range(len(records)):
        if r not in absent:
            w.spawn(rank, r)
    w.join(60)
    return out, w.at() - start


def _same(out: dict[int, Any], took: float) -> Any:
    """The law: one outcome on every rank, a Topology or a DiscoveryError, in time."""
    assert took <= TIMEOUT + SLACK_S
    kinds = {type(v) for v in out.values()}
    assert kinds <= {Topology, DiscoveryError}, out
    if kinds == {Topology}:
        assert len({v for v in out.values()}) == 1, out
    else:
        assert kinds == {DiscoveryError} and len({str(v) for v in out.values()}) == 1, out
    return next(iter(out.values()))


def test_a_clean_store_gives_every_rank_the_machine_at_once() -> None:
    out, took = _run({})
    assert _same(out, took) == Topology.from_hosts(["n0", "n0", "n1", "n1"]) and took == 0


NONCE = "0123456789abcdef"


def _forged() -> bytes:
    other = Topology.from_hosts(["n0", "n1", "n1", "n1"]).to_dict()
    return Answer(NS, 4, other, None, NONCE).encode()


def test_a_forged_valid_answer_planted_first_fails_every_rank_alike() -> None:
    """Item 1: a valid machine planted before the last rank writes was adopted by 3 of 4
    ranks while the 4th got the real one; now every rank refuses an answer that was there
    before it counted itself (issue 44: before, only the ranks it misplaced did)."""
    out, took = _run({"answer": _forged()})
    e = _same(out, took)
    assert isinstance(e, DiscoveryError) and "held a value before every rank had counted " \
        "itself" in str(e)


@pytest.mark.parametrize(("value", "words"), [
    (b"\x00junk{", "is not JSON"),
    (json.dumps({"v": 1, "call": NS, "world": 4, "topology": {
        "version": 1, "world": 4, "devices_per_host": None, "ranks": [[2**62, 4, 0]],
        "hosts_per_domain": 1, "domains": None, "hosts": None}, "nonce": NONCE}).encode(),
     "hosts 0 <= host < 4"),
    (json.dumps({"v": 1, "call": NS, "world": 4, "topology": {
        "version": 1, "world": 4, "devices_per_host": 2, "ranks": None,
        "hosts_per_domain": None, "domains": [[2**62, 2]], "hosts": None}, "nonce": NONCE}
               ).encode(), "domains 0 <= domain < 2"),
    (json.dumps({"v": 1, "call": "meshlayout/topo/old/0/0", "world": 4, "topology": {},
                 "nonce": NONCE}).encode(), "belongs to another call"),
    (json.dumps([1, 2, 3]).encode(), "is not a version-1 record"),
    (Answer(NS, 4, Topology(2, 2).to_dict(), None, NONCE).encode(), "a machine of 2 ranks"),
    (Answer(NS, 4, Topology(4, 2).to_dict(), None, "x").encode(), "nonce must be 16 hex"),
])
def test_a_bad_answer_planted_first_is_one_typed_error_on_every_rank(value, words) -> None:
    """Item 1: a junk answer gave 3 ranks a JSONDecodeError; an index of 2**62 hung every
    rank in Topology.from_dict."""
    out, took = _run({"answer": value})
    e = _same(out, took)
    assert isinstance(e, DiscoveryError) and words in str(e) and "answer" in str(e)
    assert took == 0  # refused at once, not at the timeout


def test_a_local_rank_of_2_to_the_61_is_refused_by_its_neighbour_for_all() -> None:
    """Item 1: a rank record whose local device index is 2**61 hung every rank."""
    records = _records()
    records[1] = DiscoveryRecord.of("n0", local_rank=2**61)
    out, took = _run({}, records)
    e = _same(out, took)
    assert isinstance(e, DiscoveryError) and "rank 1's" in str(e) and "past the world" in str(e)


@pytest.mark.parametrize(("line", "words"), [
    (b"not json\n", "line 1"),
    (b'[1, 1, "h", "n0", 0, null, 7]\n', "is not a version-1 run record"),
    (b'[1, 1, "h", 5, 0, null]\n', "the hostname must be a str"),
    (b'[1, 3, "h", "n9", 2305843009213693952, null]\n', "local rank 2305843009213693952"),
    (b'[1, 9, "h", "n9", 0, null]\n', "rank 9 is past the world"),
])
def test_one_malformed_run_record_is_one_typed_error_on_every_rank_at_once(line,
                                                                           words) -> None:
    """Item 2: one malformed record gave the last rank an untyped error at once, and the
    other 7 waited out the timeout to read "8 of 8 ranks had arrived"."""
    out, took = _run({"runs": line})
    e = _same(out, took)
    assert isinstance(e, DiscoveryError) and words in str(e) and "/runs" in str(e)
    assert took == 0


@pytest.mark.parametrize(("key", "value", "words"), [
    # 2 planted: the rank counting 4 builds from the lines there so far; whichever fault is
    # first: a rank counting 5 or 6, a rank the early machine misplaces, or no line of rank 0
    ("n", b"2", r"counted [56] of 4 ranks|count at '\S+/n' let the machine be built|no run "
                r"starts at rank 0"),
    ("n", b"junk", "is not a counter"),
    ("r/2", Digest("0" * 12, "0" * 12, 0).encode(), "held b'1:000000000000"),
    ("verdict", b"{}", "is not a version-1 record"),
    ("verdict", Verdict(NS, 4, "0" * 64, None).encode(), "names a machine that not every rank"),
    ("verdict", Verdict("meshlayout/topo/old/0/0", 4, "0" * 64, None).encode(),
     "belongs to another call"),
])
def test_a_stale_or_planted_key_is_one_typed_error_on_every_rank(key, value, words) -> None:
    """Planted counters, digests and verdicts: never a split, never a hang."""
    out, took = _run({key: value})
    e = _same(out, took)
    assert isinstance(e, DiscoveryError) and re.search(words, str(e)), e


def test_a_rank_that_never_arrives_is_named_by_all_at_the_timeout() -> None:
    """Item 3: a rank that never arrives was counted, never named."""
    out, took = _run({}, absent=(2,))
    e = _same(out, took)
    assert sorted(out) == [0, 1, 3] and "rank 2 did not arrive within 30 s" in str(e)
    assert TIMEOUT <= took <= TIMEOUT + SLACK_S


def test_a_call_that_failed_on_one_rank_uses_up_its_round() -> None:
    """Item 3: a call that failed locally on one rank (here: never reached the store) left
    its round open, and its next call filled it, mixing two calls.  Rounds are numbered by
    the call, so call 1 of every rank meets in round 1, whatever happened to call 0."""
    w = World()
    first, _ = _run({}, absent=(1,), call=0, world=w)
    assert all(isinstance(e, DiscoveryError) for e in first.values())
    w2 = World()
    w2._data = w._data  # the same store, a new set of rank threads
    moved = [DiscoveryRecord.of(f"m{r % 2}", local_rank=r // 2) for r in range(4)]
    second, took = _run({}, moved, call=1, world=w2)
    assert _same(second, took) == Topology.from_hosts(["m0", "m1", "m0", "m1"])


# ---- the fuzz -------------------------------------------------------------------------------
_KEYS = ["r/0", "r/1", "r/2", "r/3", "runs", "n", "answer", "checked", "verdict"]


def _valid(key: str) -> bytes:
    """A valid value of this call for ``key`` (truncated or mixed up by the fuzz)."""
    real = Topology.from_hosts(["n0", "n0", "n1", "n1"]).to_dict()
    return {
        "runs": b'[1, 0, "%s", "n0", 0, null]\n' % _records()[0].host.encode(),
        "n": b"1", "checked": b"1",
        "answer": Answer(NS, 4, real, None, NONCE).encode(),
        "verdict": Verdict(NS, 4, sha(Answer(NS, 4, real, None, NONCE).encode()), None).encode(),
    }.get(key, _records()[0].digest().encode())


_values = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(_KEYS).flatmap(lambda k: st.integers(0, 200).map(lambda n: _valid(k)[:n])),
    st.sampled_from(_KEYS).map(_valid),
    st.sampled_from([b"[]", b"{}", b"null", b"1e400", b'"x"', b"-1", b"99999999999999999999",
                     str(2**62).encode(), b"[" * 5000, _forged()]),
    st.dictionaries(st.sampled_from(["v", "call", "world", "topology", "answer", "fault"]),
                    st.sampled_from([1, 4, 2**62, NS, None, [], {}, "x" * 300]),
                    max_size=6).map(lambda d: json.dumps(d).encode()),
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(_KEYS), _values, max_size=4))
def test_fuzzed_store_contents_never_split_hang_or_escape_untyped(plant) -> None:
    """Law: whatever a peer planted under this call's keys before it ran (random bytes,
    truncations of valid records, wrong types, huge numbers, valid records of this or
    another call), every rank ends alike (one machine or one DiscoveryError), within the
    timeout plus the slack, with no other exception."""
    out, took = _run(plant)
    assert sorted(out) == [0, 1, 2, 3]
    _same(out, took)


def test_an_answer_that_joins_two_domains_is_refused_by_the_rank_at_the_boundary() -> None:
    """The check of step 4: hosts n0 and n1 are in two NVLink domains; an answer that puts
    them in one (every name and device right), written by a peer racing the call (ranks 0-2
    came, rank 3 comes at 2 s), is refused by rank 2, whose record and rank 1's differ in
    domain, and every rank says so (rank 3, which finds that answer there, too)."""
    records = [DiscoveryRecord.of(f"n{r // 2}", local_rank=r % 2,
                                  nvlink_domain=f"{r // 2:032x}/0") for r in range(4)]
    joined = Topology.from_hosts(["n0", "n0", "n1", "n1"], hosts_per_domain=2).to_dict()
    out, took = _run({}, records, late={3: 2.0},
                     racer=(1.0, "answer", Answer(NS, 4, joined, None, NONCE).encode()))
    e = _same(out, took)
    assert isinstance(e, DiscoveryError) and "ranks 1 and 2 are on one fast domain, but their " \
        "records say they are not" in str(e) and "not built from rank 2's line" in str(e)
    clean, took = _run({}, records)
    assert _same(clean, took) == Topology.from_hosts(["n0", "n0", "n1", "n1"],
                                                     domains=["a", "a", "b", "b"])
