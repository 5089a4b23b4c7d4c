"""``backend.StateWork``: a state's move running on a thread of its own, as
``backend.reshard_state(..., async_op=True)`` returns it (the move itself, over Gloo, is
``tests/test_reshard_gloo.py``'s; here the handle, over stand-in moves that yield buckets).

Its contract: ``bucket(k)`` gives bucket ``k``'s tensors once it has landed, ``wait()`` all
of them merged once the move ended; the move's error is raised by ``wait()`` and by
``bucket(k)`` for every bucket it did not land; a timeout and a bad ``k`` are typed errors
naming the value.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from backend import BackendConfigError, BackendError, StateWork


def _landing(buckets: list[dict[str, Any]], gate: threading.Event | None = None,
             fail: BaseException | None = None) -> Iterator[dict[str, Any]]:
    """Yield ``buckets`` in turn (waiting for ``gate`` before the last), then raise ``fail``."""
    for k, bucket in enumerate(buckets):
        if gate is not None and k == len(buckets) - 1:
            gate.wait(30)
        yield bucket
    if fail is not None:
        raise fail


def test_buckets_land_in_turn_and_wait_merges_them() -> None:
    work = StateWork(_landing([{"a": 1, "b": None}, {"c": 3}]), 2)
    assert work.bucket(1, timeout=30) == {"c": 3}
    assert work.bucket(0, timeout=30) == {"a": 1, "b": None}
    assert work.wait(timeout=30) == {"a": 1, "b": None, "c": 3}
    assert work.is_completed() and work.buckets == 2


def test_a_bucket_not_landed_in_time_is_a_typed_error_and_lands_later() -> None:
    gate = threading.Event()
    work = StateWork(_landing([{"a": 1}, {"b": 2}], gate), 2)
    assert work.bucket(0, timeout=30) == {"a": 1}
    with pytest.raises(BackendError, match=r"bucket 1 had not landed after 0\.05 s"):
        work.bucket(1, timeout=0.05)
    with pytest.raises(BackendError, match=r"the whole move had not landed after 0\.05 s"):
        work.wait(timeout=0.05)
    assert not work.is_completed()
    gate.set()
    assert work.wait(timeout=30) == {"a": 1, "b": 2}


def test_the_move_s_error_is_raised_for_what_did_not_land_and_by_wait() -> None:
    """A move that failed after its first bucket (a pair that disagreed in the second, say):
    the first bucket's tensors are final; the second and the whole raise the move's own
    error, the same object each time."""
    error = BackendConfigError("reshard_state: rank 3 and its peers disagree on what moves")
    work = StateWork(_landing([{"a": 1}], fail=error), 2)
    with pytest.raises(BackendConfigError) as second:
        work.bucket(1, timeout=30)
    assert second.value is error
    assert work.bucket(0) == {"a": 1}
    with pytest.raises(BackendConfigError) as whole:
        work.wait(timeout=30)
    assert whole.value is error and work.is_completed()


@pytest.mark.parametrize("k", [-1, 2, "0", 1.0, True, None])
def test_a_bucket_outside_the_move_is_a_typed_error_naming_it(k: Any) -> None:
    work = StateWork(_landing([{"a": 1}, {"b": 2}]), 2)
    with pytest.raises(BackendConfigError, match=r"k must be an int in \[0, 2\), got " +
                       repr(k).replace("(", r"\(").replace(".", r"\.")):
        work.bucket(k)
    work.wait(timeout=30)
