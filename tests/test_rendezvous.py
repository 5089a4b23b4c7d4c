"""The arrival barrier of ``backend._rendezvous`` in one process: two ranks as threads on an
in-process store (torch's ``HashStore``), with the timing of each step set by the test.

These pin down, without Gloo, the rule that keeps one group's failure from failing the next
group of ranks that are all present: a member whose partner is still busy with (or has just
left) another group waits for it, at most one more timeout; a partner idle for long is
reported as having skipped the group.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

pytest.importorskip("torch")
from torch.distributed import HashStore

from backend import MembersMissingError
from backend._rendezvous import PREFIX, Rendezvous

pytestmark = pytest.mark.timeout(60)
TIMEOUT_S = 0.5


def _record(store: Any, rank: int, value: dict[str, Any]) -> None:
    store.set(f"{PREFIX}/creating/{rank}", json.dumps(value))


def _arrive(rz: Rendezvous, out: dict[str, Any]) -> None:
    start = time.time()
    try:
        rz.arrive("g", (0, 1), TIMEOUT_S, "tp", (0, 1))
        out["ok"] = True
    except MembersMissingError as e:
        out["error"] = e
    out["waited"] = time.time() - start


def test_a_partner_between_a_failed_group_and_this_one_is_waited_for() -> None:
    """Rank 1 gives up another group just before rank 0's deadline and needs 0.55 s (less
    than the 1 s slack) to reach this one: rank 0 waits for it and both create the group.
    (The race a loaded CI machine hit: rank 0 looked during that gap and gave up.)"""
    store = HashStore()
    zero, one = Rendezvous(store, 0, None), Rendezvous(store, 1, None)
    t0 = time.time()
    _record(store, 1, {"group": "other", "dim": "dp", "ranks": [1, 3], "since": t0,
                       "until": t0 + 0.3})
    out0: dict[str, Any] = {}
    waiter = threading.Thread(target=_arrive, args=(zero, out0))
    waiter.start()
    time.sleep(0.35)
    _record(store, 1, {"idle_since": time.time(), "last": {"dim": "dp", "ranks": [1, 3]}})
    time.sleep(0.55)  # rank 0's own deadline passes during this gap
    out1: dict[str, Any] = {}
    _arrive(one, out1)
    waiter.join(10)
    assert out0.get("ok") and out1.get("ok"), (out0, out1)
    assert out0["waited"] > TIMEOUT_S  # it did wait past its own timeout


def test_a_partner_idle_for_long_is_not_waited_for_and_is_named() -> None:
    """Rank 1 finished its last group 5 s ago and never comes: rank 0 gives up at its own
    timeout (no extension) and names rank 1 as not creating any group."""
    store = HashStore()
    zero = Rendezvous(store, 0, None)
    _record(store, 1, {"idle_since": time.time() - 5,
                       "last": {"dim": "dp", "ranks": [1, 3]}})
    out: dict[str, Any] = {}
    _arrive(zero, out)
    err = out.get("error")
    assert isinstance(err, MembersMissingError) and err.missing == (1,)
    assert TIMEOUT_S - 0.05 < out["waited"] < TIMEOUT_S + 0.5
    assert "rank 1 is not creating any group" in str(err)


def test_a_partner_busy_with_another_group_extends_the_wait_by_at_most_one_timeout() -> None:
    """Rank 1 is creating another group until far in the future and never comes: rank 0
    waits past its timeout for it, but never longer than twice its timeout."""
    store = HashStore()
    zero = Rendezvous(store, 0, None)
    now = time.time()
    _record(store, 1, {"group": "other", "dim": "dp", "ranks": [1, 3], "since": now,
                       "until": now + 60})
    out: dict[str, Any] = {}
    _arrive(zero, out)
    err = out.get("error")
    assert isinstance(err, MembersMissingError) and err.missing == (1,)
    assert 2 * TIMEOUT_S - 0.05 < out["waited"] < 2 * TIMEOUT_S + 0.5
    assert "is creating the 'dp' group (1, 3)" in str(err)


class _ArrivesWhenListed:
    """A store on which rank 1 announces itself in round 0 of group ``g`` exactly when
    rank 0, at its deadline, looks up who is missing: the moment a loaded CI machine hit."""

    def __init__(self) -> None:
        self._store = HashStore()
        self.key = f"{PREFIX}/here/g/0/1"

    def check(self, keys: list[str]) -> bool:
        if keys == [self.key]:
            self._store.set(self.key, "1")
        return bool(self._store.check(keys))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_member_arriving_as_the_deadline_is_checked_is_not_refused() -> None:
    """Rank 1 arrives between rank 0's last look and its listing of the missing members at
    its deadline: nobody is missing, so rank 0 commits the round ("go") instead of closing it
    and failing with an empty list of missing members."""
    store = _ArrivesWhenListed()
    out: dict[str, Any] = {}
    _arrive(Rendezvous(store, 0, None), out)
    assert out.get("ok"), out
    assert store._store.get(f"{PREFIX}/state/g/0") == b"go"
