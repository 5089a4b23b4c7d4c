"""A deterministic bound on the work a block does: Python trace events and memory held.

Where a test's claim is "answered without enumerating" (a huge listing refused, a placement
too irregular to count refused, a view over 2**62 ranks read), wall-clock seconds are the
wrong measure on a shared CI machine; the number of Python calls and lines executed
(``sys.settrace`` events) and the bytes held (``tracemalloc``) are the same on every run and
grow with the universe the moment something enumerates it.  The seconds themselves are
measured by ``bench/time_bounds.py``.
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


@contextmanager
def bounded(events: int, peak_bytes: int) -> Iterator[None]:
    """Fail as soon as the block executes more than ``events`` trace events (calls and lines)
    or holds more than ``peak_bytes``; fail at the end if its peak exceeded ``peak_bytes``."""
    seen = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal seen
        seen += 1
        if seen > events:
            raise AssertionError(f"more than {events} trace events: this enumerates")
        if tracemalloc.get_traced_memory()[0] > peak_bytes:
            raise AssertionError(f"more than {peak_bytes} bytes held: this materializes")
        return trace

    previous = sys.gettrace()
    tracemalloc.start()
    sys.settrace(trace)
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        sys.settrace(previous)
        tracemalloc.stop()
    assert peak < peak_bytes, f"peak {peak} bytes: something listed a large part of the universe"
