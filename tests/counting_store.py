"""A store that counts what one rank asks of it (for the barrier's cost tests and bench).

``CountingStore(shared)`` wraps an in-process torch ``HashStore`` (shared by every rank of a
simulated world); each rank gets its own wrapper, so its calls are counted to it, and
``clone()`` (the barrier's per-thread connection) shares the count; ``set_timeout`` (local to
a connection) is not counted.  ``calls`` counts store
round trips by operation; ``keys`` counts the keys each call touched (store-side work), and
``widest`` is the most keys one call touched.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any


class CountingStore:
    """One rank's counted view of a shared store."""

    def __init__(self, shared: Any, *, of: CountingStore | None = None) -> None:
        self._shared = shared
        self.calls: Counter[str] = Counter() if of is None else of.calls
        self.keys: Counter[str] = Counter() if of is None else of.keys
        self._lock = threading.Lock() if of is None else of._lock

    def clone(self) -> CountingStore:
        """A connection of its own (its own timeout), counted to the same rank."""
        shared = self._shared.clone() if hasattr(self._shared, "clone") else self._shared
        return type(self)(shared, of=self)

    def set_timeout(self, timeout: Any) -> None:
        """The connection's timeout for blocking calls (local: not a round trip)."""
        self._shared.set_timeout(timeout)

    @property
    def widest(self) -> int:
        """The most keys one call touched."""
        return self.keys["(widest)"]

    def _count(self, op: str, touched: int) -> None:
        with self._lock:
            self.calls[op] += 1
            self.keys[op] += touched
            self.keys["(widest)"] = max(self.keys["(widest)"], touched)

    def total(self) -> int:
        """Round trips so far."""
        return sum(self.calls.values())

    def __getattr__(self, op: str) -> Any:
        method = getattr(self._shared, op)

        def counted(*args: Any) -> Any:
            first = args[0] if args else None
            self._count(op, len(first) if isinstance(first, list) else 1)
            return method(*args)

        return counted
