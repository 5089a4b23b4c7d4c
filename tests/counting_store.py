"""A store that counts what one rank asks of it (for the barrier's cost tests and bench).

``CountingStore(shared)`` wraps an in-process torch ``HashStore`` (shared by every rank of a
simulated world); each rank gets its own wrapper, so its calls are counted to it, and
``clone()`` (the barrier's per-thread connection) shares the count; ``set_timeout`` (local to
a connection) is not counted.  ``calls`` counts store
round trips by operation; ``keys`` counts the keys each call touched (store-side work), and
``widest`` is the most keys one call touched; ``bytes_read`` and ``bytes_written`` count the
values a rank got (``get``, ``multi_get``) and sent (``set``, ``append``, ``compare_set``,
``multi_set``); ``written`` holds the keys it wrote (those and ``add``).
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
        self.bytes: Counter[str] = Counter() if of is None else of.bytes
        self.written: set[str] = set() if of is None else of.written
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

    @property
    def bytes_read(self) -> int:
        return self.bytes["read"]

    @property
    def bytes_written(self) -> int:
        return self.bytes["written"]

    def __getattr__(self, op: str) -> Any:
        method = getattr(self._shared, op)

        def counted(*args: Any) -> Any:
            first = args[0] if args else None
            self._count(op, len(first) if isinstance(first, list) else 1)
            out = method(*args)
            with self._lock:
                if op in ("set", "append", "compare_set", "multi_set", "add"):
                    self.written.update(first if isinstance(first, list) else [first])
                if op in ("set", "append", "compare_set", "multi_set"):
                    self.bytes["written"] += sum(_size(a) for a in args[1:])
                elif op in ("get", "multi_get"):
                    self.bytes["read"] += _size(out)
            return out

        return counted


def _size(value: Any) -> int:
    """The bytes of a store value (str, bytes, or a list of them)."""
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, list):
        return sum(_size(v) for v in value)
    return 0
